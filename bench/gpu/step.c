/*
 * Decode step benchmark: one model, loaded once, run through
 * pl_model_forward_logits() and the backend's sampler on decode batches
 * of B sequences at a context of C tokens, with CUDA graphs and eagerly,
 * against the floor of reading every matrix the step multiplies once at
 * the device-to-device copy bandwidth measured in the same run.
 *
 *   step MODEL_DIR [BATCHES (1,16,64,256)] [CONTEXT (192)]
 *
 * A step is what the engine does per decode iteration on the GPU: the
 * batch description uploaded, the forward pass, greedy sampling and the
 * tokens copied back.  The cache holds whatever it holds (timing does
 * not depend on the values); sequences have distinct shuffled blocks.
 * Each figure is the mean of REPS back-to-back steps after WARM ones.
 * PAGEDLLM_STEP_DTYPE (as the engine's --dtype: auto, float16, bfloat16)
 * picks the activations; the model's own dtype otherwise (auto).
 * With PAGEDLLM_STEP_PROFILE=1 only one eager step of each batch runs,
 * inside an NVTX range "step" for ncu --nvtx --nvtx-include "step/".
 * Output lines start with "ours".
 */

#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_gpu.h"
#include "pl_model.h"
#include "pl_ops.h"

#define BLOCK      16
#define WARM       5
#define REPS       50
#define MAX_BATCH  256

static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}


/* bytes of the matrices one decode step reads: every layer's projections
   and the lm_head (the embedding table is only indexed) */
static double
matrix_bytes(const pl_model_config_t *c)
{
    double  h = c->hidden_size, kv = (double) c->num_kv_heads * c->head_dim;
    double  q = (double) c->num_heads * c->head_dim;
    double  layer = h * (q + 2 * kv) + q * h + 3.0 * h * c->intermediate_size;

    return 2.0 * (c->num_layers * layer + (double) c->vocab_size * h);
}


typedef struct {
    int32_t  ids[MAX_BATCH], pos[MAX_BATCH], slots[MAX_BATCH];
    int32_t  qs[MAX_BATCH + 1], ctx[MAX_BATCH], rows[MAX_BATCH];
    int32_t *tables;
} batch_arrays_t;


static void
build(batch_arrays_t *a, pl_batch_t *b, int n, int ctx, int width,
    const int32_t *perm)
{
    int  s, i;

    for (s = 0; s < n; s++) {
        for (i = 0; i < width; i++) {
            a->tables[s * width + i] = perm[s * width + i];
        }
        a->ids[s] = (s * 7919 + 13) % 30000 + 3;
        a->pos[s] = ctx - 1;
        a->slots[s] = a->tables[s * width + (ctx - 1) / BLOCK] * BLOCK
                      + (ctx - 1) % BLOCK;
        a->qs[s] = s;
        a->ctx[s] = ctx;
        a->rows[s] = s;
    }
    a->qs[n] = n;
    *b = (pl_batch_t) {
        .num_tokens = n, .num_seqs = n, .token_ids = a->ids,
        .positions = a->pos, .slot_mapping = a->slots, .query_start = a->qs,
        .context_lens = a->ctx, .block_tables = a->tables,
        .logits_rows = a->rows, .max_blocks_per_seq = width,
        .max_query_len = 1, .max_context_len = ctx,
    };
}


/* Mean seconds of one step over REPS steps, or -1. */
static double
time_steps(pl_model_t *m, pl_backend_t *be, const pl_batch_t *b, int reps,
    int warm, int vocab)
{
    static pl_sample_req_t  reqs[MAX_BATCH];
    static int32_t          tokens[MAX_BATCH];
    pl_logits_t             out;
    char                    err[256];
    double                  t = 0;
    int                     i, s;

    for (s = 0; s < b->num_seqs; s++) {
        reqs[s] = (pl_sample_req_t) { .row = s, .top_p = 1.0f };
    }
    for (i = 0; i < warm + reps; i++) {
        if (i == warm) {
            be->sync(be);
            t = now();
        }
        if (pl_model_forward_logits(m, b, NULL, &out, err, sizeof(err))
            != 0)
        {
            fprintf(stderr, "step: %s\n", err);
            return -1;
        }
        be->sample(be, tokens, out.data, out.dtype, vocab, reqs,
                   b->num_seqs, NULL, 0, NULL, 0);
    }
    be->sync(be);
    return (now() - t) / reps;
}


