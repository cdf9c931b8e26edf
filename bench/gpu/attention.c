/*
 * Attention benchmark of the CUDA backend: decode over paged KV (bf16, head
 * 128, block 16) at the shapes of docs/BENCHMARKS.md, reported as the
 * bandwidth of reading K and V once, next to a device-to-device copy
 * measured in the same process; and one causal prefill of 4096 tokens,
 * reported in TFLOP/s (4 x heads x 128 x the (query, key) pairs the
 * causal mask keeps), on the default kernel and, for comparison in the
 * same run, on the wgmma kernel with cp.async loads and on the mma.sync
 * one (the PAGEDLLM_CUDA_PREFILL* knobs); the kernel that ran is named.
 *
 * Physical blocks are shuffled (PAGEDLLM_BENCH_BLOCKS=ordered lays every
 * sequence's blocks out in order instead, to measure what the scatter
 * costs against torch's contiguous K/V; =runs:N shuffles runs of N
 * blocks, each run in order; =local:N shuffles each aligned group of N
 * blocks in place; =engine lays them out as the engine's block
 * manager does for a batch decoding together: block_layout).  Shapes
 * whose cache fits in L2 a few times over rotate among several caches,
 * so every timed call reads from device memory (at least 1 GiB read per
 * rotation; PAGEDLLM_BENCH_ROTATE_MB=n: n MiB, one cache at least, to see
 * what a smaller footprint changes).  Each call is timed with events on
 * the backend's stream; the median of the calls is printed.
 * Output lines start with "ours".  Each decode line names its block
 * layout (PAGEDLLM_BENCH_BLOCKS, "shuffled" by default; make bench-gpu
 * runs the decode part again on the engine's) and gives the time
 * of a device-to-device copy that reads and writes as many bytes as the
 * attention reads, timed the same way over the same caches (what one
 * pass over those bytes costs, launch and ramp included).  Built as
 * bench/gpu/attention-trace, with PAGEDLLM_BENCH_TRACE=1 it also prints
 * where each shape's blocks spend their time (trace_decode), and with
 * PAGEDLLM_BENCH_TRACE_DUMP=file appends each block's record to file
 * (dump_trace: when each block's loop ended, on which SM).
 * After the five shapes of docs/BENCHMARKS.md come the engine's
 * short-context decode shapes, with max_context_len rounded up to the
 * graph's context bucket as the engine passes it.  "decode" as argv[1]
 * runs only the decode part (tools/gpu-run.sh runs it again under
 * settings of the PAGEDLLM_CUDA_ATTN_* knobs, kernels/pl_cuda.cuh).
 */

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_manager.h"
#include "pl_ops.h"
#include "bench_gpu.h"


/* the kernel of the last prefill launch (kernels/prefill_attention.cu) */
const char *pl_cuda_prefill_kernel(void);
/* trace the decode kernel's blocks into buf (kernels/decode_attention.cu);
   0 unless this is bench/gpu/attention-trace */
int pl_cuda_decode_trace(void *buf);
/* the KV splits of the last decode launch */
int pl_cuda_decode_splits(void);

#define HEAD_DIM    128
#define BLOCK       16
#define REPS        40
#define ROTATE_MIN  (1ull << 30)    /* PAGEDLLM_BENCH_ROTATE_MB overrides */

typedef struct {
    int  batch, ctx, heads, kv_heads;
    int  bucket;     /* max_context_len the engine's graph would pass
                        (context rounded up to its bucket); 0: ctx */
} shape_t;

static void *
dev_ints(const int32_t *h, size_t n)
{
    void  *d = dev_alloc(n * sizeof(int32_t));

    BE->upload(BE, d, h, n * sizeof(int32_t));
    return d;
}


/* One batch of num_seqs sequences, qlen query rows each, every context ctx
   long, blocks drawn from perm starting at *next_block. */
