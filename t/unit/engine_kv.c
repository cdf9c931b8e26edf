/*
 * The KV cache manager through the real pagedllm-engine (tiny model, CPU),
 * driven by a fake worker: greedy output is the same token for token
 * whether requests run alone in an ample pool, or together in a pool far
 * too small, preempted by recompute or by swap; a second request sharing
 * a long prefix reuses cached blocks (counted) and gives the output it
 * gives without prefix caching; the Orca-Max baseline policy serves the
 * same tokens; every block, device and host, comes back.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

#include "pl_proto.h"
#include "pl_ring.h"

#define N_REQ      6
#define N_PROMPT   200
#define N_GEN      200
#define WAIT_MS    60000

typedef struct {
    int               fd;
    int               sub_efd;
    int               comp_efd;
    void             *region;
    size_t            size;
    pl_region_hdr_t  *hdr;
    pl_ring_t         sub;
    pl_ring_t         comp;
} worker_t;

typedef struct {
    int32_t   toks[N_GEN];
    int       n;
    int       finished;
} result_t;

static char      dir[64], sock_path[128], log_path[128];
static pid_t     engine_pid;
static result_t  res[64];
static int32_t   prompts[N_REQ][N_PROMPT];
static int32_t   ref[N_REQ][N_GEN];
static int32_t   px[300], py[300], ref_x[N_GEN], ref_y[N_GEN];


static uint64_t
now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


static void
show_log(void)
{
    char   line[512];
    FILE  *f = fopen(log_path, "r");

    while (f && fgets(line, sizeof(line), f)) {
        printf("#   engine: %s", line);
    }
    if (f) {
        fclose(f);
    }
}


/* Start the engine with the given extra flags (NULL-terminated). */
static int
start_engine(const char *build, const char *const *extra)
{
    char                model[512], engine[512];
    const char         *argv[40];
    struct sockaddr_un  sa = { .sun_family = AF_UNIX };
    uint64_t            until = now_ms() + WAIT_MS;
    int                 fd, status, n = 0;

    snprintf(engine, sizeof(engine), "%s/pagedllm-engine", build);
    snprintf(model, sizeof(model), "%s/models/tiny", build);
    unlink(sock_path);

    argv[n++] = engine;
    argv[n++] = "--model";
    argv[n++] = model;
    argv[n++] = "--listen";
    argv[n++] = sock_path;
    argv[n++] = "--device";
    argv[n++] = "cpu";
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--block-size";
    argv[n++] = "16";
    while (*extra) {
        argv[n++] = *extra++;
    }
    argv[n] = NULL;

    engine_pid = fork();
    if (engine_pid == 0) {
        int  log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        dup2(log, 2);
        execv(engine, (char *const *) argv);
        _exit(127);
    }

    strcpy(sa.sun_path, sock_path);
    while (now_ms() < until) {
        if (waitpid(engine_pid, &status, WNOHANG) == engine_pid) {
            return -1;
        }
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0) {
            close(fd);
            return 0;
        }
        close(fd);
        usleep(20000);
    }

    return -1;
}


static int
stop_engine(void)
{
    int  status = 0;

    kill(engine_pid, SIGTERM);
    waitpid(engine_pid, &status, 0);

    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}


