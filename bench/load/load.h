/*
 * load.h: the pure parts of pagedllm-load, linked by the program and by
 * its unit test (t/unit/load_stats.c): the random draws (seeded, so a run
 * is reproducible), the request-length distributions, the statistics of a
 * run, and the parsers of what the server answers (HTTP/1.1 framing, SSE
 * events, Prometheus text).  Nothing here does I/O or reads a clock.
 */

#ifndef PL_LOAD_H
#define PL_LOAD_H

#include <stddef.h>
#include <stdint.h>


/* xoshiro256** seeded through splitmix64: fast, and the same numbers on
   every machine for a seed. */
typedef struct {
    uint64_t  s[4];
} load_rng_t;

void load_rng_seed(load_rng_t *r, uint64_t seed);
uint64_t load_rng_next(load_rng_t *r);
double load_rng_uniform(load_rng_t *r);
double load_rng_normal(load_rng_t *r);
double load_rng_exp(load_rng_t *r, double rate);


/* A length in tokens: lognormal(mu, sigma) rounded to an integer and
   clipped to [lo, hi].  sigma sets the shape of the tail; mu is solved so
   that the mean after clipping is the target mean. */
typedef struct {
    double  mean;
    double  sigma;
    double  mu;
    int     lo;
    int     hi;
} load_lognormal_t;

int load_lognormal_init(load_lognormal_t *d, double mean, double sigma,
    int lo, int hi);
double load_lognormal_clipped_mean(double mu, double sigma, double lo,
    double hi);
double load_lognormal_quantile(const load_lognormal_t *d, double p);
int load_lognormal_draw(const load_lognormal_t *d, load_rng_t *r);


/* A workload's prompt and output lengths (see load_datasets in dist.c). */
typedef struct {
    const char  *name;
    double       in_mean;
    double       in_sigma;
    double       out_mean;
    double       out_sigma;
} load_dataset_t;

const load_dataset_t *load_dataset_find(const char *name);
void load_context_limits(int max_model_len, int *in_max, int *out_max);


/* One HTTP request as measured: times in seconds on one clock. */
typedef struct {
    double  start;               /* the request's first byte sent */
    double  first;               /* its first token's event */
    double  end;                 /* its [DONE], or its failure */
    long    prompt_tokens;       /* usage.prompt_tokens */
    long    output_tokens;       /* usage.completion_tokens, all sequences */
    int     seqs;                /* sequences it returned (n) */
    int     ok;
} load_record_t;

typedef struct {
    long    requests;
    long    ok;
    long    failed;
    double  duration;            /* first start to last end */
    double  request_rate;        /* ok / duration */
    long    prompt_tokens;
    long    output_tokens;
    double  output_tps;
    double  total_tps;
    double  norm_mean;           /* latency / output tokens per sequence */
    double  norm_p50;
    double  norm_p99;
    double  ttft_p50;
    double  ttft_p90;
    double  ttft_p99;
    double  tpot_p50;            /* (end of stream - first) / (tokens - 1) */
    double  tpot_p99;
    double  latency_p50;
    double  latency_p99;
} load_summary_t;

double load_percentile(double *v, size_t n, double p);
int load_summarize(const load_record_t *r, size_t n, load_summary_t *s);


/* Prometheus text: the running requests and the KV blocks in use and in
   all; 0 when all three are there. */
int load_metrics_parse(const char *text, size_t len, double *running,
    double *kv_used, double *kv_capacity);


/* An HTTP/1.1 response, fed as it arrives: the status, then the body
   (chunked, Content-Length or up to the close) handed to body(). */
typedef void (*load_body_pt)(void *data, const char *p, size_t n);

typedef struct {
    int     state;
    int     status;
    int     chunked;
    long    length;              /* Content-Length, -1 if none */
    long    left;                /* bytes left of the body or the chunk */
    char    line[8192];
    size_t  nline;
} load_http_t;

#define LOAD_HTTP_MORE   0
#define LOAD_HTTP_DONE   1
#define LOAD_HTTP_ERROR  -1

void load_http_init(load_http_t *h);
int load_http_feed(load_http_t *h, const char *p, size_t n,
    load_body_pt body, void *data);
int load_http_eof(load_http_t *h);


/* SSE: "data: ...\n\n" events cut out of the body; ev() gets each
   payload (the text after "data: "). */
typedef void (*load_event_pt)(void *data, const char *p, size_t n);

typedef struct {
    char    *buf;
    size_t   len;
    size_t   cap;
} load_sse_t;

int load_sse_feed(load_sse_t *s, const char *p, size_t n, load_event_pt ev,
    void *data);
void load_sse_free(load_sse_t *s);

#endif