static pl_batch_t
make_batch(int num_seqs, int qlen, int ctx, int bucket, const int32_t *perm,
    int64_t *next_block)
{
    int         mb = ctx / BLOCK, s, i;
    int32_t    *qs = malloc((num_seqs + 1) * sizeof(int32_t));
    int32_t    *cl = malloc(num_seqs * sizeof(int32_t));
    int32_t    *bt = malloc((size_t) num_seqs * mb * sizeof(int32_t));
    pl_batch_t  b;

    memset(&b, 0, sizeof(b));
    for (s = 0; s <= num_seqs; s++) {
        qs[s] = s * qlen;
    }
    for (s = 0; s < num_seqs; s++) {
        cl[s] = ctx;
        for (i = 0; i < mb; i++) {
            bt[(size_t) s * mb + i] = perm[(*next_block)++];
        }
    }
    b.num_tokens = num_seqs * qlen;
    b.num_seqs = num_seqs;
    b.query_start = dev_ints(qs, num_seqs + 1);
    b.context_lens = dev_ints(cl, num_seqs);
    b.block_tables = dev_ints(bt, (size_t) num_seqs * mb);
    b.max_blocks_per_seq = mb;
    b.max_query_len = qlen;
    b.max_context_len = bucket > ctx ? bucket : ctx;
    free(qs);
    free(cl);
    free(bt);
    return b;
}


static void
free_batch(pl_batch_t *b)
{
    BE->free(BE, (void *) b->query_start);
    BE->free(BE, (void *) b->context_lens);
    BE->free(BE, (void *) b->block_tables);
}


/*
 * PAGEDLLM_BENCH_BLOCKS=engine: the blocks as the engine's block manager
 * hands them out (engine/block_manager.c, runs of 64 tokens' worth), for
 * batch sequences of mb blocks in each of nsets caches: each cache's
 * manager holds exactly its blocks; every sequence is prefilled with a
 * prompt of (at most) 128 tokens, one after the other, then all grow a
 * token at a time in turn, as a batch decoding together does.
 */
static int32_t *
engine_layout(int batch, int mb, int nsets)
{
    int64_t             per = (int64_t) batch * mb;
    int32_t            *p = malloc(per * nsets * sizeof(int32_t));
    pl_block_manager_t  bm;
    pl_block_table_t   *t = calloc(batch, sizeof(pl_block_table_t));
    int                 k, sq, i, len, ctx = mb * BLOCK;
    int                 prompt = ctx < 128 ? ctx : 128;

    if (p == NULL || t == NULL) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    for (k = 0; k < nsets; k++) {
        if (pl_bm_init(&bm, (int) per, BLOCK) != 0) {
            fprintf(stderr, "bench: block manager init failed\n");
            exit(1);
        }
        for (len = prompt; len <= ctx; len++) {
            /* the prompts first, then a token each in turn */
            for (sq = 0; sq < batch; sq++) {
                if (pl_bm_ensure(&bm, &t[sq], len) != 0) {
                    fprintf(stderr, "bench: block manager out of blocks\n");
                    exit(1);
                }
            }
        }
        for (sq = 0; sq < batch; sq++) {
            for (i = 0; i < mb; i++) {
                p[k * per + (int64_t) sq * mb + i] =
                    (int32_t) (k * per + t[sq].ids[i]);
            }
            pl_bm_free_table(&bm, &t[sq]);
            pl_block_table_release(&t[sq]);
        }
        pl_bm_destroy(&bm);
    }
    free(t);
    return p;
}


/* blocks 0 .. n-1 in order */
static int32_t *
in_order(int64_t n)
{
    int32_t  *p = malloc(n * sizeof(int32_t));
    int64_t   i;

    for (i = 0; i < n; i++) {
        p[i] = (int32_t) i;
    }
    return p;
}


/* shuffle the n / run runs of run entries of p (each run kept in order) */
static void
shuffle_runs(int32_t *p, int64_t n, int64_t run)
{
    int64_t  i, j, k;

    for (i = n / run - 1; i > 0; i--) {
        j = (int64_t) (next() % (uint64_t) (i + 1));
        for (k = 0; k < run; k++) {
            int32_t  t = p[i * run + k];

            p[i * run + k] = p[j * run + k];
            p[j * run + k] = t;
        }
    }
}


/* blocks 0 .. n-1 in shuffled runs of run blocks, each run in order */
static int32_t *
shuffled(int64_t n, int64_t run)
{
    int32_t  *p = in_order(n);

    shuffle_runs(p, n, run);
    return p;
}


/* blocks 0 .. n-1, each aligned group of group blocks shuffled in place:
   scattered blocks that share their neighbourhood (a group of 16 blocks of
   128 KiB is one 2 MiB page) */
