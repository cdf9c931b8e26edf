/*
 * load_stats: what pagedllm-load reports (bench/load/stats.c) and how it
 * reads the server (bench/load/http.c).  A small recorded run is
 * summarized and every figure is compared with the same figure worked
 * out by hand below; the HTTP and SSE readers give the same events
 * however the bytes are cut; the Prometheus reader finds the running
 * requests and the KV blocks.
 */

#include "tap.h"

#include "load/load.h"

#define near(got, want, ...)                                                \
    do {                                                                    \
        double  g_ = (got), w_ = (want);                                    \
        if (!tap_ok(fabs(g_ - w_) < 1e-9, __VA_ARGS__)) {                   \
            printf("#   got %.12g, want %.12g\n", g_, w_);                  \
        }                                                                   \
    } while (0)


/*
 * The recorded run, (start, first token, end, prompt, output, n, ok):
 *
 *   A  0.0  0.5  2.5   10  20  1  ok   latency 2.5  per seq 20
 *   B  1.0  1.2  2.2    5   5  1  ok   latency 1.2  per seq 5
 *   C  1.5  2.0  5.5    8  40  2  ok   latency 4.0  per seq 20 (n = 2)
 *   D  2.0  2.1  2.1    0   0  1  failed
 *   E  3.0  3.1  3.1    3   1  1  ok   latency 0.1  per seq 1
 *
 * By hand: duration 5.5 - 0.0 = 5.5 s; 4 ok of 5; prompt 10+5+8+3 = 26,
 * output 20+5+40+1 = 66 tokens; 66 / 5.5 = 12 output tokens/s,
 * 92 / 5.5 total.
 * normalized latency: A 2.5/20 = 0.125, B 1.2/5 = 0.24, C 4.0/20 = 0.2,
 * E 0.1/1 = 0.1; mean 0.665 / 4 = 0.16625; sorted 0.1 0.125 0.2 0.24:
 * p50 at rank 1.5 = 0.125 + 0.5 * 0.075 = 0.1625, p99 at rank 2.97 =
 * 0.2 + 0.97 * 0.04 = 0.2388.
 * TTFT: 0.5 0.2 0.5 0.1, sorted 0.1 0.2 0.5 0.5: p50 0.35, p90 (rank 2.7)
 * 0.5, p99 0.5.
 * TPOT (E has one token, no TPOT): A 2.0/19, B 1.0/4 = 0.25, C 3.5/19;
 * sorted 2/19 3.5/19 0.25: p50 3.5/19, p99 at rank 1.98 =
 * 3.5/19 + 0.98 * (0.25 - 3.5/19).
 * latency: sorted 0.1 1.2 2.5 4.0: p50 1.85, p99 2.5 + 0.97 * 1.5 = 3.955.
 */
static void
test_summary(void)
{
    static const load_record_t  run[] = {
        { 0.0, 0.5, 2.5, 10, 20, 1, 1 },
        { 1.0, 1.2, 2.2, 5, 5, 1, 1 },
        { 1.5, 2.0, 5.5, 8, 40, 2, 1 },
        { 2.0, 2.1, 2.1, 0, 0, 1, 0 },
        { 3.0, 3.1, 3.1, 3, 1, 1, 1 },
    };
    load_summary_t  s;

    ok(load_summarize(run, 5, &s) == 0, "a recorded run summarized");
    is_int(s.requests, 5, "5 requests");
    is_int(s.ok, 4, "4 ok");
    is_int(s.failed, 1, "1 failed");
    near(s.duration, 5.5, "duration: first start to last end");
    near(s.request_rate, 4 / 5.5, "achieved rate: ok / duration");
    is_int(s.prompt_tokens, 26, "prompt tokens of the ok requests");
    is_int(s.output_tokens, 66, "output tokens, every sequence");
    near(s.output_tps, 12.0, "output tokens/s");
    near(s.total_tps, 92 / 5.5, "total tokens/s");
    near(s.norm_mean, 0.16625, "normalized latency: mean of latency / "
         "output tokens of a sequence");
    near(s.norm_p50, 0.1625, "normalized latency p50");
    near(s.norm_p99, 0.2388, "normalized latency p99");
    near(s.ttft_p50, 0.35, "TTFT p50");
    near(s.ttft_p90, 0.5, "TTFT p90");
    near(s.ttft_p99, 0.5, "TTFT p99");
    near(s.tpot_p50, 3.5 / 19, "TPOT p50 (one-token requests left out)");
    near(s.tpot_p99, 3.5 / 19 + 0.98 * (0.25 - 3.5 / 19), "TPOT p99");
    near(s.latency_p50, 1.85, "latency p50");
    near(s.latency_p99, 3.955, "latency p99");

    ok(load_summarize(run + 3, 1, &s) == 0 && s.ok == 0 && s.failed == 1
       && s.norm_mean == 0 && s.output_tps == 0,
       "all failed: no figures, no division by zero");
}


