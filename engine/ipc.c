/*
 * ipc: attach, regions, doorbells and records on the engine's side.
 *
 * Every worker gets its own region, so a worker can only ever damage its
 * own requests.  The region is a sealed memfd: once sized, its size can
 * neither shrink nor grow, so no worker can make the engine fault by
 * truncating the file under its mapping.  Every offset and size the engine
 * uses lives in pl_conn_t, never read back from the shared header, and
 * every record is copied out of the ring and checked before anyone looks
 * at it: a record that cannot be right is reported as corruption, and the
 * engine drops that one connection.
 *
 * Everything here is non-blocking: attach is a small state machine driven
 * by the socket becoming readable, bounded by a deadline, so a client that
 * connects and stays silent cannot hold up the batch.  Reading the worker's
 * attach and building its region are two steps, so the engine can refuse
 * a worker over its cap before a byte of region exists.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ipc.h"

#define PL_PAGE           4096u
#define PL_ALIGN_UP(n, a) (((n) + (a) - 1) / (a) * (a))
#define PL_ROUND8(n)      (((n) + 7u) & ~(uint64_t) 7u)
#define PL_ERROR_MAX_LEN  1024u


uint64_t
pl_now_ms(void)
{
    return pl_now_us() / 1000;
}


uint64_t
pl_now_us(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}


static int
pl_ipc_addr(const char *path, struct sockaddr_un *sa, char *err,
    size_t errlen)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;

    if (strlen(path) >= sizeof(sa->sun_path)) {
        snprintf(err, errlen, "socket path \"%s\" is longer than %zu bytes",
                 path, sizeof(sa->sun_path) - 1);
        return -1;
    }

    strcpy(sa->sun_path, path);

    return 0;
}


/* A socket file left by an engine that is gone may be replaced; a live
   engine's socket or any other kind of file may not. */
static int
pl_ipc_clear_stale(const char *path, const struct sockaddr_un *sa, char *err,
    size_t errlen)
{
    struct stat  st;
    int          fd, live;

    if (lstat(path, &st) != 0) {
        return 0;
    }

    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "\"%s\" exists and is not a socket", path);
        return -1;
    }

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    live = fd >= 0
           && connect(fd, (const struct sockaddr *) sa, sizeof(*sa)) == 0;
    if (fd >= 0) {
        close(fd);
    }

    if (live) {
        snprintf(err, errlen, "another engine is listening on \"%s\"", path);
        return -1;
    }

    unlink(path);

    return 0;
}


/*
 * bind() creates the socket file with 0777 less the umask, so the umask
 * is set to the complement of mode around it: the file exists with mode
 * from its first instant, never wider for a moment as a chmod() after
 * bind() would leave it.  The engine is the only writer of its umask.
 */
static int
pl_ipc_bind(int fd, const struct sockaddr_un *sa, unsigned mode)
{
    mode_t  old = umask(~mode & 0777);
    int     rc = bind(fd, (const struct sockaddr *) sa, sizeof(*sa));
    int     saved = errno;

    umask(old);
    errno = saved;

    return rc;
}


int
pl_ipc_listen(const char *path, unsigned mode, char *err, size_t errlen)
{
    struct sockaddr_un  sa;
    int                 fd;

    if (pl_ipc_addr(path, &sa, err, errlen) != 0
        || pl_ipc_clear_stale(path, &sa, err, errlen) != 0)
    {
        return -1;
    }

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket(): %s", strerror(errno));
        return -1;
    }

    if (pl_ipc_bind(fd, &sa, mode) != 0) {
        snprintf(err, errlen, "bind(\"%s\"): %s", sa.sun_path,
                 strerror(errno));
        close(fd);
        return -1;
    }

    if (listen(fd, PL_IPC_BACKLOG) != 0) {
        snprintf(err, errlen, "listen \"%s\": %s", sa.sun_path,
                 strerror(errno));
        close(fd);
        unlink(sa.sun_path);
        return -1;
    }

    return fd;
}


pl_conn_t *
pl_ipc_accept(int lfd, uint32_t worker_id)
{
    pl_conn_t  *c;
    int         fd;

    fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        return NULL;
    }

    c = calloc(1, sizeof(pl_conn_t));
    if (c == NULL || pl_seq_index_init(&c->live) != 0) {
        free(c);
        close(fd);
        return NULL;
    }

    c->worker_id = worker_id;
    c->fd = fd;
    c->sub_efd = -1;
    c->comp_efd = -1;
    c->deadline_ms = pl_now_ms() + PL_IPC_ATTACH_TIMEOUT;
    c->sock_watch = (pl_watch_t) { PL_WATCH_SOCKET, c };
    c->bell_watch = (pl_watch_t) { PL_WATCH_DOORBELL, c };

    return c;
}


