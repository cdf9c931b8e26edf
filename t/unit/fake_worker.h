/*
 * fake_worker.h: the engine tests' nginx worker.  It starts the real
 * pagedllm-engine (the build folder's tiny model) as a child process with
 * each test's flags, and plays a worker against it: attach over the Unix
 * socket, take the hello with the region and the two eventfds
 * (SCM_RIGHTS), map the region, write SUBMIT and ABORT records into the
 * submission ring and ring the engine's doorbell, and pump the completion
 * ring into the test's own record handler, which keeps whatever that test
 * checks.  Static inline functions, like tap.h: one copy per test program.
 *
 * A test may define FW_WAIT_MS (how long a wait lasts before it fails)
 * before including this file, as a multiple of fw_time_scale(): the
 * factor PAGEDLLM_TEST_TIME_SCALE gives (1 when unset), which make
 * test-sanitize sets for an engine that runs several times slower.
 */

#ifndef PL_FAKE_WORKER_H
#define PL_FAKE_WORKER_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

#include "pl_client.h"
#include "pl_proto.h"
#include "pl_ring.h"

#ifndef FW_WAIT_MS
#define FW_WAIT_MS   (60000 * fw_time_scale())
#endif
#define FW_START_MS  (60000 * fw_time_scale())
#define FW_MAX_ARGS  48
#define FW_RECBUF    (1 << 20)

/* One completion record: its type, its bytes and their length. */
typedef void (*fw_take_pt)(uint32_t type, const uint8_t *buf, uint32_t len);

/* Whether request id is complete, by the test's own bookkeeping. */
typedef int (*fw_done_pt)(int id);

typedef struct {
    int               fd;
    int               sub_efd;      /* the engine's doorbell */
    int               comp_efd;     /* ours */
    void             *region;
    size_t            size;
    pl_region_hdr_t  *hdr;
    pl_ring_t         sub;
    pl_ring_t         comp;
    pl_hello_t        hello;
    fw_take_pt        take;
} fw_t;

static char   fw_dir[64];
static char   fw_sock[sizeof(((struct sockaddr_un *) 0)->sun_path)];
static char   fw_log[128];
static pid_t  fw_pid;


static inline int
fw_time_scale(void)
{
    const char  *s = getenv("PAGEDLLM_TEST_TIME_SCALE");
    int          k = s != NULL ? atoi(s) : 1;

    return k > 0 ? k : 1;
}


static inline uint64_t
fw_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


/* PAGEDLLM_TEST_DEVICE, or cpu. */
static inline const char *
fw_device(void)
{
    const char  *device = getenv("PAGEDLLM_TEST_DEVICE");

    return device != NULL ? device : "cpu";
}


/* A temporary folder /tmp/pl-NAME-XXXXXX for the socket and the log. */
static inline int
fw_setup(const char *name)
{
    snprintf(fw_dir, sizeof(fw_dir), "/tmp/pl-%s-XXXXXX", name);
    if (mkdtemp(fw_dir) == NULL) {
        return -1;
    }
    snprintf(fw_sock, sizeof(fw_sock), "%s/engine.sock", fw_dir);
    snprintf(fw_log, sizeof(fw_log), "%s/engine.log", fw_dir);

    return 0;
}


static inline void
fw_cleanup(void)
{
    unlink(fw_log);
    unlink(fw_sock);
    rmdir(fw_dir);
}


/* The engine's log (its stderr), as TAP comments. */
static inline void
fw_show_log(void)
{
    char   line[512];
    FILE  *f = fopen(fw_log, "r");

    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f)) {
        printf("#   engine: %s", line);
    }
    fclose(f);
}


/* ---- the engine process ---- */


