/*
 * The small-batch matmul kernel (kernels/gemv.cu) against the CPU twin,
 * pl_cpu_matmul, on fresh random inputs: every launch configuration at
 * n = 1 .. N_SMALL + 1 and at the widest tiles (n up to 32), on shapes
 * whose rows end inside an m-tile and whose columns end inside a chunk,
 * with and without bias; then the backend's matmul, which dispatches
 * between the kernel and cuBLAS, at the Llama-2-7B shapes and at the
 * shapes the kernel must refuse (odd columns, misaligned x, n past
 * PL_GEMV_MAX_N, too few rows).
 *
 * Outputs hold one row more than the call writes, all poisoned with NaN
 * first: every element of out[n][rows] must be written and close to the
 * CPU's (||gpu - cpu|| / ||cpu||, bf16 result: METHOD.md's 1e-3 to 1e-2),
 * and the row past it left alone.
 *
 * All of it with bf16 activations, then a subset with fp16 ones (fewer n
 * and shapes, every tile width still): there only dispatch's
 * configurations are built (pl_cuda_gemv_built), and the others must
 * refuse.
 */

#include "pair.h"
#include "gemv.cuh"

#define GEMV_BOUND  5e-3

/* one weight matrix (and a bias) loaded into both backends */
typedef struct {
    int          rows;
    int          cols;
    void        *wbytes;
    void        *bbytes;
    pl_weight_t  wc, wg, bc, bg;
} mat_t;

/* how a case reaches the GPU */
enum {
    VIA_MATMUL = -2,           /* the backend's matmul (dispatch) */
    VIA_PICK = -1              /* pl_cuda_gemv choosing the configuration */
};

static pair_t      P;
static pl_dtype_t  act = PL_DT_BF16;    /* the GPU's activations */


static void
mat_load(mat_t *m, int rows, int cols)
{
    float  *w = pair_rand((size_t) rows * cols, 0.1f);
    float  *b = pair_rand(rows, 1.0f);

    m->rows = rows;
    m->cols = cols;
    m->wbytes = pair_weight_bytes(w, (size_t) rows * cols, PL_DT_BF16);
    m->bbytes = pair_weight_bytes(b, rows, PL_DT_BF16);
    if (pair_weight(&P, &m->wc, &m->wg, m->wbytes, PL_DT_BF16, rows, cols)
        != 0
        || pair_weight(&P, &m->bc, &m->bg, m->bbytes, PL_DT_BF16, 1, rows)
           != 0)
    {
        diag("cannot load a %dx%d weight", rows, cols);
        exit(1);
    }
    free(w);
    free(b);
}


static void
mat_free(mat_t *m)
{
    P.gpu->free(P.gpu, m->wg.data);
    P.gpu->free(P.gpu, m->bg.data);
    free(m->wbytes);
    free(m->bbytes);
}


static const char *
via_name(int via)
{
    return via == VIA_MATMUL ? "matmul"
           : via == VIA_PICK ? "gemv picked" : pl_cuda_gemv_config_name(via);
}


/* x on the GPU, misaligned by one element when asked (the kernel must
   refuse it and cuBLAS compute it); *base is what to free */
static void *
put_x(const float *x, size_t count, int misalign, void **base)
{
    float  *h = calloc(count + 1, sizeof(float));

    memcpy(h + misalign, x, count * sizeof(float));
    *base = pair_put(P.gpu, h, count + 1);
    free(h);
    return (char *) *base + misalign * 2;
}


/* out[n][rows] written and within GEMV_BOUND of the CPU's (relative), the row
   past it NaN */
static int
check_out(const void *og, const void *oc, int n, int rows, const char *name)
{
    size_t   cnt = (size_t) n * rows;
    float   *g = pair_get(P.gpu, og, cnt + rows);
    float   *c = pair_get(P.cpu, oc, cnt);
    double   e = pair_relerr(g, c, cnt);
    int      left = 0, i, r;

    for (i = 0; i < rows; i++) {
        left += isnan(g[cnt + i]) != 0;
    }
    r = ok(e <= GEMV_BOUND && left == rows,
           "%s: relative error %.2e <= %.0e, row past out[%d] untouched",
           name, e, GEMV_BOUND, n);
    if (left != rows) {
        diag("%d elements of the row past the output were written",
             rows - left);
    }
    free(g);
    free(c);
    return r;
}


