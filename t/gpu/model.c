/*
 * The whole tiny model ($PAGEDLLM_BUILD/models/tiny) on the CUDA backend
 * against the CPU backend, through pl_model_*: three sequences of random
 * prompts, one prefilled in two chunks while the others already decode,
 * then greedy decoding.
 *
 * Teacher-forced: both backends are fed the CPU's greedy tokens, so every
 * step compares the same computation; the logits must agree within bf16
 * error and so must the greedy choice wherever the CPU's best logit leads
 * the runner-up by a clear margin (twice the error bound, in units of the
 * logits' rms: the GPU's logits are bf16).  Free-running: each backend
 * follows its own greedy choices, and the generations must be identical
 * up to the first near-tie of the CPU's.  Then the free-running
 * generation in caches of blocks of 1, 2, 4, 8, 32 and 64 tokens: the
 * CPU's tokens are exactly those of blocks of 16, CUDA's those of the CPU
 * and its own of blocks of 16 up to the first near-tie.  Then again with
 * the GPU's activations in fp16, loaded as the engine's --dtype float16
 * asks (pl_model_load_opts; the tiny model's bf16 weights converted at
 * load).  Last, --dtype auto on the golden fixtures: an fp16 checkpoint
 * (OPT pre-LN) runs in fp16, a bf16 one in bf16 (t/gpu/golden.c compares
 * both with transformers).
 */

#include <stdio.h>

#include "fixture_model.h"
#include "pair.h"

#define NSEQ        3
#define SEQ_TOKENS  128         /* a sequence's room: prompt + generated */
#define NEW_TOKENS  24
#define CHUNK       16
#define LOGIT_BOUND 3e-2
#define CLEAR_LEAD  (2 * LOGIT_BOUND)   /* times the logits' rms */

typedef struct {
    int32_t  tok[SEQ_TOKENS];
    int      len;           /* tokens known (prompt + generated) */
    int      done;          /* tokens whose K/V are in the cache */
    int      prompt;
} seq_t;

typedef struct {
    pl_backend_t  *be;
    pl_model_t    *m;
} side_t;

static const int  prompt_len[NSEQ] = { 11, 29, 5 };

/* the caches' block size (16 but in block_sizes), and blocks a sequence */
static int  block = 16;
static int  max_blocks = SEQ_TOKENS / 16;


/* best index; lead = its margin over the runner-up in units of the
   logits' rms, so that bf16 rounding of large logits is no "lead" */
static int
argmax(const float *v, int n, float *lead)
{
    int     i, best = 0, second = -1;
    double  ss = 0.0;

    for (i = 1; i < n; i++) {
        if (v[i] > v[best]) {
            second = best;
            best = i;
        } else if (second < 0 || v[i] > v[second]) {
            second = i;
        }
    }
    for (i = 0; i < n; i++) {
        ss += (double) v[i] * v[i];
    }
    *lead = (float) ((v[best] - v[second]) / sqrt(ss / n + 1e-30));
    return best;
}


/* the model on be, with the engine's options opts (NULL: the defaults) */
static int
open_side(side_t *s, pl_backend_t *be, const char *dir,
    const pl_model_options_t *opts)
{
    char  err[256];

    s->be = be;
    s->m = fm_open(dir, be, opts, 64, NSEQ, NSEQ * max_blocks, block, err,
                   sizeof(err));
    if (s->m == NULL) {
        diag("%s: %s", be->name, err);
        return -1;
    }
    return 0;
}


