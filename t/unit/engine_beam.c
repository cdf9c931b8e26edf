/*
 * Beam search through the real pagedllm-engine (tiny model, CPU) driven
 * by a fake worker.
 *
 * The oracle is a plain beam search written here, on no KV cache of its
 * own: every beam's row is asked of the engine as a separate one-token
 * request of the beam's whole text with its top-20 log-probabilities (a
 * fresh prefill each time), and the rules of transformers' beam search
 * (engine/beam.h) are applied to those rows.  The engine's paged search
 * (beams forked by reference, pruned beams freed, copy-on-write of last
 * blocks, decode steps) must return the same tokens, finish reasons and
 * cumulative log-probabilities, for widths 2, 4 and 6, several n,
 * length_penalty and all three early_stopping rules, with stop ids,
 * min_tokens and ignore_eos.  Also: a long prompt's blocks are held once
 * by all beams; ABORT mid-search frees every block; preemption by
 * recompute and by swap gives the same beams and leaks nothing; bad
 * combinations are refused with 400 naming the parameter.
 */

#include <math.h>

#include "beam_client.h"

#define REF_TOP      20
#define MAX_TOK      24
#define EOS          511

static fw_t      worker;
static uint64_t  next_query = 2000;

typedef struct {
    int32_t  prompt[48];
    int      n_prompt;
    int      width;
    int      n;
    float    lp;
    int      es;
    int      max_tokens;
    int      min_tokens;
    int      ignore_eos;
    int32_t  stops[4];
    int      n_stops;
} bcase_t;

typedef struct {
    double   cum;
    double   score;
    int      n;
    int      stopped;
    int32_t  toks[MAX_TOK];
} ref_beam_t;


/* The top REF_TOP (id, logprob) of the row after prompt + gen. */
static int
query_row(const bcase_t *c, const int32_t *gen, int n_gen,
    pl_top_logprob_t *top)
{
    int32_t          text[48 + MAX_TOK];
    uint64_t         id = next_query++;
    pl_rec_submit_t  r = { .req_id = id, .max_tokens = 1, .top_p = 1,
                           .logprobs = REF_TOP,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_LOGPROBS };

    if (id >= BC_REQ) {
        return -1;
    }
    memcpy(text, c->prompt, c->n_prompt * sizeof(int32_t));
    if (n_gen > 0) {
        memcpy(text + c->n_prompt, gen, n_gen * sizeof(int32_t));
    }
    r.n_prompt = (uint32_t) (c->n_prompt + n_gen);

    if (bc_submit(&worker, &r, text, NULL) != 0
        || bc_wait(&worker, (int) id, (int) id + 1) != 0
        || bc_res[id].n_top != REF_TOP)
    {
        return -1;
    }
    memcpy(top, bc_res[id].top, sizeof(pl_top_logprob_t) * REF_TOP);

    return 0;
}


static int
is_stop(const bcase_t *c, int32_t t)
{
    int  i;

    if (!c->ignore_eos && t == EOS) {
        return 1;
    }
    for (i = 0; i < c->n_stops; i++) {
        if (c->stops[i] == t) {
            return 1;
        }
    }

    return 0;
}


typedef struct {
    double   cum;
    int      parent;
    int32_t  token;
} ref_cand_t;


static int
ref_cand_cmp(const void *pa, const void *pb)
{
    const ref_cand_t  *a = pa, *b = pb;

    if (a->cum != b->cum) {
        return a->cum > b->cum ? -1 : 1;
    }
    return a->parent != b->parent ? a->parent - b->parent
                                  : a->token - b->token;
}


/* Put hypothesis h among the width best of hyps (best first). */
static void
ref_keep(ref_beam_t *hyps, int *n_hyps, int width, const ref_beam_t *h)
{
    int  i;

    if (*n_hyps == width && !(h->score > hyps[width - 1].score)) {
        return;
    }
    i = *n_hyps < width ? (*n_hyps)++ : width - 1;
    while (i > 0 && h->score > hyps[i - 1].score) {
        hyps[i] = hyps[i - 1];
        i--;
    }
    hyps[i] = *h;
}


/* The reference search: hyps gets the hypotheses, best first; their
   count, or -1 when a query failed. */
