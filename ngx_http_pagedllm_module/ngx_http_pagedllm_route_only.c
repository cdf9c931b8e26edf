
/*
 * ngx_http_pagedllm_route_only: a front nginx that attaches to no engine
 * and routes requests to serving nginx instances by their prompt's
 * prefix ($pagedllm_prefix_hash in a "hash ... consistent" upstream):
 *
 *     pagedllm_route_only /srv/models/llama3 [model=NAME];       (http)
 *
 * loads the model folder's tokenizer.json and tokenizer_config.json, the
 * files the engine serving that folder names to its nginx, so that the
 * prompt can be made here exactly as a serving nginx makes it: the body
 * parsed by the same parser, against a stand-in for the engine (the
 * model's name, as the engine's --served-model-name or the folder's
 * name, the tokenizer's vocabulary and no length limit: lengths are the
 * serving tier's to check), and the prompt rendered by the chat template
 * and tokenized by the same code.  A body the parser refuses has no
 * prompt here; the serving tier answers it.
 *
 * The tokenizer is loaded while the configuration is read, in the
 * master (a bad folder fails "nginx -t"), shared by the workers and
 * freed with the configuration's pool.
 *
 * The prompt is made in the event loop, from a variable's getter, which
 * cannot wait for a thread: the work grows with the body (about 0.1 ms
 * for 4 KiB, see ngx_http_pagedllm_completion.c), so it is done only for
 * bodies held in memory, those within client_body_buffer_size.  A body
 * nginx wrote to a temp file is hashed by its first bytes instead
 * (ngx_http_pagedllm_route_raw_hash()), one read of the file.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_prefix.h"


/* the bytes of a body in a temp file that its hash reads */
#define NGX_HTTP_PAGEDLLM_RAW_PREFIX   4096


static ngx_int_t ngx_http_pagedllm_route_model(ngx_conf_t *cf,
    ngx_http_pagedllm_engine_t *engine, ngx_str_t *dir, ngx_str_t *name);
static void ngx_http_pagedllm_route_cleanup(void *data);
static ngx_int_t ngx_http_pagedllm_route_prompt(ngx_http_request_t *r,
    ngx_uint_t chat, int32_t **ids, ngx_uint_t *n);
static ngx_int_t ngx_http_pagedllm_route_api(ngx_http_request_t *r,
    ngx_uint_t *chat);
static ngx_int_t ngx_http_pagedllm_route_raw_hash(ngx_http_request_t *r,
    uint64_t *hash);


/* pagedllm_route_only DIR [model=NAME] */
char *
ngx_http_pagedllm_route_only_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_pagedllm_main_conf_t *pmcf = conf;

    u_char                      *start;
    ngx_str_t                   *value, dir, name;
    ngx_http_pagedllm_engine_t  *engine;

    if (pmcf->route_only) {
        return "is duplicate";
    }

    value = cf->args->elts;
    dir = value[1];

    /* a relative folder is under nginx's configuration prefix */

    if (ngx_conf_full_name(cf->cycle, &dir, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    while (dir.len > 1 && dir.data[dir.len - 1] == '/') {
        dir.len--;
    }

    if (cf->args->nelts == 3) {
        if (ngx_strncmp(value[2].data, "model=", 6) != 0
            || value[2].len == 6)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\": \"model=NAME\"",
                               &value[2]);
            return NGX_CONF_ERROR;
        }

        name.data = value[2].data + 6;
        name.len = value[2].len - 6;

    } else {
        /* the folder's name, as the engine names its model by default */

        for (start = dir.data + dir.len;
             start > dir.data && start[-1] != '/';
             start--)
        {
            /* void */
        }

        name.data = start;
        name.len = dir.data + dir.len - start;
    }

    engine = ngx_pcalloc(cf->pool, sizeof(ngx_http_pagedllm_engine_t));
    if (engine == NULL) {
        return NGX_CONF_ERROR;
    }

    if (ngx_http_pagedllm_route_model(cf, engine, &dir, &name) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    pmcf->route_only = engine;

    return NGX_CONF_OK;
}


/* The stand-in engine: the folder's tokenizer, released with the
   configuration's pool. */
static ngx_int_t
ngx_http_pagedllm_route_model(ngx_conf_t *cf,
    ngx_http_pagedllm_engine_t *engine, ngx_str_t *dir, ngx_str_t *name)
{
    u_char               path[PL_PATH_LEN], err[NGX_HTTP_PAGEDLLM_ERR_LEN];
    ngx_pool_cleanup_t  *cln;

    if (dir->len + sizeof("/tokenizer.json") > PL_PATH_LEN) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "model folder \"%V\" has "
                           "too long a path", dir);
        return NGX_ERROR;
    }

    ngx_snprintf(path, sizeof(path), "%V/tokenizer.json%Z", dir);

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    engine->tok = ngx_http_pagedllm_tok_open((char *) path, 0, cf->log, err,
                                             sizeof(err));
    if (engine->tok == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", err);
        return NGX_ERROR;
    }

    cln->handler = ngx_http_pagedllm_route_cleanup;
    cln->data = engine->tok;

    engine->model.data = ngx_pstrdup(cf->pool, name);
    if (engine->model.data == NULL) {
        return NGX_ERROR;
    }

    engine->model.len = name->len;
    engine->vocab_size = pl_tokenizer_vocab_size(engine->tok->tokenizer);
    engine->max_model_len = NGX_MAX_INT32_VALUE;
    engine->max_prompt = NGX_MAX_INT32_VALUE;
    engine->default_temperature = -1;
    engine->default_top_p = -1;
    engine->default_top_k = -1;

    return NGX_OK;
}