/* One iteration over all sequences; logits [NSEQ][vocab]. */
static int
step(side_t *s, seq_t *seqs, const int32_t *tables, float *logits)
{
    int32_t     ids[64], pos[64], slots[64], qs[NSEQ + 1], cl[NSEQ],
                rows[NSEQ];
    pl_batch_t  b;
    char        err[256];
    int         i, n = 0, j;

    memset(&b, 0, sizeof(b));
    qs[0] = 0;
    for (i = 0; i < NSEQ; i++) {
        int  q = seqs[i].len - seqs[i].done;

        q = q > CHUNK ? CHUNK : q;
        for (j = 0; j < q; j++) {
            int  p = seqs[i].done + j;

            ids[n] = seqs[i].tok[p];
            pos[n] = p;
            slots[n] = tables[i * max_blocks + p / block] * block
                       + p % block;
            n++;
        }
        qs[i + 1] = n;
        cl[i] = seqs[i].done + q;
        rows[i] = n - 1;
        b.max_query_len = q > b.max_query_len ? q : b.max_query_len;
        b.max_context_len = cl[i] > b.max_context_len ? cl[i]
                                                      : b.max_context_len;
    }
    b.num_tokens = n;
    b.num_seqs = NSEQ;
    b.token_ids = ids;
    b.positions = pos;
    b.slot_mapping = slots;
    b.query_start = qs;
    b.context_lens = cl;
    b.block_tables = tables;
    b.logits_rows = rows;
    b.max_blocks_per_seq = max_blocks;
    if (pl_model_forward(s->m, &b, logits, err, sizeof(err)) != 0) {
        diag("%s forward: %s", s->be->name, err);
        return -1;
    }
    return 0;
}


static void
advance(seq_t *seqs)
{
    int  i;

    for (i = 0; i < NSEQ; i++) {
        int  q = seqs[i].len - seqs[i].done;

        seqs[i].done += q > CHUNK ? CHUNK : q;
    }
}


static void
draw_prompts(seq_t *seqs, int vocab)
{
    int  i, j;

    memset(seqs, 0, NSEQ * sizeof(seq_t));
    for (i = 0; i < NSEQ; i++) {
        seqs[i].prompt = seqs[i].len = prompt_len[i];
        for (j = 0; j < prompt_len[i]; j++) {
            seqs[i].tok[j] = pair_int(vocab);
        }
    }
}


static void
teacher_forced(side_t *cpu, side_t *gpu, const int32_t *tables, int vocab)
{
    seq_t   seqs[NSEQ];
    float  *lc = malloc((size_t) NSEQ * vocab * sizeof(float));
    float  *lg = malloc((size_t) NSEQ * vocab * sizeof(float));
    double  worst = 0.0;
    int     it, i, compared = 0, agree = 0, clear = 0, clear_agree = 0;

    draw_prompts(seqs, vocab);
    for (it = 0; it < NEW_TOKENS + 1; it++) {
        if (step(cpu, seqs, tables, lc) != 0
            || step(gpu, seqs, tables, lg) != 0)
        {
            ok(0, "teacher-forced forward runs on both backends");
            break;
        }
        advance(seqs);
        for (i = 0; i < NSEQ; i++) {
            double  e;
            float   lead_c, lead_g;
            int     tc, tg;

            if (seqs[i].done < seqs[i].len) {
                continue;
            }
            tc = argmax(lc + (size_t) i * vocab, vocab, &lead_c);
            seqs[i].tok[seqs[i].len++] = tc;
            if (seqs[i].len > seqs[i].prompt + NEW_TOKENS) {
                continue;
            }
            e = pair_relerr(lg + (size_t) i * vocab, lc + (size_t) i * vocab,
                            vocab);
            worst = e > worst ? e : worst;
            tg = argmax(lg + (size_t) i * vocab, vocab, &lead_g);
            compared++;
            agree += tc == tg;
            if (lead_c > CLEAR_LEAD) {
                clear++;
                clear_agree += tc == tg;
            }
        }
    }
    ok(compared == NSEQ * NEW_TOKENS, "teacher-forced %s: %d of %d steps "
       "compared", pl_dtype_name(gpu->be->act_dtype), compared,
       NSEQ * NEW_TOKENS);
    ok(worst <= LOGIT_BOUND, "teacher-forced %s: logits relative error "
       "%.2e <= %.0e at every step", pl_dtype_name(gpu->be->act_dtype),
       worst, LOGIT_BOUND);
    ok(clear_agree == clear && clear > 0, "teacher-forced %s: greedy token "
       "agrees on all %d of %d steps with a clear lead (%d agree overall)",
       pl_dtype_name(gpu->be->act_dtype), clear_agree, clear, agree);
    free(lc);
    free(lg);
}