static int
ref_search(const bcase_t *c, ref_beam_t *hyps)
{
    ref_beam_t        run[16], next[16], h;
    ref_cand_t        cand[16 * REF_TOP];
    pl_top_logprob_t  top[REF_TOP];
    int               n_run = 1, n_hyps = 0, step, i, j, nc, n_next, last;
    double            len;

    memset(run, 0, sizeof(run));

    for (step = 1; step <= c->max_tokens; step++) {
        nc = 0;
        for (i = 0; i < n_run; i++) {
            if (query_row(c, run[i].toks, run[i].n, top) != 0) {
                return -1;
            }
            for (j = 0; j < REF_TOP; j++) {
                if (run[i].n < c->min_tokens && is_stop(c, top[j].id)) {
                    continue;
                }
                cand[nc].cum = run[i].cum + top[j].logprob;
                cand[nc].parent = i;
                cand[nc].token = top[j].id;
                nc++;
            }
        }
        qsort(cand, nc, sizeof(cand[0]), ref_cand_cmp);

        last = step == c->max_tokens;
        for (i = 0; i < nc && i < c->width; i++) {
            if (last || is_stop(c, cand[i].token)) {
                h = run[cand[i].parent];
                h.toks[h.n++] = cand[i].token;
                h.cum = cand[i].cum;
                h.score = h.cum / pow(step, c->lp);
                h.stopped = is_stop(c, cand[i].token);
                ref_keep(hyps, &n_hyps, c->width, &h);
            }
        }
        if (last) {
            break;
        }

        for (n_next = 0, i = 0; i < nc && n_next < c->width; i++) {
            if (!is_stop(c, cand[i].token)) {
                next[n_next] = run[cand[i].parent];
                next[n_next].toks[next[n_next].n++] = cand[i].token;
                next[n_next].cum = cand[i].cum;
                n_next++;
            }
        }
        memcpy(run, next, sizeof(run));
        n_run = n_next;

        if (n_hyps == c->width) {
            if (c->es == PL_EARLY_STOPPING_TRUE) {
                break;
            }
            len = c->es == PL_EARLY_STOPPING_NEVER && c->lp > 0
                  ? c->max_tokens : step;
            if (run[0].cum / pow(len, c->lp) <= hyps[c->width - 1].score) {
                break;
            }
        }
    }

    return n_hyps;
}


/* The engine's search of case c as request id; 0 when it answered. */
static int
engine_search(const bcase_t *c, uint64_t id)
{
    pl_rec_submit_t  r = bc_beam(id, c->n_prompt, c->max_tokens, c->width,
                                 c->n, c->lp, c->es);

    r.min_tokens = (uint32_t) c->min_tokens;
    r.n_stop_ids = (uint32_t) c->n_stops;
    if (c->ignore_eos) {
        r.flags |= PL_SUBMIT_IGNORE_EOS;
    }

    if (bc_submit(&worker, &r, c->prompt, c->stops) != 0) {
        return -1;
    }

    return bc_wait(&worker, (int) id, (int) id + 1);
}


/* Case c's engine answer (request id) against the reference. */
static void
check_case(const bcase_t *c, uint64_t id, const char *what)
{
    ref_beam_t     hyps[16];
    bc_result_t   *r = &bc_res[id];
    bc_choice_t   *ch;
    int            i, n_hyps, same = 1, cum = 1, reasons = 1, stopped = 0;

    ok(engine_search(c, id) == 0 && r->fail_reason == 0
       && r->finishes == c->n && r->bad_index == 0,
       "%s: the engine returns %d beams", what, c->n);

    n_hyps = ref_search(c, hyps);
    if (!ok(n_hyps >= c->n, "%s: the reference search ran", what)) {
        return;
    }

    for (i = 0; i < c->n; i++) {
        ch = &r->c[i];
        same &= ch->n == hyps[i].n
                && memcmp(ch->toks, hyps[i].toks, ch->n * 4) == 0;
        cum &= fabs(ch->cum - hyps[i].cum) <= 1e-3;
        reasons &= ch->reason == (hyps[i].stopped ? PL_FINISH_STOP
                                                  : PL_FINISH_LENGTH)
                   && ch->completion == (uint32_t) ch->n;
        stopped += hyps[i].stopped;
        if (!same || !cum) {
            diag("beam %d: engine %d tokens cum %.5f, reference %d tokens "
                 "cum %.5f", i, ch->n, ch->cum, hyps[i].n, hyps[i].cum);
        }
    }
    diag("%s: %d of %d beams end in a stop token, best cum %.4f", what,
         stopped, c->n, hyps[0].cum);

    ok(same, "%s: the same beams, in order, as the reference", what);
    ok(cum, "%s: their cumulative logprobs agree within 1e-3", what);
    ok(reasons, "%s: STOP for a beam ending in a stop token, else LENGTH",
       what);
}


