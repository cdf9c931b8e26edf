/*
 * pagedllm-load: the serving benchmark client of the paper's evaluation.
 *
 * It drives an OpenAI-style server (nginx with ngx_http_pagedllm_module)
 * over HTTP/1.1, one connection per request, every request streaming, and
 * writes one JSON line per request rate.  Requests arrive as a Poisson
 * process at each rate of --rate (or all at once, "inf"), or, without
 * --rate, from C clients that each send their next request when the last
 * one ends.  One thread, non-blocking sockets and poll(): the client must
 * never be the bottleneck of what it measures.
 *
 * What a request asks for:
 *   lengths   drawn from ShareGPT-like or Alpaca-like distributions
 *             (load/dist.c), fixed (-P, -G), or taken from a ShareGPT
 *             JSON file: the human turn is sent as the prompt text and the
 *             gpt reply's length in bytes / 4 is max_tokens;
 *   output    exactly max_tokens tokens: ignore_eos, so random-weight
 *             models give the lengths that were drawn;
 *   prompt    token ids ("prompt": [ids]), so lengths are exact, except
 *             for text from a dataset file and for chat;
 *   decoding  --n parallel samples, or --beam-width (vLLM's
 *             use_beam_search, n = best_of = W, temperature 0);
 *   prefix    --shared-prefix: the same 80 or 341 tokens in front of every
 *             prompt (the paper's 1-shot and 5-shot translation prompts);
 *   chat      --chat-turns K: conversations of K turns on
 *             /v1/chat/completions, each turn carrying the earlier turns
 *             with the assistant's actual replies.
 *
 * Timing: a request starts when its first byte is sent; its first token
 * is its first streamed event that carries text; it ends at [DONE].  The
 * token counts are the stream's usage (stream_options.include_usage).  A
 * beam search is asked with stream: true too, and answered, as vLLM does,
 * with one JSON response: its first token and its end are that response's
 * end, its counts the response's usage.
 * The server's /metrics is read every 0.5 s during a run for the number
 * of running requests and the share of KV blocks in use.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "load/load.h"

#define LOAD_VERSION       "pagedllm-load 2.0"
#define LOAD_BUF           65536
#define LOAD_MAX_TURNS     64
#define LOAD_SCRAPE_EVERY  0.5
#define LOAD_PREFIX_SEED   0x70726566697800ull     /* any constant */


/* Where a request goes: address, Host header and path. */
typedef struct {
    struct sockaddr_storage   sa;
    socklen_t                 salen;
    char                      host[256];
    char                      hostport[300];
    char                      path[256];
} load_target_t;


/* One turn of a conversation, as drawn before the run. */
typedef struct {
    int          in;             /* prompt tokens (text: bytes / 4) */
    int          out;            /* max_tokens */
    const char  *text;           /* a dataset's human turn, or NULL */
} load_turn_t;


/* A dataset file's conversations: their (human, gpt) pairs. */
typedef struct {
    load_turn_t  *turns;
    int           nturns;
} load_source_t;


typedef struct {
    load_target_t          api;
    load_target_t          metrics;
    int                    metrics_on;
    const char            *dist;
    const load_dataset_t  *ds;
    load_lognormal_t       in;
    load_lognormal_t       out;
    int                    fixed_in;
    int                    fixed_out;
    const char            *dataset_file;
    load_source_t         *sources;
    long                   nsources;
    int                    prefix;          /* shared prefix tokens */
    int                    chat_turns;
    int                    n;
    int                    beam;
    double                 temperature;
    int                    vocab;
    int                    max_model_len;
    int                    in_max;
    int                    out_max;
    double                *rates;          /* 0: closed loop */
    int                    nrates;
    long                   requests;
    double                 duration;
    int                    concurrency;
    uint64_t               seed;
    long                   warmup;
    double                 timeout;
    FILE                  *json_out;
} load_conf_t;


typedef struct {
    double        arrival;
    int           turn;            /* the next turn to send */
    int           nturns;
    load_turn_t   turns[LOAD_MAX_TURNS];
    json_t       *history;         /* chat: the messages so far */
    char         *user;            /* chat: the message of the turn sent */
    int           hist_tokens[2 * LOAD_MAX_TURNS];
    uint64_t      seed;
} load_conv_t;


typedef struct {
    int             fd;
    int             is_metrics;
    char           *req;
    size_t          req_len;
    size_t          sent;
    load_http_t     http;
    load_sse_t      sse;
    char           *body;          /* a body that is not an event stream */
    size_t          body_len;
    size_t          body_cap;
    char           *reply;         /* chat: choice 0's text */
    size_t          reply_len;
    size_t          reply_cap;
    load_conv_t    *conv;
    load_record_t   rec;
    double          t_read;
    int             got_done;
    int             got_usage;
    int             whole;          /* beam search: one JSON response */
    char            error[512];
    int             finished;
} load_conn_t;


typedef struct {
    char  key[64];
    long  count;
} load_error_t;


typedef struct {
    load_conf_t     *cf;
    int              record;
    load_conv_t     *convs;
    long             nconvs;
    long             next_conv;
    long             convs_done;
    load_conn_t    **conns;
    size_t           nconns;
    size_t           conns_cap;
    long             in_flight;
    load_record_t   *recs;
    size_t           nrecs;
    size_t           recs_cap;
    double           t0;
    double           last_progress;
    load_conn_t     *scrape;
    double           next_scrape;
    double           running_sum;
    double           kv_sum;
    long             samples;
    load_error_t     errors[16];
    int              nerrors;
    char             first_error[512];
} load_run_t;


static const char  *load_words[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with",
    "was", "on", "be", "at", "by", "this", "had", "not", "are", "but",
    "from", "or", "have", "an", "they", "which", "one", "you", "were",
    "her", "all", "she", "there", "would", "their", "we", "him", "been",
    "has", "when", "who", "will", "more", "no", "if", "out", "so", "said",
    "what", "up", "its", "about", "into", "than", "them", "can", "only",
    "other", "new", "some", "could", "time", "these", "two", "may", "then",
    "do", "first", "any", "my", "now", "such", "like", "our", "over", "man",
    "me", "even", "most", "made", "after", "also", "did", "many", "before",
    "must", "through", "back", "years", "where", "much", "your", "way",
    "well", "down", "should", "because", "each", "just", "those", "people"
};

static int  load_metrics_warned;


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}


static void
die(const char *fmt, const char *arg)
{
    fprintf(stderr, "pagedllm-load: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(2);
}


static void *
xrealloc(void *p, size_t size)
{
    p = realloc(p, size);
    if (p == NULL) {
        fprintf(stderr, "pagedllm-load: out of memory\n");
        exit(1);
    }
    return p;
}


static void
append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *buf = xrealloc(*buf, *cap);
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
}


/* ---- the target ------------------------------------------------------ */