static int
attach(worker_t *w)
{
    pl_attach_t         a = { PL_PROTO_MAGIC, PL_PROTO_VERSION,
                              (uint32_t) getpid(), 0 };
    pl_hello_t          hello;
    struct sockaddr_un  sa = { .sun_family = AF_UNIX };
    union {
        struct cmsghdr  h;
        char            buf[CMSG_SPACE(3 * sizeof(int))];
    }                   ctl;
    struct iovec        iov = { &hello, sizeof(hello) };
    struct msghdr       msg = { 0 };
    struct pollfd       p;
    int                 fds[3];

    memset(w, 0, sizeof(*w));
    strcpy(sa.sun_path, sock_path);
    w->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(w->fd, (struct sockaddr *) &sa, sizeof(sa)) != 0
        || write(w->fd, &a, sizeof(a)) != sizeof(a))
    {
        return -1;
    }

    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    p = (struct pollfd) { w->fd, POLLIN, 0 };
    if (poll(&p, 1, WAIT_MS) != 1
        || recvmsg(w->fd, &msg, MSG_CMSG_CLOEXEC) != sizeof(hello)
        || CMSG_FIRSTHDR(&msg) == NULL)
    {
        return -1;
    }
    memcpy(fds, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(fds));

    w->size = hello.region_size;
    w->region = mmap(NULL, w->size, PROT_READ | PROT_WRITE, MAP_SHARED,
                     fds[0], 0);
    close(fds[0]);
    w->sub_efd = fds[1];
    w->comp_efd = fds[2];
    if (w->region == MAP_FAILED) {
        return -1;
    }

    w->hdr = w->region;
    pl_ring_attach_producer(&w->sub, (uint8_t *) w->region
                            + w->hdr->sub_offset, w->hdr->sub_size);
    pl_ring_attach_consumer(&w->comp, (uint8_t *) w->region
                            + w->hdr->comp_offset, w->hdr->comp_size);

    return 0;
}


static void
detach(worker_t *w)
{
    munmap(w->region, w->size);
    close(w->sub_efd);
    close(w->comp_efd);
    close(w->fd);
}


/* Greedy, ignoring EOS, max_tokens N_GEN. */
static void
submit(worker_t *w, uint64_t id, const int32_t *prompt, uint32_t n)
{
    pl_rec_submit_t  r = { .req_id = id, .max_tokens = N_GEN,
                           .flags = PL_SUBMIT_IGNORE_EOS, .top_p = 1,
                           .n_prompt = n };
    uint64_t         one = 1;

    memset(&res[id], 0, sizeof(res[id]));
    if (pl_ring_write(&w->sub, PL_REC_SUBMIT, &r, sizeof(r), prompt,
                      n * sizeof(int32_t)) != 0
        || write(w->sub_efd, &one, sizeof(one)) != sizeof(one))
    {
        diag("submit %llu failed", (unsigned long long) id);
    }
}


static void
take(uint32_t type, const uint8_t *buf, uint32_t len)
{
    pl_rec_tokens_t  t;
    pl_rec_finish_t  f;

    if (type == PL_REC_TOKENS && len >= sizeof(t)) {
        memcpy(&t, buf, sizeof(t));
        if (t.req_id < 64 && res[t.req_id].n + (int) t.n <= N_GEN) {
            memcpy(res[t.req_id].toks + res[t.req_id].n, buf + sizeof(t),
                   t.n * sizeof(int32_t));
            res[t.req_id].n += (int) t.n;
        }
    } else if (type == PL_REC_FINISH && len >= sizeof(f)) {
        memcpy(&f, buf, sizeof(f));
        if (f.req_id < 64) {
            res[f.req_id].finished = 1;
        }
    } else {
        diag("unexpected record %u", type);
    }
}


/* Pump until requests [first, first + n) have finished. */
static int
wait_all(worker_t *w, int first, int n)
{
    static uint8_t  buf[1 << 20];
    uint64_t        until = now_ms() + WAIT_MS, v;
    struct pollfd   p = { w->comp_efd, POLLIN, 0 };
    uint32_t        type, len;
    int             i, left = n;

    while (left > 0 && now_ms() < until) {
        if (poll(&p, 1, 50) == 1 && read(w->comp_efd, &v, sizeof(v)) < 0) {
            diag("doorbell: %s", strerror(errno));
        }
        while (pl_ring_read(&w->comp, &type, buf, sizeof(buf), &len) == 1) {
            take(type, buf, len);
        }
        for (left = 0, i = first; i < first + n; i++) {
            left += !res[i].finished;
        }
    }

    return left == 0 ? 0 : -1;
}