static void
test_percentile(void)
{
    double  v[] = { 4, 1, 3, 2 };

    near(load_percentile(v, 4, 0), 1, "p0: the least");
    near(load_percentile(v, 4, 1), 4, "p100: the most");
    near(load_percentile(v, 4, 0.5), 2.5, "p50 of 1..4: 2.5");
    near(load_percentile(v, 1, 0.99), 1, "one value: itself");
    near(load_percentile(v, 0, 0.5), 0, "no value: 0");
}


static void
test_metrics(void)
{
    static const char  text[] =
        "# HELP pagedllm_requests_running Requests running.\n"
        "# TYPE pagedllm_requests_running gauge\n"
        "pagedllm_requests_running 7\n"
        "pagedllm_requests_running_total 99\n"
        "pagedllm_kv_blocks{state=\"free\"} 700\n"
        "pagedllm_kv_blocks{state=\"used\"} 300\n"
        "pagedllm_kv_blocks_capacity 1000";
    double  running = -1, used = -1, cap = -1;

    ok(load_metrics_parse(text, sizeof(text) - 1, &running, &used, &cap)
       == 0, "metrics: all three series found");
    near(running, 7, "running: the exact name, not a longer one");
    near(used, 300, "KV used: the state=\"used\" series");
    near(cap, 1000, "KV capacity, on the last line without a newline");
    ok(load_metrics_parse(text, 60, &running, &used, &cap) != 0,
       "metrics: a series missing is reported");
}


static void
test_metrics_group(void)
{
    static const char  text[] =
        "pagedllm_requests_running{engine=\"/r/e0.sock\"} 3\n"
        "pagedllm_requests_running{engine=\"/r/e1.sock\"} 4\n"
        "pagedllm_kv_blocks{engine=\"/r/e0.sock\",state=\"used\"} 10\n"
        "pagedllm_kv_blocks{engine=\"/r/e0.sock\",state=\"free\"} 90\n"
        "pagedllm_kv_blocks{engine=\"/r/e1.sock\",state=\"used\"} 20\n"
        "pagedllm_kv_blocks_capacity{engine=\"/r/e0.sock\"} 100\n"
        "pagedllm_kv_blocks_capacity{engine=\"/r/e1.sock\"} 100\n";
    double  running = -1, used = -1, cap = -1;

    ok(load_metrics_parse(text, sizeof(text) - 1, &running, &used, &cap)
       == 0, "metrics of a group: all three series found");
    near(running, 7, "running: every engine's, summed");
    near(used, 30, "KV used: every engine's state=\"used\" series");
    near(cap, 200, "KV capacity: every engine's, summed");
}


typedef struct {
    char    body[4096];
    size_t  len;
    char    events[16][128];
    int     nevents;
} sink_t;


static void
sink_body(void *data, const char *p, size_t n)
{
    sink_t  *s = data;

    memcpy(s->body + s->len, p, n);
    s->len += n;
}