static void
pl_ipc_fill_header(pl_conn_t *c, const pl_ipc_identity_t *id,
    uint64_t sub_off, uint64_t comp_off, uint64_t map_off)
{
    pl_region_hdr_t  *h = c->hdr;

    h->magic = PL_PROTO_MAGIC;
    h->version = PL_PROTO_VERSION;
    h->region_size = c->region_size;
    h->sub_offset = sub_off;
    h->sub_size = PL_IPC_RING_SIZE;
    h->comp_offset = comp_off;
    h->comp_size = PL_IPC_RING_SIZE;

    h->worker_id = c->worker_id;
    h->vocab_size = id->vocab_size;
    h->max_model_len = id->max_model_len;
    h->bos_id = id->bos_id;
    h->n_eos = id->n_eos;
    memcpy(h->eos_ids, id->eos_ids, sizeof(h->eos_ids));
    h->tokenizer_hash = id->tokenizer_hash;
    memcpy(h->model_name, id->model_name, sizeof(h->model_name));
    memcpy(h->tokenizer_path, id->tokenizer_path, sizeof(h->tokenizer_path));
    h->default_temperature = id->default_temperature;
    h->default_top_p = id->default_top_p;
    h->default_top_k = id->default_top_k;
    h->map_offset = id->map_bytes ? map_off : 0;
    h->map_size = id->map_bytes;
    atomic_store_explicit(&h->stats_seq, 0, memory_order_release);
}


pl_bmap_hdr_t *
pl_ipc_block_map(pl_conn_t *c)
{
    return c->map_size
           ? (pl_bmap_hdr_t *) ((uint8_t *) c->region + c->map_offset)
           : NULL;
}


/* Create, seal and map the region; returns the memfd or -1. */
static int
pl_ipc_make_region(pl_conn_t *c, const pl_ipc_identity_t *id, char *err,
    size_t errlen)
{
    uint64_t  ring = pl_ring_bytes(PL_IPC_RING_SIZE);
    uint64_t  sub_off = PL_ALIGN_UP(sizeof(pl_region_hdr_t), PL_PAGE);
    uint64_t  comp_off = PL_ALIGN_UP(sub_off + ring, PL_PAGE);
    uint64_t  map_off = PL_ALIGN_UP(comp_off + ring, PL_PAGE);
    int       fd;
    void     *p;

    c->region_size = PL_ALIGN_UP(map_off + id->map_bytes, PL_PAGE);
    c->map_offset = map_off;
    c->map_size = id->map_bytes;

    fd = memfd_create("pagedllm-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        snprintf(err, errlen, "memfd_create(): %s", strerror(errno));
        return -1;
    }

    if (ftruncate(fd, (off_t) c->region_size) != 0
        || fcntl(fd, F_ADD_SEALS,
                 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    {
        snprintf(err, errlen, "sizing the region: %s", strerror(errno));
        close(fd);
        return -1;
    }

    p = mmap(NULL, c->region_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "mmap(): %s", strerror(errno));
        close(fd);
        return -1;
    }

    c->region = p;
    c->hdr = p;
    pl_ring_init(&c->sub, (uint8_t *) p + sub_off, PL_IPC_RING_SIZE);
    pl_ring_init(&c->comp, (uint8_t *) p + comp_off, PL_IPC_RING_SIZE);
    pl_ipc_fill_header(c, id, sub_off, comp_off, map_off);

    return fd;
}


static int
pl_ipc_send_hello(pl_conn_t *c, int memfd)
{
    pl_hello_t       hello = { PL_PROTO_MAGIC, PL_PROTO_VERSION,
                               c->region_size, c->worker_id, 0 };
    int              fds[3] = { memfd, c->sub_efd, c->comp_efd };
    union {
        struct cmsghdr  h;
        char            buf[CMSG_SPACE(sizeof(fds))];
    }                ctl;
    struct iovec     iov = { &hello, sizeof(hello) };
    struct msghdr    msg = { 0 };
    struct cmsghdr  *cm;

    memset(&ctl, 0, sizeof(ctl));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);

    cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(cm), fds, sizeof(fds));

    return sendmsg(c->fd, &msg, MSG_NOSIGNAL) == (ssize_t) sizeof(hello)
           ? 0 : -1;
}


