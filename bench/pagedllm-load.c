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
 *
 * This file holds main and the run loop: a rate's conversations started
 * when due, every connection polled, each finished request recorded.
 * The other parts are in load/ (client.h lists them); the pure ones,
 * which do no I/O, are load.h's.
 */

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "load/client.h"


/* ---- a run --------------------------------------------------------- */

static void
run_add_conn(load_run_t *run, load_conn_t *c)
{
    if (run->nconns == run->conns_cap) {
        run->conns_cap = run->conns_cap ? run->conns_cap * 2 : 64;
        run->conns = load_xrealloc(run->conns,
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

    body = load_turn_body(run->cf, cv, &path);
    req = load_http_request(&run->cf->api, "POST", path, body, &len);
    free(body);

    c = load_conn_new(&run->cf->api, req, len);
    c->conv = cv;
    c->rec.start = load_now();
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
        c->rec.end = load_now();
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
        run->recs = load_xrealloc(run->recs,
                                  run->recs_cap * sizeof(load_record_t));
    }
    run->recs[run->nrecs++] = c->rec;
}


/* a finished request: recorded; a chat conversation goes on */
static void
run_finish(load_run_t *run, load_conn_t *c)
{
    load_conv_t  *cv = c->conv;

    run->in_flight--;
    run_record(run, c);

    if (c->error[0] == '\0' && cv->history) {
        load_history_add(cv, c);
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
    double              t = load_now() - run->t0;
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


static int
run_poll_timeout(load_run_t *run)
{
    double  t = load_now(), wait = 1.0;
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
        load_scrape_done(run, run->scrape);
        load_conn_free(run->scrape);
        run->scrape = NULL;
    }

    /* run_finish may add a chat's next turn: the loop reaches it too */
    for (i = 0; i < run->nconns; i++) {
        if (run->conns[i]->finished) {
            run_finish(run, run->conns[i]);
            load_conn_free(run->conns[i]);
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

    if (run->in_flight == 0
        || load_now() - run->last_progress < run->cf->timeout)
    {
        return;
    }

    snprintf(msg, sizeof(msg), "timeout: no response for %.0f s",
             run->cf->timeout);
    for (i = 0; i < run->nconns; i++) {
        load_conn_fail(run->conns[i], msg);
    }
}


static void
run_loop(load_run_t *run)
{
    struct pollfd  *pfd = NULL;
    size_t          i, n, cap = 0;
    int             rc;
    load_conn_t    *c;

    run->t0 = load_now();
    run->last_progress = run->t0;
    /* the first reading once requests are in flight, not before any */
    run->next_scrape = run->t0 + LOAD_SCRAPE_EVERY / 2
                       + (run->nconvs ? run->convs[0].arrival : 0);

    while (run->convs_done < run->nconvs) {
        run_start_due(run);
        load_scrape_start(run);
        run_reap(run);

        n = run->nconns + 1;
        if (n > cap) {
            cap = n * 2;
            pfd = load_xrealloc(pfd, cap * sizeof(*pfd));
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
            run->last_progress = load_now();
        }

        for (i = 0; i <= run->nconns; i++) {
            c = i < run->nconns ? run->conns[i] : run->scrape;
            if (c && pfd[i].revents) {
                load_conn_io(c, pfd[i].revents);
            }
        }

        run_check_stall(run);
        run_reap(run);
    }

    /* a reading still on its way belongs to no run */
    if (run->scrape) {
        load_conn_free(run->scrape);
        run->scrape = NULL;
    }
    free(pfd);
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
    run.convs = load_draw_convs(cf, rate, count, record ? cf->duration : 0,
                                record ? cf->seed : cf->seed ^ 0x7761726dull,
                                &run.nconvs);

    run_loop(&run);

    failed = 0;
    for (i = 0; i < (long) run.nrecs; i++) {
        failed += !run.recs[i].ok;
    }

    if (record) {
        load_report(cf, &run, rate);
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


int
main(int argc, char **argv)
{
    load_conf_t  cf;
    int          i, failed = 0;

    load_parse_args(&cf, argc, argv);

    if (cf.max_model_len == 0) {
        cf.max_model_len = load_fetch_max_model_len(&cf);
        if (cf.max_model_len == 0) {
            free(cf.rates);
            return 1;
        }
    }
    load_setup_lengths(&cf);

    if (cf.warmup > 0) {
        run_rate(&cf, INFINITY, cf.warmup, 0);
    }

    for (i = 0; i < cf.nrates; i++) {
        failed |= run_rate(&cf, cf.rates[i], cf.requests, 1);
    }

    if (cf.json_out != stdout) {
        fclose(cf.json_out);
    }
    free(cf.rates);
    return failed;
}