static int
target_set(load_target_t *t, const char *host, const char *port,
    const char *path)
{
    struct addrinfo   hints, *ai;

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;

    if (strlen(host) >= sizeof(t->host) || strlen(path) >= sizeof(t->path)
        || getaddrinfo(host, port, &hints, &ai) != 0)
    {
        return -1;
    }

    memcpy(&t->sa, ai->ai_addr, ai->ai_addrlen);
    t->salen = ai->ai_addrlen;
    freeaddrinfo(ai);

    snprintf(t->host, sizeof(t->host), "%s", host);
    snprintf(t->hostport, sizeof(t->hostport), "%s:%s", host, port);
    snprintf(t->path, sizeof(t->path), "%s", path);
    return 0;
}


/* http://HOST[:PORT][/PATH] */
static int
target_parse_url(load_target_t *t, const char *url)
{
    char         host[256], port[16] = "80";
    const char  *p, *slash, *colon;
    size_t       n;

    if (strncmp(url, "http://", 7) != 0) {
        return -1;
    }

    p = url + 7;
    slash = strchr(p, '/');
    if (slash == NULL) {
        slash = p + strlen(p);
    }
    colon = memchr(p, ':', slash - p);
    n = (colon ? colon : slash) - p;

    if (n == 0 || n >= sizeof(host)) {
        return -1;
    }
    memcpy(host, p, n);
    host[n] = '\0';

    if (colon) {
        n = slash - colon - 1;
        if (n == 0 || n >= sizeof(port)) {
            return -1;
        }
        memcpy(port, colon + 1, n);
        port[n] = '\0';
    }

    return target_set(t, host, port, *slash ? slash : "/");
}


static int
target_connect(const load_target_t *t)
{
    int  fd, one = 1;

    fd = socket(t->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    if (connect(fd, (const struct sockaddr *) &t->sa, t->salen) < 0
        && errno != EINPROGRESS)
    {
        close(fd);
        return -1;
    }
    return fd;
}


static char *
http_request(const load_target_t *t, const char *method, const char *path,
    const char *body, size_t *len)
{
    size_t  blen = body ? strlen(body) : 0, cap = blen + 512;
    char   *req = xrealloc(NULL, cap);
    int     n;

    n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path,
                 t->hostport);
    if (body) {
        n += snprintf(req + n, cap - n, "Content-Type: application/json\r\n"
                      "Content-Length: %zu\r\n", blen);
    }
    n += snprintf(req + n, cap - n, "Connection: close\r\n\r\n");
    memcpy(req + n, body ? body : "", blen);
    *len = n + blen;
    return req;
}


/* ---- one connection -------------------------------------------------- */

static load_conn_t *
conn_new(const load_target_t *t, char *req, size_t req_len)
{
    load_conn_t  *c = xrealloc(NULL, sizeof(*c));

    memset(c, 0, sizeof(*c));
    c->req = req;
    c->req_len = req_len;
    load_http_init(&c->http);
    c->fd = target_connect(t);
    if (c->fd < 0) {
        snprintf(c->error, sizeof(c->error), "connect: %s", strerror(errno));
        c->finished = 1;
    }
    return c;
}


static void
conn_free(load_conn_t *c)
{
    if (c->fd >= 0) {
        close(c->fd);
    }
    free(c->req);
    free(c->body);
    free(c->reply);
    load_sse_free(&c->sse);
    free(c);
}


static void
conn_fail(load_conn_t *c, const char *what)
{
    if (c->error[0] == '\0') {
        snprintf(c->error, sizeof(c->error), "%s", what);
    }
    c->finished = 1;
}


/* an error body's message: {"error": {"message": ...}} */
static void
error_message(const char *text, char *out, size_t size)
{
    json_t      *j = json_loads(text, JSON_DECODE_ANY, NULL);
    const char  *m = json_string_value(json_object_get(
                         json_object_get(j, "error"), "message"));

    snprintf(out, size, "%s", m ? m : text);
    json_decref(j);
}


static void
event_usage(load_conn_t *c, const char *p, size_t n)
{
    json_t  *j = json_loadb(p, n, 0, NULL), *u;

    u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        c->rec.prompt_tokens = json_integer_value(
                                   json_object_get(u, "prompt_tokens"));
        c->rec.output_tokens = json_integer_value(
                                   json_object_get(u, "completion_tokens"));
        c->got_usage = 1;
    }
    json_decref(j);
}


/* a chat chunk: 1 when it carries text; choice 0's text is kept */
static int
event_chat_text(load_conn_t *c, const char *p, size_t n)
{
    json_t  *j = json_loadb(p, n, 0, NULL), *ch, *text;
    size_t   len;

    ch = json_array_get(json_object_get(j, "choices"), 0);
    text = json_object_get(json_object_get(ch, "delta"), "content");
    len = json_is_string(text) ? json_string_length(text) : 0;

    if (len && json_integer_value(json_object_get(ch, "index")) == 0) {
        append(&c->reply, &c->reply_len, &c->reply_cap,
               json_string_value(text), len);
    }
    json_decref(j);
    return len > 0;
}


static void
on_event(void *data, const char *p, size_t n)
{
    load_conn_t  *c = data;
    char          msg[400];
    int           token;

    if (n == 6 && memcmp(p, "[DONE]", 6) == 0) {
        c->got_done = 1;
        c->rec.end = c->t_read;
        return;
    }

    if (n > 9 && memcmp(p, "{\"error\":", 9) == 0) {
        char  *s = strndup(p, n);

        error_message(s, msg, sizeof(msg));
        free(s);
        snprintf(c->error, sizeof(c->error), "stream error: %s", msg);
        return;
    }

    if (memmem(p, n, "\"choices\":[]", 12) != NULL) {
        event_usage(c, p, n);
        return;
    }

    token = c->conv->history
            ? event_chat_text(c, p, n)
            : memmem(p, n, "\"text\":\"\"", 9) == NULL;

    if (token && c->rec.first == 0) {
        c->rec.first = c->t_read;
    }
}


static void
on_body(void *data, const char *p, size_t n)
{
    load_conn_t  *c = data;

    if (c->http.status == 200 && !c->is_metrics && !c->whole) {
        if (load_sse_feed(&c->sse, p, n, on_event, c) != 0) {
            conn_fail(c, "out of memory");
        }
        return;
    }
    append(&c->body, &c->body_len, &c->body_cap, p, n);
}


/* A beam search's one JSON response: its usage, choice 0's text (chat),
   and its end as both its first token and its last. */
static void
whole_response(load_conn_t *c)
{
    json_t  *j, *text;

    c->rec.first = c->rec.end = c->t_read;
    event_usage(c, c->body ? c->body : "", c->body_len);
    if (!c->got_usage) {
        conn_fail(c, "the response carried no usage");
        return;
    }

    j = json_loadb(c->body, c->body_len, 0, NULL);
    text = json_object_get(json_object_get(json_array_get(
               json_object_get(j, "choices"), 0), "message"), "content");
    if (c->conv->history && json_is_string(text)) {
        append(&c->reply, &c->reply_len, &c->reply_cap,
               json_string_value(text), json_string_length(text));
    }
    json_decref(j);
}