/* Stats once the engine is idle (it publishes at least every 200 ms). */
static pl_stats_t
idle_stats(worker_t *w)
{
    uint64_t    until = now_ms() + WAIT_MS;
    pl_stats_t  st;

    do {
        usleep(20000);
        memset(&st, 0, sizeof(st));
        pl_stats_read(w->hdr, &st);
    } while (now_ms() < until
             && (st.running || st.waiting || st.swapped
                 || st.kv_blocks_used));

    return st;
}


/* Run the N_REQ requests together; 1 when each got its reference tokens. */
static int
run_together(worker_t *w)
{
    int  i, same = 1;

    for (i = 0; i < N_REQ; i++) {
        submit(w, (uint64_t) (10 + i), prompts[i], N_PROMPT);
    }
    if (wait_all(w, 10, N_REQ) != 0) {
        return 0;
    }
    for (i = 0; i < N_REQ; i++) {
        same &= res[10 + i].n == N_GEN
                && memcmp(res[10 + i].toks, ref[i], sizeof(ref[i])) == 0;
    }

    return same;
}


static void
make_prompts(void)
{
    int  i, j;

    for (i = 0; i < N_REQ; i++) {
        for (j = 0; j < N_PROMPT; j++) {
            prompts[i][j] = (i * 37 + j * 11 + 5) % 500;
        }
    }
    for (j = 0; j < 300; j++) {
        px[j] = (j * 13 + 1) % 500;
        py[j] = j < 288 ? px[j] : (j * 7 + 3) % 500;
    }
}


/* References: each request alone, ample pool, no prefix caching. */
static int
references(const char *build)
{
    static const char *const  flags[] = {
        "--num-blocks", "512", "--no-prefix-caching", NULL
    };
    worker_t    w;
    pl_stats_t  st;
    int         i, good = 1;

    if (!ok(start_engine(build, flags) == 0 && attach(&w) == 0,
            "reference engine: ample pool, prefix caching off"))
    {
        show_log();
        return -1;
    }

    for (i = 0; i < N_REQ; i++) {
        submit(&w, (uint64_t) i, prompts[i], N_PROMPT);
        good &= wait_all(&w, i, 1) == 0 && res[i].n == N_GEN;
        memcpy(ref[i], res[i].toks, sizeof(ref[i]));
    }
    submit(&w, 0, px, 300);
    good &= wait_all(&w, 0, 1) == 0;
    memcpy(ref_x, res[0].toks, sizeof(ref_x));
    submit(&w, 1, py, 300);
    good &= wait_all(&w, 1, 1) == 0;
    memcpy(ref_y, res[1].toks, sizeof(ref_y));
    ok(good, "every reference request finishes alone");

    ok(run_together(&w), "together in an ample pool: the same tokens");
    st = idle_stats(&w);
    ok(st.preemptions_total == 0 && st.prefix_cache_queries == 0
       && st.kv_blocks_cached == 0, "no preemption; no prefix cache used");

    detach(&w);
    ok(stop_engine() == 0, "the reference engine stops cleanly");

    return 0;
}