static int32_t *
shuffled_locally(int64_t n, int64_t group)
{
    int32_t  *p = in_order(n);
    int64_t   g;

    for (g = 0; g + group <= n; g += group) {
        shuffle_runs(p + g, group, 1);
    }
    return p;
}


/* The physical blocks of nsets caches of batch sequences of mb blocks, in
   the order make_batch hands them out, as PAGEDLLM_BENCH_BLOCKS says
   (see the top): shuffled one by one unless it says otherwise. */
static int32_t *
block_layout(int batch, int mb, int nsets)
{
    const char  *v = getenv("PAGEDLLM_BENCH_BLOCKS");
    int64_t      n = (int64_t) nsets * batch * mb;

    if (v != NULL && strcmp(v, "engine") == 0) {
        return engine_layout(batch, mb, nsets);
    }
    if (v != NULL && strcmp(v, "ordered") == 0) {
        return shuffled(n, n);
    }
    if (v != NULL && strncmp(v, "runs:", 5) == 0 && atoi(v + 5) > 0) {
        return shuffled(n, atoi(v + 5));
    }
    if (v != NULL && strncmp(v, "local:", 6) == 0 && atoi(v + 6) > 0) {
        return shuffled_locally(n, atoi(v + 6));
    }
    return shuffled(n, 1);
}


typedef struct {
    void              *out, *q, *kc, *vc;
    const pl_batch_t  *b;
    int                nsets;
    const shape_t     *s;
} timed_attention_t;


static void
timed_attention(void *arg, int i)
{
    timed_attention_t  *a = arg;

    BE->attention(BE, a->out, a->q, a->kc, a->vc, &a->b[i % a->nsets],
                  a->s->heads, a->s->kv_heads, HEAD_DIM, BLOCK,
                  1.0f / sqrtf((float) HEAD_DIM));
}


typedef struct {
    char    *src, *dst;
    size_t   bytes;
    int      nsets;
} timed_copy_t;


static void
timed_copy(void *arg, int i)
{
    timed_copy_t  *a = arg;
    int            s = i % a->nsets;

    check(cudaMemcpyAsync(a->dst + (size_t) ((s + 1) % a->nsets) * a->bytes,
                          a->src + (size_t) s * a->bytes, a->bytes,
                          cudaMemcpyDeviceToDevice, pl_cuda_stream(BE)),
          "copy");
}


/* median seconds of one attention call over rotating batches */
static double
time_attention(void *out, void *q, void *kc, void *vc, const pl_batch_t *b,
    int nsets, const shape_t *s)
{
    timed_attention_t  a = { out, q, kc, vc, b, nsets, s };

    return bench_time(timed_attention, &a, 3, REPS);
}


static int
cmp_u64(const void *a, const void *b)
{
    uint64_t  x = *(const uint64_t *) a, y = *(const uint64_t *) b;

    return x < y ? -1 : x > y;
}


/* "min/median/max" of v[0..n) in us */
static void
print_spread(const char *name, uint64_t *v, int n)
{
    qsort(v, n, sizeof(uint64_t), cmp_u64);
    printf(" %s %.2f/%.2f/%.2f", name, v[0] / 1e3, v[n / 2] / 1e3,
           v[n - 1] / 1e3);
}


/* the words of a block's trace record (kernels/decode_attention.cu's
   DEC_TR_*): globaltimer at each phase, then whether it merged the
   splits and its SM; then as many words of clock64 */
enum { TR_START, TR_TABLE, TR_FIRST, TR_LOOP, TR_FINISH, TR_END, TR_MERGED,
       TR_SM };

/* PAGEDLLM_BENCH_TRACE_DUMP=file: append each traced block's record to
   file, a line each: shape, launch number, SM, then its phases in ns
   from the earliest start (start, table, first, loop, finish, end) */
static void
dump_trace(const shape_t *s, const uint64_t *h, const int *id, int n,
    int words, uint64_t t0)
{
    const char  *path = getenv("PAGEDLLM_BENCH_TRACE_DUMP");
    FILE        *f;
    int          i, k;

    if (path == NULL || (f = fopen(path, "a")) == NULL) {
        return;
    }
    for (i = 0; i < n; i++) {
        const uint64_t  *r = h + (size_t) i * 2 * words;

        fprintf(f, "%dx%dx%d/%d %d %d", s->batch, s->ctx, s->heads,
                s->kv_heads, id[i], (int) r[TR_SM]);
        for (k = TR_START; k <= TR_END; k++) {
            fprintf(f, " %llu", (unsigned long long) (r[k] - t0));
        }
        fprintf(f, "\n");
    }
    fclose(f);
}