/* Stop ids that the searches meet: the tokens the reference ranks
   second after the prompt and first after a greedy token. */
static void
pick_stops(bcase_t *c)
{
    pl_top_logprob_t  top[REF_TOP];
    int32_t           first;

    c->n_stops = 0;
    if (query_row(c, NULL, 0, top) != 0) {
        return;
    }
    first = top[0].id;
    c->stops[c->n_stops++] = top[1].id;
    if (query_row(c, &first, 1, top) == 0 && top[0].id != top[1].id) {
        c->stops[c->n_stops++] = top[0].id;
    }
}


static void
test_against_reference(void)
{
    static const struct {
        int    width, n;
        float  lp;
        int    es, max_tokens, min_tokens, ignore_eos, stops;
    } cfg[] = {
        { 2, 1, 1.0f, PL_EARLY_STOPPING_FALSE, 12, 0, 0, 1 },
        { 2, 2, 0.5f, PL_EARLY_STOPPING_TRUE, 10, 0, 0, 1 },
        { 4, 2, 1.0f, PL_EARLY_STOPPING_NEVER, 12, 0, 0, 1 },
        { 4, 4, 2.0f, PL_EARLY_STOPPING_FALSE, 10, 3, 0, 1 },
        { 6, 3, 1.0f, PL_EARLY_STOPPING_TRUE, 8, 0, 1, 1 },
        { 6, 6, 0.5f, PL_EARLY_STOPPING_NEVER, 10, 0, 0, 1 },
        { 4, 3, 0.0f, PL_EARLY_STOPPING_FALSE, 9, 0, 0, 0 },
    };
    bcase_t  c;
    char     what[128];
    int      i;

    for (i = 0; i < (int) (sizeof(cfg) / sizeof(cfg[0])); i++) {
        memset(&c, 0, sizeof(c));
        c.n_prompt = 6 + 5 * i;
        fw_fill_prompt(c.prompt, c.n_prompt, 40 + i);
        c.width = cfg[i].width;
        c.n = cfg[i].n;
        c.lp = cfg[i].lp;
        c.es = cfg[i].es;
        c.max_tokens = cfg[i].max_tokens;
        c.min_tokens = cfg[i].min_tokens;
        c.ignore_eos = cfg[i].ignore_eos;
        if (cfg[i].stops) {
            pick_stops(&c);
        }
        snprintf(what, sizeof(what), "width %d n %d lp %.1f es %d%s%s",
                 c.width, c.n, c.lp, c.es,
                 c.min_tokens ? " min_tokens 3" : "",
                 c.ignore_eos ? " ignore_eos" : "");
        check_case(&c, 100 + i, what);
    }
}


/* A 200-token prompt, width 4: the prompt's blocks are held once, the
   beams' own blocks at most twice over (the last one copied on write),
   and nothing is left at the end. */
