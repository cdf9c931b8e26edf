
/*
 * ngx_http_pagedllm_tokenizer: the engine's tokenizer on the worker's
 * side.  Loading it means hashing tokenizer.json (to be sure it is the
 * engine's), parsing it, loading the chat template next to it and listing
 * the special tokens' text: a large tokenizer takes hundreds of
 * milliseconds, so the channel runs ngx_http_pagedllm_tok_load() on the
 * thread pool.  It is thread-safe: it touches no pool, no log but the one
 * given, and reports failure in err.  The result is reference-counted
 * (in the event loop only) so that requests and tasks still using a
 * tokenizer keep it alive across a re-attach that loads another.
 */


#include "ngx_http_pagedllm_module.h"


#define NGX_HTTP_PAGEDLLM_MAX_TOKENIZER     (256 * 1024 * 1024)


static ngx_int_t ngx_http_pagedllm_file_hash(const char *path,
    uint64_t *hash, ngx_log_t *log, u_char *err, size_t len);
static void ngx_http_pagedllm_tok_chat(ngx_http_pagedllm_tok_t *tok);
static ngx_int_t ngx_http_pagedllm_tok_specials(ngx_http_pagedllm_tok_t *tok,
    ngx_log_t *log);
static void ngx_http_pagedllm_tok_cleanup(void *data);
static void ngx_http_pagedllm_tok_free(ngx_http_pagedllm_tok_t *tok);


ngx_http_pagedllm_tok_t *
ngx_http_pagedllm_tok_load(const char *path, uint64_t hash, ngx_log_t *log,
    u_char *err, size_t len)
{
    uint64_t  got;

    if (ngx_http_pagedllm_file_hash(path, &got, log, err, len) != NGX_OK) {
        return NULL;
    }

    if (got != hash) {
        ngx_snprintf(err, len, "tokenizer \"%s\" differs from the engine's "
                     "(hash %016xL, engine %016xL)%Z", path, got, hash);
        return NULL;
    }

    return ngx_http_pagedllm_tok_open(path, hash, log, err, len);
}


/* The tokenizer at path, its chat template and special tokens, loaded
   as they are: pagedllm_route_only's, with no engine to compare with. */
ngx_http_pagedllm_tok_t *
ngx_http_pagedllm_tok_open(const char *path, uint64_t hash, ngx_log_t *log,
    u_char *err, size_t len)
{
    char                      perr[256];
    ngx_http_pagedllm_tok_t  *tok;

    tok = ngx_calloc(sizeof(ngx_http_pagedllm_tok_t), log);
    if (tok == NULL) {
        ngx_snprintf(err, len, "out of memory%Z");
        return NULL;
    }

    tok->tokenizer = pl_tokenizer_load(path, perr, sizeof(perr));
    if (tok->tokenizer == NULL) {
        ngx_snprintf(err, len, "cannot load tokenizer \"%s\": %s%Z",
                     path, perr);
        ngx_free(tok);
        return NULL;
    }

    ngx_cpystrn((u_char *) tok->path, (u_char *) path, PL_PATH_LEN);
    tok->hash = hash;
    tok->refs = 1;

    ngx_http_pagedllm_tok_chat(tok);

    if (ngx_http_pagedllm_tok_specials(tok, log) != NGX_OK) {
        ngx_snprintf(err, len, "out of memory%Z");
        ngx_http_pagedllm_tok_free(tok);
        return NULL;
    }

    return tok;
}


void
ngx_http_pagedllm_tok_hold(ngx_http_pagedllm_tok_t *tok)
{
    tok->refs++;
}


void
ngx_http_pagedllm_tok_release(ngx_http_pagedllm_tok_t *tok)
{
    if (tok != NULL && --tok->refs == 0) {
        ngx_http_pagedllm_tok_free(tok);
    }
}


/* A reference the pool holds: released when the pool is destroyed, which
   a request's is only once no thread task of it runs. */
ngx_int_t
ngx_http_pagedllm_tok_hold_pool(ngx_pool_t *pool, ngx_http_pagedllm_tok_t *tok)
{
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    ngx_http_pagedllm_tok_hold(tok);

    cln->handler = ngx_http_pagedllm_tok_cleanup;
    cln->data = tok;

    return NGX_OK;
}