static void
conn_complete(load_conn_t *c)
{
    char  msg[400];

    c->finished = 1;

    if (c->is_metrics || c->error[0]) {
        return;
    }

    if (c->http.status != 200) {
        error_message(c->body ? c->body : "", msg, sizeof(msg));
        snprintf(c->error, sizeof(c->error), "HTTP %d: %s", c->http.status,
                 msg);
    } else if (c->whole) {
        whole_response(c);
    } else if (!c->got_done) {
        conn_fail(c, "the stream ended without [DONE]");
    } else if (!c->got_usage) {
        conn_fail(c, "the stream carried no usage");
    }
}


static void
conn_io(load_conn_t *c, short revents)
{
    char     buf[LOAD_BUF], msg[128];
    ssize_t  n;
    int      rc;

    if (c->sent < c->req_len) {
        if (!(revents & (POLLOUT | POLLERR | POLLHUP))) {
            return;
        }
        n = send(c->fd, c->req + c->sent, c->req_len - c->sent,
                 MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN) {
            snprintf(msg, sizeof(msg), "%s: %s",
                     c->sent ? "send" : "connect", strerror(errno));
            conn_fail(c, msg);
        } else if (n > 0) {
            c->sent += n;
        }
        return;
    }

    n = recv(c->fd, buf, sizeof(buf), 0);
    c->t_read = now();

    if (n < 0) {
        if (errno != EAGAIN) {
            snprintf(msg, sizeof(msg), "recv: %s", strerror(errno));
            conn_fail(c, msg);
        }
        return;
    }

    rc = n ? load_http_feed(&c->http, buf, n, on_body, c)
           : load_http_eof(&c->http);

    if (rc == LOAD_HTTP_ERROR) {
        conn_fail(c, n ? "a malformed HTTP response"
                       : "the connection closed mid-response");
    } else if (rc == LOAD_HTTP_DONE) {
        conn_complete(c);
    }
}


/* ---- what a request asks for ------------------------------------------ */

/* about 4 bytes a token: English words from a fixed list */
static char *
words_text(load_rng_t *r, int tokens)
{
    size_t       len = 0, cap = 0, want = (size_t) tokens * 4;
    char        *s = NULL;
    const char  *w;
    size_t       nw = sizeof(load_words) / sizeof(load_words[0]);

    append(&s, &len, &cap, "", 0);

    while (len + 1 < want) {
        w = load_words[load_rng_next(r) % nw];
        if (len) {
            append(&s, &len, &cap, " ", 1);
        }
        append(&s, &len, &cap, w, strlen(w));
    }
    return s;
}


static json_t *
prompt_ids(const load_conf_t *cf, load_rng_t *r, int tokens)
{
    json_t      *a = json_array();
    load_rng_t   pr;
    int          i;

    load_rng_seed(&pr, LOAD_PREFIX_SEED);

    for (i = 0; i < cf->prefix; i++) {
        json_array_append_new(a, json_integer(load_rng_next(&pr)
                                              % (unsigned) cf->vocab));
    }
    for (i = 0; i < tokens; i++) {
        json_array_append_new(a, json_integer(load_rng_next(r)
                                              % (unsigned) cf->vocab));
    }
    return a;
}


static json_t *
prompt_text(const load_conf_t *cf, const char *text)
{
    load_rng_t   pr;
    char        *prefix, *s;
    json_t      *j;

    if (cf->prefix == 0) {
        return json_string(text);
    }

    load_rng_seed(&pr, LOAD_PREFIX_SEED);
    prefix = words_text(&pr, cf->prefix);
    s = xrealloc(NULL, strlen(prefix) + strlen(text) + 2);
    sprintf(s, "%s\n%s", prefix, text);
    j = json_string(s);
    free(prefix);
    free(s);
    return j;
}


static void
body_decoding(const load_conf_t *cf, json_t *b)
{
    json_object_set_new(b, "ignore_eos", json_true());
    json_object_set_new(b, "stream", json_true());
    json_object_set_new(b, "stream_options",
                        json_pack("{s:b}", "include_usage", 1));

    if (cf->beam) {
        json_object_set_new(b, "use_beam_search", json_true());
        json_object_set_new(b, "n", json_integer(cf->beam));
        json_object_set_new(b, "best_of", json_integer(cf->beam));
        json_object_set_new(b, "temperature", json_real(0));
        return;
    }

    json_object_set_new(b, "temperature", json_real(cf->temperature));
    if (cf->n > 1) {
        json_object_set_new(b, "n", json_integer(cf->n));
    }
}


/* chat: drop the oldest turns while the history and the new message
   (bytes / 4, and 8 tokens a message for the template) pass in_max */
static void
history_fit(const load_conf_t *cf, load_conv_t *cv, int new_tokens)
{
    size_t  i, n;
    long    sum;

    for ( ;; ) {
        n = json_array_size(cv->history);
        sum = new_tokens + 8;
        for (i = 0; i < n; i++) {
            sum += cv->hist_tokens[i] + 8;
        }
        if (sum <= cf->in_max || n < 2) {
            return;
        }
        json_array_remove(cv->history, 0);
        json_array_remove(cv->history, 0);
        memmove(cv->hist_tokens, cv->hist_tokens + 2,
                (n - 2) * sizeof(int));
    }
}


static char *
turn_body(const load_conf_t *cf, load_conv_t *cv, const char **path)
{
    load_turn_t  *t = &cv->turns[cv->turn];
    load_rng_t    r;
    json_t       *b = json_object(), *msgs;
    char         *s;

    load_rng_seed(&r, cv->seed + cv->turn);
    json_object_set_new(b, "max_tokens", json_integer(t->out));

    if (cv->history == NULL) {
        *path = "/v1/completions";
        json_object_set_new(b, "prompt", t->text ? prompt_text(cf, t->text)
                                                 : prompt_ids(cf, &r, t->in));
    } else {
        *path = "/v1/chat/completions";
        free(cv->user);
        cv->user = t->text ? strdup(t->text) : words_text(&r, t->in);
        history_fit(cf, cv, t->in);
        msgs = json_copy(cv->history);
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user",
                                              "content", cv->user));
        json_object_set_new(b, "messages", msgs);
    }

    body_decoding(cf, b);
    s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}


