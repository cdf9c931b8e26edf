/*
 * Sequence groups (parallel sampling n, best_of) through the real
 * pagedllm-engine (tiny model, CPU) driven by a fake worker: greedy n=2
 * gives identical choices; a long prompt's blocks are held once by its
 * four samples and all are freed at the end; seeded samples differ from
 * each other yet repeat run to run; each choice stops on its own;
 * best_of returns the candidates with the highest cumulative logprob;
 * an ABORT frees every member; preempted groups give the same tokens;
 * bad n and best_of get ERROR 400.
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

#define N_REQ      64
#define N_SEQ      16
#define N_TOK      64
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
    int32_t   toks[N_TOK];
    float     lp[N_TOK];
    int       n;
    int       finished;         /* FINISH records of this choice */
    uint32_t  reason;
    uint32_t  completion;       /* as FINISH counts them */
} choice_t;

typedef struct {
    choice_t  c[N_SEQ];
    int       finishes;         /* FINISH records in all */
    int       bad_index;
    uint32_t  err_status;
    uint32_t  fail_reason;      /* a FINISH(ABORT/ERROR) */
} result_t;

static result_t  res[N_REQ];
static char      sock_path[256], log_path[256], dir[128];
static pid_t     engine_pid;
static int       n_index[N_REQ];     /* choices each request expects */


static uint64_t
now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