/*
 * PAGEDLLM_BENCH_TRACE=1 (bench/gpu/attention-trace): after the timed
 * calls, three more with the decode kernel's phase trace on; of the last
 * one print, in us from the earliest block's start, each phase's
 * min/median/max over the blocks (start, table staged, first tile in,
 * last tile done, warps merged, end), the same as each block's own
 * durations (globaltimer), the mean gap on an SM between a block's end
 * and the start of the next block there, and the span of the whole grid;
 * with KV splits also when each split's blocks finished their last tile
 * (do the splits launched last end last?).
 */
static void
trace_decode(const shape_t *s, void *out, void *q, void *kc, void *vc,
    const pl_batch_t *b, int nsets)
{
    static const char  *phase[] = { "start", "table", "first", "loop",
                                    "finish", "end" };
    int                 words = pl_cuda_decode_trace(NULL);
    size_t              max_blocks = (size_t) s->batch * s->heads * 64;
    size_t              bytes = max_blocks * 2 * words * sizeof(uint64_t);
    uint64_t           *h, *v, t0 = UINT64_MAX, t1 = 0;
    void               *d;
    int                *id;
    int                 n = 0, merged = 0, k, i, j, gaps = 0, ns, per;
    double              gap = 0;
    timed_attention_t   a = { out, q, kc, vc, b, nsets, s };

    if (words == 0) {
        return;
    }
    d = dev_alloc(bytes);
    check(cudaMemsetAsync(d, 0, bytes, pl_cuda_stream(BE)), "memset");
    /* the symbol is set outside the backend's stream: nothing of it may
       run meanwhile */
    BE->sync(BE);
    pl_cuda_decode_trace(d);
    for (i = 0; i < 3; i++) {
        timed_attention(&a, i);
    }
    BE->sync(BE);
    pl_cuda_decode_trace(NULL);
    h = malloc(bytes);
    v = malloc(max_blocks * sizeof(uint64_t));
    id = malloc(max_blocks * sizeof(int));
    BE->download(BE, h, d, bytes);
    BE->sync(BE);
    /* the blocks that ran the whole kernel (empty splits end early) */
    for (i = 0; i < (int) max_blocks; i++) {
        uint64_t  *r = h + (size_t) i * 2 * words;

        if (r[TR_START] != 0 && r[TR_END] != 0) {
            memmove(h + (size_t) n * 2 * words, r,
                    2 * words * sizeof(uint64_t));
            id[n++] = i;
        }
    }
    for (i = 0; i < n; i++) {
        uint64_t  *r = h + (size_t) i * 2 * words;

        t0 = r[TR_START] < t0 ? r[TR_START] : t0;
        t1 = r[TR_END] > t1 ? r[TR_END] : t1;
        merged += r[TR_MERGED] == 1;
    }
    printf("trace %dx%dx%d/%d: %d blocks (%d merged splits), span %.2f us;"
           " from the first start:", s->batch, s->ctx, s->heads,
           s->kv_heads, n, merged, (t1 - t0) / 1e3);
    for (k = TR_START; k <= TR_END; k++) {
        for (i = 0; i < n; i++) {
            v[i] = h[(size_t) i * 2 * words + k] - t0;
        }
        print_spread(phase[k], v, n);
    }
    /* split z's blocks are launch numbers [z * per, (z + 1) * per): the
       swapped form, one block per (row, KV head) and split */
    ns = pl_cuda_decode_splits();
    per = s->batch * s->kv_heads;
    for (k = 0; ns > 1 && k < ns; k++) {
        int  m = 0;

        for (i = 0; i < n; i++) {
            if (id[i] / per == k) {
                v[m++] = h[(size_t) i * 2 * words + TR_LOOP] - t0;
            }
        }
        if (m > 0) {
            char  name[32];

            snprintf(name, sizeof(name), "split %d loop", k);
            print_spread(name, v, m);
        }
    }
    printf("; each block's own:");
    for (k = TR_TABLE; k <= TR_END; k++) {
        for (i = 0; i < n; i++) {
            uint64_t  *r = h + (size_t) i * 2 * words;

            v[i] = r[k] - r[k - 1];
        }
        print_spread(phase[k], v, n);
    }
    /* on each SM, from a block's end to the next start there after it */
    for (i = 0; i < n; i++) {
        uint64_t  *r = h + (size_t) i * 2 * words, best = UINT64_MAX;

        for (j = 0; j < n; j++) {
            uint64_t  *o = h + (size_t) j * 2 * words;

            if (o[TR_SM] == r[TR_SM] && o[TR_START] >= r[TR_END]
                && o[TR_START] - r[TR_END] < best)
            {
                best = o[TR_START] - r[TR_END];
            }
        }
        if (best != UINT64_MAX) {
            gap += best;
            gaps++;
        }
    }
    printf("; end to next start on an SM: %.2f us (%d)",
           gaps ? gap / gaps / 1e3 : 0.0, gaps);
    dump_trace(s, h, id, n, words, t0);
    /* the merging blocks' own merge, the others' */
    for (k = 0; k < 2 && merged > 0; k++) {
        int  m = 0;

        for (i = 0; i < n; i++) {
            uint64_t  *r = h + (size_t) i * 2 * words;

            if ((r[TR_MERGED] == 1) == (k == 0)) {
                v[m++] = r[TR_END] - r[TR_FINISH];
            }
        }
        if (m > 0) {
            print_spread(k == 0 ? "merging blocks' merge"
                                : "the others' merge", v, m);
        }
    }
    printf("\n");
    BE->free(BE, d);
    free(h);
    free(v);
    free(id);
}