/* chat: the turn that ended goes into the history */
static void
history_add(load_conv_t *cv, load_conn_t *c)
{
    size_t  n = json_array_size(cv->history);

    json_array_append_new(cv->history, json_pack("{s:s,s:s}", "role", "user",
                                                 "content", cv->user));
    json_array_append_new(cv->history,
                          json_pack("{s:s,s:s}", "role", "assistant",
                                    "content", c->reply ? c->reply : ""));
    cv->hist_tokens[n] = cv->turns[cv->turn].in;
    cv->hist_tokens[n + 1] = (int) (c->rec.output_tokens
                                    / (c->rec.seqs ? c->rec.seqs : 1));
}


/* ---- the conversations of a run --------------------------------------- */

static void
draw_turn(const load_conf_t *cf, load_rng_t *r, load_turn_t *t)
{
    t->text = NULL;

    if (cf->ds == NULL) {
        t->in = cf->fixed_in;
        t->out = cf->fixed_out;
        return;
    }
    t->in = load_lognormal_draw(&cf->in, r);
    t->out = load_lognormal_draw(&cf->out, r);
}


/* arrivals and lengths, all from the seed: every rate gets the same
   requests in the same order */
static load_conv_t *
draw_convs(const load_conf_t *cf, double rate, long count, double duration,
    uint64_t seed, long *nconvs)
{
    load_rng_t      arr, len;
    load_conv_t    *cv = NULL;
    load_source_t  *src;
    long            i, cap = 0;
    double          t = 0;
    int             k, poisson = rate > 0 && !isinf(rate);
    int             timed = poisson && duration > 0;

    load_rng_seed(&arr, seed);
    load_rng_seed(&len, seed ^ 0x6c656e67746873ull);

    for (i = 0; timed || i < count; i++) {
        if (poisson) {
            t += load_rng_exp(&arr, rate);
        }
        if (timed && t > duration) {
            break;
        }
        if (i == cap) {
            cap = cap ? cap * 2 : 64;
            cv = xrealloc(cv, cap * sizeof(*cv));
        }

        memset(&cv[i], 0, sizeof(cv[i]));
        cv[i].arrival = t;
        cv[i].seed = seed * 1000003u + (uint64_t) i * 7919u + 1;
        cv[i].nturns = cf->chat_turns ? cf->chat_turns : 1;
        if (cf->chat_turns) {
            cv[i].history = json_array();
        }

        if (cf->sources) {
            src = &cf->sources[load_rng_next(&len) % cf->nsources];
            if (cv[i].nturns > src->nturns) {
                cv[i].nturns = src->nturns;
            }
            memcpy(cv[i].turns, src->turns,
                   cv[i].nturns * sizeof(load_turn_t));
            continue;
        }
        for (k = 0; k < cv[i].nturns; k++) {
            draw_turn(cf, &len, &cv[i].turns[k]);
        }
    }

    *nconvs = i;
    return cv;
}


/* ---- a run --------------------------------------------------------- */

static void
run_add_conn(load_run_t *run, load_conn_t *c)
{
    if (run->nconns == run->conns_cap) {
        run->conns_cap = run->conns_cap ? run->conns_cap * 2 : 64;
        run->conns = xrealloc(run->conns,
                              run->conns_cap * sizeof(load_conn_t *));
    }
    run->conns[run->nconns++] = c;
}


static void
run_send_turn(load_run_t *run, load_conv_t *cv)
{
    const char   *path;
    char         *body, *req;
    size_t        len;
    load_conn_t  *c;

    body = turn_body(run->cf, cv, &path);
    req = http_request(&run->cf->api, "POST", path, body, &len);
    free(body);

    c = conn_new(&run->cf->api, req, len);
    c->conv = cv;
    c->rec.start = now();
    c->rec.seqs = run->cf->beam ? run->cf->beam : run->cf->n;
    c->whole = run->cf->beam > 0;
    run->in_flight++;
    run_add_conn(run, c);
}


static void
run_error(load_run_t *run, const char *error)
{
    char  key[64];
    int   i;

    if (run->first_error[0] == '\0') {
        snprintf(run->first_error, sizeof(run->first_error), "%s", error);
    }

    /* the class: "HTTP 400", "stream error", "connect", ... */
    snprintf(key, sizeof(key), "%.*s", (int) strcspn(error, ":"), error);

    for (i = 0; i < run->nerrors; i++) {
        if (strcmp(run->errors[i].key, key) == 0) {
            run->errors[i].count++;
            return;
        }
    }
    if (run->nerrors < (int) (sizeof(run->errors) / sizeof(run->errors[0])))
    {
        snprintf(run->errors[run->nerrors].key, sizeof(key), "%s", key);
        run->errors[run->nerrors++].count = 1;
    }
}


static void
run_record(load_run_t *run, load_conn_t *c)
{
    if (c->error[0]) {
        c->rec.ok = 0;
        c->rec.end = now();
        run_error(run, c->error);
    } else {
        c->rec.ok = 1;
    }
    if (c->rec.first == 0) {
        c->rec.first = c->rec.end;
    }

    if (!run->record) {
        return;
    }
    if (run->nrecs == run->recs_cap) {
        run->recs_cap = run->recs_cap ? run->recs_cap * 2 : 256;
        run->recs = xrealloc(run->recs,
                             run->recs_cap * sizeof(load_record_t));
    }
    run->recs[run->nrecs++] = c->rec;
}


static void
run_scrape_done(load_run_t *run, load_conn_t *c)
{
    double  running, used, cap;

    if (c->error[0] == '\0' && c->http.status == 200 && c->body
        && load_metrics_parse(c->body, c->body_len, &running, &used, &cap)
           == 0 && cap > 0)
    {
        run->running_sum += running;
        run->kv_sum += used / cap;
        run->samples++;
        return;
    }

    if (!load_metrics_warned) {
        fprintf(stderr, "pagedllm-load: no metrics from http://%s%s (%s); "
                "running and KV means are left out\n",
                run->cf->metrics.hostport, run->cf->metrics.path,
                c->error[0] ? c->error : "no pagedllm_ series");
        load_metrics_warned = 1;
    }
    run->cf->metrics_on = 0;
}


/* a finished request: recorded; a chat conversation goes on */
static void
run_finish(load_run_t *run, load_conn_t *c)
{
    load_conv_t  *cv = c->conv;

    run->in_flight--;
    run_record(run, c);

    if (c->error[0] == '\0' && cv->history) {
        history_add(cv, c);
        if (++cv->turn < cv->nturns) {
            run_send_turn(run, cv);
            return;
        }
    }

    if (cv->history) {
        json_decref(cv->history);
        cv->history = NULL;
        free(cv->user);
        cv->user = NULL;
    }
    run->convs_done++;
}


static void
run_start_due(load_run_t *run)
{
    const load_conf_t  *cf = run->cf;
    double              t = now() - run->t0;
    load_conv_t        *cv;

    while (run->next_conv < run->nconvs) {
        cv = &run->convs[run->next_conv];
        if (cv->arrival > t
            || (cf->concurrency && run->in_flight >= cf->concurrency))
        {
            return;
        }
        run->next_conv++;
        run_send_turn(run, cv);
    }
}