static void
ngx_http_pagedllm_tok_cleanup(void *data)
{
    ngx_http_pagedllm_tok_release(data);
}


/* The chat template of tokenizer_config.json next to tokenizer.json; a
   model without one serves completions only (chat_error says why). */
static void
ngx_http_pagedllm_tok_chat(ngx_http_pagedllm_tok_t *tok)
{
    char         path[PL_PATH_LEN + 32], err[NGX_HTTP_PAGEDLLM_ERR_LEN];
    const char  *slash;

    slash = strrchr(tok->path, '/');

    ngx_snprintf((u_char *) path, sizeof(path), "%*s/tokenizer_config.json%Z",
                 (size_t) (slash ? slash - tok->path : 1),
                 slash ? tok->path : ".");

    tok->chat = pl_chat_load(path, err, sizeof(err));

    if (tok->chat == NULL) {
        ngx_snprintf((u_char *) tok->chat_error, sizeof(tok->chat_error) - 1,
                     "This model has no usable chat template (%s)%Z", err);
    }
}


/* The text of every special token: chat content may not contain it. */
static ngx_int_t
ngx_http_pagedllm_tok_specials(ngx_http_pagedllm_tok_t *tok, ngx_log_t *log)
{
    int32_t      id, n;
    ngx_str_t   *sp;
    const char  *piece;

    n = (int32_t) pl_tokenizer_vocab_size(tok->tokenizer);

    sp = ngx_alloc(sizeof(ngx_str_t) * n, log);
    if (sp == NULL) {
        return NGX_ERROR;
    }

    tok->specials = sp;
    tok->n_specials = 0;

    for (id = 0; id < n; id++) {
        piece = pl_tokenizer_id_to_piece(tok->tokenizer, id);

        if (pl_tokenizer_is_special(tok->tokenizer, id) && piece
            && piece[0] != '\0')
        {
            sp[tok->n_specials].data = (u_char *) piece;
            sp[tok->n_specials].len = ngx_strlen(piece);
            tok->n_specials++;
        }
    }

    return NGX_OK;
}


static void
ngx_http_pagedllm_tok_free(ngx_http_pagedllm_tok_t *tok)
{
    pl_tokenizer_free(tok->tokenizer);

    if (tok->chat) {
        pl_chat_free(tok->chat);
    }

    if (tok->specials) {
        ngx_free(tok->specials);
    }

    ngx_free(tok);
}


static ngx_int_t
ngx_http_pagedllm_file_hash(const char *path, uint64_t *hash, ngx_log_t *log,
    u_char *err, size_t len)
{
    u_char           *buf, *p;
    ssize_t           n;
    ngx_fd_t          fd;
    ngx_int_t         rc;
    ngx_file_t        file;
    ngx_file_info_t   fi;

    fd = ngx_open_file(path, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (fd == NGX_INVALID_FILE) {
        p = ngx_snprintf(err, len - 1, "cannot open tokenizer \"%s\": ",
                         path);
        p = ngx_strerror(ngx_errno, p, err + len - 1 - p);
        *p = '\0';
        return NGX_ERROR;
    }

    rc = NGX_ERROR;
    buf = NULL;

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR
        || ngx_file_size(&fi) > NGX_HTTP_PAGEDLLM_MAX_TOKENIZER)
    {
        ngx_snprintf(err, len, "tokenizer \"%s\" is unreadable or too "
                     "large%Z", path);
        goto done;
    }

    buf = ngx_alloc(ngx_file_size(&fi) + 1, log);
    if (buf == NULL) {
        ngx_snprintf(err, len, "out of memory%Z");
        goto done;
    }

    ngx_memzero(&file, sizeof(ngx_file_t));
    file.fd = fd;
    file.log = log;

    n = ngx_read_file(&file, buf, ngx_file_size(&fi), 0);
    if (n != (ssize_t) ngx_file_size(&fi)) {
        ngx_snprintf(err, len, "short read of tokenizer \"%s\"%Z", path);
        goto done;
    }

    *hash = pl_fnv1a64(buf, (size_t) n);
    rc = NGX_OK;

done:

    if (buf) {
        ngx_free(buf);
    }

    ngx_close_file(fd);

    return rc;
}