/* each backend follows its own greedy choices; lead[i][k] is the margin
   of the k-th generated token of sequence i */
static int
free_run(side_t *s, seq_t *seqs, const int32_t *tables, int vocab,
    float (*lead)[NEW_TOKENS + 1])
{
    float  *lg = malloc((size_t) NSEQ * vocab * sizeof(float));
    int     it, i;

    for (it = 0; it < NEW_TOKENS + 1; it++) {
        if (step(s, seqs, tables, lg) != 0) {
            free(lg);
            return -1;
        }
        advance(seqs);
        for (i = 0; i < NSEQ; i++) {
            int  k = seqs[i].len - seqs[i].prompt;

            if (seqs[i].done == seqs[i].len) {
                seqs[i].tok[seqs[i].len++] =
                    argmax(lg + (size_t) i * vocab, vocab, &lead[i][k]);
            }
        }
    }
    free(lg);
    return 0;
}


/*
 * Draw prompts into prompts and run the CPU on a copy of them (sc, its
 * leads in lc), again (up to 16 times) while no sequence's first token
 * has a clear lead on the CPU, so that a comparison up to the first
 * near-tie never runs empty (the tiny model's random weights give
 * near-ties often: on the H200 once all three first tokens were).  0, or
 * -1 when the CPU did not run.
 */
static int
clear_prompts(side_t *cpu, seq_t *prompts, seq_t *sc, const int32_t *tables,
    int vocab, float (*lc)[NEW_TOKENS + 1])
{
    int  i, clear = 0, tries = 0;

    do {
        draw_prompts(prompts, vocab);
        memcpy(sc, prompts, NSEQ * sizeof(seq_t));
        if (free_run(cpu, sc, tables, vocab, lc) != 0) {
            return -1;
        }
        for (i = 0; i < NSEQ; i++) {
            clear |= lc[i][0] > CLEAR_LEAD;
        }
    } while (!clear && ++tries < 16);

    return 0;
}


/* Tokens of a and b compared up to the first token the CPU chose without
   a clear lead (lc, its leads): past a near-tie, bf16 rounding may rightly
   pick the other token and the two generations part.  The count, or -1
   at the first difference before that. */
static int
same_until_tie(const seq_t *a, const seq_t *b, float (*lc)[NEW_TOKENS + 1],
    const char *an, const char *bn)
{
    int  i, k, compared = 0;

    for (i = 0; i < NSEQ; i++) {
        for (k = 0; k < NEW_TOKENS && lc[i][k] > CLEAR_LEAD; k++) {
            int  p = a[i].prompt + k;

            if (a[i].tok[p] != b[i].tok[p]) {
                diag("sequence %d token %d: %s %d, %s %d (lead %.3f rms)",
                     i, k, an, a[i].tok[p], bn, b[i].tok[p], lc[i][k]);
                return -1;
            }
            compared++;
        }
    }
    return compared;
}


/* each backend follows its own greedy choices: the same sequences up to
   the CPU's first near-tie */