static void
sink_event(void *data, const char *p, size_t n)
{
    sink_t  *s = data;

    snprintf(s->events[s->nevents++], 128, "%.*s", (int) n, p);
}


/* the response fed in pieces of `step` bytes */
static int
feed(const char *resp, size_t step, load_http_t *h, sink_t *s)
{
    size_t  at = 0, len = strlen(resp), n;
    int     rc = LOAD_HTTP_MORE;

    load_http_init(h);
    memset(s, 0, sizeof(*s));

    while (at < len && rc == LOAD_HTTP_MORE) {
        n = len - at < step ? len - at : step;
        rc = load_http_feed(h, resp + at, n, sink_body, s);
        at += n;
    }
    return rc;
}


static void
test_http(void)
{
    static const char  chunked[] =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
        "14\r\ndata: {\"text\":\"a\"}\n\n\r\n"
        "1d\r\ndata: {\"text\":\"b\"}\n\ndata: [DO\r\n"
        "4\r\nNE]\n\r\n"
        "1\r\n\n\r\n"
        "0\r\n\r\n";
    static const char  sized[] =
        "HTTP/1.1 400 Bad Request\r\ncontent-length: 11\r\n\r\n"
        "{\"error\":1}";
    static const char  to_close[] =
        "HTTP/1.1 200 OK\r\n\r\nuntil the close";
    load_http_t  h;
    load_sse_t   sse = { 0 };
    sink_t       s, ev;
    size_t       step;
    int          good = 1, rc;

    for (step = 1; step <= sizeof(chunked); step++) {
        rc = feed(chunked, step, &h, &s);
        memset(&ev, 0, sizeof(ev));
        load_sse_feed(&sse, s.body, s.len, sink_event, &ev);
        good &= rc == LOAD_HTTP_DONE && h.status == 200 && ev.nevents == 3
                && strcmp(ev.events[0], "{\"text\":\"a\"}") == 0
                && strcmp(ev.events[1], "{\"text\":\"b\"}") == 0
                && strcmp(ev.events[2], "[DONE]") == 0 && sse.len == 0;
    }
    ok(good, "chunked SSE: the same 3 events in pieces of 1..%zu bytes",
       sizeof(chunked));

    memset(&ev, 0, sizeof(ev));
    load_sse_feed(&sse, "data: {\"x\"", 10, sink_event, &ev);
    load_sse_feed(&sse, ":1}\n", 4, sink_event, &ev);
    is_int(ev.nevents, 0, "SSE: an event cut before its blank line waits");
    load_sse_feed(&sse, "\ndata: [DONE]\n\n", 15, sink_event, &ev);
    ok(ev.nevents == 2 && strcmp(ev.events[0], "{\"x\":1}") == 0,
       "SSE: the event completes with the next read");
    load_sse_free(&sse);

    ok(feed(sized, 7, &h, &s) == LOAD_HTTP_DONE && h.status == 400
       && s.len == 11 && memcmp(s.body, "{\"error\":1}", 11) == 0,
       "Content-Length body: status 400 and the body");

    ok(feed(to_close, 5, &h, &s) == LOAD_HTTP_MORE
       && load_http_eof(&h) == LOAD_HTTP_DONE && s.len == 15,
       "a body without length ends at the close");

    feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 64,
         &h, &s);
    ok(load_http_eof(&h) == LOAD_HTTP_ERROR,
       "a chunked body cut by the close is an error");
    ok(feed("SSH-2.0-OpenSSH\r\n", 64, &h, &s) == LOAD_HTTP_ERROR,
       "not HTTP: an error");
    ok(feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            64, &h, &s) == LOAD_HTTP_ERROR, "a bad chunk size: an error");
}


int
main(void)
{
    test_summary();
    test_percentile();
    test_metrics();
    test_metrics_group();
    test_http();
    return done_testing();
}
