
/*
 * ngx_http_pagedllm_attach: attaching a worker to pagedllm-engine, and
 * re-attaching.
 *
 * Attaching never blocks the event loop: the worker connects the unix
 * socket without blocking, sends pl_attach_t and waits in the event loop
 * for pl_hello_t and its three descriptors (region memfd, submission and
 * completion doorbells); a tokenizer it does not have yet is then loaded
 * on the thread pool (ngx_http_pagedllm_tokenizer.c).  Requests that
 * arrive meanwhile are parked and resumed when the attach succeeds or
 * fails.  Socket EOF means the engine is gone: every running request
 * fails, and a timer re-attaches when the engine is back.
 */


#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_channel.h"


#define NGX_HTTP_PAGEDLLM_MIN_RING          4096


/* A tokenizer being loaded on the thread pool, in a pool of its own. */
typedef struct {
    ngx_http_pagedllm_channel_t        *ch;
    ngx_pool_t                         *pool;
    ngx_uint_t                          attempt;
    char                                path[PL_PATH_LEN];
    uint64_t                            hash;
    ngx_http_pagedllm_tok_t            *tok;         /* NULL: err says */
    u_char                              err[NGX_HTTP_PAGEDLLM_ERR_LEN];
} ngx_http_pagedllm_load_t;


static void ngx_http_pagedllm_sock_handler(ngx_event_t *ev);
static void ngx_http_pagedllm_hello(ngx_http_pagedllm_channel_t *ch);
static ngx_int_t ngx_http_pagedllm_map(ngx_http_pagedllm_channel_t *ch,
    pl_hello_t *hello, int *fds);
static ngx_int_t ngx_http_pagedllm_check_region(
    ngx_http_pagedllm_channel_t *ch, pl_hello_t *hello);
static ngx_int_t ngx_http_pagedllm_check_ring(ngx_http_pagedllm_channel_t *ch,
    const char *name, uint64_t off, uint64_t size);
static ngx_int_t ngx_http_pagedllm_identity(ngx_http_pagedllm_channel_t *ch);
static void ngx_http_pagedllm_load_model(ngx_http_pagedllm_channel_t *ch);
static void ngx_http_pagedllm_load_work(void *data, ngx_log_t *log);
static void ngx_http_pagedllm_load_done(void *data);
static ngx_int_t ngx_http_pagedllm_vocab_fits(
    ngx_http_pagedllm_channel_t *ch, ngx_http_pagedllm_tok_t *tok);
static ngx_int_t ngx_http_pagedllm_start(ngx_http_pagedllm_channel_t *ch);
static void ngx_http_pagedllm_resume_parked(ngx_http_pagedllm_channel_t *ch);


ngx_int_t
ngx_http_pagedllm_connect(ngx_http_pagedllm_channel_t *ch)
{
    int                  fd;
    ngx_uint_t           level;
    pl_attach_t          att;
    ngx_connection_t    *c;
    struct sockaddr_un   sun;

    level = ch->logged_down ? NGX_LOG_DEBUG : NGX_LOG_ERR;

    fd = socket(AF_UNIX, SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC, 0);
    if (fd == -1) {
        ngx_log_error(NGX_LOG_ALERT, ch->log, ngx_socket_errno,
                      "pagedllm: socket() failed");
        return NGX_ERROR;
    }

    ngx_memzero(&sun, sizeof(struct sockaddr_un));
    sun.sun_family = AF_UNIX;
    ngx_memcpy(sun.sun_path, ch->ec->path.data, ch->ec->path.len);

    if (connect(fd, (struct sockaddr *) &sun, sizeof(struct sockaddr_un))
        == -1)
    {
        ngx_log_error(level, ch->log, ngx_socket_errno,
                      "pagedllm: cannot connect to engine at \"%V\"",
                      &ch->ec->path);
        ch->logged_down = 1;
        close(fd);
        return NGX_ERROR;
    }

    ngx_memzero(&att, sizeof(pl_attach_t));
    att.magic = PL_PROTO_MAGIC;
    att.version = PL_PROTO_VERSION;
    att.pid = (uint32_t) ngx_pid;

    if (send(fd, &att, sizeof(pl_attach_t), MSG_NOSIGNAL)
        != (ssize_t) sizeof(pl_attach_t))
    {
        ngx_log_error(level, ch->log, ngx_socket_errno,
                      "pagedllm: cannot send attach to engine at \"%V\"",
                      &ch->ec->path);
        ch->logged_down = 1;
        close(fd);
        return NGX_ERROR;
    }

    c = ngx_get_connection(fd, ch->log);
    if (c == NULL) {
        close(fd);
        return NGX_ERROR;
    }

    c->data = ch;
    c->read->handler = ngx_http_pagedllm_sock_handler;
    c->read->log = ch->log;
    c->write->log = ch->log;

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        ngx_close_connection(c);
        return NGX_ERROR;
    }

    ch->sock = c;
    ch->state = NGX_HTTP_PAGEDLLM_CONNECTING;
    ngx_add_timer(&ch->timer, ch->conf->attach_timeout);

    return NGX_OK;
}


