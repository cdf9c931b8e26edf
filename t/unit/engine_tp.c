/*
 * The real pagedllm-engine with --tensor-parallel-size on the CPU: the
 * tiny model served whole and split over two ranks gives the same greedy
 * tokens, and the same log-probabilities within LOGPROB_TOL, for a batch
 * of requests that the engine runs with chunked prefill (a small token
 * budget) and paged blocks of 4 tokens.  Split over two ranks with a
 * pool too small for the batch and swap preemption, every rank swaps its
 * share of each block out and back and the tokens stay the same.  A size
 * that does not divide the model's KV heads stops the engine at start
 * with the reason.  On the CPU unless PAGEDLLM_TEST_DEVICE names another
 * device (cuda: rank r on GPU r, NCCL between them).
 *
 * LOGPROB_TOL: the split model sums its row-parallel projections in a
 * different fp32 order (see t/unit/tp.c); logits move by about 1e-5 at
 * most, and a log-softmax moves by at most twice that.
 * LOGPROB_TOL_BF16, on devices with bf16 activations (cuda): every
 * activation is rounded to an 8-bit significand (a relative step of
 * 2^-8), NCCL adds the partial sums in bf16, and the tiny model's logits
 * reach about 10, so one rounding moves a logit by up to ~0.04 and the
 * two runs' log-softmax apart by up to about twice that (0.033 measured
 * on two H200s, 2026-11-29).  The greedy tokens must still be identical.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

#include "pl_proto.h"
#include "pl_ring.h"

#define N_REQ        6
#define MAX_NEW      20
#define WAIT_MS      60000
#define RECBUF       (1 << 16)
#define LOGPROB_TOL       1e-4
#define LOGPROB_TOL_BF16  0.1

typedef struct {
    int32_t   toks[MAX_NEW];
    float     logprob[MAX_NEW];
    int       n;
    int       finished;
    uint32_t  reason;
} result_t;

typedef struct {
    int               fd;
    int               sub_efd;
    int               comp_efd;
    void             *region;
    size_t            size;
    pl_ring_t         sub;
    pl_ring_t         comp;
} worker_t;

static char   dir[] = "/tmp/pl-engine-tp-XXXXXX";
static char   sock_path[256];
static char   log_path[256];
static pid_t  engine_pid;
static const char  *device = "cpu";
static const char  *num_blocks = "2048";
static const char  *preemption = "recompute";


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

    while (f != NULL && fgets(line, sizeof(line), f)) {
        printf("#   engine: %s", line);
    }
    if (f != NULL) {
        fclose(f);
    }
}


static int
log_has(const char *what)
{
    char   line[512];
    int    found = 0;
    FILE  *f = fopen(log_path, "r");

    while (f != NULL && !found && fgets(line, sizeof(line), f)) {
        found = strstr(line, what) != NULL;
    }
    if (f != NULL) {
        fclose(f);
    }
    return found;
}


/* the KV cache's size on each rank, from the engine's "KV cache: ...
   (X MiB)" line; -1 when absent */
