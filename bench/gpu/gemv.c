/*
 * Small-batch GEMM benchmark: the weight-streaming kernel of
 * kernels/gemv.cu against cuBLAS in the same run, at the GEMM shapes of a
 * Llama-2-7B decode step (bf16; fused QKV, O, fused gate/up, down, and
 * lm_head), for n = 1 .. 32 rows of x.  A GEMM is reported as the
 * bandwidth of reading its weight once, next to a device-to-device copy
 * measured in the same process (the ceiling).
 *
 * Each shape has 32 weight copies (4 for lm_head), 1 to 6 GB, and the
 * timed calls rotate through them, so every call reads its weight from
 * device memory, not L2.  Each call is timed with events on the backend's
 * stream; the median of REPS calls after WARMUP is printed.  A step is
 * 32 layers of the four layer GEMMs plus lm_head: projected from the
 * medians, and measured whole as one CUDA graph over 32 distinct layers'
 * weights (which also shows the kernel is capturable, and that replaying
 * the graph writes what the direct launches wrote).
 *
 *     gemv            kernel as dispatched (pl_cuda_gemv picking) vs cuBLAS
 *     gemv sweep      also every launch configuration at every shape and n
 *                     (or PAGEDLLM_GEMV_SWEEP=1), best per shape and per n;
 *                     PAGEDLLM_GEMV_SWEEP_NS=1,8 sweeps those n only
 *
 * Lines start with "ours"; the summary table is printed last.
 */

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_ops.h"
#include "gemv.cuh"
#include "bench_gpu.h"


#define LAYERS      32
#define REPS        50
#define WARMUP      5
#define GRAPH_REPS  10
#define MAX_CONFIGS 64

#define PATH_PICK    (-1)         /* pl_cuda_gemv choosing */
#define PATH_CUBLAS  (-2)

typedef struct {
    const char  *name;
    int          rows;
    int          cols;
    int          per_step;        /* calls in one decode step */
    int          copies;          /* weight copies rotated through */
    char        *w;               /* copies x rows x cols bf16 */
    void        *out;             /* [PL_GEMV_MAX_N][rows] */
} shape_t;

static shape_t  shapes[] = {
    { "qkv", 12288, 4096, LAYERS, LAYERS, NULL, NULL },
    { "o", 4096, 4096, LAYERS, LAYERS, NULL, NULL },
    { "gate_up", 22016, 4096, LAYERS, LAYERS, NULL, NULL },
    { "down", 4096, 11008, LAYERS, LAYERS, NULL, NULL },
    { "lm_head", 32000, 4096, 1, 4, NULL, NULL },
};

#define NSHAPES  (int) (sizeof(shapes) / sizeof(shapes[0]))

static const int  ns[] = { 1, 2, 4, 8, 16, 32 };
static const int  sweep_ns[] = { 1, 2, 4, 8, 12, 16, 24, 32 };

#define NNS     (int) (sizeof(ns) / sizeof(ns[0]))

static void          *X;          /* [PL_GEMV_MAX_N][11008] */
static double         copy_tbs;


static size_t
weight_bytes(const shape_t *s)
{
    return (size_t) s->rows * s->cols * 2;
}


static pl_weight_t
weight(const shape_t *s, int copy)
{
    pl_weight_t  w = { s->w + (size_t) copy * weight_bytes(s), PL_DT_BF16,
                       s->rows, s->cols };

    return w;
}


/* one call down path; 0, or -1 when the kernel refused the shape */
static int
call(int path, const shape_t *s, int copy, int n)
{
    pl_weight_t  w = weight(s, copy);

    if (path == PATH_CUBLAS) {
        pl_cuda_matmul_cublas(BE, s->out, X, &w, NULL, n);
        return 0;
    }
    return pl_cuda_gemv(BE, s->out, X, &w, NULL, n, path);
}


typedef struct {
    int       path;
    shape_t  *s;
    int       n;
} timed_call_t;


static void
timed_call(void *arg, int i)
{
    timed_call_t  *c = arg;

    call(c->path, c->s, i % c->s->copies, c->n);
}