static int
start_engine(const char *build, const char *blocks, const char *seqs,
    const char *caching)
{
    char                model[512], engine[512];
    struct sockaddr_un  sa = { .sun_family = AF_UNIX };
    uint64_t            until = now_ms() + 60000;
    int                 fd, status, log;

    snprintf(engine, sizeof(engine), "%s/pagedllm-engine", build);
    snprintf(model, sizeof(model), "%s/models/tiny", build);

    engine_pid = fork();
    if (engine_pid == 0) {
        log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(log, 2);
        execl(engine, engine, "--model", model, "--listen", sock_path,
              "--device", "cpu", "--threads", "1", "--num-blocks", blocks,
              "--max-num-seqs", seqs, "--max-num-batched-tokens", "256",
              caching, (char *) NULL);
        _exit(127);
    }

    strcpy(sa.sun_path, sock_path);

    while (now_ms() < until) {
        if (waitpid(engine_pid, &status, WNOHANG) == engine_pid) {
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
attach(worker_t *w)
{
    union {
        struct cmsghdr  h;
        char            buf[CMSG_SPACE(3 * sizeof(int))];
    }                   ctl;
    pl_attach_t         a = { PL_PROTO_MAGIC, PL_PROTO_VERSION, 1, 0 };
    pl_hello_t          hello;
    struct sockaddr_un  sa = { .sun_family = AF_UNIX };
    struct iovec        iov = { &hello, sizeof(hello) };
    struct msghdr       msg = { 0 };
    struct cmsghdr     *cm;
    struct pollfd       p;
    int                 fds[3];

    memset(w, 0, sizeof(*w));
    strcpy(sa.sun_path, sock_path);
    w->fd = socket(AF_UNIX, SOCK_STREAM, 0);
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
        || recvmsg(w->fd, &msg, 0) != sizeof(hello)
        || (cm = CMSG_FIRSTHDR(&msg)) == NULL
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


static int
submit(worker_t *w, const pl_rec_submit_t *r, const int32_t *prompt,
    const int32_t *stop)
{
    uint8_t   body[8192], *b = body;
    uint64_t  one = 1;
    int       rc;

    memcpy(b, prompt, r->n_prompt * sizeof(int32_t));
    b += r->n_prompt * sizeof(int32_t);
    memcpy(b, stop, r->n_stop_ids * sizeof(int32_t));
    b += r->n_stop_ids * sizeof(int32_t);

    if (r->req_id < N_REQ) {
        n_index[r->req_id] = r->n ? (int) r->n : 1;
        memset(&res[r->req_id], 0, sizeof(result_t));
    }

    rc = pl_ring_write(&w->sub, PL_REC_SUBMIT, r, sizeof(*r), body,
                       (uint32_t) (b - body));
    if (write(w->sub_efd, &one, sizeof(one)) != sizeof(one)) {
        diag("doorbell write failed");
    }

    return rc;
}


static void
take_tokens(const uint8_t *buf)
{
    pl_rec_tokens_t   t;
    const int32_t    *ids;
    const float      *lp;
    result_t         *r;
    choice_t         *c;
    uint32_t          i;

    memcpy(&t, buf, sizeof(t));
    if (t.req_id >= N_REQ) {
        return;
    }

    r = &res[t.req_id];
    if (t.index >= (uint32_t) n_index[t.req_id]) {
        r->bad_index++;
        return;
    }

    c = &r->c[t.index];
    ids = (const int32_t *) (buf + sizeof(t));
    lp = (const float *) (ids + t.n);

    for (i = 0; i < t.n && c->n < N_TOK; i++, c->n++) {
        c->toks[c->n] = ids[i];
        c->lp[c->n] = (t.flags & PL_TOKENS_LOGPROBS) ? lp[i] : 0;
    }
}


static void
take(uint32_t type, const uint8_t *buf)
{
    pl_rec_finish_t  f;
    pl_rec_error_t   e;
    result_t        *r;

    if (type == PL_REC_TOKENS) {
        take_tokens(buf);

    } else if (type == PL_REC_FINISH) {
        memcpy(&f, buf, sizeof(f));
        if (f.req_id >= N_REQ) {
            return;
        }
        r = &res[f.req_id];
        r->finishes++;
        if (f.reason == PL_FINISH_ABORT || f.reason == PL_FINISH_ERROR) {
            r->fail_reason = f.reason;
        } else if (f.index < (uint32_t) n_index[f.req_id]) {
            r->c[f.index].finished++;
            r->c[f.index].reason = f.reason;
            r->c[f.index].completion = f.completion_tokens;
        } else {
            r->bad_index++;
        }

    } else if (type == PL_REC_ERROR) {
        memcpy(&e, buf, sizeof(e));
        if (e.req_id < N_REQ) {
            res[e.req_id].err_status = e.status;
        }
    }
}


static int
is_done(int id)
{
    result_t  *r = &res[id];
    int        i;

    if (r->fail_reason) {
        return 1;
    }
    for (i = 0; i < n_index[id]; i++) {
        if (!r->c[i].finished) {
            return 0;
        }
    }

    return 1;
}


/* Pump the completion ring until ids [lo, hi) are done; the most KV
   blocks in use seen meanwhile into *max_used (when not NULL). */
static int
wait_all(worker_t *w, int lo, int hi, uint32_t *max_used)
{
    static uint8_t  buf[1 << 20];
    struct pollfd   p = { w->comp_efd, POLLIN, 0 };
    uint64_t        until = now_ms() + WAIT_MS, v;
    uint32_t        type, len;
    pl_stats_t      st;
    int             i, left;

    while (now_ms() < until) {
        if (poll(&p, 1, 2) == 1 && read(w->comp_efd, &v, 8) != 8) {
            diag("doorbell read failed");
        }
        if (max_used && pl_stats_read(w->hdr, &st) == 0
            && st.kv_blocks_used > *max_used)
        {
            *max_used = st.kv_blocks_used;
        }
        while (pl_ring_read(&w->comp, &type, buf, sizeof(buf), &len) == 1) {
            take(type, buf);
        }
        for (left = 0, i = lo; i < hi; i++) {
            left += !is_done(i);
        }
        if (left == 0) {
            return 0;
        }
    }

    return -1;
}


/* Blocks in use once the engine has published a pass after the end. */
static uint32_t
blocks_used(worker_t *w)
{
    pl_stats_t  st;
    uint64_t    it = 0;
    int         i;

    for (i = 0; i < 100; i++) {
        usleep(5000);
        if (pl_stats_read(w->hdr, &st) == 0 && st.running == 0
            && st.waiting == 0 && st.iterations == it)
        {
            return st.kv_blocks_used;
        }
        it = st.iterations;
    }

    return st.kv_blocks_used;
}


static int
same_choice(const choice_t *a, const choice_t *b)
{
    return a->n == b->n && memcmp(a->toks, b->toks, a->n * 4) == 0;
}


static void
fill_prompt(int32_t *p, int n, int salt)
{
    int  i;

    for (i = 0; i < n; i++) {
        p[i] = 1 + (i * 37 + salt * 11) % 500;
    }
}


static void
test_greedy(worker_t *w)
{
    int32_t          prompt[40];
    pl_rec_submit_t  r = { .req_id = 1, .max_tokens = 24, .top_p = 1,
                           .n_prompt = 40, .n = 2,
                           .flags = PL_SUBMIT_IGNORE_EOS };

    fill_prompt(prompt, 40, 1);
    submit(w, &r, prompt, NULL);
    ok(wait_all(w, 1, 2, NULL) == 0, "greedy n=2 finishes");
    ok(res[1].c[0].n == 24 && same_choice(&res[1].c[0], &res[1].c[1]),
       "greedy n=2: two identical choices of 24 tokens");
    ok(res[1].finishes == 2 && res[1].c[0].reason == PL_FINISH_LENGTH
       && res[1].c[1].reason == PL_FINISH_LENGTH
       && res[1].c[1].completion == 24 && res[1].bad_index == 0,
       "one FINISH(LENGTH) per choice, each counting its own tokens");
}


static void
test_sharing(worker_t *w)
{
    int32_t          prompt[200];
    pl_rec_submit_t  r = { .req_id = 2, .max_tokens = 48, .top_p = 1,
                           .temperature = 1, .n_prompt = 200, .n = 4,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_HAS_SEED, .seed = 7 };
    uint32_t         max_used = 0, prompt_blocks = (200 + 15) / 16;
    uint32_t         own = (200 + 48 + 15) / 16 - 200 / 16;

    fill_prompt(prompt, 200, 2);
    submit(w, &r, prompt, NULL);
    ok(wait_all(w, 2, 3, &max_used) == 0, "n=4 with a 200-token prompt "
       "finishes");
    diag("blocks in use at most %u (prompt %u blocks)", max_used,
         prompt_blocks);
    ok(max_used >= prompt_blocks + 3
       && max_used <= 200 / 16 + 4 * own,
       "the prompt's blocks are held once: at most %u blocks in use, "
       "not 4 x %u", 200 / 16 + 4 * own, (200 + 48 + 15) / 16);
    is_int((int) blocks_used(w), 0, "every block is free afterwards");
}


static void
test_seeded(worker_t *w)
{
    int32_t          prompt[12];
    pl_rec_submit_t  r = { .req_id = 3, .max_tokens = 32, .top_p = 1,
                           .temperature = 1.0f, .n_prompt = 12, .n = 3,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_HAS_SEED, .seed = 99 };
    pl_rec_submit_t  one = r;
    int              i, same = 1;

    fill_prompt(prompt, 12, 3);
    submit(w, &r, prompt, NULL);
    r.req_id = 4;
    submit(w, &r, prompt, NULL);
    one.req_id = 5;
    one.n = 0;
    submit(w, &one, prompt, NULL);
    ok(wait_all(w, 3, 6, NULL) == 0, "two seeded n=3 and a seeded n=1 "
       "finish");

    ok(!same_choice(&res[3].c[0], &res[3].c[1])
       && !same_choice(&res[3].c[1], &res[3].c[2])
       && !same_choice(&res[3].c[0], &res[3].c[2]),
       "seeded n=3: the three choices differ");
    for (i = 0; i < 3; i++) {
        same &= same_choice(&res[3].c[i], &res[4].c[i]);
    }
    ok(same, "and the same seed gives the same three choices again");
    ok(same_choice(&res[3].c[0], &res[5].c[0]), "choice 0 draws from the "
       "seed's own stream: it equals the n=1 request with that seed");
}


static void
test_stops(worker_t *w)
{
    int32_t          prompt[8], stop[48];
    pl_rec_submit_t  r = { .req_id = 6, .max_tokens = 40, .top_p = 1,
                           .temperature = 1.0f, .n_prompt = 8, .n = 4,
                           .n_stop_ids = 48,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_HAS_SEED, .seed = 5 };
    int              i, j, k, good = 1, lengths = 0, hit;
    choice_t        *c;

    fill_prompt(prompt, 8, 6);
    for (i = 0; i < 48; i++) {
        stop[i] = 10 * i + 3;
    }
    submit(w, &r, prompt, stop);
    ok(wait_all(w, 6, 7, NULL) == 0, "n=4 with 48 stop ids finishes");

    for (i = 0; i < 4; i++) {
        c = &res[6].c[i];
        for (j = 0; j < c->n; j++) {
            for (hit = 0, k = 0; k < 48; k++) {
                hit |= c->toks[j] == stop[k];
            }
            good &= hit == (j == c->n - 1 && c->reason == PL_FINISH_STOP);
        }
        good &= c->reason == PL_FINISH_STOP
                || (c->reason == PL_FINISH_LENGTH && c->n == 40);
        good &= c->completion == (uint32_t) c->n;
        lengths |= 1 << (c->n & 31);
        diag("choice %d: %d tokens, reason %u", i, c->n, c->reason);
    }
    ok(good, "each choice ends at its own first stop id (or its length)");
    ok((lengths & (lengths - 1)) != 0, "and the choices end at different "
       "lengths");
}


/* The best_of candidates are the n=best_of members with the same seed:
   best_of returns those with the highest sum of logprobs, in order. */
static void
test_best_of(worker_t *w)
{
    int32_t          prompt[10];
    pl_rec_submit_t  all = { .req_id = 7, .max_tokens = 16, .top_p = 1,
                             .temperature = 1.2f, .n_prompt = 10, .n = 4,
                             .logprobs = 0,
                             .flags = PL_SUBMIT_IGNORE_EOS
                                      | PL_SUBMIT_HAS_SEED
                                      | PL_SUBMIT_LOGPROBS, .seed = 31 };
    pl_rec_submit_t  best = all;
    double           sum[4];
    int              i, j, first = 0, second = -1;

    fill_prompt(prompt, 10, 7);
    submit(w, &all, prompt, NULL);
    best.req_id = 8;
    best.n = 1;
    best.best_of = 4;
    best.flags &= ~PL_SUBMIT_LOGPROBS;
    submit(w, &best, prompt, NULL);
    best.req_id = 9;
    best.n = 2;
    submit(w, &best, prompt, NULL);
    ok(wait_all(w, 7, 10, NULL) == 0, "n=4, best_of=4 n=1 and best_of=4 "
       "n=2 finish");

    for (i = 0; i < 4; i++) {
        for (sum[i] = 0, j = 0; j < res[7].c[i].n; j++) {
            sum[i] += res[7].c[i].lp[j];
        }
        diag("candidate %d: cumulative logprob %.4f", i, sum[i]);
        if (sum[i] > sum[first]) {
            first = i;
        }
    }
    for (i = 0; i < 4; i++) {
        if (i != first && (second < 0 || sum[i] > sum[second])) {
            second = i;
        }
    }

    ok(res[8].finishes == 1 && same_choice(&res[8].c[0], &res[7].c[first]),
       "best_of=4, n=1 returns candidate %d, the highest cumulative "
       "logprob, as its only choice", first);
    ok(res[9].finishes == 2 && same_choice(&res[9].c[0], &res[7].c[first])
       && same_choice(&res[9].c[1], &res[7].c[second]),
       "best_of=4, n=2 returns the best two in order");
}


static void
test_abort(worker_t *w)
{
    int32_t          prompt[100];
    uint64_t         one = 1;
    pl_rec_abort_t   a = { 10 };
    pl_rec_submit_t  r = { .req_id = 10, .max_tokens = 400, .top_p = 1,
                           .n_prompt = 100, .n = 4,
                           .flags = PL_SUBMIT_IGNORE_EOS };
    pl_stats_t       st;
    uint64_t         until = now_ms() + WAIT_MS, start;

    fill_prompt(prompt, 100, 10);
    pl_stats_read(w->hdr, &st);
    start = st.generation_tokens_total;
    submit(w, &r, prompt, NULL);
    while (now_ms() < until && pl_stats_read(w->hdr, &st) == 0
           && st.generation_tokens_total < start + 4 * 20)
    {
        usleep(1000);
    }
    ok(st.kv_blocks_used > 0 && st.running == 4, "n=4 runs as four "
       "sequences (%u blocks in use)", st.kv_blocks_used);

    pl_ring_write(&w->sub, PL_REC_ABORT, &a, sizeof(a), NULL, 0);
    if (write(w->sub_efd, &one, sizeof(one)) != sizeof(one)) {
        diag("doorbell write failed");
    }

    ok(wait_all(w, 10, 11, NULL) == 0 && res[10].fail_reason
       == PL_FINISH_ABORT && res[10].finishes == 1,
       "ABORT of a running n=4 request: one FINISH(ABORT)");
    is_int((int) blocks_used(w), 0, "and all four sequences' blocks are "
           "free");
}


static void
test_refusals(worker_t *w)
{
    int32_t          prompt[2] = { 10, 5 };
    pl_rec_submit_t  base = { .max_tokens = 4, .top_p = 1, .n_prompt = 2 };
    pl_rec_submit_t  r[4];
    int              i, all = 1;

    for (i = 0; i < 4; i++) {
        r[i] = base;
        r[i].req_id = 20 + i;
    }
    r[0].n = 17;
    r[1].n = 3;
    r[1].best_of = 2;
    r[2].best_of = 17;
    r[3].n = 8;
    r[3].max_tokens = 1500;

    for (i = 0; i < 4; i++) {
        submit(w, &r[i], prompt, NULL);
        n_index[20 + i] = 1;
    }

    ok(wait_all(w, 20, 24, NULL) == 0, "four bad groups finish");
    for (i = 20; i < 24; i++) {
        all &= res[i].err_status == 400 && res[i].fail_reason
               == PL_FINISH_ERROR && res[i].finishes == 1
               && res[i].c[0].n == 0;
    }
    ok(all, "n 17, best_of < n, best_of 17 and 8 sequences that cannot "
       "all fit the KV cache: ERROR 400 + FINISH(ERROR) each");
}


static int
run_engine(const char *build, const char *blocks, const char *seqs,
    const char *caching, worker_t *w)
{
    return ok(start_engine(build, blocks, seqs, caching) == 0,
              "the engine starts with %s blocks, %s sequences", blocks, seqs)
           && ok(attach(w) == 0, "a fake worker attaches");
}


static void
stop_engine(worker_t *w)
{
    int   status;
    char  line[512];
    FILE *f;

    kill(engine_pid, SIGTERM);
    waitpid(engine_pid, &status, 0);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
       "the engine stops cleanly");

    if (tap_failed && (f = fopen(log_path, "r")) != NULL) {
        while (fgets(line, sizeof(line), f)) {
            printf("#   engine: %s", line);
        }
        fclose(f);
    }

    detach(w);
    unlink(log_path);
}


/* Six n=3 requests through a cache of 40 blocks: groups get preempted
   (recompute, whole groups) and give the same tokens as without. */
static void
test_preemption(const char *build, const char *mode)
{
    static result_t  base[6];
    worker_t         w;
    int32_t          prompt[6][40];
    pl_rec_submit_t  r = { .max_tokens = 60, .top_p = 1, .n_prompt = 40,
                           .n = 3, .temperature = 0.8f,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_HAS_SEED };
    pl_stats_t       st;
    int              i, j, same = 1;

    for (i = 0; i < 6; i++) {
        fill_prompt(prompt[i], 40, 30 + i);
    }

    if (!run_engine(build, "512", "64", NULL, &w)) {
        return;
    }
    for (i = 0; i < 6; i++) {
        r.req_id = 30 + i;
        r.seed = 300 + i;
        submit(&w, &r, prompt[i], NULL);
    }
    ok(wait_all(&w, 30, 36, NULL) == 0, "six n=3 requests finish with "
       "room to spare");
    memcpy(base, &res[30], sizeof(base));
    stop_engine(&w);

    if (!run_engine(build, "40", "64", mode, &w)) {
        return;
    }
    for (i = 0; i < 6; i++) {
        r.req_id = 30 + i;
        r.seed = 300 + i;
        submit(&w, &r, prompt[i], NULL);
    }
    ok(wait_all(&w, 30, 36, NULL) == 0, "and with 40 blocks");
    pl_stats_read(w.hdr, &st);
    diag("preemptions: %llu", (unsigned long long) st.preemptions_total);
    ok(st.preemptions_total > 0, "where groups were preempted");

    for (i = 0; i < 6; i++) {
        for (j = 0; j < 3; j++) {
            same &= same_choice(&base[i].c[j], &res[30 + i].c[j]);
        }
    }
    ok(same, "every choice is the same as without preemption");
    is_int((int) blocks_used(&w), 0, "every block is free afterwards");
    stop_engine(&w);
}


int
main(void)
{
    const char  *build = getenv("PAGEDLLM_BUILD");
    worker_t     w;

    if (build == NULL) {
        build = "build";
    }

    snprintf(dir, sizeof(dir), "/tmp/pl-groups-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        ok(0, "temporary folder");
        return done_testing();
    }
    snprintf(sock_path, sizeof(sock_path), "%s/engine.sock", dir);
    snprintf(log_path, sizeof(log_path), "%s/engine.log", dir);

    if (run_engine(build, "128", "64", "--no-prefix-caching", &w)) {
        test_greedy(&w);
        test_sharing(&w);
        test_seeded(&w);
        test_stops(&w);
        test_best_of(&w);
        test_abort(&w);
        test_refusals(&w);
        stop_engine(&w);
    }

    test_preemption(build, NULL);

    rmdir(dir);

    return done_testing();
}