/* One case: n random rows of x through the path via; 0 when the GPU
   computed it, -1 when pl_cuda_gemv refused it (nothing to compare). */
static int
run_case(const mat_t *m, int n, int via, int with_bias, int misalign)
{
    size_t   xs = (size_t) n * m->cols, os = (size_t) n * m->rows;
    float   *x = pair_rand(xs, 1.0f);
    void    *xc = pair_put(P.cpu, x, xs), *xbase;
    void    *xg = put_x(x, xs, misalign, &xbase);
    void    *oc = P.cpu->alloc(P.cpu, os * sizeof(float));
    void    *og = P.gpu->alloc(P.gpu, (os + m->rows) * 2);
    const pl_weight_t  *bc = with_bias ? &m->bc : NULL;
    const pl_weight_t  *bg = with_bias ? &m->bg : NULL;
    char     name[160];
    int      rc = 0;

    pair_poison(P.gpu, og, os + m->rows);
    if (via == VIA_MATMUL) {
        P.gpu->matmul(P.gpu, og, xg, &m->wg, bg, n);
    } else {
        rc = pl_cuda_gemv(P.gpu, og, xg, &m->wg, bg, n, via);
    }
    if (rc == 0) {
        P.cpu->matmul(P.cpu, oc, xc, &m->wc, bc, n);
        snprintf(name, sizeof(name), "%s n=%d %dx%d%s%s", via_name(via), n,
                 m->rows, m->cols, with_bias ? " +bias" : "",
                 misalign ? " x misaligned" : "");
        check_out(og, oc, n, m->rows, name);
    }
    P.gpu->free(P.gpu, xbase);
    P.gpu->free(P.gpu, og);
    P.cpu->free(P.cpu, xc);
    P.cpu->free(P.cpu, oc);
    free(x);
    return rc;
}


/* what configuration c answers with the current activations: 0 built
   for them, -1 not */
static int
built_rc(int c)
{
    return pl_cuda_gemv_built(c, act) ? 0 : -1;
}


/* n of the fp16 pass's short lists: the first and last of each 8-wide
   tile and the one past dispatch's limit */
static int
f16_skips(int n)
{
    return act == PL_DT_F16 && n % 8 > 1 && n != pl_cuda_gemv_n_small() + 1;
}


/* Each configuration on rows that end inside an m-tile (300 = 18 * 16 +
   12) and columns that end inside a chunk (1000 = 31 * 32 + 8), every n
   dispatch may send and one more; then the widest tiles on a matrix with
   fewer rows than one block has.  A configuration not built for the
   activations refuses. */
static void
test_configs(void)
{
    int    last = pl_cuda_gemv_n_small() + 1, c, n;
    mat_t  a, b;

    mat_load(&a, 300, 1000);
    mat_load(&b, 7, 4104);
    for (c = 0; c < pl_cuda_gemv_configs(); c++) {
        if (act == PL_DT_BF16) {
            ok(pl_cuda_gemv_built(c, act), "%s is built for bf16",
               pl_cuda_gemv_config_name(c));
        }
        if (built_rc(c) != 0) {
            is_int(run_case(&a, 1, c, 1, 0), -1, "%s refuses %s",
                   pl_cuda_gemv_config_name(c), pl_dtype_name(act));
            continue;
        }
        for (n = 1; n <= last; n++) {
            if (f16_skips(n)) {
                continue;
            }
            is_int(run_case(&a, n, c, n % 2, 0), 0,
                   "%s takes n=%d 300x1000", pl_cuda_gemv_config_name(c), n);
        }
        for (n = 23; n <= PL_GEMV_MAX_N; n += 9) {
            is_int(run_case(&b, n, c, n % 2, 0), 0,
                   "%s takes n=%d 7x4104", pl_cuda_gemv_config_name(c), n);
        }
    }
    mat_free(&a);
    mat_free(&b);
}