/* median seconds of one call, rotating through the weight copies; -1
   when the path refuses the shape */
static double
time_path(int path, shape_t *s, int n)
{
    timed_call_t  c = { path, s, n };

    if (call(path, s, 0, n) != 0) {
        return -1.0;
    }
    return bench_time(timed_call, &c, WARMUP, REPS);
}


static double
step_bytes(void)
{
    double  b = 0.0;
    int     s;

    for (s = 0; s < NSHAPES; s++) {
        b += (double) weight_bytes(&shapes[s]) * shapes[s].per_step;
    }
    return b;
}


/* seconds of one step from per-shape times */
static double
step_time(const double *t)
{
    double  sum = 0.0;
    int     s;

    for (s = 0; s < NSHAPES; s++) {
        if (t[s] < 0.0) {
            return -1.0;
        }
        sum += t[s] * shapes[s].per_step;
    }
    return sum;
}


static double
tbs(const shape_t *s, double sec)
{
    return (double) weight_bytes(s) / sec / 1e12;
}


/* whether the sweep runs at n: every n of sweep_ns, or those listed in
   PAGEDLLM_GEMV_SWEEP_NS (comma-separated) */
static int
sweep_wanted(int n)
{
    const char  *v = getenv("PAGEDLLM_GEMV_SWEEP_NS");
    char        *end;

    if (v == NULL || *v == '\0') {
        return 1;
    }
    for ( ;; ) {
        long  k = strtol(v, &end, 10);

        if (end == v) {
            return 0;
        }
        if (k == n) {
            return 1;
        }
        if (*end != ',') {
            return 0;
        }
        v = end + 1;
    }
}


/* Every configuration at every shape of n; best per shape, and the best
   single configuration over the whole step. */
static void
sweep_n(int n)
{
    int     nc = pl_cuda_gemv_configs(), s, c, best_c = -1;
    double  t[NSHAPES][MAX_CONFIGS], cub[NSHAPES], best[NSHAPES];
    double  best_step = -1.0;

    for (s = 0; s < NSHAPES; s++) {
        int  bc = -1;

        printf("# sweep n=%d %-7s", n, shapes[s].name);
        for (c = 0; c < nc && c < MAX_CONFIGS; c++) {
            t[s][c] = time_path(c, &shapes[s], n);
            printf(" %s %.1f", pl_cuda_gemv_config_name(c), t[s][c] * 1e6);
            if (t[s][c] > 0.0 && (bc < 0 || t[s][c] < t[s][bc])) {
                bc = c;
            }
        }
        cub[s] = time_path(PATH_CUBLAS, &shapes[s], n);
        best[s] = bc >= 0 ? t[s][bc] : -1.0;
        printf(" cublas %.1f us; best %s %.3f TB/s\n", cub[s] * 1e6,
               pl_cuda_gemv_config_name(bc), tbs(&shapes[s], best[s]));
    }
    for (c = 0; c < nc && c < MAX_CONFIGS; c++) {
        double  one[NSHAPES], st;

        for (s = 0; s < NSHAPES; s++) {
            one[s] = t[s][c];
        }
        st = step_time(one);
        if (st > 0.0 && (best_step < 0.0 || st < best_step)) {
            best_step = st;
            best_c = c;
        }
    }
    printf("ours gemv sweep n=%-2d step: best per shape %.3f ms, best single "
           "config %s %.3f ms, cublas %.3f ms\n", n, step_time(best) * 1e3,
           pl_cuda_gemv_config_name(best_c), best_step * 1e3,
           step_time(cub) * 1e3);
}


/* The kernel as dispatched and cuBLAS at every shape; the projected step
   of each, in ms, into ours_ms and cublas_ms. */