static int
pl_ipc_check_attach(pl_conn_t *c, char *err, size_t errlen)
{
    pl_attach_t  a;

    memcpy(&a, c->attach_buf, sizeof(a));

    if (a.magic != PL_PROTO_MAGIC) {
        snprintf(err, errlen, "bad attach magic 0x%08x", a.magic);
        return -1;
    }

    if (a.version != PL_PROTO_VERSION) {
        snprintf(err, errlen, "worker speaks protocol version %u, the "
                 "engine %u", a.version, PL_PROTO_VERSION);
        return -1;
    }

    c->pid = a.pid;

    return 0;
}


int
pl_ipc_read_attach(pl_conn_t *c, char *err, size_t errlen)
{
    ssize_t  n;

    n = recv(c->fd, c->attach_buf + c->attach_got,
             sizeof(c->attach_buf) - c->attach_got, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return 0;
    }
    if (n <= 0) {
        snprintf(err, errlen, "closed before attaching");
        return -1;
    }

    c->attach_got += (size_t) n;
    if (c->attach_got < sizeof(c->attach_buf)) {
        return 0;
    }

    return pl_ipc_check_attach(c, err, errlen) == 0 ? 1 : -1;
}


/* A descriptor could not be made: -2 with the doorbells closed when the
   process is out of them, so the attach can be tried again; else -1. */
static int
pl_ipc_fd_failure(pl_conn_t *c)
{
    int  saved = errno;

    if (saved != EMFILE && saved != ENFILE) {
        return -1;
    }

    if (c->sub_efd >= 0) {
        close(c->sub_efd);
        c->sub_efd = -1;
    }
    if (c->comp_efd >= 0) {
        close(c->comp_efd);
        c->comp_efd = -1;
    }
    errno = saved;

    return -2;
}


int
pl_ipc_attach(pl_conn_t *c, const pl_ipc_identity_t *id,
    const pl_stats_t *stats, char *err, size_t errlen)
{
    int  memfd, rc;

    c->sub_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->comp_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->sub_efd < 0 || c->comp_efd < 0) {
        snprintf(err, errlen, "eventfd(): %s", strerror(errno));
        return pl_ipc_fd_failure(c);
    }

    memfd = pl_ipc_make_region(c, id, err, errlen);
    if (memfd < 0) {
        return c->region == NULL ? pl_ipc_fd_failure(c) : -1;
    }
    pl_stats_publish(c->hdr, stats);
    if (id->map) {
        pl_bmap_publish(pl_ipc_block_map(c), id->map, id->map_bytes);
    }

    rc = pl_ipc_send_hello(c, memfd);
    close(memfd);

    if (rc != 0) {
        snprintf(err, errlen, "sending hello: %s", strerror(errno));
        return -1;
    }

    c->attached = 1;

    return 1;
}


int
pl_ipc_socket_event(pl_conn_t *c)
{
    char     buf[64];
    ssize_t  n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return 0;
    }

    return -1;
}


void
pl_ipc_doorbell_clear(pl_conn_t *c)
{
    uint64_t  v;
    ssize_t   n = read(c->sub_efd, &v, sizeof(v));

    (void) n;   /* EAGAIN when nothing was pending: nothing to reset */
}


/* Bytes a SUBMIT of these counts takes, before rounding. */
static uint64_t
pl_ipc_submit_bytes(const pl_rec_submit_t *sub)
{
    return sizeof(pl_rec_submit_t)
           + (uint64_t) sub->n_prompt * sizeof(int32_t)
           + (sub->n_prompts > 1 ? (uint64_t) sub->n_prompts
                                   * sizeof(uint32_t) : 0)
           + (uint64_t) sub->n_logit_bias * sizeof(pl_bias_pair_t)
           + (uint64_t) sub->n_stop_ids * sizeof(int32_t)
           + sub->n_grammar;
}


/* Batched prompts' lengths: each > 0, summing to n_prompt. */
static int
pl_ipc_check_lens(const pl_ipc_msg_t *msg, char *err, size_t errlen)
{
    const pl_rec_submit_t  *sub = &msg->submit;
    uint64_t                sum = 0;
    uint32_t                i;

    for (i = 0; i < sub->n_prompts; i++) {
        if (msg->prompt_lens[i] == 0) {
            break;
        }
        sum += msg->prompt_lens[i];
    }

    if (i < sub->n_prompts || sum != sub->n_prompt) {
        snprintf(err, errlen, "SUBMIT %llu: the lengths of its %u prompts "
                 "do not add up to n_prompt %u",
                 (unsigned long long) sub->req_id, sub->n_prompts,
                 sub->n_prompt);
        return -1;
    }

    return 0;
}