static inline void
fw_exec(const char *engine, const char *const *argv)
{
    int  log = open(fw_log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    dup2(log, 2);
    execv(engine, (char *const *) argv);
    fprintf(stderr, "exec %s: %s\n", engine, strerror(errno));
    _exit(127);
}


static inline int
fw_connect(void)
{
    return pl_client_connect(fw_sock);
}


/*
 * Start BUILD/pagedllm-engine on model (a folder), listening on the
 * test's socket with one thread, plus args (NULL-terminated).  0 once its
 * socket answers; -1 when it exited (its wait status into *status, when
 * not NULL) or never listened.
 */
static inline int
fw_engine_start_model(const char *build, const char *model,
    const char *const *args, int *status)
{
    char         engine[512];
    const char  *argv[FW_MAX_ARGS];
    uint64_t     until = fw_now_ms() + FW_START_MS;
    int          n = 0, fd, st;

    snprintf(engine, sizeof(engine), "%s/pagedllm-engine", build);

    argv[n++] = engine;
    argv[n++] = "--model";
    argv[n++] = model;
    argv[n++] = "--listen";
    argv[n++] = fw_sock;
    argv[n++] = "--threads";
    argv[n++] = "1";
    while (*args != NULL && n < FW_MAX_ARGS - 1) {
        argv[n++] = *args++;
    }
    argv[n] = NULL;

    unlink(fw_sock);
    fw_pid = fork();
    if (fw_pid == 0) {
        fw_exec(engine, argv);
    }

    while (fw_now_ms() < until) {
        if (waitpid(fw_pid, &st, WNOHANG) == fw_pid) {
            fw_pid = 0;
            if (status != NULL) {
                *status = st;
            }
            return -1;
        }
        fd = fw_connect();
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        usleep(20000);
    }

    return -1;
}


/* fw_engine_start_model on the build folder's tiny model. */
static inline int
fw_engine_start(const char *build, const char *const *args, int *status)
{
    char  model[512];

    snprintf(model, sizeof(model), "%s/models/tiny", build);

    return fw_engine_start_model(build, model, args, status);
}


/* SIGTERM; 0 when the engine then exits with status 0. */
static inline int
fw_engine_stop(void)
{
    int  status = 0;

    if (fw_pid <= 0) {
        return -1;
    }
    kill(fw_pid, SIGTERM);
    waitpid(fw_pid, &status, 0);
    fw_pid = 0;

    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}


/* ---- attaching ---- */


/* Attach as a worker; take gets every completion record fw_pump reads. */
static inline int
fw_attach(fw_t *w, fw_take_pt take)
{
    int  fds[3];

    memset(w, 0, sizeof(*w));
    w->take = take;
    w->fd = fw_connect();
    if (w->fd < 0) {
        return -1;
    }
    if (pl_client_attach(w->fd, FW_WAIT_MS, &w->hello, fds) != 0) {
        close(w->fd);
        return -1;
    }

    w->sub_efd = fds[1];
    w->comp_efd = fds[2];
    w->size = w->hello.region_size;
    w->region = pl_client_map(&w->hello, fds[0], &w->sub, &w->comp);
    if (w->region == NULL) {
        close(w->sub_efd);
        close(w->comp_efd);
        close(w->fd);
        return -1;
    }
    w->hdr = w->region;

    return 0;
}


static inline void
fw_detach(fw_t *w)
{
    munmap(w->region, w->size);
    close(w->sub_efd);
    close(w->comp_efd);
    close(w->fd);
}


/* The socket reaches EOF: the engine closed this connection. */
static inline int
fw_closed(int fd)
{
    struct pollfd  p = { fd, POLLIN, 0 };
    char           c;

    return poll(&p, 1, FW_WAIT_MS) == 1 && recv(fd, &c, 1, 0) == 0;
}


/* ---- the submission ring ---- */


static inline int
fw_doorbell(fw_t *w)
{
    uint64_t  one = 1;

    if (write(w->sub_efd, &one, sizeof(one)) != sizeof(one)) {
        diag("doorbell write failed");
        return -1;
    }

    return 0;
}


static inline uint8_t *
fw_put(uint8_t *at, const void *src, size_t n)
{
    if (src != NULL && n > 0) {
        memcpy(at, src, n);
    }

    return at + n;
}


/* A SUBMIT with its prompt, logit bias and stop ids (as many as r
   counts; NULL where it counts none), then the doorbell; 0 when both
   went through. */
static inline int
fw_submit(fw_t *w, const pl_rec_submit_t *r, const int32_t *prompt,
    const pl_bias_pair_t *bias, const int32_t *stop)
{
    static uint8_t  body[1 << 16];
    uint8_t        *b = body;
    size_t          need = (size_t) r->n_prompt * sizeof(int32_t)
                           + r->n_logit_bias * sizeof(pl_bias_pair_t)
                           + r->n_stop_ids * sizeof(int32_t);
    int             rc;

    if (need > sizeof(body)) {
        diag("SUBMIT of %zu bytes is larger than the test's buffer", need);
        return -1;
    }

    b = fw_put(b, prompt, r->n_prompt * sizeof(int32_t));
    b = fw_put(b, bias, r->n_logit_bias * sizeof(pl_bias_pair_t));
    b = fw_put(b, stop, r->n_stop_ids * sizeof(int32_t));

    rc = pl_ring_write(&w->sub, PL_REC_SUBMIT, r, sizeof(*r), body,
                       (uint32_t) (b - body));

    return fw_doorbell(w) == 0 ? rc : -1;
}


static inline void
fw_abort(fw_t *w, uint64_t id)
{
    pl_rec_abort_t  r = { id };

    pl_ring_write(&w->sub, PL_REC_ABORT, &r, sizeof(r), NULL, 0);
    fw_doorbell(w);
}


/* ---- the completion ring ---- */


/* Hand everything in the completion ring to w->take; wait up to ms for
   the doorbell first.  Records read, or -1 on a corrupt ring. */
static inline int
fw_pump(fw_t *w, int ms)
{
    static uint8_t  buf[FW_RECBUF];
    struct pollfd   p = { w->comp_efd, POLLIN, 0 };
    uint32_t        type, len;
    uint64_t        v;
    int             n = 0, rc;

    if (poll(&p, 1, ms) == 1
        && read(w->comp_efd, &v, sizeof(v)) != sizeof(v))
    {
        diag("doorbell read failed");
    }

    while ((rc = pl_ring_read(&w->comp, &type, buf, sizeof(buf), &len)) == 1)
    {
        w->take(type, buf, len);
        n++;
    }

    return rc < 0 ? -1 : n;
}


static inline int
fw_all_done(fw_done_pt done, int lo, int hi)
{
    int  i;

    for (i = lo; i < hi; i++) {
        if (!done(i)) {
            return 0;
        }
    }

    return 1;
}


/* Pump until done(id) for every id in [lo, hi); 0, or -1 on a corrupt
   ring or after FW_WAIT_MS. */
static inline int
fw_wait(fw_t *w, fw_done_pt done, int lo, int hi)
{
    uint64_t  until = fw_now_ms() + FW_WAIT_MS;

    while (!fw_all_done(done, lo, hi)) {
        if (fw_now_ms() >= until || fw_pump(w, 50) < 0) {
            return -1;
        }
    }

    return 0;
}


/* ---- the engine's published state ---- */


static inline pl_stats_t
fw_stats(fw_t *w)
{
    pl_stats_t  st;

    memset(&st, 0, sizeof(st));
    if (pl_stats_read(w->hdr, &st) != 0) {
        diag("stats stayed busy");
    }

    return st;
}


/* Pump until the engine reports nothing running, waiting or swapped out
   and no block in use (it publishes at least every 200 ms). */
static inline pl_stats_t
fw_wait_idle(fw_t *w)
{
    uint64_t    until = fw_now_ms() + FW_WAIT_MS;
    pl_stats_t  st;

    do {
        fw_pump(w, 20);
        st = fw_stats(w);
    } while (fw_now_ms() < until
             && (st.running || st.waiting || st.swapped
                 || st.kv_blocks_used));

    return st;
}


/* ---- helpers of the group tests ---- */


/* n prompt tokens: a fixed pattern over ids 1..500 that salt shifts. */
static inline void
fw_fill_prompt(int32_t *p, int n, int salt)
{
    int  i;

    for (i = 0; i < n; i++) {
        p[i] = 1 + (i * 37 + salt * 11) % 500;
    }
}


/* KV blocks in use once the engine has published a pass with nothing
   running, waiting or swapped. */
static inline uint32_t
fw_blocks_used(fw_t *w)
{
    pl_stats_t  st;
    uint64_t    it = 0;
    int         i;

    memset(&st, 0, sizeof(st));
    for (i = 0; i < 200; i++) {
        usleep(5000);
        if (pl_stats_read(w->hdr, &st) == 0 && st.running == 0
            && st.waiting == 0 && st.swapped == 0 && st.iterations == it)
        {
            return st.kv_blocks_used;
        }
        it = st.iterations;
    }

    return st.kv_blocks_used;
}

#endif /* PL_FAKE_WORKER_H */