static void
bench_n(int n, double *ours_ms, double *cublas_ms)
{
    double  ours[NSHAPES], cub[NSHAPES];
    int     s;

    for (s = 0; s < NSHAPES; s++) {
        shape_t  *sh = &shapes[s];
        pl_weight_t  w = weight(sh, 0);

        ours[s] = time_path(PATH_PICK, sh, n);
        cub[s] = time_path(PATH_CUBLAS, sh, n);
        if (ours[s] < 0.0) {
            printf("ours gemv n=%-2d %-7s %5dx%-5d  refused      "
                   "| cublas %7.1f us %.3f TB/s\n", n, sh->name, sh->rows,
                   sh->cols, cub[s] * 1e6, tbs(sh, cub[s]));
            continue;
        }
        printf("ours gemv n=%-2d %-7s %5dx%-5d %7.1f us %.3f TB/s (%s) "
               "| cublas %7.1f us %.3f TB/s | %.2fx\n", n, sh->name,
               sh->rows, sh->cols, ours[s] * 1e6, tbs(sh, ours[s]),
               pl_cuda_gemv_config_name(pl_cuda_gemv_pick(BE, &w, n)),
               cub[s] * 1e6, tbs(sh, cub[s]), cub[s] / ours[s]);
    }
    *ours_ms = step_time(ours) * 1e3;
    *cublas_ms = step_time(cub) * 1e3;
}


/* One decode step's GEMMs: 32 distinct layers, then lm_head. */
static void
launch_step(int ours, int n)
{
    int  l, s;

    for (l = 0; l < LAYERS; l++) {
        for (s = 0; s < NSHAPES; s++) {
            pl_weight_t  w = weight(&shapes[s], l % shapes[s].copies);

            if (shapes[s].per_step != LAYERS) {
                continue;
            }
            if (ours) {
                BE->matmul(BE, shapes[s].out, X, &w, NULL, n);
            } else {
                pl_cuda_matmul_cublas(BE, shapes[s].out, X, &w, NULL, n);
            }
        }
    }
    for (s = 0; s < NSHAPES; s++) {
        pl_weight_t  w = weight(&shapes[s], 0);

        if (shapes[s].per_step == 1) {
            if (ours) {
                BE->matmul(BE, shapes[s].out, X, &w, NULL, n);
            } else {
                pl_cuda_matmul_cublas(BE, shapes[s].out, X, &w, NULL, n);
            }
        }
    }
}


/* every shape's output, as bytes (*len of them) */
static char *
download_outs(int n, size_t *len)
{
    size_t  off = 0;
    char   *h;
    int     s;

    *len = 0;
    for (s = 0; s < NSHAPES; s++) {
        *len += (size_t) n * shapes[s].rows * 2;
    }
    h = malloc(*len);
    for (s = 0; s < NSHAPES; s++) {
        BE->download(BE, h + off, shapes[s].out,
                     (size_t) n * shapes[s].rows * 2);
        off += (size_t) n * shapes[s].rows * 2;
    }
    BE->sync(BE);
    return h;
}


static void
poison_outs(void)
{
    int  s;

    for (s = 0; s < NSHAPES; s++) {
        check(cudaMemsetAsync(shapes[s].out, 0xff,
                              (size_t) PL_GEMV_MAX_N * shapes[s].rows * 2,
                              pl_cuda_stream(BE)), "memset");
    }
    BE->sync(BE);
}


/* The step captured as one graph (the backend's matmul, as the model
   calls it, or cuBLAS alone) and replayed: median ms.  *same: the
   replay wrote exactly what the direct launches wrote. */