static void
ngx_http_pagedllm_route_cleanup(void *data)
{
    ngx_http_pagedllm_tok_release(data);
}


/*
 * A pagedllm_route_only nginx's prefix hash of a request: of the first k
 * ids of its prompt, or of its body's first bytes when the body sits in
 * a temp file.  NGX_OK; NGX_DECLINED, for good, when its body is read and
 * it is not a completion or has no prompt the parser takes; NGX_AGAIN
 * while there may be one later: the body not read (or passed on
 * unbuffered), or this nginx not routing (a serving nginx, whose request
 * gets its prompt in the content phase).
 */
ngx_int_t
ngx_http_pagedllm_route_hash(ngx_http_request_t *r, size_t k,
    uint64_t *hash)
{
    int32_t                        *ids;
    ngx_int_t                       rc;
    ngx_uint_t                      chat, n;
    ngx_http_request_t             *m;
    ngx_http_pagedllm_main_conf_t  *pmcf;

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pagedllm_module);
    m = r->main;

    if (pmcf->route_only == NULL || m->request_body == NULL
        || m->reading_body || m->request_body_no_buffering)
    {
        return NGX_AGAIN;
    }

    if (ngx_http_pagedllm_route_api(m, &chat) != NGX_OK) {
        return NGX_DECLINED;
    }

    if (m->request_body->temp_file) {
        return ngx_http_pagedllm_route_raw_hash(m, hash);
    }

    rc = ngx_http_pagedllm_route_prompt(m, chat, &ids, &n);

    if (rc == NGX_OK) {
        *hash = ngx_http_pagedllm_prefix_hash(ids, n, k);
    }

    return rc;
}


/* The prompt's ids of a completion or chat completion body held in
   memory, as a serving nginx would submit them: NGX_OK with ids (the
   request pool's) and n; NGX_DECLINED when the parser refuses it. */
static ngx_int_t
ngx_http_pagedllm_route_prompt(ngx_http_request_t *r, ngx_uint_t chat,
    int32_t **ids, ngx_uint_t *n)
{
    u_char                         *body;
    size_t                          len;
    ngx_http_pagedllm_error_t       err;
    ngx_http_pagedllm_decode_t     *d;
    ngx_http_pagedllm_params_t     *p;
    ngx_http_pagedllm_tokenize_t   *job;
    ngx_http_pagedllm_main_conf_t  *pmcf;

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pagedllm_module);

    body = ngx_http_pagedllm_body(r, &len);
    if (body == NULL) {
        return NGX_DECLINED;
    }

    d = ngx_palloc(r->pool, sizeof(ngx_http_pagedllm_decode_t));
    p = ngx_palloc(r->pool, sizeof(ngx_http_pagedllm_params_t));
    job = ngx_palloc(r->pool, sizeof(ngx_http_pagedllm_tokenize_t));

    if (d == NULL || p == NULL || job == NULL
        || ngx_http_pagedllm_decode_init(r->pool, d, body, len) != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_http_pagedllm_decode(d);

    if (ngx_http_pagedllm_parse_completion(r, d, pmcf->route_only, chat, p,
                                           &err)
        != NGX_OK)
    {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "pagedllm: no prompt to route by: %s", err.message);
        return NGX_DECLINED;
    }

    if (p->prompt != NULL) {
        *ids = p->prompt;
        *n = p->n_prompt;
        return NGX_OK;
    }

    if (ngx_http_pagedllm_tokenize_init(r->pool, job, pmcf->route_only->tok,
                                        p)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_http_pagedllm_tokenize(job, r->connection->log);

    if (job->rc != NGX_OK) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "pagedllm: no prompt to route by: %s",
                       job->err.message);
        return NGX_DECLINED;
    }

    *ids = job->ids;
    *n = job->n_ids;

    return NGX_OK;
}


/* Which API the URI asks for, by its end as the serving location sees
   it: .../chat/completions or .../completions (not .../tokenize). */
static ngx_int_t
ngx_http_pagedllm_route_api(ngx_http_request_t *r, ngx_uint_t *chat)
{
    ngx_str_t  *uri = &r->uri;

    static ngx_str_t  chat_end = ngx_string("/chat/completions");
    static ngx_str_t  end = ngx_string("/completions");

    if (uri->len >= chat_end.len
        && ngx_strncmp(uri->data + uri->len - chat_end.len, chat_end.data,
                       chat_end.len) == 0)
    {
        *chat = 1;
        return NGX_OK;
    }

    if (uri->len >= end.len
        && ngx_strncmp(uri->data + uri->len - end.len, end.data, end.len)
           == 0)
    {
        *chat = 0;
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/*
 * A body in a temp file, too long to parse in the event loop: FNV-1a of
 * its first NGX_HTTP_PAGEDLLM_RAW_PREFIX bytes, so that clients that
 * write the same leading JSON (the model, a shared system prompt) still
 * meet on one instance.
 */
static ngx_int_t
ngx_http_pagedllm_route_raw_hash(ngx_http_request_t *r, uint64_t *hash)
{
    u_char   buf[NGX_HTTP_PAGEDLLM_RAW_PREFIX];
    ssize_t  n;

    n = ngx_read_file(&r->request_body->temp_file->file, buf, sizeof(buf),
                      0);
    if (n <= 0) {
        return NGX_DECLINED;
    }

    *hash = pl_fnv1a64(buf, (size_t) n);

    return NGX_OK;
}