static void
test_sharing(void)
{
    int32_t          prompt[200];
    pl_rec_submit_t  r = bc_beam(200, 200, 40, 4, 2, 1.0f,
                                 PL_EARLY_STOPPING_NEVER);
    pl_stats_t       st;
    uint32_t         max_used = 0;
    uint64_t         until = fw_now_ms() + FW_WAIT_MS;
    int              own = (200 + 40 + 15) / 16 - 200 / 16;

    fw_fill_prompt(prompt, 200, 9);
    r.flags |= PL_SUBMIT_IGNORE_EOS;
    bc_submit(&worker, &r, prompt, NULL);
    while (!bc_done(200) && fw_now_ms() < until) {
        if (fw_pump(&worker, 1) < 0) {
            break;
        }
        if (pl_stats_read(worker.hdr, &st) == 0
            && st.kv_blocks_used > max_used)
        {
            max_used = st.kv_blocks_used;
        }
    }
    ok(bc_done(200) && bc_res[200].finishes == 2, "width 4 over a 200-token "
       "prompt finishes");
    diag("blocks in use at most %u; prompt %d blocks, %d own blocks a beam",
         max_used, 200 / 16, own);
    ok(max_used <= (uint32_t) (200 / 16 + 4 * own + 4),
       "the prompt's blocks are held once by the four beams");
    ok(bc_res[200].c[0].n == 40 && bc_res[200].c[1].n == 40
       && bc_res[200].c[0].cum >= bc_res[200].c[1].cum,
       "two beams of 40 tokens, the best first");
    is_int((int) fw_blocks_used(&worker), 0, "every block is free after");
}


/* Width 8 over 450 tokens (8 x 32 blocks at most: the whole cache),
   aborted as soon as the eight beams run: the search stops there (the
   token count says so) and frees every block. */
static void
test_abort(void)
{
    int32_t          prompt[60];
    pl_rec_submit_t  r = bc_beam(201, 60, 450, 8, 2, 1.0f,
                                 PL_EARLY_STOPPING_NEVER);
    pl_stats_t       st;
    uint64_t         until = fw_now_ms() + FW_WAIT_MS, start;

    fw_fill_prompt(prompt, 60, 11);
    r.flags |= PL_SUBMIT_IGNORE_EOS;
    pl_stats_read(worker.hdr, &st);
    start = st.generation_tokens_total;
    bc_submit(&worker, &r, prompt, NULL);
    while (fw_now_ms() < until
           && (pl_stats_read(worker.hdr, &st) != 0 || st.running < 8))
    {
        /* spin: the whole search takes well under a second */
    }
    ok(st.running == 8 && st.kv_blocks_used > 60 / 16,
       "width 8 runs as eight beams (%u blocks in use)",
       st.kv_blocks_used);

    fw_abort(&worker, 201);
    ok(bc_wait(&worker, 201, 202) == 0
       && bc_res[201].fail_reason == PL_FINISH_ABORT
       && bc_res[201].finishes == 1 && bc_res[201].tokens_records == 0,
       "ABORT mid-search: one FINISH(ABORT), no tokens");
    pl_stats_read(worker.hdr, &st);
    ok(st.generation_tokens_total - start < 1 + 449 * 8,
       "the search stopped mid-way (%llu of %d tokens)",
       (unsigned long long) (st.generation_tokens_total - start),
       1 + 449 * 8);
    is_int((int) fw_blocks_used(&worker), 0, "and every block is free "
           "(status shows 0 used)");
}


static void
test_refusals(void)
{
    static const struct {
        const char  *name;
        const char  *param;
    } bad[] = {
        { "temperature 0.7", "temperature" },
        { "best_of 1", "best_of" },
        { "top_p 0.9", "top_p" },
        { "top_k 5", "top_k" },
        { "width 17", "best_of" },
        { "early_stopping 3", "early_stopping" },
        { "logprobs", "logprobs" },
        { "presence_penalty", "presence_penalty" },
        { "early_stopping without beam search", "early_stopping" },
    };
    int32_t          prompt[4] = { 5, 6, 7, 8 };
    pl_rec_submit_t  r[9];
    int              i;

    for (i = 0; i < 9; i++) {
        r[i] = bc_beam(300 + i, 4, 4, 4, 2, 1.0f, PL_EARLY_STOPPING_FALSE);
    }
    r[0].temperature = 0.7f;
    r[1].best_of = 1;
    r[1].n = 1;
    r[2].top_p = 0.9f;
    r[3].top_k = 5;
    r[4].best_of = 17;
    r[5].early_stopping = 3;
    r[6].flags |= PL_SUBMIT_LOGPROBS;
    r[7].presence_penalty = 0.5f;
    r[8].flags = 0;
    r[8].early_stopping = PL_EARLY_STOPPING_TRUE;

    for (i = 0; i < 9; i++) {
        bc_submit(&worker, &r[i], prompt, NULL);
        bc_res[300 + i].n_index = 1;
    }
    ok(bc_wait(&worker, 300, 309) == 0, "nine bad beam searches finish");
    for (i = 0; i < 9; i++) {
        ok(bc_res[300 + i].err_status == 400
           && bc_res[300 + i].fail_reason == PL_FINISH_ERROR
           && strstr(bc_res[300 + i].err, bad[i].param) != NULL,
           "%s: 400 naming %s (%s)", bad[i].name, bad[i].param,
           bc_res[300 + i].err);
    }
}