/* Columns down to one partial chunk: some warps have no chunk at all. */
static void
test_narrow_columns(void)
{
    static const int  cols[] = { 8, 24, 40, 72 };
    mat_t   m;
    size_t  i;
    int     c;

    for (i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
        mat_load(&m, 50, cols[i]);
        for (c = 0; c < pl_cuda_gemv_configs(); c++) {
            is_int(run_case(&m, 3, c, 1, 0), built_rc(c),
                   "%s %s n=3 50x%d", pl_cuda_gemv_config_name(c),
                   built_rc(c) == 0 ? "takes" : "refuses", cols[i]);
        }
        mat_free(&m);
    }
}


/* The 7B shapes through the backend's matmul, which takes the kernel for
   every n up to N_SMALL and cuBLAS past it (fp16: two of them). */
static void
test_llama_shapes(void)
{
    static const int  shapes[][2] = {
        { 12288, 4096 }, { 4096, 4096 }, { 22016, 4096 }, { 4096, 11008 },
        { 32000, 4096 }
    };
    static const int  ns[] = { 1, 2, 3, 8, 9, 16 };
    int     last = pl_cuda_gemv_n_small() + 1, n;
    mat_t   m;
    size_t  s, i;

    mat_load(&m, 4096, 4096);
    for (n = 1; n <= last; n++) {
        if (!f16_skips(n)) {
            run_case(&m, n, VIA_MATMUL, n == 4, 0);
        }
    }
    mat_free(&m);
    for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        if (act == PL_DT_F16 && s != 0 && s != 3) {
            continue;
        }
        mat_load(&m, shapes[s][0], shapes[s][1]);
        for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
            if (ns[i] <= pl_cuda_gemv_n_small()) {
                is_int(run_case(&m, ns[i], VIA_PICK, s == 0, 0), 0,
                       "the kernel takes n=%d %dx%d", ns[i], m.rows,
                       m.cols);
            }
        }
        run_case(&m, last, VIA_MATMUL, 0, 0);
        mat_free(&m);
    }
}


/* What the kernel refuses cuBLAS still computes right. */
static void
test_refused(void)
{
    mat_t  m;
    int    c;

    mat_load(&m, 1000, 4095);
    is_int(run_case(&m, 1, VIA_PICK, 0, 0), -1,
           "the kernel refuses columns that are not a multiple of 8");
    is_int(run_case(&m, 1, 0, 0, 0), -1,
           "... in every configuration");
    run_case(&m, 1, VIA_MATMUL, 1, 0);
    run_case(&m, 5, VIA_MATMUL, 0, 0);
    mat_free(&m);

    mat_load(&m, 4096, 1024);
    is_int(run_case(&m, 2, VIA_PICK, 0, 1), -1,
           "the kernel refuses x that is not 16-byte aligned");
    run_case(&m, 2, VIA_MATMUL, 0, 1);
    is_int(run_case(&m, PL_GEMV_MAX_N + 1, 0, 0, 0), -1,
           "the kernel refuses n past %d", PL_GEMV_MAX_N);
    mat_free(&m);

    mat_load(&m, 256, 4096);
    is_int(run_case(&m, 1, VIA_PICK, 0, 0), -1,
           "dispatch leaves 256 rows (too few blocks) to cuBLAS");
    run_case(&m, 1, VIA_MATMUL, 1, 0);
    for (c = 0; !pl_cuda_gemv_built(c, act); c++) {
        /* the first configuration built for these activations */
    }
    is_int(run_case(&m, 1, c, 1, 0), 0,
           "a named configuration (%s) still takes 256 rows",
           pl_cuda_gemv_config_name(c));
    mat_free(&m);
}


int
main(void)
{
    if (!pair_start(&P)) {
        return done_testing();
    }
    diag("%d configurations, dispatch up to n=%d", pl_cuda_gemv_configs(),
         pl_cuda_gemv_n_small());
    test_configs();
    test_narrow_columns();
    test_llama_shapes();
    test_refused();
    if (pair_act(P.gpu, PL_DT_F16)) {
        act = PL_DT_F16;
        test_configs();
        test_narrow_columns();
        test_llama_shapes();
        test_refused();
    }
    P.gpu->destroy(P.gpu);
    P.cpu->destroy(P.cpu);
    return done_testing();
}