static void
free_running(side_t *cpu, side_t *gpu, const int32_t *tables, int vocab)
{
    seq_t  prompts[NSEQ], sc[NSEQ], sg[NSEQ];
    float  lc[NSEQ][NEW_TOKENS + 1], lg[NSEQ][NEW_TOKENS + 1];
    int    compared, ran;

    ran = clear_prompts(cpu, prompts, sc, tables, vocab, lc) == 0;
    memcpy(sg, prompts, sizeof(sg));
    if (!ok(ran && free_run(gpu, sg, tables, vocab, lg) == 0,
            "free-running greedy decoding runs on both backends"))
    {
        return;
    }
    compared = same_until_tie(sc, sg, lc, "cpu", "cuda");
    ok(compared > 0, "free-running greedy %s: CUDA generates the CPU's "
       "tokens up to the first near-tie (%d tokens compared of %d)",
       pl_dtype_name(gpu->be->act_dtype), compared, NSEQ * NEW_TOKENS);
}


/* tables of the current block size: the pool's blocks in a scattered
   order (7 is prime to every pool size, 384 / block) */
static void
make_tables(int32_t *tables)
{
    int  i, n = NSEQ * max_blocks;

    for (i = 0; i < n; i++) {
        tables[i] = (i * 7 + 3) % n;
    }
}


/* both sides' caches in blocks of bs; 0 or -1 */
static int
set_block_size(side_t *cpu, side_t *gpu, int bs, int32_t *tables)
{
    char  err[256];

    block = bs;
    max_blocks = SEQ_TOKENS / bs;
    make_tables(tables);
    if (pl_model_kv_alloc(cpu->m, NSEQ * max_blocks, bs, err, sizeof(err))
        != 0
        || pl_model_kv_alloc(gpu->m, NSEQ * max_blocks, bs, err,
                             sizeof(err)) != 0)
    {
        diag("blocks of %d: %s", bs, err);
        return -1;
    }
    return 0;
}


/*
 * Blocks of 1 to 64 tokens (powers of two), each side's cache made again
 * for each size: the same prompts give on the CPU exactly the tokens they
 * give in blocks of 16 (its attention adds in token order whatever the
 * blocks), and on CUDA the CPU's tokens and its own tokens in blocks of
 * 16, up to the CPU's first near-tie.
 */
static void
block_sizes(side_t *cpu, side_t *gpu, int vocab)
{
    static const int  sizes[] = { 16, 1, 2, 4, 8, 32, 64 };
    seq_t             prompts[NSEQ], sc[NSEQ], sg[NSEQ], rc[NSEQ], rg[NSEQ];
    float             lc[NSEQ][NEW_TOKENS + 1], lg[NSEQ][NEW_TOKENS + 1];
    float             lead[NSEQ][NEW_TOKENS + 1];
    int32_t           tables[NSEQ * SEQ_TOKENS];
    int               k, bs, ran;

    for (k = 0; k < (int) (sizeof(sizes) / sizeof(sizes[0])); k++) {
        bs = sizes[k];
        if (!ok(set_block_size(cpu, gpu, bs, tables) == 0, "blocks of %d: "
                "caches of %d blocks on both backends", bs,
                NSEQ * max_blocks))
        {
            break;
        }
        if (k == 0) {
            ran = clear_prompts(cpu, prompts, rc, tables, vocab, lead) == 0;
            memcpy(rg, prompts, sizeof(rg));
            if (!ok(ran && free_run(gpu, rg, tables, vocab, lg) == 0,
                    "blocks of 16: greedy decoding runs on both backends"))
            {
                break;
            }
            ok(same_until_tie(rc, rg, lead, "cpu", "cuda") > 0, "blocks of "
               "16: CUDA generates the CPU's tokens up to the first "
               "near-tie");
            continue;
        }
        memcpy(sc, prompts, sizeof(sc));
        memcpy(sg, prompts, sizeof(sg));
        if (!ok(free_run(cpu, sc, tables, vocab, lc) == 0
                && free_run(gpu, sg, tables, vocab, lg) == 0,
                "blocks of %d: greedy decoding runs on both backends", bs))
        {
            continue;
        }
        ok(memcmp(sc, rc, sizeof(sc)) == 0, "blocks of %d: the CPU "
           "generates exactly its tokens in blocks of 16", bs);
        ok(same_until_tie(rc, sg, lead, "cpu", "cuda") > 0
           && same_until_tie(rg, sg, lead, "cuda 16", "cuda") > 0,
           "blocks of %d: CUDA generates the CPU's tokens and its own in "
           "blocks of 16 up to the CPU's first near-tie", bs);
    }
    set_block_size(cpu, gpu, 16, tables);
}