static int
pl_ipc_check_submit(pl_ipc_msg_t *msg, const uint8_t *buf, uint32_t len,
    uint32_t vocab_size, char *err, size_t errlen)
{
    const pl_rec_submit_t  *sub = &msg->submit;
    const uint8_t          *p;
    uint32_t                i;

    if (len < sizeof(pl_rec_submit_t)) {
        snprintf(err, errlen, "SUBMIT record of %u bytes", len);
        return -1;
    }

    memcpy(&msg->submit, buf, sizeof(pl_rec_submit_t));

    if (sub->n_logit_bias > PL_MAX_LOGIT_BIAS
        || sub->n_stop_ids > PL_MAX_STOP_IDS
        || sub->n_grammar > PL_MAX_GRAMMAR
        || sub->n_prompts > PL_MAX_PROMPTS
        || sub->n_prompt > (len - sizeof(pl_rec_submit_t)) / sizeof(int32_t)
        || PL_ROUND8(pl_ipc_submit_bytes(sub)) != len)
    {
        snprintf(err, errlen, "SUBMIT %llu: n_prompt %u, n_prompts %u, "
                 "n_logit_bias %u, n_stop_ids %u, n_grammar %u do not match "
                 "its record of %u bytes", (unsigned long long) sub->req_id,
                 sub->n_prompt, sub->n_prompts, sub->n_logit_bias,
                 sub->n_stop_ids, sub->n_grammar, len);
        return -1;
    }

    p = buf + sizeof(pl_rec_submit_t);
    msg->prompt = (const int32_t *) p;
    p += (size_t) sub->n_prompt * sizeof(int32_t);
    msg->prompt_lens = NULL;
    if (sub->n_prompts > 1) {
        msg->prompt_lens = (const uint32_t *) p;
        p += (size_t) sub->n_prompts * sizeof(uint32_t);
        if (pl_ipc_check_lens(msg, err, errlen) != 0) {
            return -1;
        }
    }
    msg->bias = (const pl_bias_pair_t *) p;
    p += (size_t) sub->n_logit_bias * sizeof(pl_bias_pair_t);
    msg->stop_ids = (const int32_t *) p;
    p += (size_t) sub->n_stop_ids * sizeof(int32_t);
    msg->grammar = (const char *) p;

    for (i = 0; i < sub->n_prompt; i++) {
        if (msg->prompt[i] < 0 || (uint32_t) msg->prompt[i] >= vocab_size) {
            snprintf(err, errlen, "SUBMIT %llu: token %d at %u is outside "
                     "the vocabulary of %u",
                     (unsigned long long) sub->req_id, msg->prompt[i], i,
                     vocab_size);
            return -1;
        }
    }

    return 0;
}


int
pl_ipc_next(pl_conn_t *c, void *buf, uint32_t cap, uint32_t vocab_size,
    pl_ipc_msg_t *msg, char *err, size_t errlen)
{
    uint32_t  type, len;
    int       rc = pl_ring_read(&c->sub, &type, buf, cap, &len);

    if (rc == 0) {
        return 0;
    }

    if (rc < 0) {
        snprintf(err, errlen, "submission ring corrupt (%s)",
                 rc == -2 ? "record larger than the ring allows"
                          : "bad counters or record header");
        return -1;
    }

    msg->type = type;

    if (type == PL_REC_SUBMIT) {
        return pl_ipc_check_submit(msg, buf, len, vocab_size, err, errlen)
               == 0 ? 1 : -1;
    }

    if (type == PL_REC_ABORT && len == PL_ROUND8(sizeof(pl_rec_abort_t))) {
        memcpy(&msg->abort_id, buf, sizeof(uint64_t));
        return 1;
    }

    snprintf(err, errlen, "record type %u of %u bytes is not a SUBMIT or "
             "an ABORT", type, len);

    return -1;
}


static int
pl_ipc_write(pl_conn_t *c, uint32_t type, const void *a, uint32_t alen,
    const void *b, uint32_t blen)
{
    if (pl_ring_write(&c->comp, type, a, alen, b, blen) != 0) {
        c->comp_full = 1;
        return -1;
    }

    c->ring_doorbell = 1;

    return 0;
}


/* Bytes per token of a TOKENS record: its id, with logprobs its own and
   n_top best, and for prompt tokens (PL_TOKENS_PROMPT) its rank. */