static void
ngx_http_pagedllm_sock_handler(ngx_event_t *ev)
{
    u_char                        buf[64];
    ssize_t                       n;
    ngx_connection_t             *c = ev->data;
    ngx_http_pagedllm_channel_t  *ch = c->data;

    if (ch->state == NGX_HTTP_PAGEDLLM_CONNECTING) {
        ngx_http_pagedllm_hello(ch);
        return;
    }

    for ( ;; ) {
        n = recv(c->fd, buf, sizeof(buf), 0);

        if (n > 0) {
            continue;
        }

        if (n == -1 && ngx_socket_errno == NGX_EAGAIN) {
            ev->ready = 0;
            return;
        }

        if (n == -1 && ngx_socket_errno == NGX_EINTR) {
            continue;
        }

        ngx_log_error(NGX_LOG_ERR, ch->log, n == 0 ? 0 : ngx_socket_errno,
                      "pagedllm: engine at \"%V\" went away",
                      &ch->ec->path);
        ngx_http_pagedllm_lost(ch);
        return;
    }
}


static void
ngx_http_pagedllm_hello(ngx_http_pagedllm_channel_t *ch)
{
    int              fds[3], nfds, i;
    ssize_t          n;
    pl_hello_t       hello;
    struct iovec     iov;
    struct msghdr    msg;
    struct cmsghdr  *cm;
    union {
        struct cmsghdr  cm;
        char            space[CMSG_SPACE(sizeof(int) * 3)];
    } cmsg;

    iov.iov_base = &hello;
    iov.iov_len = sizeof(pl_hello_t);

    ngx_memzero(&msg, sizeof(struct msghdr));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = &cmsg;
    msg.msg_controllen = sizeof(cmsg);

    n = recvmsg(ch->sock->fd, &msg, MSG_CMSG_CLOEXEC);

    if (n == -1 && (ngx_socket_errno == NGX_EAGAIN
                    || ngx_socket_errno == NGX_EINTR))
    {
        ch->sock->read->ready = 0;
        return;
    }

    nfds = 0;

    for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            nfds = ngx_min(nfds, 3);
            ngx_memcpy(fds, CMSG_DATA(cm), nfds * sizeof(int));
        }
    }

    if (n != (ssize_t) sizeof(pl_hello_t) || nfds != 3
        || (msg.msg_flags & (MSG_CTRUNC|MSG_TRUNC)))
    {
        ngx_log_error(NGX_LOG_ERR, ch->log, n == -1 ? ngx_socket_errno : 0,
                      "pagedllm: engine at \"%V\" sent a bad hello "
                      "(%z bytes, %d descriptors)", &ch->ec->path,
                      n, nfds);
        goto failed;
    }

    if (ngx_http_pagedllm_map(ch, &hello, fds) != NGX_OK) {
        goto failed;
    }

    close(fds[0]);
    ch->sub_bell = fds[1];
    ch->comp_bell = fds[2];

    ngx_http_pagedllm_load_model(ch);

    return;

failed:

    for (i = 0; i < nfds; i++) {
        close(fds[i]);
    }

    ngx_http_pagedllm_lost(ch);
}