static void
run_scrape(load_run_t *run)
{
    load_target_t  *m = &run->cf->metrics;
    size_t          len;
    char           *req;
    double          t = now();

    if (!run->record || !run->cf->metrics_on || run->scrape
        || t < run->next_scrape)
    {
        return;
    }

    run->next_scrape = t + LOAD_SCRAPE_EVERY;
    req = http_request(m, "GET", m->path, NULL, &len);
    run->scrape = conn_new(m, req, len);
    run->scrape->is_metrics = 1;
}


static int
run_poll_timeout(load_run_t *run)
{
    double  t = now(), wait = 1.0;
    long    conc = run->cf->concurrency;

    /* a request held back by the concurrency waits for a reply instead */
    if (run->next_conv < run->nconvs && (conc == 0 || run->in_flight < conc))
    {
        wait = run->t0 + run->convs[run->next_conv].arrival - t;
    }
    if (run->record && run->cf->metrics_on && run->scrape == NULL
        && run->next_scrape - t < wait)
    {
        wait = run->next_scrape - t;
    }
    if (wait > 1.0) {
        wait = 1.0;
    }
    return wait > 0 ? (int) (wait * 1000) + 1 : 0;
}


static void
run_reap(load_run_t *run)
{
    size_t  i, k = 0;

    if (run->scrape && run->scrape->finished) {
        run_scrape_done(run, run->scrape);
        conn_free(run->scrape);
        run->scrape = NULL;
    }

    /* run_finish may add a chat's next turn: the loop reaches it too */
    for (i = 0; i < run->nconns; i++) {
        if (run->conns[i]->finished) {
            run_finish(run, run->conns[i]);
            conn_free(run->conns[i]);
        } else {
            run->conns[k++] = run->conns[i];
        }
    }

    run->nconns = k;
}


static void
run_check_stall(load_run_t *run)
{
    size_t  i;
    char    msg[64];

    if (run->in_flight == 0 || now() - run->last_progress < run->cf->timeout)
    {
        return;
    }

    snprintf(msg, sizeof(msg), "timeout: no response for %.0f s",
             run->cf->timeout);
    for (i = 0; i < run->nconns; i++) {
        conn_fail(run->conns[i], msg);
    }
}


static void
run_loop(load_run_t *run)
{
    struct pollfd  *pfd = NULL;
    size_t          i, n, cap = 0;
    int             rc;
    load_conn_t    *c;

    run->t0 = now();
    run->last_progress = run->t0;
    /* the first reading once requests are in flight, not before any */
    run->next_scrape = run->t0 + LOAD_SCRAPE_EVERY / 2
                       + (run->nconvs ? run->convs[0].arrival : 0);

    while (run->convs_done < run->nconvs) {
        run_start_due(run);
        run_scrape(run);
        run_reap(run);

        n = run->nconns + 1;
        if (n > cap) {
            cap = n * 2;
            pfd = xrealloc(pfd, cap * sizeof(*pfd));
        }

        for (i = 0; i <= run->nconns; i++) {
            c = i < run->nconns ? run->conns[i] : run->scrape;
            pfd[i].fd = c ? c->fd : -1;
            pfd[i].events = c == NULL ? 0
                            : c->sent < c->req_len ? POLLOUT : POLLIN;
            pfd[i].revents = 0;
        }

        rc = poll(pfd, n, run_poll_timeout(run));
        if (rc < 0 && errno != EINTR) {
            perror("pagedllm-load: poll");
            exit(1);
        }
        if (rc > 0) {
            run->last_progress = now();
        }

        for (i = 0; i <= run->nconns; i++) {
            c = i < run->nconns ? run->conns[i] : run->scrape;
            if (c && pfd[i].revents) {
                conn_io(c, pfd[i].revents);
            }
        }

        run_check_stall(run);
        run_reap(run);
    }

    /* a reading still on its way belongs to no run */
    if (run->scrape) {
        conn_free(run->scrape);
        run->scrape = NULL;
    }
    free(pfd);
}


/* ---- the report -------------------------------------------------------- */

static json_t *
num_or_null(double v, int ok)
{
    return ok ? json_real(v) : json_null();
}


static void
report(const load_conf_t *cf, load_run_t *run, double rate)
{
    load_summary_t  s;
    json_t         *j = json_object(), *errs = json_object();
    char           *line;
    int             i, m = run->samples > 0;

    if (load_summarize(run->recs, run->nrecs, &s) != 0) {
        fprintf(stderr, "pagedllm-load: out of memory\n");
        exit(1);
    }

#define SET(k, v)  json_object_set_new(j, k, v)
    SET("mode", json_string(rate == 0 ? "closed" : isinf(rate) ? "burst"
                                                               : "poisson"));
    SET("offered_rate", num_or_null(rate, rate > 0 && !isinf(rate)));
    SET("concurrency", cf->concurrency ? json_integer(cf->concurrency)
                                       : json_null());
    SET("dataset", json_string(cf->dataset_file ? cf->dataset_file
                                                : cf->dist));
    SET("seed", json_integer((json_int_t) cf->seed));
    SET("n", json_integer(cf->n));
    SET("beam_width", json_integer(cf->beam));
    SET("shared_prefix_tokens", json_integer(cf->prefix));
    SET("chat_turns", json_integer(cf->chat_turns));
    SET("requests", json_integer(s.requests));
    SET("ok", json_integer(s.ok));
    SET("failed", json_integer(s.failed));
    SET("duration_s", json_real(s.duration));
    SET("request_rate", json_real(s.request_rate));
    SET("prompt_tokens", json_integer(s.prompt_tokens));
    SET("output_tokens", json_integer(s.output_tokens));
    SET("output_tokens_per_s", json_real(s.output_tps));
    SET("total_tokens_per_s", json_real(s.total_tps));
    SET("norm_latency_mean_s", num_or_null(s.norm_mean, s.ok));
    SET("norm_latency_p50_s", num_or_null(s.norm_p50, s.ok));
    SET("norm_latency_p99_s", num_or_null(s.norm_p99, s.ok));
    SET("ttft_p50_ms", num_or_null(s.ttft_p50 * 1e3, s.ok));
    SET("ttft_p90_ms", num_or_null(s.ttft_p90 * 1e3, s.ok));
    SET("ttft_p99_ms", num_or_null(s.ttft_p99 * 1e3, s.ok));
    SET("tpot_p50_ms", num_or_null(s.tpot_p50 * 1e3, s.ok));
    SET("tpot_p99_ms", num_or_null(s.tpot_p99 * 1e3, s.ok));
    SET("latency_p50_s", num_or_null(s.latency_p50, s.ok));
    SET("latency_p99_s", num_or_null(s.latency_p99, s.ok));
    SET("running_mean", num_or_null(run->running_sum / run->samples, m));
    SET("kv_usage_mean", num_or_null(run->kv_sum / run->samples, m));
    SET("metrics_samples", json_integer(run->samples));
    for (i = 0; i < run->nerrors; i++) {
        json_object_set_new(errs, run->errors[i].key,
                            json_integer(run->errors[i].count));
    }
    SET("errors", errs);
    SET("first_error", run->first_error[0] ? json_string(run->first_error)
                                           : json_null());
#undef SET

    line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER
                         | JSON_REAL_PRECISION(6));
    fprintf(cf->json_out, "%s\n", line);
    fflush(cf->json_out);
    free(line);
    json_decref(j);

    if (s.failed) {
        fprintf(stderr, "pagedllm-load: %ld of %ld requests failed; the "
                "first: %s\n", s.failed, s.requests, run->first_error);
    }
}