int
main(int argc, char **argv)
{
    const char               *dir = argc > 1 ? argv[1] : NULL;
    char                     *list = argc > 2 ? argv[2] : "1,16,64,256";
    int                       ctx = argc > 3 ? atoi(argv[3]) : 192;
    int                       profile = getenv("PAGEDLLM_STEP_PROFILE") != NULL;
    const pl_model_config_t  *c;
    pl_backend_t             *be;
    pl_model_t               *m[2];
    batch_arrays_t            a;
    pl_batch_t                b;
    int32_t                  *perm;
    double                    tbps, floor_s, secs[2];
    char                      err[512], *tok;
    int                       width, nblocks, i, j, k, n;

    if (dir == NULL || ctx < 1) {
        fprintf(stderr, "usage: step MODEL_DIR [BATCHES] [CONTEXT]\n");
        return 2;
    }
    if (getenv("PAGEDLLM_STEP_DTYPE") != NULL) {
        pl_model_options_t  o = { 1, PL_MODEL_DTYPE_AUTO };

        if (pl_model_dtype_parse(getenv("PAGEDLLM_STEP_DTYPE"), &o.dtype)
            != 0)
        {
            fprintf(stderr, "step: PAGEDLLM_STEP_DTYPE: auto, float16, "
                    "bfloat16 or float32\n");
            return 2;
        }
        pl_model_set_default_options(&o);
    }
    be = pl_backend_cuda_create(0, err, sizeof(err));
    if (be == NULL) {
        fprintf(stderr, "step: %s\n", err);
        return 1;
    }
    BE = be;
    tbps = bench_copy();

    width = (ctx + BLOCK - 1) / BLOCK;
    nblocks = MAX_BATCH * width;
    m[0] = pl_model_load(dir, be, err, sizeof(err));
    if (m[0] == NULL
        || pl_model_prepare(m[0], 2048, MAX_BATCH, err, sizeof(err)) != 0
        || pl_model_kv_alloc(m[0], nblocks, BLOCK, err, sizeof(err)) != 0)
    {
        fprintf(stderr, "step: %s\n", err);
        return 1;
    }
    /* the eager side shares nothing: a second copy of the model would
       not fit a 70B-class card, but a 7B one fits twice */
    m[1] = pl_model_load(dir, be, err, sizeof(err));
    if (m[1] == NULL
        || pl_model_prepare(m[1], 2048, MAX_BATCH, err, sizeof(err)) != 0
        || pl_model_kv_alloc(m[1], nblocks, BLOCK, err, sizeof(err)) != 0)
    {
        fprintf(stderr, "step: %s\n", err);
        return 1;
    }
    pl_model_set_decode_mode(m[0], PL_DECODE_GRAPHS);
    pl_model_set_decode_mode(m[1], PL_DECODE_EAGER);
    c = pl_model_config(m[0]);
    floor_s = matrix_bytes(c) / (tbps * 1e12);

    perm = malloc((size_t) nblocks * sizeof(int32_t));
    a.tables = malloc((size_t) nblocks * sizeof(int32_t));
    if (perm == NULL || a.tables == NULL) {
        return 1;
    }
    srand(1);
    for (i = 0; i < nblocks; i++) {
        perm[i] = i;
    }
    for (i = nblocks - 1; i > 0; i--) {
        j = rand() % (i + 1);
        k = perm[i];
        perm[i] = perm[j];
        perm[j] = k;
    }

    printf("ours step matrices %.2f GB: floor at %.3f TB/s %.3f ms, "
           "1.25x floor %.3f ms\n", matrix_bytes(c) / 1e9, tbps,
           floor_s * 1e3, 1.25 * floor_s * 1e3);

    for (tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
        n = atoi(tok);
        if (n < 1 || n > MAX_BATCH) {
            fprintf(stderr, "step: batch %s out of 1..%d\n", tok, MAX_BATCH);
            return 2;
        }
        build(&a, &b, n, ctx, width, perm);
        if (profile) {
            if (time_steps(m[1], be, &b, 0, 2, c->vocab_size) < 0) {
                return 1;
            }
            nvtxRangePushA("step");
            time_steps(m[1], be, &b, 1, 0, c->vocab_size);
            nvtxRangePop();
            continue;
        }
        for (k = 0; k < 2; k++) {
            secs[k] = time_steps(m[k], be, &b, REPS, WARM, c->vocab_size);
            if (secs[k] < 0) {
                return 1;
            }
        }
        printf("ours step batch %-3d ctx %d: graphs %.3f ms (%.2fx floor, "
               "%.0f tok/s), eager %.3f ms (%.2fx floor, %.0f tok/s)\n", n,
               ctx, secs[0] * 1e3, secs[0] / floor_s, n / secs[0],
               secs[1] * 1e3, secs[1] / floor_s, n / secs[1]);
    }

    pl_model_free(m[0]);
    pl_model_free(m[1]);
    be->destroy(be);
    free(perm);
    free(a.tables);
    return 0;
}