static double
graph_step(int ours, int n, int *same)
{
    cudaStream_t     st = pl_cuda_stream(BE);
    cudaGraph_t      g;
    cudaGraphExec_t  ge;
    cudaEvent_t      ev[GRAPH_REPS + 1];
    float            ms[GRAPH_REPS];
    char            *direct, *replayed;
    size_t           len;
    int              i;

    poison_outs();
    launch_step(ours, n);
    direct = download_outs(n, &len);
    poison_outs();

    check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal),
          "begin capture");
    launch_step(ours, n);
    check(cudaStreamEndCapture(st, &g), "end capture");
    check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
    check(cudaGraphLaunch(ge, st), "graph launch");
    replayed = download_outs(n, &len);
    *same = memcmp(direct, replayed, len) == 0;

    for (i = 0; i <= GRAPH_REPS; i++) {
        check(cudaEventCreate(&ev[i]), "event");
    }
    check(cudaGraphLaunch(ge, st), "graph launch");
    check(cudaEventRecord(ev[0], st), "record");
    for (i = 0; i < GRAPH_REPS; i++) {
        check(cudaGraphLaunch(ge, st), "graph launch");
        check(cudaEventRecord(ev[i + 1], st), "record");
    }
    check(cudaEventSynchronize(ev[GRAPH_REPS]), "sync");
    for (i = 0; i < GRAPH_REPS; i++) {
        check(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]), "elapsed");
    }
    for (i = 0; i <= GRAPH_REPS; i++) {
        cudaEventDestroy(ev[i]);
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    free(direct);
    free(replayed);
    return median(ms, GRAPH_REPS);
}


static void
setup(void)
{
    size_t  xbytes = (size_t) PL_GEMV_MAX_N * 11008 * 2;
    int     s;

    X = dev_alloc(xbytes);
    fill_random(X, xbytes);
    for (s = 0; s < NSHAPES; s++) {
        size_t  bytes = weight_bytes(&shapes[s]) * shapes[s].copies;

        shapes[s].w = dev_alloc(bytes);
        shapes[s].out = dev_alloc((size_t) PL_GEMV_MAX_N * shapes[s].rows
                                  * 2);
        fill_random(shapes[s].w, bytes);
    }
}


int
main(int argc, char **argv)
{
    const char  *env = getenv("PAGEDLLM_GEMV_SWEEP");
    int          sweep = (argc > 1 && strcmp(argv[1], "sweep") == 0)
                         || (env != NULL && atoi(env) > 0);
    double       ours_ms[NNS], cublas_ms[NNS], graph_ms[NNS];
    double       cublas_graph_ms, ceiling_ms;
    int          same[NNS], cublas_same = 0, i;
    char         err[256];

    BE = pl_backend_cuda_create(0, err, sizeof(err));
    if (BE == NULL) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    copy_tbs = bench_copy();
    setup();
    ceiling_ms = step_bytes() / (copy_tbs * 1e12) * 1e3;
    printf("ours gemv: %d configurations, dispatch up to n=%d; step weights "
           "%.2f GB\n", pl_cuda_gemv_configs(), pl_cuda_gemv_n_small(),
           step_bytes() / 1e9);

    if (sweep) {
        for (i = 0; i < (int) (sizeof(sweep_ns) / sizeof(sweep_ns[0]));
             i++)
        {
            if (sweep_wanted(sweep_ns[i])) {
                sweep_n(sweep_ns[i]);
            }
        }
    }
    for (i = 0; i < NNS; i++) {
        bench_n(ns[i], &ours_ms[i], &cublas_ms[i]);
    }
    for (i = 0; i < NNS; i++) {
        graph_ms[i] = graph_step(1, ns[i], &same[i]);
    }
    cublas_graph_ms = graph_step(0, 1, &cublas_same);

    printf("#\n# decode step GEMMs (32 layers + lm_head, %.2f GB): at the "
           "copy's %.3f TB/s %.3f ms; target 1.25x = %.3f ms\n",
           step_bytes() / 1e9, copy_tbs, ceiling_ms, 1.25 * ceiling_ms);
    for (i = 0; i < NNS; i++) {
        printf("ours gemv step n=%-2d gemv %.3f ms  cublas %.3f ms  matmul "
               "graph %.3f ms = %.2fx ceiling  graph==direct %s\n", ns[i],
               ours_ms[i], cublas_ms[i], graph_ms[i],
               graph_ms[i] / ceiling_ms, same[i] ? "yes" : "NO");
    }
    printf("ours gemv step n=1  cublas alone: graph %.3f ms = %.2fx ceiling  "
           "graph==direct %s\n", cublas_graph_ms,
           cublas_graph_ms / ceiling_ms, cublas_same ? "yes" : "NO");
    BE->destroy(BE);
    return 0;
}