/* one rate: its requests sent and measured; 1 when any failed */
static int
run_rate(load_conf_t *cf, double rate, long count, int record)
{
    load_run_t  run;
    long        i, failed;

    memset(&run, 0, sizeof(run));
    run.cf = cf;
    run.record = record;
    run.convs = draw_convs(cf, rate, count, record ? cf->duration : 0,
                           record ? cf->seed : cf->seed ^ 0x7761726dull,
                           &run.nconvs);

    run_loop(&run);

    failed = 0;
    for (i = 0; i < (long) run.nrecs; i++) {
        failed += !run.recs[i].ok;
    }

    if (record) {
        report(cf, &run, rate);
    } else if (run.first_error[0]) {
        fprintf(stderr, "pagedllm-load: warm-up: %s\n", run.first_error);
    }

    for (i = 0; i < run.nconvs; i++) {
        json_decref(run.convs[i].history);
    }
    free(run.convs);
    free(run.conns);
    free(run.recs);
    return failed > 0 || (!record && run.first_error[0]);
}


/* ---- set-up ---------------------------------------------------------- */

/* GET path on the API's server, whole, blocking */
static char *
fetch(const load_conf_t *cf, const char *path, int *status)
{
    size_t          len;
    char           *req = http_request(&cf->api, "GET", path, NULL, &len);
    load_conn_t    *c = conn_new(&cf->api, req, len);
    struct pollfd   p;
    char           *body;
    double          deadline = now() + 10;

    c->is_metrics = 1;

    while (!c->finished && now() < deadline) {
        p.fd = c->fd;
        p.events = c->sent < c->req_len ? POLLOUT : POLLIN;
        p.revents = 0;
        if (poll(&p, 1, 1000) > 0) {
            conn_io(c, p.revents);
        }
    }

    *status = c->finished && c->error[0] == '\0' ? c->http.status : 0;
    if (*status == 0) {
        fprintf(stderr, "pagedllm-load: GET http://%s%s: %s\n",
                cf->api.hostport, path, c->error[0] ? c->error : "timeout");
    }
    body = c->body;
    c->body = NULL;
    conn_free(c);
    return body;
}


static int
fetch_max_model_len(const load_conf_t *cf)
{
    int      status;
    char    *body = fetch(cf, "/v1/models", &status);
    json_t  *j = body ? json_loads(body, 0, NULL) : NULL;
    int      len;

    len = (int) json_integer_value(json_object_get(json_array_get(
              json_object_get(j, "data"), 0), "max_model_len"));
    json_decref(j);
    free(body);

    if (status == 200 && len <= 0) {
        fprintf(stderr, "pagedllm-load: /v1/models names no max_model_len; "
                "give --max-model-len\n");
    }
    return status == 200 ? len : 0;
}


/* ShareGPT JSON: [{"conversations": [{"from": "human", "value": ...},
   {"from": "gpt", "value": ...}, ...]}, ...]; each (human, gpt) pair is a
   turn: the human text as the prompt, the reply's bytes / 4 as
   max_tokens.  Pairs whose prompt passes the context end a
   conversation. */
static void
load_dataset_file(load_conf_t *cf)
{
    json_error_t    err;
    json_t         *root, *conv, *h, *g, *human, *gpt;
    size_t          i, k, n;
    load_source_t  *src;
    load_turn_t    *t;
    int             in, out, room = cf->in_max - cf->prefix;

    root = json_load_file(cf->dataset_file, 0, &err);
    if (!json_is_array(root)) {
        fprintf(stderr, "pagedllm-load: %s: %s\n", cf->dataset_file,
                root ? "not a JSON list" : err.text);
        exit(2);
    }

    cf->sources = xrealloc(NULL, (json_array_size(root) + 1)
                                 * sizeof(load_source_t));
    human = json_string("human");
    gpt = json_string("gpt");

    for (i = 0; i < json_array_size(root); i++) {
        conv = json_object_get(json_array_get(root, i), "conversations");
        n = json_array_size(conv) / 2;
        src = &cf->sources[cf->nsources];
        src->turns = xrealloc(NULL, (n + 1) * sizeof(load_turn_t));
        src->nturns = 0;

        for (k = 0; k < n && k < LOAD_MAX_TURNS; k++) {
            h = json_array_get(conv, 2 * k);
            g = json_array_get(conv, 2 * k + 1);
            if (!json_is_string(json_object_get(h, "value"))
                || !json_is_string(json_object_get(g, "value"))
                || !json_equal(json_object_get(h, "from"), human)
                || !json_equal(json_object_get(g, "from"), gpt))
            {
                break;
            }
            in = (int) (json_string_length(json_object_get(h, "value")) / 4);
            out = (int) (json_string_length(json_object_get(g, "value")) / 4);
            if (in < 1 || in > room) {
                break;
            }
            t = &src->turns[src->nturns++];
            t->in = in;
            t->out = out < 1 ? 1 : out > cf->out_max ? cf->out_max : out;
            t->text = strdup(json_string_value(json_object_get(h, "value")));
        }

        if (src->nturns > 0) {
            cf->nsources++;
        } else {
            free(src->turns);
        }
    }
    json_decref(root);
    json_decref(human);
    json_decref(gpt);

    if (cf->nsources == 0) {
        die("%s: no conversation with a human turn and a reply that fit",
            cf->dataset_file);
    }
}


static void
setup_lengths(load_conf_t *cf)
{
    int  room;

    load_context_limits(cf->max_model_len, &cf->in_max, &cf->out_max);
    room = cf->in_max - cf->prefix;

    if (cf->dataset_file) {
        load_dataset_file(cf);
        return;
    }
    if (cf->ds == NULL) {
        return;
    }
    if (load_lognormal_init(&cf->in, cf->ds->in_mean, cf->ds->in_sigma, 1,
                            room) != 0
        || load_lognormal_init(&cf->out, cf->ds->out_mean,
                               cf->ds->out_sigma, 1, cf->out_max) != 0)
    {
        die("the model's context is too short for the %s lengths",
            cf->ds->name);
    }
}