static double
log_kv_mib(void)
{
    char    line[512], *at;
    double  mib = -1;
    FILE   *f = fopen(log_path, "r");

    while (f != NULL && fgets(line, sizeof(line), f)) {
        at = strstr(line, "KV cache:");
        at = at != NULL ? strchr(at, '(') : NULL;
        if (at != NULL && strstr(at, " MiB)") != NULL) {
            mib = atof(at + 1);
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return mib;
}


/* Start the engine split over tp ranks; 0 once its socket answers, -1
   when it exited (its status in *status) or never listened. */
static int
start_engine(const char *build, const char *tp, int *status)
{
    char                model[512], engine[512];
    struct sockaddr_un  sa = { .sun_family = AF_UNIX };
    uint64_t            until = now_ms() + WAIT_MS;
    int                 fd;

    snprintf(engine, sizeof(engine), "%s/pagedllm-engine", build);
    snprintf(model, sizeof(model), "%s/models/tiny", build);
    unlink(sock_path);
    engine_pid = fork();
    if (engine_pid == 0) {
        int  log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        dup2(log, 2);
        execl(engine, engine, "--model", model, "--listen", sock_path,
              "--device", device, "--threads", "1", "--num-blocks", num_blocks,
              "--block-size", "4", "--max-num-batched-tokens", "32",
              "--max-num-seqs", "8", "--preemption-mode", preemption,
              "--swap-space", "4",
              "--tensor-parallel-size", tp, "--log-level", "info",
              (char *) NULL);
        fprintf(stderr, "exec %s: %s\n", engine, strerror(errno));
        _exit(127);
    }
    strcpy(sa.sun_path, sock_path);
    while (now_ms() < until) {
        if (waitpid(engine_pid, status, WNOHANG) == engine_pid) {
            engine_pid = 0;
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
    int  status = -1;

    if (engine_pid > 0) {
        kill(engine_pid, SIGTERM);
        waitpid(engine_pid, &status, 0);
        engine_pid = 0;
    }
    return status;
}


static int
recv_hello(worker_t *w)
{
    union {
        struct cmsghdr  h;
        char            buf[CMSG_SPACE(3 * sizeof(int))];
    }                ctl;
    pl_hello_t       hello;
    struct iovec     iov = { &hello, sizeof(hello) };
    struct msghdr    msg = { 0 };
    struct cmsghdr  *cm;
    int              fds[3];
    struct pollfd    p = { w->fd, POLLIN, 0 };

    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    if (poll(&p, 1, WAIT_MS) != 1
        || recvmsg(w->fd, &msg, MSG_CMSG_CLOEXEC) != sizeof(hello))
    {
        return -1;
    }
    cm = CMSG_FIRSTHDR(&msg);
    if (cm == NULL || cm->cmsg_type != SCM_RIGHTS
        || cm->cmsg_len != CMSG_LEN(sizeof(fds)))
    {
        return -1;
    }
    memcpy(fds, CMSG_DATA(cm), sizeof(fds));
    w->size = hello.region_size;
    w->region = mmap(NULL, w->size, PROT_READ | PROT_WRITE, MAP_SHARED,
                     fds[0], 0);
    close(fds[0]);
    w->sub_efd = fds[1];
    w->comp_efd = fds[2];
    return w->region == MAP_FAILED ? -1 : 0;
}


static int
attach(worker_t *w)
{
    struct sockaddr_un  sa = { .sun_family = AF_UNIX };
    pl_attach_t         a = { PL_PROTO_MAGIC, PL_PROTO_VERSION,
                              (uint32_t) getpid(), 0 };
    pl_region_hdr_t    *hdr;

    memset(w, 0, sizeof(*w));
    strcpy(sa.sun_path, sock_path);
    w->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(w->fd, (struct sockaddr *) &sa, sizeof(sa)) != 0
        || write(w->fd, &a, sizeof(a)) != sizeof(a) || recv_hello(w) != 0)
    {
        close(w->fd);
        return -1;
    }
    hdr = w->region;
    pl_ring_attach_producer(&w->sub, (uint8_t *) w->region + hdr->sub_offset,
                            hdr->sub_size);
    pl_ring_attach_consumer(&w->comp, (uint8_t *) w->region
                            + hdr->comp_offset, hdr->comp_size);
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


/* greedy, ignoring eos, with each token's log-probability */
static int
submit(worker_t *w, uint64_t id, const int32_t *prompt, uint32_t n)
{
    pl_rec_submit_t  r = { .req_id = id, .max_tokens = MAX_NEW,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_LOGPROBS,
                           .temperature = 0, .top_p = 1, .n_prompt = n };
    uint64_t         one = 1;

    if (pl_ring_write(&w->sub, PL_REC_SUBMIT, &r, sizeof(r), prompt,
                      n * sizeof(int32_t)) != 0)
    {
        return -1;
    }
    return write(w->sub_efd, &one, sizeof(one)) == sizeof(one) ? 0 : -1;
}


static void
take_tokens(result_t *res, const uint8_t *buf, uint32_t len)
{
    pl_rec_tokens_t  t;
    result_t        *r;
    uint32_t         i;

    memcpy(&t, buf, sizeof(t));
    if (t.req_id >= N_REQ || !(t.flags & PL_TOKENS_LOGPROBS)
        || len < sizeof(t) + t.n * 8)
    {
        diag("unexpected TOKENS record");
        return;
    }
    r = &res[t.req_id];
    for (i = 0; i < t.n && r->n < MAX_NEW; i++, r->n++) {
        memcpy(&r->toks[r->n], buf + sizeof(t) + i * 4, 4);
        memcpy(&r->logprob[r->n], buf + sizeof(t) + t.n * 4 + i * 4, 4);
    }
}


/* read completions until every request finished; 0, or -1 on timeout */
static int
collect(worker_t *w, result_t *res)
{
    static uint8_t   buf[RECBUF];
    struct pollfd    p = { w->comp_efd, POLLIN, 0 };
    uint64_t         until = now_ms() + WAIT_MS, v;
    uint32_t         type, len;
    pl_rec_finish_t  f;
    int              done = 0;

    while (done < N_REQ && now_ms() < until) {
        if (poll(&p, 1, 50) == 1 && read(w->comp_efd, &v, sizeof(v)) < 0) {
            return -1;
        }
        while (pl_ring_read(&w->comp, &type, buf, sizeof(buf), &len) == 1) {
            if (type == PL_REC_TOKENS && len >= sizeof(pl_rec_tokens_t)) {
                take_tokens(res, buf, len);
            } else if (type == PL_REC_FINISH && len >= sizeof(f)) {
                memcpy(&f, buf, sizeof(f));
                if (f.req_id < N_REQ) {
                    res[f.req_id].finished++;
                    res[f.req_id].reason = f.reason;
                    done++;
                }
            } else {
                diag("unexpected record type %u", type);
            }
        }
    }
    return done == N_REQ ? 0 : -1;
}


/* N_REQ prompts of 5 to 60 tokens at once through an engine of tp ranks */
static int
serve(const char *build, const char *tp, result_t *res, double *kv_mib,
    pl_stats_t *stats)
{
    static const int  lens[N_REQ] = { 5, 60, 17, 33, 9, 41 };
    int32_t           prompt[64];
    uint32_t          seed = 12345;
    worker_t          w;
    int               i, j, status, rc = 0;

    memset(res, 0, N_REQ * sizeof(result_t));
    if (start_engine(build, tp, &status) != 0) {
        diag("the engine with %s ranks did not start", tp);
        show_log();
        return -1;
    }
    if (attach(&w) != 0) {
        diag("attach failed");
        stop_engine();
        return -1;
    }
    for (i = 0; i < N_REQ && rc == 0; i++) {
        for (j = 0; j < lens[i]; j++) {
            seed = seed * 1103515245u + 12345u;
            prompt[j] = (int32_t) ((seed >> 8) % 500);
        }
        rc = submit(&w, (uint64_t) i, prompt, (uint32_t) lens[i]);
    }
    rc = rc == 0 ? collect(&w, res) : -1;
    if (rc == 0 && stats != NULL) {
        usleep(300000);     /* the engine publishes once more when idle */
        rc = pl_stats_read(w.region, stats);
    }
    detach(&w);
    *kv_mib = log_kv_mib();
    if (stop_engine() != 0 || rc != 0) {
        diag("%s ranks: %s", tp, rc ? "requests did not finish"
                                    : "unclean stop");
        show_log();
        return -1;
    }
    return 0;
}


static int
build_dir(char *out, size_t len, const char *argv0)
{
    const char  *slash = strrchr(argv0, '/');

    if (getenv("PAGEDLLM_BUILD") != NULL) {
        snprintf(out, len, "%s", getenv("PAGEDLLM_BUILD"));
    } else if (slash != NULL) {
        snprintf(out, len, "%.*s/..", (int) (slash - argv0), argv0);
    } else {
        return -1;
    }
    return 0;
}


int
main(int argc, char **argv)
{
    static result_t  one[N_REQ], two[N_REQ], swapped[N_REQ];
    pl_stats_t       st;
    char             build[512];
    double           d = 0, mib1 = -1, mib2 = -1, tol = LOGPROB_TOL;
    int              i, j, same = 1, full = 1, status = 0;

    (void) argc;
    if (build_dir(build, sizeof(build), argv[0]) != 0
        || mkdtemp(dir) == NULL)
    {
        printf("Bail out! no build folder or temporary folder\n");
        return 1;
    }
    if (getenv("PAGEDLLM_TEST_DEVICE") != NULL) {
        device = getenv("PAGEDLLM_TEST_DEVICE");
        tol = strcmp(device, "cpu") == 0 ? LOGPROB_TOL : LOGPROB_TOL_BF16;
    }
    snprintf(sock_path, sizeof(sock_path), "%s/engine.sock", dir);
    snprintf(log_path, sizeof(log_path), "%s/engine.log", dir);

    ok(serve(build, "1", one, &mib1, NULL) == 0,
       "one rank: %d requests served", N_REQ);
    ok(serve(build, "2", two, &mib2, NULL) == 0,
       "two ranks: %d requests served", N_REQ);
    ok(mib1 > 0 && fabs(mib2 * 2 - mib1) < 0.11, "two ranks: each holds "
       "half the KV cache of one (%.1f MiB, whole %.1f MiB)", mib2, mib1);
    for (i = 0; i < N_REQ; i++) {
        full &= one[i].n == MAX_NEW && two[i].n == MAX_NEW
                && one[i].finished == 1 && two[i].finished == 1
                && two[i].reason == PL_FINISH_LENGTH;
        same &= memcmp(one[i].toks, two[i].toks, sizeof(one[i].toks)) == 0;
        for (j = 0; j < MAX_NEW; j++) {
            d = fmax(d, fabs(one[i].logprob[j] - two[i].logprob[j]));
        }
    }
    ok(full, "every request got %d tokens and one FINISH on both", MAX_NEW);
    ok(full && same, "two ranks give one rank's greedy tokens, request by request");
    ok(full && d <= tol, "two ranks give one rank's log-probabilities "
       "within %g (max %.2g)", tol, d);

    num_blocks = "32";
    preemption = "swap";
    memset(&st, 0, sizeof(st));
    ok(serve(build, "2", swapped, &mib2, &st) == 0,
       "two ranks, 32 blocks, swap preemption: %d requests served", N_REQ);
    ok(st.preemptions_swap > 0 && st.blocks_swapped_out > 0
       && st.blocks_swapped_in == st.blocks_swapped_out,
       "the pool was too small: %llu swap preemptions, %llu blocks out and "
       "%llu back", (unsigned long long) st.preemptions_swap,
       (unsigned long long) st.blocks_swapped_out,
       (unsigned long long) st.blocks_swapped_in);
    same = 1;
    for (i = 0; i < N_REQ; i++) {
        same &= swapped[i].n == MAX_NEW
                && memcmp(one[i].toks, swapped[i].toks,
                          sizeof(one[i].toks)) == 0;
    }
    ok(same, "swapping every rank's share gives one rank's greedy tokens");
    ok(st.kv_blocks_used == 0 && st.swap_blocks_used == 0,
       "every device and host block came back (%u, %u in use)",
       st.kv_blocks_used, st.swap_blocks_used);
    num_blocks = "2048";
    preemption = "recompute";

    ok(start_engine(build, "4", &status) != 0 && WIFEXITED(status)
       && WEXITSTATUS(status) == 1
       && log_has("tensor parallel size 4 does not divide the model's 4 "
                  "attention heads and 2 KV heads"),
       "four ranks on a model of 2 KV heads: the engine refuses to start, "
       "saying why");
    stop_engine();

    unlink(sock_path);
    unlink(log_path);
    rmdir(dir);
    return done_testing();
}
