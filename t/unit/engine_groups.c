/*
 * Sequence groups (parallel sampling n, best_of) through the real
 * pagedllm-engine (tiny model, CPU) driven by a fake worker
 * (fake_worker.h): greedy n=2 gives identical choices; a long prompt's
 * blocks are held once by its four samples and all are freed at the end;
 * seeded samples differ from each other yet repeat run to run; each
 * choice stops on its own; best_of returns the candidates with the
 * highest cumulative logprob; an ABORT frees every member; preempted
 * groups give the same tokens; bad n and best_of get ERROR 400.
 */

#include "fake_worker.h"

#define N_REQ      64
#define N_SEQ      16
#define N_TOK      64

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
static int       n_index[N_REQ];     /* choices each request expects */


static int
submit(fw_t *w, const pl_rec_submit_t *r, const int32_t *prompt,
    const int32_t *stop)
{
    if (r->req_id < N_REQ) {
        n_index[r->req_id] = r->n ? (int) r->n : 1;
        memset(&res[r->req_id], 0, sizeof(result_t));
    }

    return fw_submit(w, r, prompt, NULL, stop);
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
take(uint32_t type, const uint8_t *buf, uint32_t len)
{
    pl_rec_finish_t  f;
    pl_rec_error_t   e;
    result_t        *r;

    if (type == PL_REC_TOKENS && len >= sizeof(pl_rec_tokens_t)) {
        take_tokens(buf);

    } else if (type == PL_REC_FINISH && len >= sizeof(f)) {
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

    } else if (type == PL_REC_ERROR && len >= sizeof(e)) {
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


/* Pump the completion ring until ids [lo, hi) are done. */
static int
wait_all(fw_t *w, int lo, int hi)
{
    return fw_wait(w, is_done, lo, hi);
}


/* Pump until request id is done; the most KV blocks in use seen
   meanwhile into *max_used. */
static int
wait_peak_blocks(fw_t *w, int id, uint32_t *max_used)
{
    uint64_t    until = fw_now_ms() + FW_WAIT_MS;
    pl_stats_t  st;

    while (!is_done(id)) {
        if (fw_now_ms() >= until || fw_pump(w, 2) < 0) {
            return -1;
        }
        if (pl_stats_read(w->hdr, &st) == 0 && st.kv_blocks_used > *max_used)
        {
            *max_used = st.kv_blocks_used;
        }
    }

    return 0;
}


static int
same_choice(const choice_t *a, const choice_t *b)
{
    return a->n == b->n && memcmp(a->toks, b->toks, a->n * 4) == 0;
}


static void
test_greedy(fw_t *w)
{
    int32_t          prompt[40];
    pl_rec_submit_t  r = { .req_id = 1, .max_tokens = 24, .top_p = 1,
                           .n_prompt = 40, .n = 2,
                           .flags = PL_SUBMIT_IGNORE_EOS };

    fw_fill_prompt(prompt, 40, 1);
    submit(w, &r, prompt, NULL);
    ok(wait_all(w, 1, 2) == 0, "greedy n=2 finishes");
    ok(res[1].c[0].n == 24 && same_choice(&res[1].c[0], &res[1].c[1]),
       "greedy n=2: two identical choices of 24 tokens");
    ok(res[1].finishes == 2 && res[1].c[0].reason == PL_FINISH_LENGTH
       && res[1].c[1].reason == PL_FINISH_LENGTH
       && res[1].c[1].completion == 24 && res[1].bad_index == 0,
       "one FINISH(LENGTH) per choice, each counting its own tokens");
}


static void
test_sharing(fw_t *w)
{
    int32_t          prompt[200];
    pl_rec_submit_t  r = { .req_id = 2, .max_tokens = 48, .top_p = 1,
                           .temperature = 1, .n_prompt = 200, .n = 4,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_HAS_SEED, .seed = 7 };
    uint32_t         max_used = 0, prompt_blocks = (200 + 15) / 16;
    uint32_t         own = (200 + 48 + 15) / 16 - 200 / 16;

    fw_fill_prompt(prompt, 200, 2);
    submit(w, &r, prompt, NULL);
    ok(wait_peak_blocks(w, 2, &max_used) == 0, "n=4 with a 200-token prompt "
       "finishes");
    diag("blocks in use at most %u (prompt %u blocks)", max_used,
         prompt_blocks);
    ok(max_used >= prompt_blocks + 3
       && max_used <= 200 / 16 + 4 * own,
       "the prompt's blocks are held once: at most %u blocks in use, "
       "not 4 x %u", 200 / 16 + 4 * own, (200 + 48 + 15) / 16);
    is_int((int) fw_blocks_used(w), 0, "every block is free afterwards");
}


static void
test_seeded(fw_t *w)
{
    int32_t          prompt[12];
    pl_rec_submit_t  r = { .req_id = 3, .max_tokens = 32, .top_p = 1,
                           .temperature = 1.0f, .n_prompt = 12, .n = 3,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_HAS_SEED, .seed = 99 };
    pl_rec_submit_t  one = r;
    int              i, same = 1;

    fw_fill_prompt(prompt, 12, 3);
    submit(w, &r, prompt, NULL);
    r.req_id = 4;
    submit(w, &r, prompt, NULL);
    one.req_id = 5;
    one.n = 0;
    submit(w, &one, prompt, NULL);
    ok(wait_all(w, 3, 6) == 0, "two seeded n=3 and a seeded n=1 "
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
test_stops(fw_t *w)
{
    int32_t          prompt[8], stop[48];
    pl_rec_submit_t  r = { .req_id = 6, .max_tokens = 40, .top_p = 1,
                           .temperature = 1.0f, .n_prompt = 8, .n = 4,
                           .n_stop_ids = 48,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_HAS_SEED, .seed = 5 };
    int              i, j, k, good = 1, lengths = 0, hit;
    choice_t        *c;

    fw_fill_prompt(prompt, 8, 6);
    for (i = 0; i < 48; i++) {
        stop[i] = 10 * i + 3;
    }
    submit(w, &r, prompt, stop);
    ok(wait_all(w, 6, 7) == 0, "n=4 with 48 stop ids finishes");

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
test_best_of(fw_t *w)
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

    fw_fill_prompt(prompt, 10, 7);
    submit(w, &all, prompt, NULL);
    best.req_id = 8;
    best.n = 1;
    best.best_of = 4;
    best.flags &= ~PL_SUBMIT_LOGPROBS;
    submit(w, &best, prompt, NULL);
    best.req_id = 9;
    best.n = 2;
    submit(w, &best, prompt, NULL);
    ok(wait_all(w, 7, 10) == 0, "n=4, best_of=4 n=1 and best_of=4 "
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
test_abort(fw_t *w)
{
    int32_t          prompt[100];
    pl_rec_submit_t  r = { .req_id = 10, .max_tokens = 400, .top_p = 1,
                           .n_prompt = 100, .n = 4,
                           .flags = PL_SUBMIT_IGNORE_EOS };
    pl_stats_t       st;
    uint64_t         until = fw_now_ms() + FW_WAIT_MS, start;

    fw_fill_prompt(prompt, 100, 10);
    pl_stats_read(w->hdr, &st);
    start = st.generation_tokens_total;
    submit(w, &r, prompt, NULL);
    while (fw_now_ms() < until && pl_stats_read(w->hdr, &st) == 0
           && st.generation_tokens_total < start + 4 * 20)
    {
        usleep(1000);
    }
    ok(st.kv_blocks_used > 0 && st.running == 4, "n=4 runs as four "
       "sequences (%u blocks in use)", st.kv_blocks_used);

    fw_abort(w, 10);

    ok(wait_all(w, 10, 11) == 0 && res[10].fail_reason
       == PL_FINISH_ABORT && res[10].finishes == 1,
       "ABORT of a running n=4 request: one FINISH(ABORT)");
    is_int((int) fw_blocks_used(w), 0, "and all four sequences' blocks are "
           "free");
}


static void
test_refusals(fw_t *w)
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

    ok(wait_all(w, 20, 24) == 0, "four bad groups finish");
    for (i = 20; i < 24; i++) {
        all &= res[i].err_status == 400 && res[i].fail_reason
               == PL_FINISH_ERROR && res[i].finishes == 1
               && res[i].c[0].n == 0;
    }
    ok(all, "n 17, best_of < n, best_of 17 and 8 sequences that cannot "
       "all fit the KV cache: ERROR 400 + FINISH(ERROR) each");
}


/* caching: an extra flag, or NULL */
static int
run_engine(const char *build, const char *blocks, const char *seqs,
    const char *caching, fw_t *w)
{
    const char  *args[] = {
        "--device", "cpu", "--num-blocks", blocks, "--max-num-seqs", seqs,
        "--max-num-batched-tokens", "256", caching, NULL
    };

    return ok(fw_engine_start(build, args, NULL) == 0,
              "the engine starts with %s blocks, %s sequences", blocks, seqs)
           && ok(fw_attach(w, take) == 0, "a fake worker attaches");
}


static void
stop_engine(fw_t *w)
{
    ok(fw_engine_stop() == 0, "the engine stops cleanly");

    if (tap_failed) {
        fw_show_log();
    }

    fw_detach(w);
    unlink(fw_log);
}


/* Six n=3 requests through a cache of 40 blocks: groups get preempted
   (recompute, whole groups) and give the same tokens as without. */
static void
test_preemption(const char *build, const char *mode)
{
    static result_t  base[6];
    fw_t             w;
    int32_t          prompt[6][40];
    pl_rec_submit_t  r = { .max_tokens = 60, .top_p = 1, .n_prompt = 40,
                           .n = 3, .temperature = 0.8f,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_HAS_SEED };
    pl_stats_t       st;
    int              i, j, same = 1;

    for (i = 0; i < 6; i++) {
        fw_fill_prompt(prompt[i], 40, 30 + i);
    }

    if (!run_engine(build, "512", "64", NULL, &w)) {
        return;
    }
    for (i = 0; i < 6; i++) {
        r.req_id = 30 + i;
        r.seed = 300 + i;
        submit(&w, &r, prompt[i], NULL);
    }
    ok(wait_all(&w, 30, 36) == 0, "six n=3 requests finish with "
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
    ok(wait_all(&w, 30, 36) == 0, "and with 40 blocks");
    pl_stats_read(w.hdr, &st);
    diag("preemptions: %llu", (unsigned long long) st.preemptions_total);
    ok(st.preemptions_total > 0, "where groups were preempted");

    for (i = 0; i < 6; i++) {
        for (j = 0; j < 3; j++) {
            same &= same_choice(&base[i].c[j], &res[30 + i].c[j]);
        }
    }
    ok(same, "every choice is the same as without preemption");
    is_int((int) fw_blocks_used(&w), 0, "every block is free afterwards");
    stop_engine(&w);
}


int
main(void)
{
    const char  *build = getenv("PAGEDLLM_BUILD");
    fw_t         w;

    if (build == NULL) {
        build = "build";
    }

    if (fw_setup("groups") != 0) {
        ok(0, "temporary folder");
        return done_testing();
    }

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

    fw_cleanup();

    return done_testing();
}