/* ---- the command line -------------------------------------------------- */

static void
usage(void)
{
    printf(
"usage: pagedllm-load [options]\n"
"Drives an OpenAI-style server and writes one JSON line per request rate.\n"
"\n"
"target\n"
"  -H, --host HOST          server address (127.0.0.1)\n"
"  -p, --port PORT          server port (8080)\n"
"      --metrics-url URL    Prometheus text read every 0.5 s for the mean\n"
"                           running requests and KV usage\n"
"                           (http://HOST:PORT/metrics; 'none': not read)\n"
"      --max-model-len N    the model's context (default: GET /v1/models)\n"
"  -V, --vocab N            prompt token ids are drawn from 0..N-1 (512)\n"
"\n"
"arrivals (each rate gets the same requests, drawn from the seed)\n"
"      --rate R[,R...]      Poisson arrivals at R requests/s, one run per\n"
"                           rate in order; 'inf': all at once.  Without\n"
"                           --rate: a closed loop of -c clients\n"
"  -c, --concurrency N      closed loop: clients (16); with --rate: the\n"
"                           most requests in flight (0, no limit)\n"
"  -n, --num-requests N     requests (conversations with --chat-turns) per\n"
"                           rate (64)\n"
"      --duration S         Poisson arrivals for S seconds per rate instead\n"
"                           of a count\n"
"      --seed S             seed of arrivals, lengths and prompts (1)\n"
"      --warmup N           N requests at once, not measured, first\n"
"      --timeout S          fail requests after S s without progress (120)\n"
"\n"
"lengths (output lengths are exact: ignore_eos, max_tokens = the draw)\n"
"      --dist NAME          lognormal lengths with the paper's means\n"
"                           (Fig. 11), each mu set so the clipped mean is\n"
"                           the paper's; at a 2048-token context:\n"
"                           sharegpt (default): input mean 161.31 sigma\n"
"                           1.1 (median 93, p99 1024), output mean 337.99\n"
"                           sigma 0.9 (median 248, p99 1024); long tails\n"
"                           alpaca: input mean 19.31 sigma 0.6 (median 16,\n"
"                           p99 65), output mean 58.45 sigma 0.8 (median\n"
"                           42, p99 273); short and narrow\n"
"                           Inputs are clipped to [1, min(1024, ctx/2)]\n"
"                           less a shared prefix, outputs to [1,\n"
"                           min(2048, ctx) - min(1024, ctx/2)]\n"
"                           fixed: -P and -G\n"
"  -P, --prompt-tokens N    fixed prompt length (selects --dist fixed; 128)\n"
"  -G, --output-tokens N    fixed output length (selects --dist fixed; 128)\n"
"      --dataset FILE       ShareGPT JSON: each human turn is sent as the\n"
"                           prompt text; max_tokens is the gpt reply's\n"
"                           bytes / 4; turns longer than the input limit\n"
"                           are left out\n"
"\n"
"decoding\n"
"      --n N                parallel sampling: N sequences a request (1)\n"
"      --beam-width W       beam search: use_beam_search, n = best_of = W,\n"
"                           temperature 0 (a server without it answers\n"
"                           400; the failures are reported)\n"
"      --temperature T      (0; 1 with --n above 1)\n"
"\n"
"workloads\n"
"      --shared-prefix K    1shot (80 tokens) or 5shot (341 tokens): the\n"
"                           same prefix before every prompt\n"
"      --chat-turns K       conversations of K turns on\n"
"                           /v1/chat/completions; each turn sends the\n"
"                           earlier turns with the actual replies, the\n"
"                           oldest dropped past the input limit\n"
"\n"
"output\n"
"      --out FILE           the JSON lines to FILE (stdout)\n"
"  -h, --help               this help\n"
"      --version            the version\n"
"\n"
"Each JSON line: mode, offered_rate, requests, ok, failed, duration_s,\n"
"request_rate (achieved), prompt_tokens, output_tokens,\n"
"output_tokens_per_s, total_tokens_per_s, norm_latency_{mean,p50,p99}_s\n"
"(end-to-end latency / output tokens of a sequence), ttft_{p50,p90,p99}_ms,\n"
"tpot_{p50,p99}_ms, latency_{p50,p99}_s, running_mean, kv_usage_mean,\n"
"errors (by kind) and first_error.  The exit status is 1 when a request\n"
"failed.\n");
}


static double *
parse_rates(const char *s, int *n)
{
    double  *r = NULL;
    char    *copy = strdup(s), *tok, *save, *end;

    *n = 0;
    for (tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save))
    {
        r = xrealloc(r, (*n + 1) * sizeof(double));
        if (strcmp(tok, "inf") == 0) {
            r[*n] = INFINITY;
        } else {
            r[*n] = strtod(tok, &end);
            if (*end || !(r[*n] > 0) || isinf(r[*n])) {
                die("--rate: '%s' is not a positive rate or inf", tok);
            }
        }
        (*n)++;
    }
    free(copy);

    if (*n == 0) {
        die("--rate: no rate in '%s'", s);
    }
    return r;
}


static long
parse_long(const char *s, const char *flag, long min)
{
    char  *end;
    long   v = strtol(s, &end, 10);

    if (*s == '\0' || *end || v < min) {
        fprintf(stderr, "pagedllm-load: %s: '%s' is not an integer >= %ld\n",
                flag, s, min);
        exit(2);
    }
    return v;
}


static double
parse_double(const char *s, const char *flag)
{
    char    *end;
    double   v = strtod(s, &end);

    if (*s == '\0' || *end || !(v >= 0) || isinf(v)) {
        die("%s: not a non-negative number", flag);
    }
    return v;
}


enum {
    OPT_RATE = 256, OPT_DURATION, OPT_SEED, OPT_WARMUP, OPT_TIMEOUT,
    OPT_DIST, OPT_DATASET, OPT_N, OPT_BEAM, OPT_TEMP, OPT_PREFIX, OPT_CHAT,
    OPT_METRICS, OPT_MAXLEN, OPT_OUT, OPT_VERSION
};

static const struct option  load_options[] = {
    { "host", required_argument, NULL, 'H' },
    { "port", required_argument, NULL, 'p' },
    { "metrics-url", required_argument, NULL, OPT_METRICS },
    { "max-model-len", required_argument, NULL, OPT_MAXLEN },
    { "vocab", required_argument, NULL, 'V' },
    { "rate", required_argument, NULL, OPT_RATE },
    { "concurrency", required_argument, NULL, 'c' },
    { "num-requests", required_argument, NULL, 'n' },
    { "duration", required_argument, NULL, OPT_DURATION },
    { "seed", required_argument, NULL, OPT_SEED },
    { "warmup", required_argument, NULL, OPT_WARMUP },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "dist", required_argument, NULL, OPT_DIST },
    { "prompt-tokens", required_argument, NULL, 'P' },
    { "output-tokens", required_argument, NULL, 'G' },
    { "dataset", required_argument, NULL, OPT_DATASET },
    { "n", required_argument, NULL, OPT_N },
    { "beam-width", required_argument, NULL, OPT_BEAM },
    { "temperature", required_argument, NULL, OPT_TEMP },
    { "shared-prefix", required_argument, NULL, OPT_PREFIX },
    { "chat-turns", required_argument, NULL, OPT_CHAT },
    { "out", required_argument, NULL, OPT_OUT },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, OPT_VERSION },
    { NULL, 0, NULL, 0 }
};


