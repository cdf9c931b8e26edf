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
 * logits' rms: the GPU's logits are bf16).  Free-running: each backend follows its
 * own greedy choices, and the generations must be identical up to the
 * first near-tie of the CPU's.  Then again with the GPU's activations in
 * fp16, loaded as the engine's --dtype float16 asks (pl_model_load_opts;
 * the tiny model's bf16 weights converted at load).  Last, --dtype auto
 * on the golden fixtures: an fp16 checkpoint (OPT pre-LN) runs in fp16, a
 * bf16 one in bf16 (t/gpu/golden.c compares both with transformers).
 */

#include <stdio.h>

#include "fixture_model.h"
#include "pair.h"

#define NSEQ        3
#define BLOCK       16
#define MAX_BLOCKS  8
#define NEW_TOKENS  24
#define CHUNK       16
#define LOGIT_BOUND 3e-2
#define CLEAR_LEAD  (2 * LOGIT_BOUND)   /* times the logits' rms */

typedef struct {
    int32_t  tok[MAX_BLOCKS * BLOCK];
    int      len;           /* tokens known (prompt + generated) */
    int      done;          /* tokens whose K/V are in the cache */
    int      prompt;
} seq_t;

typedef struct {
    pl_backend_t  *be;
    pl_model_t    *m;
} side_t;

static const int  prompt_len[NSEQ] = { 11, 29, 5 };


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
    s->m = fm_open(dir, be, opts, 64, NSEQ, NSEQ * MAX_BLOCKS, BLOCK, err,
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
            slots[n] = tables[i * MAX_BLOCKS + p / BLOCK] * BLOCK + p % BLOCK;
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
    b.max_blocks_per_seq = MAX_BLOCKS;
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
 * Sequences must be identical up to the first token the CPU chose without
 * a clear lead: past a near-tie, bf16 rounding may rightly pick the other
 * token and the two generations part.  Prompts are drawn again (up to
 * 16 times) while no sequence's first token has a clear lead on the CPU,
 * so that the comparison never runs empty (the tiny model's random
 * weights give near-ties often: on the H200 once all three first tokens
 * were).
 */
static void
free_running(side_t *cpu, side_t *gpu, const int32_t *tables, int vocab)
{
    seq_t  sc[NSEQ], sg[NSEQ];
    float  lc[NSEQ][NEW_TOKENS + 1], lg[NSEQ][NEW_TOKENS + 1];
    int    i, k, same = 1, compared = 0, ran, clear = 0, tries = 0;

    do {
        draw_prompts(sc, vocab);
        memcpy(sg, sc, sizeof(sc));
        ran = free_run(cpu, sc, tables, vocab, lc) == 0;
        for (i = 0; ran && i < NSEQ; i++) {
            clear |= lc[i][0] > CLEAR_LEAD;
        }
    } while (ran && !clear && ++tries < 16);
    if (!ok(ran && free_run(gpu, sg, tables, vocab, lg) == 0,
            "free-running greedy decoding runs on both backends"))
    {
        return;
    }
    for (i = 0; i < NSEQ; i++) {
        for (k = 0; k < NEW_TOKENS && lc[i][k] > CLEAR_LEAD; k++) {
            int  p = sc[i].prompt + k;

            if (sc[i].tok[p] != sg[i].tok[p]) {
                diag("sequence %d token %d: cpu %d, cuda %d (lead %.3f rms)", i,
                     k, sc[i].tok[p], sg[i].tok[p], lc[i][k]);
                same = 0;
                break;
            }
            compared++;
        }
    }
    ok(same && compared > 0, "free-running greedy %s: CUDA generates the "
       "CPU's tokens up to the first near-tie (%d tokens compared of %d)",
       pl_dtype_name(gpu->be->act_dtype), compared, NSEQ * NEW_TOKENS);
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
    int32_t      tables[NSEQ * MAX_BLOCKS];
    int          i, vocab;
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
    for (i = 0; i < NSEQ * MAX_BLOCKS; i++) {
        tables[i] = (i * 7 + 3) % (NSEQ * MAX_BLOCKS);
    }
    vocab = pl_model_config(cpu.m)->vocab_size;
    teacher_forced(&cpu, &gpu, tables, vocab);
    free_running(&cpu, &gpu, tables, vocab);
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