static void
bench_decode(const shape_t *s)
{
    size_t      set_bytes = (size_t) s->batch * s->ctx * s->kv_heads
                            * HEAD_DIM * 2;
    const char *mb = getenv("PAGEDLLM_BENCH_ROTATE_MB");
    long        mib = mb != NULL ? atol(mb) : -1;
    size_t      rotate = mib >= 0 ? ((size_t) mib << 20) + 1 : ROTATE_MIN;
    int         nsets = (int) ((rotate + 2 * set_bytes - 1)
                               / (2 * set_bytes));
    int32_t    *perm = block_layout(s->batch, s->ctx / BLOCK, nsets);
    int64_t     next_block = 0;
    size_t      qn = (size_t) s->batch * s->heads * HEAD_DIM;
    void       *kc = dev_alloc((size_t) nsets * set_bytes);
    void       *vc = dev_alloc((size_t) nsets * set_bytes);
    void       *q = dev_alloc(qn * 2), *out = dev_alloc(qn * 2);
    pl_batch_t *b = malloc(nsets * sizeof(pl_batch_t));
    double      sec, csec;
    timed_copy_t  copy;
    int         i;

    fill_random(kc, (size_t) nsets * set_bytes);
    fill_random(vc, (size_t) nsets * set_bytes);
    fill_random(q, qn * 2);
    for (i = 0; i < nsets; i++) {
        b[i] = make_batch(s->batch, 1, s->ctx, s->bucket, perm,
                          &next_block);
    }
    sec = time_attention(out, q, kc, vc, b, nsets, s);
    copy.src = kc;
    copy.dst = vc;
    copy.bytes = set_bytes;
    copy.nsets = nsets;
    csec = bench_time(timed_copy, &copy, 3, REPS);
    printf("ours decode %dx%dx%d/%d %.1f us %.3f TB/s (%d caches, blocks %s",
           s->batch, s->ctx, s->heads, s->kv_heads, sec * 1e6,
           2.0 * set_bytes / sec / 1e12, nsets,
           getenv("PAGEDLLM_BENCH_BLOCKS") != NULL
           ? getenv("PAGEDLLM_BENCH_BLOCKS") : "shuffled");
    if (s->bucket > s->ctx) {
        printf(", max_context_len %d", s->bucket);
    }
    printf("; a copy of as many bytes: %.1f us)\n", csec * 1e6);
    if (getenv("PAGEDLLM_BENCH_TRACE") != NULL) {
        trace_decode(s, out, q, kc, vc, b, nsets);
    }
    for (i = 0; i < nsets; i++) {
        free_batch(&b[i]);
    }
    BE->free(BE, kc);
    BE->free(BE, vc);
    BE->free(BE, q);
    BE->free(BE, out);
    free(b);
    free(perm);
}


/* one sequence prefilled whole, sent through batch_upload as the model
   does */