static void
parse_args(load_conf_t *cf, int argc, char **argv)
{
    const char  *host = "127.0.0.1", *port = "8080", *murl = NULL;
    const char  *out = NULL;
    int          opt, conc_set = 0, temp_set = 0;
    char         url[400];

    opterr = 0;

    while ((opt = getopt_long(argc, argv, ":H:p:V:c:n:P:G:h", load_options,
                              NULL)) != -1)
    {
        switch (opt) {
        case 'H': host = optarg; break;
        case 'p': port = optarg; break;
        case OPT_METRICS: murl = optarg; break;
        case OPT_MAXLEN:
            cf->max_model_len = parse_long(optarg, "--max-model-len", 2);
            break;
        case 'V': cf->vocab = parse_long(optarg, "--vocab", 1); break;
        case OPT_RATE: cf->rates = parse_rates(optarg, &cf->nrates); break;
        case 'c':
            cf->concurrency = parse_long(optarg, "--concurrency", 0);
            conc_set = 1;
            break;
        case 'n': cf->requests = parse_long(optarg, "--num-requests", 1);
            break;
        case OPT_DURATION:
            cf->duration = parse_double(optarg, "--duration");
            break;
        case OPT_SEED:
            cf->seed = (uint64_t) parse_long(optarg, "--seed", 0);
            break;
        case OPT_WARMUP: cf->warmup = parse_long(optarg, "--warmup", 0);
            break;
        case OPT_TIMEOUT:
            cf->timeout = parse_double(optarg, "--timeout");
            break;
        case OPT_DIST: cf->dist = optarg; break;
        case 'P':
            cf->fixed_in = parse_long(optarg, "--prompt-tokens", 1);
            cf->dist = "fixed";
            break;
        case 'G':
            cf->fixed_out = parse_long(optarg, "--output-tokens", 1);
            cf->dist = "fixed";
            break;
        case OPT_DATASET: cf->dataset_file = optarg; break;
        case OPT_N: cf->n = parse_long(optarg, "--n", 1); break;
        case OPT_BEAM: cf->beam = parse_long(optarg, "--beam-width", 1);
            break;
        case OPT_TEMP:
            cf->temperature = parse_double(optarg, "--temperature");
            temp_set = 1;
            break;
        case OPT_PREFIX:
            cf->prefix = strcmp(optarg, "1shot") == 0 ? 80
                         : strcmp(optarg, "5shot") == 0 ? 341 : -1;
            if (cf->prefix < 0) {
                die("--shared-prefix: '%s' is neither 1shot nor 5shot",
                    optarg);
            }
            break;
        case OPT_CHAT:
            cf->chat_turns = parse_long(optarg, "--chat-turns", 1);
            if (cf->chat_turns > LOAD_MAX_TURNS) {
                fprintf(stderr, "pagedllm-load: --chat-turns: at most %d\n",
                        LOAD_MAX_TURNS);
                exit(2);
            }
            break;
        case OPT_OUT: out = optarg; break;
        case 'h': usage(); exit(0);
        case OPT_VERSION: printf("%s\n", LOAD_VERSION); exit(0);
        case ':':
            fprintf(stderr, "pagedllm-load: %s needs a value; try --help\n",
                    argv[optind - 1]);
            exit(2);
        default:
            fprintf(stderr, "pagedllm-load: unknown option '%s'; try --help\n",
                    argv[optind - 1]);
            exit(2);
        }
    }

    if (optind < argc) {
        die("unexpected argument '%s'; try --help", argv[optind]);
    }

    if (strcmp(cf->dist, "fixed") != 0) {
        cf->ds = load_dataset_find(cf->dist);
        if (cf->ds == NULL) {
            die("--dist: '%s' is none of sharegpt, alpaca, fixed", cf->dist);
        }
    }
    if (cf->prefix && cf->chat_turns) {
        die("%s", "--shared-prefix and --chat-turns do not go together");
    }
    if (cf->n > 1 && cf->beam) {
        die("%s", "--n and --beam-width do not go together");
    }
    if (!temp_set && cf->n > 1) {
        cf->temperature = 1.0;
    }
    if (cf->rates == NULL) {
        cf->rates = xrealloc(NULL, sizeof(double));
        cf->rates[0] = 0;
        cf->nrates = 1;
        if (cf->concurrency == 0) {
            cf->concurrency = 16;
        }
        if (cf->duration > 0) {
            die("%s", "--duration needs --rate");
        }
    } else if (!conc_set) {
        cf->concurrency = 0;
    }

    if (target_set(&cf->api, host, port, "/") != 0) {
        die("cannot resolve host '%s'", host);
    }

    if (murl == NULL) {
        snprintf(url, sizeof(url), "http://%s:%s/metrics", host, port);
        murl = url;
    }
    cf->metrics_on = strcmp(murl, "none") != 0;
    if (cf->metrics_on && target_parse_url(&cf->metrics, murl) != 0) {
        die("--metrics-url: '%s' is not http://HOST[:PORT]/PATH", murl);
    }

    cf->json_out = stdout;
    if (out && (cf->json_out = fopen(out, "w")) == NULL) {
        die("cannot write %s", out);
    }
}


int
main(int argc, char **argv)
{
    load_conf_t  cf;
    int          i, failed = 0;

    memset(&cf, 0, sizeof(cf));
    cf.dist = "sharegpt";
    cf.fixed_in = 128;
    cf.fixed_out = 128;
    cf.n = 1;
    cf.vocab = 512;
    cf.requests = 64;
    cf.concurrency = 16;
    cf.seed = 1;
    cf.timeout = 120;

    parse_args(&cf, argc, argv);

    if (cf.max_model_len == 0) {
        cf.max_model_len = fetch_max_model_len(&cf);
        if (cf.max_model_len == 0) {
            return 1;
        }
    }
    setup_lengths(&cf);

    if (cf.warmup > 0) {
        run_rate(&cf, INFINITY, cf.warmup, 0);
    }

    for (i = 0; i < cf.nrates; i++) {
        failed |= run_rate(&cf, cf.rates[i], cf.requests, 1);
    }

    if (cf.json_out != stdout) {
        fclose(cf.json_out);
    }
    return failed;
}
