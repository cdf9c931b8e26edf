/*
 * request_fuzz: a libFuzzer target for the module's OpenAI request parser,
 * linked without a server: the module's own files (request, fields,
 * prompt, response, tokenizer) against nginx's core objects from the
 * sanitized build (pools, strings, buffers, files; see the Makefile), with
 * the tiny model's tokenizer and chat template ($PAGEDLLM_BUILD/models/
 * tiny).  Each input is a request body after one byte that picks the
 * endpoint (its value modulo 4): /v1/completions, /v1/chat/completions,
 * /tokenize, /detokenize.  It goes the way the handler takes it: decoded,
 * parsed, the prompt or conversation tokenized (or the ids decoded), the
 * length checked, the answer or the error built.  Every refusal must be a
 * 4xx with a message (a 5xx only for out of memory, which libFuzzer's
 * malloc limit can cause); nothing may crash, leak or touch memory it
 * does not own.
 *
 *     make fuzz-request SECONDS=60
 *
 * The three definitions below stand in for the parts of nginx's core a
 * parser never reaches: the cycle, the log writer, and thread tasks
 * (ngx_files.c refers to them for threaded reads, which this process never
 * does).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_pagedllm_module.h"

#define FUZZ_POOL  4096

static ngx_log_t                    fuzz_log;
static ngx_cycle_t                  fuzz_cycle;
static ngx_http_pagedllm_engine_t   fuzz_engine;

volatile ngx_cycle_t  *ngx_cycle = &fuzz_cycle;


void
ngx_log_error_core(ngx_uint_t level, ngx_log_t *log, ngx_err_t err,
    const char *fmt, ...)
{
    (void) level;
    (void) log;
    (void) err;
    (void) fmt;
}


ngx_thread_task_t *
ngx_thread_task_alloc(ngx_pool_t *pool, size_t size)
{
    (void) pool;
    (void) size;

    return NULL;
}


static uint64_t
fuzz_file_hash(const char *path)
{
    FILE      *f = fopen(path, "rb");
    u_char    *buf;
    long       n;
    uint64_t   h;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0
        || fseek(f, 0, SEEK_SET) != 0 || (buf = malloc(n)) == NULL
        || fread(buf, 1, n, f) != (size_t) n)
    {
        fprintf(stderr, "request_fuzz: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    h = pl_fnv1a64(buf, (size_t) n);
    free(buf);

    return h;
}


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    u_char       err[512];
    char         path[PL_PATH_LEN];
    const char  *build = getenv("PAGEDLLM_BUILD");

    (void) argc;
    (void) argv;

    fuzz_log.log_level = NGX_LOG_EMERG;
    fuzz_cycle.log = &fuzz_log;
    ngx_pagesize = getpagesize();
    ngx_cacheline_size = NGX_CPU_CACHE_LINE;

    snprintf(path, sizeof(path), "%s/models/tiny/tokenizer.json",
             build != NULL ? build : "build");
    fuzz_engine.tok = ngx_http_pagedllm_tok_load(path, fuzz_file_hash(path),
                                                 &fuzz_log, err, sizeof(err));
    if (fuzz_engine.tok == NULL) {
        fprintf(stderr, "request_fuzz: %s\n", err);
        exit(1);
    }

    ngx_str_set(&fuzz_engine.model, "tiny");
    fuzz_engine.vocab_size = pl_tokenizer_vocab_size(
                                 fuzz_engine.tok->tokenizer);
    fuzz_engine.max_model_len = 2048;
    fuzz_engine.max_prompt = 65536;
    fuzz_engine.default_temperature = -1;

    return 0;
}


/* A refusal: an OpenAI-shaped error with a message, and its JSON. */
static void
fuzz_refused(ngx_pool_t *pool, ngx_http_pagedllm_error_t *err)
{
    if (err->status < 400 || err->status > 599 || err->message[0] == '\0'
        || (err->status >= 500 && err->status != 500))
    {
        abort();
    }

    if (ngx_http_pagedllm_error_json(pool, err) == NULL
        && err->status != 500)
    {
        abort();
    }
}


/* What the module keeps in its request context, which the pool's cleanups
   reach: the pool's memory, as there. */
typedef struct {
    ngx_http_request_t             r;
    ngx_http_pagedllm_error_t      err;
    ngx_http_pagedllm_params_t     p;
    ngx_http_pagedllm_decode_t     d;
    ngx_http_pagedllm_tokenize_t   job;
} fuzz_ctx_t;


static void
fuzz_request(ngx_pool_t *pool, ngx_uint_t endpoint, u_char *body,
    size_t len)
{
    ngx_int_t    rc;
    fuzz_ctx_t  *c;

    c = ngx_pcalloc(pool, sizeof(fuzz_ctx_t));
    if (c == NULL
        || ngx_http_pagedllm_decode_init(pool, &c->d, body, len) != NGX_OK)
    {
        return;
    }
    c->r.pool = pool;

    rc = endpoint < 2
         ? ngx_http_pagedllm_parse_completion(&c->r, &c->d, &fuzz_engine,
                                              endpoint, &c->p, &c->err)
         : ngx_http_pagedllm_parse_tokens(&c->r, &c->d, &fuzz_engine,
                                          endpoint == 3, &c->p, &c->err);
    if (rc != NGX_OK) {
        fuzz_refused(pool, &c->err);
        return;
    }

    if (c->p.prompt == NULL || endpoint == 3) {
        if (ngx_http_pagedllm_tokenize_init(pool, &c->job, fuzz_engine.tok,
                                            &c->p)
            != NGX_OK)
        {
            return;
        }

        if (endpoint == 3) {
            ngx_http_pagedllm_detokenize(&c->job, &fuzz_log);
        } else {
            ngx_http_pagedllm_tokenize(&c->job, &fuzz_log);
        }

        if (c->job.rc != NGX_OK) {
            fuzz_refused(pool, &c->job.err);
            return;
        }

        if (endpoint == 3) {
            (void) ngx_http_pagedllm_detokenize_json(pool, c->job.text,
                                                     c->job.text_len);
            return;
        }

        c->p.prompt = c->job.ids;
        c->p.n_prompt = c->job.n_ids;
    }

    if (endpoint == 2) {
        (void) ngx_http_pagedllm_tokenize_json(pool, &fuzz_engine,
                                               c->p.prompt, c->p.n_prompt);
        return;
    }

    if (ngx_http_pagedllm_check_length(&c->p, &fuzz_engine, &c->err)
        != NGX_OK)
    {
        fuzz_refused(pool, &c->err);
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char      *body;
    ngx_pool_t  *pool;

    if (size == 0) {
        return 0;
    }

    pool = ngx_create_pool(FUZZ_POOL, &fuzz_log);
    if (pool == NULL) {
        return 0;
    }

    /* the body in memory of its own size, as nginx reads it */
    body = ngx_pnalloc(pool, size - 1);
    if (body != NULL) {
        ngx_memcpy(body, data + 1, size - 1);
        fuzz_request(pool, data[0] % 4, body, size - 1);
    }

    ngx_destroy_pool(pool);

    return 0;
}
