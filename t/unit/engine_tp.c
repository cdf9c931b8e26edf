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
 * device (cuda: rank r on GPU r, NCCL between them).  The worker is
 * fake_worker.h.
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

#include "fake_worker.h"

#define N_REQ        6
#define MAX_NEW      20
#define LOGPROB_TOL       1e-4
#define LOGPROB_TOL_BF16  0.1

typedef struct {
    int32_t   toks[MAX_NEW];
    float     logprob[MAX_NEW];
    int       n;
    int       finished;
    uint32_t  reason;
} result_t;

static const char  *num_blocks = "2048";
static const char  *preemption = "recompute";
static result_t    *serving;     /* the results of the engine running now */


static int
log_has(const char *what)
{
    char   line[512];
    int    found = 0;
    FILE  *f = fopen(fw_log, "r");

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
    FILE   *f = fopen(fw_log, "r");

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
    const char  *args[] = {
        "--device", fw_device(), "--num-blocks", num_blocks,
        "--block-size", "4", "--max-num-batched-tokens", "32",
        "--max-num-seqs", "8", "--preemption-mode", preemption,
        "--swap-space", "4", "--tensor-parallel-size", tp,
        "--log-level", "info", NULL
    };

    return fw_engine_start(build, args, status);
}


/* greedy, ignoring eos, with each token's log-probability */
static int
submit(fw_t *w, uint64_t id, const int32_t *prompt, uint32_t n)
{
    pl_rec_submit_t  r = { .req_id = id, .max_tokens = MAX_NEW,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_LOGPROBS,
                           .temperature = 0, .top_p = 1, .n_prompt = n };

    return fw_submit(w, &r, prompt, NULL, NULL);
}


static void
take_tokens(const uint8_t *buf, uint32_t len)
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
    r = &serving[t.req_id];
    for (i = 0; i < t.n && r->n < MAX_NEW; i++, r->n++) {
        memcpy(&r->toks[r->n], buf + sizeof(t) + i * 4, 4);
        memcpy(&r->logprob[r->n], buf + sizeof(t) + t.n * 4 + i * 4, 4);
    }
}


static void
take(uint32_t type, const uint8_t *buf, uint32_t len)
{
    pl_rec_finish_t  f;

    if (type == PL_REC_TOKENS && len >= sizeof(pl_rec_tokens_t)) {
        take_tokens(buf, len);
    } else if (type == PL_REC_FINISH && len >= sizeof(f)) {
        memcpy(&f, buf, sizeof(f));
        if (f.req_id < N_REQ) {
            serving[f.req_id].finished++;
            serving[f.req_id].reason = f.reason;
        }
    } else {
        diag("unexpected record type %u", type);
    }
}


static int
finished(int id)
{
    return serving[id].finished;
}


/* N_REQ prompts of 5 to 60 tokens at once through an engine of tp ranks */
static int
serve(const char *build, const char *tp, result_t *res, double *kv_mib,
    pl_stats_t *stats)
{
    static const int  lens[N_REQ] = { 5, 60, 17, 33, 9, 41 };
    int32_t           prompt[64];
    uint32_t          seed = 12345;
    fw_t              w;
    int               i, j, status, rc = 0;

    memset(res, 0, N_REQ * sizeof(result_t));
    serving = res;
    if (start_engine(build, tp, &status) != 0) {
        diag("the engine with %s ranks did not start", tp);
        fw_show_log();
        return -1;
    }
    if (fw_attach(&w, take) != 0) {
        diag("attach failed");
        fw_engine_stop();
        return -1;
    }
    for (i = 0; i < N_REQ && rc == 0; i++) {
        for (j = 0; j < lens[i]; j++) {
            seed = seed * 1103515245u + 12345u;
            prompt[j] = (int32_t) ((seed >> 8) % 500);
        }
        rc = submit(&w, (uint64_t) i, prompt, (uint32_t) lens[i]);
    }
    rc = rc == 0 ? fw_wait(&w, finished, 0, N_REQ) : -1;
    if (rc == 0 && stats != NULL) {
        usleep(300000);     /* the engine publishes once more when idle */
        rc = pl_stats_read(w.hdr, stats);
    }
    fw_detach(&w);
    *kv_mib = log_kv_mib();
    if (fw_engine_stop() != 0 || rc != 0) {
        diag("%s ranks: %s", tp, rc ? "requests did not finish"
                                    : "unclean stop");
        fw_show_log();
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
        || fw_setup("engine-tp") != 0)
    {
        printf("Bail out! no build folder or temporary folder\n");
        return 1;
    }
    if (strcmp(fw_device(), "cpu") != 0) {
        tol = LOGPROB_TOL_BF16;
    }

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
    fw_engine_stop();

    fw_cleanup();
    return done_testing();
}