static int
start_engine(const char *build, const char *blocks, const char *extra)
{
    const char  *args[] = {
        "--device", "cpu", "--num-blocks", blocks, "--max-num-seqs", "64",
        "--max-num-batched-tokens", "256", extra, NULL
    };

    return ok(fw_engine_start(build, args, NULL) == 0,
              "the engine starts with %s blocks %s", blocks,
              extra ? extra : "")
           && ok(fw_attach(&worker, bc_take) == 0, "a fake worker attaches");
}


static void
stop_engine(void)
{
    ok(fw_engine_stop() == 0, "the engine stops cleanly");
    if (tap_failed) {
        fw_show_log();
    }
    fw_detach(&worker);
    unlink(fw_log);
}


/* Six width-4 searches with 40-token prompts and 60 tokens each: with
   room, then in 30 blocks, where whole groups are preempted (mode). */
static void
test_preemption(const char *build, const char *mode)
{
    static bc_result_t  base[6];
    int32_t             prompt[6][40];
    pl_rec_submit_t     r;
    pl_stats_t          st;
    int                 i, j, same = 1;

    for (i = 0; i < 6; i++) {
        fw_fill_prompt(prompt[i], 40, 60 + i);
    }

    for (j = 0; j < 2; j++) {
        if (!start_engine(build, j == 0 ? "512" : "30", j == 0 ? NULL : mode))
        {
            return;
        }
        for (i = 0; i < 6; i++) {
            r = bc_beam(400 + i, 40, 60, 4, 2, 1.0f,
                        PL_EARLY_STOPPING_NEVER);
            r.flags |= PL_SUBMIT_IGNORE_EOS;
            bc_submit(&worker, &r, prompt[i], NULL);
        }
        ok(bc_wait(&worker, 400, 406) == 0, "six width-4 searches finish "
           "in %s blocks", j == 0 ? "512" : "30");
        if (j == 0) {
            memcpy(base, &bc_res[400], sizeof(base));
            stop_engine();
        }
    }

    pl_stats_read(worker.hdr, &st);
    diag("preemptions: %llu (swap %llu, recompute %llu)",
         (unsigned long long) st.preemptions_total,
         (unsigned long long) st.preemptions_swap,
         (unsigned long long) st.preemptions_recompute);
    ok(st.preemptions_total > 0, "groups were preempted (%s)",
       mode ? mode : "recompute");
    for (i = 0; i < 6; i++) {
        for (j = 0; j < 2; j++) {
            same &= base[i].c[j].n == bc_res[400 + i].c[j].n
                    && memcmp(base[i].c[j].toks, bc_res[400 + i].c[j].toks,
                              base[i].c[j].n * 4) == 0
                    && fabs(base[i].c[j].cum - bc_res[400 + i].c[j].cum)
                       < 1e-3;
        }
    }
    ok(same, "every beam is the same as without preemption");
    is_int((int) fw_blocks_used(&worker), 0, "every block is free after");
    stop_engine();
}


int
main(void)
{
    const char  *build = getenv("PAGEDLLM_BUILD");

    if (build == NULL) {
        build = "build";
    }

    if (fw_setup("beam") != 0) {
        ok(0, "temporary folder");
        return done_testing();
    }

    if (start_engine(build, "256", NULL)) {
        test_against_reference();
        test_sharing();
        test_abort();
        test_refusals();
        stop_engine();
    }

    test_preemption(build, NULL);
    test_preemption(build, "--preemption-mode=swap");

    fw_cleanup();

    return done_testing();
}