/* --dtype auto on CUDA: the checkpoint's dtype, fp16 included */
static void
auto_follows_checkpoint(const char *dir, pl_dtype_t want)
{
    const pl_model_options_t  opts = { 1, PL_MODEL_DTYPE_AUTO };
    pl_backend_t             *be;
    pl_model_t               *m = NULL;
    char                      err[256] = "";

    be = pl_backend_cuda_create(0, err, sizeof(err));
    if (be != NULL) {
        m = pl_model_load_opts(dir, be, &opts, err, sizeof(err));
    }
    if (!ok(m != NULL && be->act_dtype == want, "--dtype auto runs %s in "
            "%s", dir, pl_dtype_name(want)))
    {
        diag("%s", err);
    }
    pl_model_free(m);
    if (be != NULL) {
        be->destroy(be);
    }
}


/* the model on a fresh CUDA backend, loaded as opts say (want: the
   activation dtype it must run, -1 any), against the CPU side */
static void
against_cpu(side_t *cpu, const char *dir, const pl_model_options_t *opts,
    int want, const char *what, const int32_t *tables, int vocab)
{
    side_t  gpu;
    char    err[256];

    gpu.be = pl_backend_cuda_create(0, err, sizeof(err));
    if (ok(gpu.be != NULL && open_side(&gpu, gpu.be, dir, opts) == 0
           && (want < 0 || gpu.be->act_dtype == (pl_dtype_t) want),
           "%s", what))
    {
        teacher_forced(cpu, &gpu, tables, vocab);
        free_running(cpu, &gpu, tables, vocab);
        pl_model_free(gpu.m);
    }
    if (gpu.be != NULL) {
        gpu.be->destroy(gpu.be);
    }
}


int
main(void)
{
    const char  *build = getenv("PAGEDLLM_BUILD");
    char         dir[1024], err[256];
    side_t       cpu, gpu;
    int32_t      tables[NSEQ * SEQ_TOKENS];
    int          vocab;
    const pl_model_options_t  f16 = { 1, PL_MODEL_DTYPE_F16 };

    pair_seed();
    snprintf(dir, sizeof(dir), "%s/models/tiny", build ? build : "build");
    cpu.be = pl_backend_cpu_create(4, err, sizeof(err));
    gpu.be = pl_backend_cuda_create(0, err, sizeof(err));
    if (!ok(cpu.be != NULL && gpu.be != NULL, "both backends start")) {
        diag("%s", err);
        return done_testing();
    }
    if (!ok(open_side(&cpu, cpu.be, dir, NULL) == 0
            && open_side(&gpu, gpu.be, dir, NULL) == 0,
            "tiny model loads on both backends from %s", dir))
    {
        return done_testing();
    }
    make_tables(tables);
    vocab = pl_model_config(cpu.m)->vocab_size;
    teacher_forced(&cpu, &gpu, tables, vocab);
    free_running(&cpu, &gpu, tables, vocab);
    block_sizes(&cpu, &gpu, vocab);
    pl_model_free(gpu.m);
    gpu.be->destroy(gpu.be);

    against_cpu(&cpu, dir, &f16, PL_DT_F16,
                "tiny model loads with --dtype float16: fp16 activations",
                tables, vocab);
    pl_model_free(cpu.m);
    cpu.be->destroy(cpu.be);
    auto_follows_checkpoint("t/fixtures/golden/opt_pre_ln", PL_DT_F16);
    auto_follows_checkpoint("t/fixtures/golden/llama_tied", PL_DT_BF16);
    return done_testing();
}
