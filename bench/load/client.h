/*
 * client.h: what the files of pagedllm-load share beyond load.h's pure
 * parts: the run's configuration, the conversations drawn before a run,
 * one connection and its measured request, and a run's state; and the
 * functions each file lends the others.
 *
 *   util.c      the clock, errors, memory
 *   conn.c      the target, one connection (send, HTTP, SSE), the
 *               blocking GET of /v1/models
 *   workload.c  what a request asks for and the conversations of a run
 *               (synthetic lengths, a dataset file, shared prefix, chat)
 *   scrape.c    the /metrics readings during a run
 *   report.c    a run's JSON line
 *   cli.c       the command line and --help
 *
 * bench/pagedllm-load.c holds main and the run loop.
 */

#ifndef PL_LOAD_CLIENT_H
#define PL_LOAD_CLIENT_H

#include <stdio.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

#include "load.h"

#define LOAD_NAME  "pagedllm-load"

#define LOAD_MAX_TURNS     64
#define LOAD_SCRAPE_EVERY  0.5


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


/* A run's configuration, from the command line (cli.c). */
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


/* util.c */
double load_now(void);
void load_die(const char *fmt, const char *arg);
void *load_xrealloc(void *p, size_t size);
void load_append(char **buf, size_t *len, size_t *cap, const char *p,
    size_t n);

/* conn.c */
int load_target_set(load_target_t *t, const char *host, const char *port,
    const char *path);
int load_target_parse_url(load_target_t *t, const char *url);
char *load_http_request(const load_target_t *t, const char *method,
    const char *path, const char *body, size_t *len);
load_conn_t *load_conn_new(const load_target_t *t, char *req,
    size_t req_len);
void load_conn_free(load_conn_t *c);
void load_conn_fail(load_conn_t *c, const char *what);
void load_conn_io(load_conn_t *c, short revents);
int load_fetch_max_model_len(const load_conf_t *cf);

/* workload.c */
void load_setup_lengths(load_conf_t *cf);
load_conv_t *load_draw_convs(const load_conf_t *cf, double rate,
    long count, double duration, uint64_t seed, long *nconvs);
char *load_turn_body(const load_conf_t *cf, load_conv_t *cv,
    const char **path);
void load_history_add(load_conv_t *cv, load_conn_t *c);

/* scrape.c */
void load_scrape_start(load_run_t *run);
void load_scrape_done(load_run_t *run, load_conn_t *c);

/* report.c */
void load_report(const load_conf_t *cf, load_run_t *run, double rate);

/* cli.c: cf from the defaults and the command line */
void load_parse_args(load_conf_t *cf, int argc, char **argv);

#endif