static uint32_t
pl_ipc_token_bytes(int logprobs, uint32_t n_top, uint16_t flags)
{
    uint32_t  size = sizeof(int32_t);

    if (logprobs) {
        size += sizeof(float) + n_top * sizeof(pl_top_logprob_t);
    }
    if (flags & PL_TOKENS_PROMPT) {
        size += sizeof(uint32_t);
    }

    return size;
}


uint32_t
pl_ipc_max_tokens_per_record(const pl_conn_t *c, int logprobs,
    uint32_t n_top, uint16_t flags)
{
    return (pl_ring_max_payload(&c->comp) - sizeof(pl_rec_tokens_t))
           / pl_ipc_token_bytes(logprobs, n_top, flags);
}


/* ids, logprobs, top entries and (prompt tokens) ranks laid out as the
   TOKENS record wants */
static void
pl_ipc_pack_logprobs(uint8_t *out, const int32_t *ids, uint32_t n,
    const pl_logprobs_t *lp, uint32_t n_top, uint16_t flags)
{
    pl_top_logprob_t  *top;
    float             *chosen;
    uint32_t           i, j, rank;

    memcpy(out, ids, n * sizeof(int32_t));
    chosen = (float *) (out + n * sizeof(int32_t));
    top = (pl_top_logprob_t *) (chosen + n);

    for (i = 0; i < n; i++) {
        chosen[i] = lp[i].logprob;
        for (j = 0; j < n_top; j++) {
            top->id = lp[i].top_ids[j];
            top->logprob = lp[i].top_logprobs[j];
            top++;
        }
    }

    for (i = 0; (flags & PL_TOKENS_PROMPT) && i < n; i++) {
        rank = (uint32_t) lp[i].rank;
        memcpy((uint8_t *) top + i * sizeof(uint32_t), &rank,
               sizeof(uint32_t));
    }
}


int
pl_ipc_send_tokens(pl_conn_t *c, uint64_t req_id, uint32_t index,
    const int32_t *ids, uint32_t n, const pl_logprobs_t *lp, uint32_t n_top,
    uint16_t flags)
{
    pl_rec_tokens_t  r = { req_id, n, flags, 0, index, 0 };
    uint32_t         size;
    uint8_t         *buf;
    int              rc;

    if (lp == NULL) {
        return pl_ipc_write(c, PL_REC_TOKENS, &r, sizeof(r), ids,
                            n * (uint32_t) sizeof(int32_t));
    }

    r.flags |= PL_TOKENS_LOGPROBS;
    r.n_top = (uint16_t) n_top;
    size = n * pl_ipc_token_bytes(1, n_top, flags);

    buf = malloc(size);
    if (buf == NULL) {
        return -1;
    }

    pl_ipc_pack_logprobs(buf, ids, n, lp, n_top, flags);
    rc = pl_ipc_write(c, PL_REC_TOKENS, &r, sizeof(r), buf, size);
    free(buf);

    return rc;
}


int
pl_ipc_send_finish(pl_conn_t *c, const pl_rec_finish_t *r)
{
    return pl_ipc_write(c, PL_REC_FINISH, r, sizeof(*r), NULL, 0);
}


int
pl_ipc_send_error(pl_conn_t *c, uint64_t req_id, uint32_t status,
    const char *msg)
{
    size_t          len = strlen(msg);
    pl_rec_error_t  r;

    r.req_id = req_id;
    r.status = status;
    r.len = (uint32_t) (len < PL_ERROR_MAX_LEN ? len : PL_ERROR_MAX_LEN);

    return pl_ipc_write(c, PL_REC_ERROR, &r, sizeof(r), msg, r.len);
}


void
pl_ipc_flush_doorbell(pl_conn_t *c)
{
    uint64_t  one = 1;
    ssize_t   n;

    if (c->ring_doorbell) {
        n = write(c->comp_efd, &one, sizeof(one));
        (void) n;   /* fails only when the counter is saturated, that is
                       when the worker has a wake-up pending anyway */
        c->ring_doorbell = 0;
    }
}


void
pl_ipc_shut(pl_conn_t *c)
{
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}


void
pl_ipc_close(pl_conn_t *c)
{
    if (c->region) {
        munmap(c->region, c->region_size);
    }

    if (c->sub_efd >= 0) {
        close(c->sub_efd);
    }
    if (c->comp_efd >= 0) {
        close(c->comp_efd);
    }

    pl_ipc_shut(c);
    pl_seq_index_destroy(&c->live);
    free(c);
}