static void
test_recompute_and_prefix(const char *build)
{
    static const char *const  flags[] = {
        "--num-blocks", "64", "--preemption-mode", "recompute", NULL
    };
    worker_t    w;
    pl_stats_t  st, before;

    if (!ok(start_engine(build, flags) == 0 && attach(&w) == 0,
            "engine: 64 blocks (1024 tokens) for 6 x 400 tokens, "
            "recompute, prefix caching on"))
    {
        show_log();
        return;
    }

    ok(run_together(&w), "preempted by recompute: every request's greedy "
       "tokens equal its tokens alone");
    st = idle_stats(&w);
    ok(st.preemptions_recompute > 0 && st.preemptions_swap == 0,
       "the pool was too small: %llu recompute preemptions",
       (unsigned long long) st.preemptions_recompute);
    is_int(st.kv_blocks_used, 0, "every block comes back");

    before = st;
    submit(&w, 0, px, 300);
    wait_all(&w, 0, 1);
    submit(&w, 1, py, 300);
    wait_all(&w, 1, 1);
    st = idle_stats(&w);
    ok(st.prefix_cache_hits - before.prefix_cache_hits >= 18,
       "a second request sharing a 288-token prefix reuses 18 cached blocks "
       "(%llu hits of %llu queries)",
       (unsigned long long) (st.prefix_cache_hits - before.prefix_cache_hits),
       (unsigned long long) (st.prefix_cache_queries
                             - before.prefix_cache_queries));
    ok(memcmp(res[0].toks, ref_x, sizeof(ref_x)) == 0
       && memcmp(res[1].toks, ref_y, sizeof(ref_y)) == 0,
       "and both give the tokens they give without prefix caching");
    ok(st.kv_blocks_cached > 0 && st.kv_blocks_used == 0,
       "idle: cached blocks kept (%u), none referenced", st.kv_blocks_cached);

    detach(&w);
    ok(stop_engine() == 0, "the engine stops cleanly");
}


static void
test_swap(const char *build)
{
    static const char *const  flags[] = {
        "--num-blocks", "64", "--preemption-mode", "swap", "--swap-space",
        "16", "--no-prefix-caching", NULL
    };
    worker_t    w;
    pl_stats_t  st;

    if (!ok(start_engine(build, flags) == 0 && attach(&w) == 0,
            "engine: 64 blocks, preemption by swap, 16 MiB swap space"))
    {
        show_log();
        return;
    }

    ok(run_together(&w), "preempted by swap: every request's greedy tokens "
       "equal its tokens alone");
    st = idle_stats(&w);
    ok(st.preemptions_swap > 0 && st.blocks_swapped_in > 0
       && st.blocks_swapped_in == st.blocks_swapped_out,
       "%llu swap preemptions moved %llu blocks out and back in",
       (unsigned long long) st.preemptions_swap,
       (unsigned long long) st.blocks_swapped_out);
    ok(st.swap_blocks_total > 0 && st.swap_blocks_used == 0
       && st.kv_blocks_used == 0, "every device and host block comes back");

    detach(&w);
    ok(stop_engine() == 0, "the engine stops cleanly");
}


static void
test_orca_max(const char *build)
{
    static const char *const  flags[] = {
        "--num-blocks", "64", "--kv-policy", "orca-max", "--max-model-len",
        "512", NULL
    };
    worker_t    w;
    pl_stats_t  st;

    if (!ok(start_engine(build, flags) == 0 && attach(&w) == 0,
            "engine: the Orca-Max baseline, 512-token reservations"))
    {
        show_log();
        return;
    }

    ok(run_together(&w), "Orca-Max serves the same tokens");
    st = idle_stats(&w);
    ok(st.preemptions_total == 0 && st.kv_blocks_used == 0,
       "without preemption, and frees every reservation");

    detach(&w);
    ok(stop_engine() == 0, "the engine stops cleanly");
}


int
main(void)
{
    const char  *build = getenv("PAGEDLLM_BUILD");

    build = build ? build : "build";
    snprintf(dir, sizeof(dir), "/tmp/pagedllm-kv-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        ok(0, "temp dir");
        return done_testing();
    }
    snprintf(sock_path, sizeof(sock_path), "%s/engine.sock", dir);
    snprintf(log_path, sizeof(log_path), "%s/engine.log", dir);

    make_prompts();
    if (references(build) == 0) {
        test_recompute_and_prefix(build);
        test_swap(build);
        test_orca_max(build);
    }

    if (tap_failed) {
        show_log();
    }
    unlink(log_path);
    unlink(sock_path);
    rmdir(dir);

    return done_testing();
}