static ngx_int_t
ngx_http_pagedllm_map(ngx_http_pagedllm_channel_t *ch, pl_hello_t *hello,
    int *fds)
{
    void         *p;
    struct stat   st;

    if (hello->magic != PL_PROTO_MAGIC || hello->version != PL_PROTO_VERSION) {
        ngx_log_error(NGX_LOG_ERR, ch->log, 0,
                      "pagedllm: engine speaks protocol %08xD/%uD, "
                      "this module %08xD/%uD", hello->magic, hello->version,
                      PL_PROTO_MAGIC, PL_PROTO_VERSION);
        return NGX_ERROR;
    }

    if (fstat(fds[0], &st) == -1
        || hello->region_size < sizeof(pl_region_hdr_t)
        || (uint64_t) st.st_size < hello->region_size)
    {
        ngx_log_error(NGX_LOG_ERR, ch->log, ngx_errno,
                      "pagedllm: engine region of %uL bytes does not fit "
                      "its memfd", hello->region_size);
        return NGX_ERROR;
    }

    p = mmap(NULL, hello->region_size, PROT_READ|PROT_WRITE, MAP_SHARED,
             fds[0], 0);
    if (p == MAP_FAILED) {
        ngx_log_error(NGX_LOG_ERR, ch->log, ngx_errno,
                      "pagedllm: mmap(%uL) of the engine region failed",
                      hello->region_size);
        return NGX_ERROR;
    }

    ch->region = p;
    ch->region_size = hello->region_size;
    ch->hdr = p;

    if (ngx_http_pagedllm_check_region(ch, hello) != NGX_OK
        || ngx_http_pagedllm_identity(ch) != NGX_OK)
    {
        munmap(ch->region, ch->region_size);
        ch->region = NULL;
        ch->hdr = NULL;
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_check_region(ngx_http_pagedllm_channel_t *ch,
    pl_hello_t *hello)
{
    uint64_t          sub_end, comp_end;
    pl_region_hdr_t  *h = ch->hdr;

    if (h->magic != PL_PROTO_MAGIC || h->version != PL_PROTO_VERSION
        || h->region_size != hello->region_size)
    {
        ngx_log_error(NGX_LOG_ERR, ch->log, 0,
                      "pagedllm: engine region header does not match "
                      "its hello");
        return NGX_ERROR;
    }

    if (ngx_http_pagedllm_check_ring(ch, "submission", h->sub_offset,
                                     h->sub_size) != NGX_OK
        || ngx_http_pagedllm_check_ring(ch, "completion", h->comp_offset,
                                        h->comp_size) != NGX_OK)
    {
        return NGX_ERROR;
    }

    sub_end = h->sub_offset + pl_ring_bytes(h->sub_size);
    comp_end = h->comp_offset + pl_ring_bytes(h->comp_size);

    if (h->sub_offset < comp_end && h->comp_offset < sub_end) {
        ngx_log_error(NGX_LOG_ERR, ch->log, 0,
                      "pagedllm: engine rings overlap");
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_check_ring(ngx_http_pagedllm_channel_t *ch,
    const char *name, uint64_t off, uint64_t size)
{
    if (size < NGX_HTTP_PAGEDLLM_MIN_RING || (size & (size - 1)) != 0
        || size > ch->region_size
        || off < sizeof(pl_region_hdr_t) || off % 64 != 0
        || off > ch->region_size
        || ch->region_size - off < pl_ring_bytes(size))
    {
        ngx_log_error(NGX_LOG_ERR, ch->log, 0,
                      "pagedllm: engine %s ring (offset %uL, size %uL) "
                      "does not fit its region of %uz bytes",
                      name, off, size, ch->region_size);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_identity(ngx_http_pagedllm_channel_t *ch)
{
    size_t            len;
    pl_region_hdr_t  *h = ch->hdr;

    len = ngx_strnlen((u_char *) h->model_name, PL_MODEL_NAME_LEN);

    if (len == 0 || len == PL_MODEL_NAME_LEN
        || ngx_strnlen((u_char *) h->tokenizer_path, PL_PATH_LEN)
           == PL_PATH_LEN
        || h->vocab_size == 0 || h->max_model_len == 0)
    {
        ngx_log_error(NGX_LOG_ERR, ch->log, 0,
                      "pagedllm: engine region has a bad model identity");
        return NGX_ERROR;
    }

    ngx_memcpy(ch->model, h->model_name, len);
    ch->engine.model.data = ch->model;
    ch->engine.model.len = len;
    ch->engine.vocab_size = h->vocab_size;
    ch->engine.max_model_len = h->max_model_len;
    ch->engine.default_temperature = h->default_temperature;
    ch->engine.default_top_p = h->default_top_p;
    ch->engine.default_top_k = h->default_top_k;

    return NGX_OK;
}


/*
 * The engine's tokenizer: the one held if it is the same file, or the
 * one another channel holds for it or, for the same model name, for a
 * file of the same content (engines of one model share one tokenizer
 * per worker, which routing relies on: a request tokenized for one goes
 * to any of them), else one loaded on the thread pool, the attach going
 * on once it is there.
 */
static void
ngx_http_pagedllm_load_model(ngx_http_pagedllm_channel_t *ch)
{
    ngx_pool_t                *pool;
    pl_region_hdr_t           *h = ch->hdr;
    ngx_http_pagedllm_tok_t   *tok;
    ngx_http_pagedllm_load_t  *load;

    tok = ngx_http_pagedllm_shared_tok(ch, h->tokenizer_path,
                                       h->tokenizer_hash);

    if (tok) {
        ngx_http_pagedllm_tok_hold(tok);
        ngx_http_pagedllm_tok_release(ch->engine.tok);
        ch->engine.tok = tok;

        if (ngx_http_pagedllm_vocab_fits(ch, tok) != NGX_OK
            || ngx_http_pagedllm_start(ch) != NGX_OK)
        {
            ngx_http_pagedllm_lost(ch);
        }

        return;
    }

    pool = ngx_create_pool(NGX_DEFAULT_POOL_SIZE, ch->log);
    if (pool == NULL) {
        ngx_http_pagedllm_lost(ch);
        return;
    }

    load = ngx_pcalloc(pool, sizeof(ngx_http_pagedllm_load_t));
    if (load == NULL) {
        ngx_destroy_pool(pool);
        ngx_http_pagedllm_lost(ch);
        return;
    }

    load->ch = ch;
    load->pool = pool;
    load->attempt = ++ch->attempt;
    load->hash = h->tokenizer_hash;
    ngx_memcpy(load->path, h->tokenizer_path, PL_PATH_LEN);

    /* the attach timeout is the engine's to answer in, not ours to load */

    if (ch->timer.timer_set) {
        ngx_del_timer(&ch->timer);
    }

    ch->state = NGX_HTTP_PAGEDLLM_LOADING;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ch->log, 0,
                   "pagedllm: loading tokenizer \"%s\"", load->path);

    if (ngx_http_pagedllm_thread_run(pool, ch->log,
                                     ngx_http_pagedllm_load_work,
                                     ngx_http_pagedllm_load_done, load)
        != NGX_OK)
    {
        ngx_destroy_pool(pool);
        ngx_http_pagedllm_lost(ch);
    }
}


static void
ngx_http_pagedllm_load_work(void *data, ngx_log_t *log)
{
    ngx_http_pagedllm_load_t  *load = data;

    load->tok = ngx_http_pagedllm_tok_load(load->path, load->hash, log,
                                           load->err, sizeof(load->err));
}


/* In the event loop: the loaded tokenizer replaces the one held, unless
   the engine went away (or attached again) while it loaded. */
static void
ngx_http_pagedllm_load_done(void *data)
{
    ngx_http_pagedllm_load_t  *load = data;

    ngx_http_pagedllm_tok_t      *tok = load->tok, *shared;
    ngx_http_pagedllm_channel_t  *ch = load->ch;

    if (ch->state != NGX_HTTP_PAGEDLLM_LOADING
        || load->attempt != ch->attempt)
    {
        ngx_http_pagedllm_tok_release(tok);
        ngx_destroy_pool(load->pool);
        return;
    }

    if (tok == NULL) {
        ngx_log_error(NGX_LOG_ERR, ch->log, 0, "pagedllm: %s: not serving",
                      load->err);
        ngx_destroy_pool(load->pool);
        ngx_http_pagedllm_lost(ch);
        return;
    }

    ngx_destroy_pool(load->pool);

    /* another channel may have loaded the same file meanwhile */

    shared = ngx_http_pagedllm_shared_tok(ch, tok->path, tok->hash);

    if (shared) {
        ngx_http_pagedllm_tok_release(tok);
        ngx_http_pagedllm_tok_hold(shared);
        tok = shared;
    }

    if (ngx_http_pagedllm_vocab_fits(ch, tok) != NGX_OK) {
        ngx_http_pagedllm_tok_release(tok);
        ngx_http_pagedllm_lost(ch);
        return;
    }

    if (tok->chat == NULL) {
        ngx_log_error(NGX_LOG_NOTICE, ch->log, 0,
                      "pagedllm: no chat completions: %s", tok->chat_error);
    }

    ngx_http_pagedllm_tok_release(ch->engine.tok);
    ch->engine.tok = tok;

    if (ngx_http_pagedllm_start(ch) != NGX_OK) {
        ngx_http_pagedllm_lost(ch);
    }
}


/*
 * Checkpoints often pad the model's vocabulary beyond the tokenizer's
 * (Qwen2 and Qwen3: 151936 embedding rows, 151669 tokens).  Padding ids
 * never come out of encoding, and a sampled one decodes to nothing, so
 * such a model is served.  A tokenizer with more ids than the model would
 * hand the engine ids it cannot embed: that one is refused.
 */
static ngx_int_t
ngx_http_pagedllm_vocab_fits(ngx_http_pagedllm_channel_t *ch,
    ngx_http_pagedllm_tok_t *tok)
{
    uint32_t     n;
    const char  *path = tok->path;

    n = pl_tokenizer_vocab_size(tok->tokenizer);

    if (n > ch->engine.vocab_size) {
        ngx_log_error(NGX_LOG_ERR, ch->log, 0,
                      "pagedllm: tokenizer \"%s\" has %uD tokens, more than "
                      "the engine's vocabulary of %uD: not serving",
                      path, n, ch->engine.vocab_size);
        return NGX_ERROR;
    }

    if (n < ch->engine.vocab_size) {
        ngx_log_error(NGX_LOG_NOTICE, ch->log, 0,
                      "pagedllm: tokenizer \"%s\" has %uD tokens, the "
                      "engine's vocabulary %uD: ids from %uD on decode to "
                      "nothing", path, n, ch->engine.vocab_size, n);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_start(ngx_http_pagedllm_channel_t *ch)
{
    ngx_fd_t           comp_fd;
    ngx_connection_t  *c;
    pl_region_hdr_t   *h = ch->hdr;

    comp_fd = ch->comp_bell;
    ch->comp_bell = NGX_INVALID_FILE;

    if (ngx_nonblocking(comp_fd) == -1 || ngx_nonblocking(ch->sub_bell) == -1)
    {
        ngx_log_error(NGX_LOG_ALERT, ch->log, ngx_errno,
                      "pagedllm: cannot make engine doorbells non-blocking");
        close(comp_fd);
        return NGX_ERROR;
    }

    pl_ring_attach_producer(&ch->sub, ch->region + h->sub_offset, h->sub_size);
    pl_ring_attach_consumer(&ch->comp, ch->region + h->comp_offset,
                            h->comp_size);

    ch->engine.max_prompt = (pl_ring_max_payload(&ch->sub)
                             - sizeof(pl_rec_submit_t)
                             - PL_MAX_LOGIT_BIAS * sizeof(pl_bias_pair_t)
                             - PL_MAX_STOP_IDS * sizeof(int32_t)
                             - PL_MAX_GRAMMAR)
                            / sizeof(int32_t);

    ch->rec_cap = pl_ring_max_payload(&ch->comp) + PL_RING_ALIGN;
    ch->rec = ngx_alloc(ch->rec_cap, ch->log);
    if (ch->rec == NULL) {
        close(comp_fd);
        return NGX_ERROR;
    }

    c = ngx_get_connection(comp_fd, ch->log);
    if (c == NULL) {
        close(comp_fd);
        return NGX_ERROR;
    }

    c->data = ch;
    c->read->handler = ngx_http_pagedllm_bell_handler;
    c->read->log = ch->log;
    c->write->log = ch->log;
    ch->bell = c;

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        return NGX_ERROR;
    }

    ch->state = NGX_HTTP_PAGEDLLM_ATTACHED;
    ch->generation++;
    ch->logged_down = 0;

    if (ch->timer.timer_set) {
        ngx_del_timer(&ch->timer);
    }

    ngx_log_error(NGX_LOG_NOTICE, ch->log, 0,
                  "pagedllm: attached to engine at \"%V\" as worker %uD, "
                  "model \"%V\", vocabulary %uD, context %uD",
                  &ch->ec->path, h->worker_id, &ch->engine.model,
                  ch->engine.vocab_size, ch->engine.max_model_len);

    ngx_http_pagedllm_resume_parked(ch);
    ngx_http_pagedllm_drain(ch);

    return NGX_OK;
}


/* The engine is gone or broke the protocol: fail what runs, re-attach. */
void
ngx_http_pagedllm_lost(ngx_http_pagedllm_channel_t *ch)
{
    ngx_rbtree_node_t        *node;
    ngx_http_pagedllm_ctx_t  *ctx;

    ngx_http_pagedllm_detach(ch);

    while (ch->tree.root != ch->tree.sentinel) {
        node = ngx_rbtree_min(ch->tree.root, ch->tree.sentinel);
        ctx = (ngx_http_pagedllm_ctx_t *) node;
        ngx_http_pagedllm_untrack(ch, ctx);

        ctx->state = NGX_HTTP_PAGEDLLM_DONE;
        ctx->finished = 1;
        ctx->finish_reason = PL_FINISH_ERROR;
        ctx->error_status = NGX_HTTP_SERVICE_UNAVAILABLE;
        ngx_str_set(&ctx->error_message, "the engine went away");
        ngx_http_pagedllm_mark(ch, ctx);
    }

    ngx_http_pagedllm_flush_dirty(ch);
    ngx_http_pagedllm_resume_parked(ch);

    if (!ngx_exiting && !ngx_terminate) {
        ngx_add_timer(&ch->timer, ch->conf->reattach_interval);
    }
}


void
ngx_http_pagedllm_detach(ngx_http_pagedllm_channel_t *ch)
{
    if (ch->sock) {
        ngx_close_connection(ch->sock);
        ch->sock = NULL;
    }

    if (ch->bell) {
        ngx_close_connection(ch->bell);
        ch->bell = NULL;
    }

    if (ch->sub_bell != NGX_INVALID_FILE) {
        close(ch->sub_bell);
        ch->sub_bell = NGX_INVALID_FILE;
    }

    if (ch->comp_bell != NGX_INVALID_FILE) {
        close(ch->comp_bell);
        ch->comp_bell = NGX_INVALID_FILE;
    }

    if (ch->region) {
        munmap(ch->region, ch->region_size);
        ch->region = NULL;
        ch->hdr = NULL;
    }

    if (ch->rec) {
        ngx_free(ch->rec);
        ch->rec = NULL;
    }

    ch->naborts = 0;
    ch->state = NGX_HTTP_PAGEDLLM_DETACHED;
}


static void
ngx_http_pagedllm_resume_parked(ngx_http_pagedllm_channel_t *ch)
{
    ngx_queue_t              *q;
    ngx_connection_t         *c;
    ngx_http_pagedllm_ctx_t  *ctx;

    while (!ngx_queue_empty(&ch->parked)) {
        q = ngx_queue_head(&ch->parked);
        ngx_queue_remove(q);

        ctx = ngx_queue_data(q, ngx_http_pagedllm_ctx_t, queue);
        ctx->state = NGX_HTTP_PAGEDLLM_NEW;
        c = ctx->request->connection;

        ctx->resume(ctx->request);
        ngx_http_run_posted_requests(c);
    }
}


void
ngx_http_pagedllm_timer_handler(ngx_event_t *ev)
{
    ngx_http_pagedllm_channel_t  *ch = ev->data;

    switch (ch->state) {

    case NGX_HTTP_PAGEDLLM_CONNECTING:
        ngx_log_error(NGX_LOG_ERR, ch->log, 0,
                      "pagedllm: engine at \"%V\" did not answer the attach "
                      "within %M ms", &ch->ec->path,
                      ch->conf->attach_timeout);
        ngx_http_pagedllm_lost(ch);
        break;

    case NGX_HTTP_PAGEDLLM_DETACHED:
        if (ngx_http_pagedllm_connect(ch) != NGX_OK) {
            ngx_add_timer(&ch->timer, ch->conf->reattach_interval);
        }
        break;

    default:
        ngx_http_pagedllm_flush_aborts(ch);
        break;
    }
}