static void
bench_prefill(int len, int heads)
{
    shape_t     s = { 1, len, heads, heads, 0 };
    size_t      bytes = (size_t) len * heads * HEAD_DIM * 2;
    int32_t    *perm = block_layout(1, len / BLOCK, 1);
    int32_t     qs[2] = { 0, len }, cl[1] = { len };
    void       *kc = dev_alloc(bytes), *vc = dev_alloc(bytes);
    void       *q = dev_alloc(bytes), *out = dev_alloc(bytes);
    pl_batch_t  h;
    const pl_batch_t  *b;
    double      sec, flops = 4.0 * heads * HEAD_DIM * (double) len
                             * (len + 1) / 2.0;

    memset(&h, 0, sizeof(h));
    h.num_tokens = len;
    h.num_seqs = 1;
    h.query_start = qs;
    h.context_lens = cl;
    h.block_tables = perm;
    h.max_blocks_per_seq = len / BLOCK;
    h.max_query_len = len;
    h.max_context_len = len;
    fill_random(kc, bytes);
    fill_random(vc, bytes);
    fill_random(q, bytes);
    b = BE->batch_upload(BE, &h);
    sec = time_attention(out, q, kc, vc, b, 1, &s);
    printf("ours prefill causal %d x %d heads %.1f us %.1f TFLOP/s (%s)\n",
           len, heads, sec * 1e6, flops / sec / 1e12,
           pl_cuda_prefill_kernel());
    BE->free(BE, kc);
    BE->free(BE, vc);
    BE->free(BE, q);
    BE->free(BE, out);
    free(perm);
}


/* set (on) or unset the "NAME=value" knobs of a variant, and have the
   backend read its knobs again */
static void
set_overrides(const char *const *kv, int on)
{
    char  name[64];
    int   k;

    for (k = 0; k < 2 && kv[k] != NULL; k++) {
        size_t  n = strcspn(kv[k], "=");

        snprintf(name, sizeof(name), "%.*s", (int) n, kv[k]);
        if (on) {
            setenv(name, kv[k] + n + 1, 1);
        } else {
            unsetenv(name);
        }
    }
    pl_cuda_knobs_reload();
}


/*
 * The prefill on the default kernel, then under each knob of
 * kernels/prefill_attention.cu (the wgmma kernel's cp.async loads, then
 * the mma.sync kernel); each is unset again after its line.
 */
static void
bench_prefill_variants(void)
{
    static const char  *variants[][2] = {
        { NULL, NULL },
        { "PAGEDLLM_CUDA_PREFILL_LOADS=cpasync", NULL },
        { "PAGEDLLM_CUDA_PREFILL=mma", NULL },
    };
    size_t  i;

    for (i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        set_overrides(variants[i], 1);
        bench_prefill(4096, 32);
        set_overrides(variants[i], 0);
    }
}


/* argv[1]: "decode" or "prefill" runs only that part; "prefill-one" the
   prefill once, on the kernel the environment picks (for ncu) */
int
main(int argc, char **argv)
{
    const char  *only = argc > 1 ? argv[1] : "";
    static const shape_t  shapes[] = {
        { 1, 4096, 32, 32, 0 }, { 32, 2048, 32, 32, 0 },
        { 64, 2048, 32, 8, 0 }, { 256, 1024, 32, 32, 0 },
        { 8, 16384, 32, 8, 0 },
        /* extra lines, not issue 6's shapes: the engine's short-context
           decode (Llama-2-7B heads, then Llama-3-8B's, context 192 in the
           graph bucket of 256) */
        { 64, 192, 32, 32, 256 }, { 1, 192, 32, 32, 256 },
        { 256, 192, 32, 32, 256 },
        { 64, 192, 32, 8, 256 }, { 256, 192, 32, 8, 256 },
    };
    char    err[256];
    size_t  i;

    BE = pl_backend_cuda_create(0, err, sizeof(err));
    if (BE == NULL) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    if (*only == '\0') {
        bench_copy();
    }
    for (i = 0; strncmp(only, "prefill", 7) != 0
                && i < sizeof(shapes) / sizeof(shapes[0]); i++)
    {
        bench_decode(&shapes[i]);
    }
    if (strcmp(only, "prefill-one") == 0) {
        bench_prefill(4096, 32);
    } else if (strcmp(only, "decode") != 0) {
        bench_prefill_variants();
    }
    BE->destroy(BE);
    return 0;
}
