/*
 * cpu_ops: every operation of the CPU backend against a plain loop written
 * here (in double where it matters), plus the dtype conversions it rests on.
 */

#include <stdint.h>

#include "pl_ops.h"
#include "tap.h"

static uint64_t  seed = 12345;


static float
frand(void)
{
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float) ((seed >> 40) / (double) (1 << 24)) * 2.0f - 1.0f;
}


static float *
random_floats(size_t n)
{
    float   *p = malloc(n * sizeof(float));
    size_t   i;

    for (i = 0; i < n; i++) {
        p[i] = frand();
    }
    return p;
}


/* a weight in dtype dt filled with random values; *ref gets the values it
   really holds, widened back to fp32 */
static pl_weight_t
random_weight(pl_dtype_t dt, int rows, int cols, float **ref)
{
    size_t       n = (size_t) rows * cols, i;
    pl_weight_t  w = { malloc(n * pl_dtype_size(dt)), dt, rows, cols };

    *ref = malloc(n * sizeof(float));
    for (i = 0; i < n; i++) {
        float  v = frand();

        if (dt == PL_DT_F32) {
            ((float *) w.data)[i] = v;
        } else if (dt == PL_DT_BF16) {
            ((uint16_t *) w.data)[i] = pl_f32_to_bf16(v);
            v = pl_bf16_to_f32(((uint16_t *) w.data)[i]);
        } else {
            ((uint16_t *) w.data)[i] = pl_f32_to_f16(v);
            v = pl_f16_to_f32(((uint16_t *) w.data)[i]);
        }
        (*ref)[i] = v;
    }
    return w;
}


static double
max_diff(const float *a, const double *b, size_t n)
{
    double  m = 0.0;
    size_t  i;

    for (i = 0; i < n; i++) {
        double  d = fabs((double) a[i] - b[i]);

        if (d > m || isnan(d)) {
            m = isnan(d) ? INFINITY : d;
        }
    }
    return m;
}


static void
test_conversions(void)
{
    uint32_t  h;
    int       bad16 = 0, badbf = 0;

    is_int(pl_f32_to_f16(1.0f), 0x3c00, "f16: 1.0");
    is_int(pl_f32_to_f16(65504.0f), 0x7bff, "f16: the largest finite");
    is_int(pl_f32_to_f16(65520.0f), 0x7c00, "f16: 65520 rounds to infinity");
    is_int(pl_f32_to_f16(0x1p-24f), 0x0001, "f16: the smallest subnormal");
    is_int(pl_f32_to_f16(0x1p-25f), 0x0000, "f16: half of it ties to even 0");
    is_int(pl_f32_to_f16(0x1.8p-25f), 0x0001, "f16: above half rounds up");
    is_int(pl_f32_to_f16(1.0f + 0x1p-11f), 0x3c00,
           "f16: a tie rounds to the even mantissa");
    is_int(pl_f32_to_f16(1.0f + 0x3p-11f), 0x3c02,
           "f16: a tie above an odd mantissa rounds up");
    is_int(pl_f32_to_f16(-2.0f), 0xc000, "f16: sign");
    ok((pl_f32_to_f16(NAN) & 0x7fff) > 0x7c00, "f16: NaN stays NaN");
    is_int(pl_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80,
           "bf16: a tie rounds to even");
    is_int(pl_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82,
           "bf16: a tie above an odd mantissa rounds up");
    ok((pl_f32_to_bf16(NAN) & 0x7fff) > 0x7f80, "bf16: NaN stays NaN");
    for (h = 0; h < 65536; h++) {
        float  f = pl_f16_to_f32((uint16_t) h);
        float  g = pl_bf16_to_f32((uint16_t) h);

        if (!isnan(f) && pl_f32_to_f16(f) != h) {
            bad16++;
        }
        if (!isnan(g) && pl_f32_to_bf16(g) != h) {
            badbf++;
        }
    }
    is_int(bad16, 0, "every f16 value survives f16 -> f32 -> f16");
    is_int(badbf, 0, "every bf16 value survives bf16 -> f32 -> bf16");
    ok(pl_f16_to_f32(0x0001) == 0x1p-24f && pl_f16_to_f32(0x3555) > 0.333f
       && pl_f16_to_f32(0x3555) < 0.3334f, "f16 decodes subnormals and "
       "normals");
    is_int(pl_dtype_size(PL_DT_BF16), 2, "bf16 is 2 bytes");
    is_str(pl_dtype_name(PL_DT_F16), "F16", "dtype names");
}


static void
test_memory(pl_backend_t *be)
{
    unsigned char  *p = be->alloc(be, 1000);
    size_t          free_b = 0, total_b = 0, i;
    int             zero = 1;

    for (i = 0; p != NULL && i < 1000; i++) {
        zero &= p[i] == 0;
    }
    ok(p != NULL && (uintptr_t) p % 64 == 0 && zero,
       "alloc returns zeroed memory aligned to 64 bytes");
    be->free(be, p);
    ok(be->mem_info(be, &free_b, &total_b) == 0 && total_b > 0
       && free_b <= total_b, "mem_info reports free <= total memory");
    ok(be->act_dtype == PL_DT_F32, "activations are fp32");
}


static void
ref_rmsnorm(double *out, const float *x, const float *w, int n, int dim,
    float eps)
{
    int  i, j;

    for (i = 0; i < n; i++) {
        double  ss = 0.0;

        for (j = 0; j < dim; j++) {
            ss += (double) x[i * dim + j] * x[i * dim + j];
        }
        for (j = 0; j < dim; j++) {
            out[i * dim + j] = x[i * dim + j] / sqrt(ss / dim + eps) * w[j];
        }
    }
}


static void
test_norms(pl_backend_t *be, int n)
{
    int          dim = 37, i;
    float       *wref, *x = random_floats(n * dim), *y = random_floats(n * dim);
    float       *res = malloc(n * dim * sizeof(float));
    float       *out = malloc(n * dim * sizeof(float));
    double      *ref = malloc(n * dim * sizeof(double));
    pl_weight_t  w = random_weight(PL_DT_BF16, 1, dim, &wref);

    be->rmsnorm(be, out, x, &w, n, dim, 1e-5f);
    ref_rmsnorm(ref, x, wref, n, dim, 1e-5f);
    ok(max_diff(out, ref, n * dim) < 1e-5, "rmsnorm matches the loop "
       "(%d rows)", n);

    memcpy(res, x, n * dim * sizeof(float));
    be->add_rmsnorm(be, out, res, y, &w, n, dim, 1e-5f);
    for (i = 0; i < n * dim; i++) {
        x[i] += y[i];
        ref[i] = x[i];
    }
    ok(max_diff(res, ref, n * dim) == 0.0, "add_rmsnorm adds x into the "
       "residual");
    ref_rmsnorm(ref, x, wref, n, dim, 1e-5f);
    ok(max_diff(out, ref, n * dim) < 1e-5, "add_rmsnorm normalizes the sum "
       "(%d rows)", n);
    free(x); free(y); free(res); free(out); free(ref); free(wref);
    free(w.data);
}


static void
ref_layernorm(double *out, const float *x, const float *w, const float *b,
    int n, int dim, float eps)
{
    int  i, j;

    for (i = 0; i < n; i++) {
        double  mean = 0.0, var = 0.0;

        for (j = 0; j < dim; j++) {
            mean += x[i * dim + j];
        }
        mean /= dim;
        for (j = 0; j < dim; j++) {
            var += (x[i * dim + j] - mean) * (x[i * dim + j] - mean);
        }
        for (j = 0; j < dim; j++) {
            out[i * dim + j] = (x[i * dim + j] - mean) / sqrt(var / dim + eps)
                               * w[j] + b[j];
        }
    }
}


/* OPT's operations: LayerNorm with bias, the residual add, ReLU */
static void
test_opt_ops(pl_backend_t *be, int n)
{
    int          dim = 37, i;
    float       *wref, *bref, *x = random_floats(n * dim);
    float       *y = random_floats(n * dim);
    float       *out = malloc(n * dim * sizeof(float));
    double      *ref = malloc(n * dim * sizeof(double));
    pl_weight_t  w = random_weight(PL_DT_F16, 1, dim, &wref);
    pl_weight_t  b = random_weight(PL_DT_F16, 1, dim, &bref);

    for (i = 0; i < n * dim; i++) {
        x[i] += 3.0f;                   /* a mean far from 0 */
    }
    be->layernorm(be, out, x, &w, &b, n, dim, 1e-5f);
    ref_layernorm(ref, x, wref, bref, n, dim, 1e-5f);
    ok(max_diff(out, ref, n * dim) < 1e-5, "layernorm centres, scales and "
       "shifts like the loop (%d rows)", n);

    for (i = 0; i < n * dim; i++) {
        ref[i] = (double) x[i] + y[i];
    }
    be->add(be, x, y, n, dim);
    ok(max_diff(x, ref, n * dim) < 1e-6, "add adds x into the residual "
       "(%d rows)", n);

    for (i = 0; i < n * dim; i++) {
        ref[i] = y[i] > 0 ? y[i] : 0.0;
    }
    be->relu(be, y, y, n, dim);
    ok(max_diff(y, ref, n * dim) == 0.0, "relu zeroes the negatives, in "
       "place (%d rows)", n);
    free(x); free(y); free(out); free(ref); free(wref); free(bref);
    free(w.data); free(b.data);
}


static void
test_matmul(pl_backend_t *be, pl_dtype_t dt, int with_bias, int n, int rows,
    int cols)
{
    int          i, j, k;
    float       *wref, *bref = NULL, *x = random_floats(n * cols);
    float       *out = malloc(n * rows * sizeof(float));
    double      *ref = malloc(n * rows * sizeof(double));
    pl_weight_t  w = random_weight(dt, rows, cols, &wref);
    pl_weight_t  bias = random_weight(dt, 1, rows, &bref);

    be->matmul(be, out, x, &w, with_bias ? &bias : NULL, n);
    for (i = 0; i < n; i++) {
        for (j = 0; j < rows; j++) {
            double  s = with_bias ? bref[j] : 0.0;

            for (k = 0; k < cols; k++) {
                s += (double) x[i * cols + k] * wref[j * cols + k];
            }
            ref[i * rows + j] = s;
        }
    }
    ok(max_diff(out, ref, n * rows) < 1e-5, "matmul [%d][%d] x [%d][%d]^T "
       "with %s weights, %s bias", n, cols, rows, cols, pl_dtype_name(dt),
       with_bias ? "with" : "without");
    free(x); free(out); free(ref); free(wref); free(bref);
    free(w.data); free(bias.data);
}


static void
ref_rope(double *out, const float *x, int pos, const float *inv_freq,
    int heads, int hd)
{
    int  h, i, half = hd / 2;

    for (h = 0; h < heads; h++) {
        for (i = 0; i < half; i++) {
            double  a = (float) pos * inv_freq[i];
            double  x0 = x[h * hd + i], x1 = x[h * hd + i + half];

            out[h * hd + i] = x0 * cos(a) - x1 * sin(a);
            out[h * hd + i + half] = x1 * cos(a) + x0 * sin(a);
        }
    }
}


/*
 * The prologue the model ran before qkv_rope_store: gather q, k and v out
 * of the fused rows, rope on q and k (fp32 cosf and sinf of the fp32
 * angle), kv_write k and v to their slots.  The operation must give the
 * same bits.
 */
static void
old_prologue(float *q, float *kc, float *vc, const float *qkv,
    const int32_t *pos, const int32_t *slot, const float *inv_freq, int n,
    int nh, int nkv, int hd)
{
    int     stride = (nh + 2 * nkv) * hd, kvd = nkv * hd, half = hd / 2;
    float  *k = malloc(n * kvd * sizeof(float));
    int     t, h, i;

    for (t = 0; t < n; t++) {
        memcpy(q + t * nh * hd, qkv + t * stride, nh * hd * sizeof(float));
        memcpy(k + t * kvd, qkv + t * stride + nh * hd, kvd * sizeof(float));
        for (h = 0; inv_freq != NULL && h < nh + nkv; h++) {
            float  *v = h < nh ? q + (t * nh + h) * hd
                               : k + t * kvd + (h - nh) * hd;

            for (i = 0; i < half; i++) {
                float  angle = (float) pos[t] * inv_freq[i];
                float  c = cosf(angle), s = sinf(angle);
                float  a = v[i], b = v[i + half];

                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
        if (slot[t] >= 0) {
            memcpy(kc + slot[t] * kvd, k + t * kvd, kvd * sizeof(float));
            memcpy(vc + slot[t] * kvd, qkv + t * stride + nh * hd + kvd,
                   kvd * sizeof(float));
        }
    }
    free(k);
}


static void
test_qkv_rope_store(pl_backend_t *be, int n, int rope)
{
    int       nh = 4, nkv = 2, hd = 16, kvd = 2 * 16, slots = n + 5, i, t;
    int       stride = (nh + 2 * nkv) * hd;
    int32_t  *pos = malloc(n * sizeof(int32_t));
    int32_t  *slot = malloc(n * sizeof(int32_t));
    float     inv_freq[8], *inv = rope ? inv_freq : NULL;
    float    *qkv = random_floats(n * stride);
    float    *kc = random_floats(slots * kvd), *vc = random_floats(slots * kvd);
    float    *q = malloc(n * nh * hd * sizeof(float));
    float    *okc = malloc(slots * kvd * sizeof(float));
    float    *ovc = malloc(slots * kvd * sizeof(float));
    float    *oq = malloc(n * nh * hd * sizeof(float));
    double   *rq = malloc(n * nh * hd * sizeof(double));
    double   *rk = malloc(n * kvd * sizeof(double));
    double    err_q = 0.0, err_k = 0.0;
    int       v_exact = 1, kept = 1;

    for (i = 0; i < hd / 2; i++) {
        inv_freq[i] = (float) pow(10000.0, -2.0 * i / hd);
    }
    for (t = 0; t < n; t++) {
        pos[t] = t < 3 ? t : (t * 293) % 4096;
        /* shuffled and distinct: 7 is prime to n + 5 for the n tested */
        slot[t] = t % 5 == 2 ? -1 : (t * 7 + 3) % slots;
    }
    memcpy(okc, kc, slots * kvd * sizeof(float));
    memcpy(ovc, vc, slots * kvd * sizeof(float));
    old_prologue(oq, okc, ovc, qkv, pos, slot, inv, n, nh, nkv, hd);
    be->qkv_rope_store(be, q, kc, vc, qkv, pos, slot, inv, n, nh, nkv, hd);
    ok(memcmp(q, oq, n * nh * hd * sizeof(float)) == 0
       && memcmp(kc, okc, slots * kvd * sizeof(float)) == 0
       && memcmp(vc, ovc, slots * kvd * sizeof(float)) == 0,
       "qkv_rope_store gives the bits of gather, %srope and kv_write "
       "(%d tokens)", rope ? "" : "no ", n);

    for (t = 0; t < n; t++) {
        const float  *x = qkv + t * stride;

        if (rope) {
            ref_rope(rq, x, pos[t], inv_freq, nh, hd);
            ref_rope(rk, x + nh * hd, pos[t], inv_freq, nkv, hd);
        } else {
            for (i = 0; i < nh * hd; i++) {
                rq[i] = x[i];
            }
            for (i = 0; i < kvd; i++) {
                rk[i] = x[nh * hd + i];
            }
        }
        err_q = fmax(err_q, max_diff(q + t * nh * hd, rq, nh * hd));
        if (slot[t] < 0) {
            continue;
        }
        err_k = fmax(err_k, max_diff(kc + slot[t] * kvd, rk, kvd));
        v_exact = v_exact && memcmp(vc + slot[t] * kvd,
                                    x + nh * hd + kvd,
                                    kvd * sizeof(float)) == 0;
    }
    for (i = 0; i < slots; i++) {
        int  used = 0;

        for (t = 0; t < n; t++) {
            used = used || slot[t] == i;
        }
        kept = kept && (used
                        || (memcmp(kc + i * kvd, okc + i * kvd,
                                   kvd * sizeof(float)) == 0));
    }
    ok(err_q < 1e-5, "qkv_rope_store: q is the query heads%s", rope
       ? ", rotate-half by position (GQA)" : ", unturned");
    ok(err_k < 1e-5 && v_exact, "qkv_rope_store: each token's K%s and V "
       "heads at its slot", rope ? " (turned alike)" : "");
    ok(kept, "qkv_rope_store: slot -1 and unused slots keep their rows");
    free(pos); free(slot); free(qkv); free(kc); free(vc); free(q);
    free(okc); free(ovc); free(oq); free(rq); free(rk);
}


static void
test_silu_mul(pl_backend_t *be, int n)
{
    int      inter = 11, i, j;
    float   *gu = random_floats(n * 2 * inter);
    float   *out = malloc(n * inter * sizeof(float));
    double  *ref = malloc(n * inter * sizeof(double));

    be->silu_mul(be, out, gu, n, inter);
    for (i = 0; i < n; i++) {
        for (j = 0; j < inter; j++) {
            double  g = gu[i * 2 * inter + j];

            ref[i * inter + j] = g / (1.0 + exp(-g))
                                 * gu[i * 2 * inter + inter + j];
        }
    }
    ok(max_diff(out, ref, n * inter) < 1e-6, "silu_mul gates the second "
       "half by silu of the first (%d rows)", n);
    free(gu); free(out); free(ref);
}


static void
test_elementwise(pl_backend_t *be)
{
    int          n = 3, inter = 11, dim = 8, i;
    int32_t      ids[4] = { 5, 0, 9, 5 }, rows[3] = { 2, 0, 2 };
    float       *gu = random_floats(n * 2 * inter), *tref;
    float       *out = malloc(128 * sizeof(float));
    double       ref[128];
    pl_weight_t  table = random_weight(PL_DT_BF16, 10, dim, &tref);

    be->embedding(be, out, &table, ids, 4);
    for (i = 0; i < 4 * dim; i++) {
        ref[i] = tref[ids[i / dim] * dim + i % dim];
    }
    ok(max_diff(out, ref, 4 * dim) == 0.0, "embedding copies the table rows "
       "of the ids");

    be->gather_rows(be, out, gu, rows, 3, 2 * inter);
    for (i = 0; i < 3 * 2 * inter; i++) {
        ref[i] = gu[rows[i / (2 * inter)] * 2 * inter + i % (2 * inter)];
    }
    ok(max_diff(out, ref, 3 * 2 * inter) == 0.0, "gather_rows picks rows");
    free(gu); free(out); free(tref); free(table.data);
}


/*
 * Three sequences through shuffled physical blocks: a prefill chunk after
 * earlier context, a decode step and a whole prompt.
 */
#define NH   4
#define NKV  2
#define HD   8
#define BS   4
#define NBLK 16

typedef struct {
    int      ctx;
    int      qlen;
    int32_t  table[6];
} seq_t;


static void
ref_attention(double *out, const float *q, const float *k, const float *v,
    int ctx, int qlen, float scale)
{
    int  i, h, t, d;

    for (i = 0; i < qlen; i++) {
        int  last = ctx - qlen + i;

        for (h = 0; h < NH; h++) {
            int     kvh = h / (NH / NKV);
            double  s[64], mx = -INFINITY, sum = 0.0;

            for (t = 0; t <= last; t++) {
                s[t] = 0.0;
                for (d = 0; d < HD; d++) {
                    s[t] += (double) q[(i * NH + h) * HD + d]
                            * k[(t * NKV + kvh) * HD + d];
                }
                s[t] *= scale;
                mx = s[t] > mx ? s[t] : mx;
            }
            for (t = 0; t <= last; t++) {
                s[t] = exp(s[t] - mx);
                sum += s[t];
            }
            for (d = 0; d < HD; d++) {
                double  acc = 0.0;

                for (t = 0; t <= last; t++) {
                    acc += s[t] * v[(t * NKV + kvh) * HD + d];
                }
                out[(i * NH + h) * HD + d] = acc / sum;
            }
        }
    }
}


static void
test_paged_attention(pl_backend_t *be)
{
    seq_t     seqs[3] = {
        { 14, 5, { 11, 3, 7, 0 } },
        { 9, 1, { 2, 15, 5 } },
        { 6, 6, { 9, 12 } },
    };
    size_t    row = NKV * HD;
    float    *kc = be->alloc(be, NBLK * BS * row * sizeof(float));
    float    *vc = be->alloc(be, NBLK * BS * row * sizeof(float));
    float    *k[3], *v[3], *q = random_floats(12 * NH * HD);
    float    *out = malloc(12 * NH * HD * sizeof(float));
    double   *ref = malloc(12 * NH * HD * sizeof(double));
    int32_t   qs[4], cl[3], bt[3 * 6] = { 0 }, slots[64], rows[3];
    int32_t   pos[12], ids[12] = { 0 };
    int       s, t, at = 0;
    float     scale = 1.0f / sqrtf(HD);

    for (s = 0; s < 3; s++) {
        k[s] = random_floats(seqs[s].ctx * row);
        v[s] = random_floats(seqs[s].ctx * row);
        for (t = 0; t < seqs[s].ctx; t++) {
            slots[t] = seqs[s].table[t / BS] * BS + t % BS;
        }
        for (t = 0; t < seqs[s].ctx; t++) {
            memcpy(kc + slots[t] * row, k[s] + t * row, row * sizeof(float));
            memcpy(vc + slots[t] * row, v[s] + t * row, row * sizeof(float));
        }
        memcpy(bt + s * 6, seqs[s].table, sizeof(seqs[s].table));
        qs[s] = at;
        cl[s] = seqs[s].ctx;
        for (t = 0; t < seqs[s].qlen; t++) {
            pos[at + t] = seqs[s].ctx - seqs[s].qlen + t;
        }
        ref_attention(ref + (size_t) at * NH * HD, q + (size_t) at * NH * HD,
                      k[s], v[s], seqs[s].ctx, seqs[s].qlen, scale);
        at += seqs[s].qlen;
        rows[s] = at - 1;
    }
    qs[3] = at;

    pl_batch_t  b = {
        .num_tokens = at, .num_seqs = 3, .token_ids = ids, .positions = pos,
        .slot_mapping = slots, .query_start = qs, .context_lens = cl,
        .block_tables = bt, .logits_rows = rows, .max_blocks_per_seq = 6,
        .max_query_len = 6, .max_context_len = 14
    };

    be->attention(be, out, q, kc, vc, be->batch_upload(be, &b), NH, NKV, HD,
                  BS, scale);
    ok(max_diff(out, ref, (size_t) at * NH * HD) < 1e-5, "paged attention "
       "over shuffled blocks matches causal attention on contiguous K/V "
       "(prefill chunk, decode, whole prompt; GQA)");
    for (s = 0; s < 3; s++) {
        free(k[s]);
        free(v[s]);
    }
    be->free(be, kc);
    be->free(be, vc);
    free(q); free(out); free(ref);
}


int
main(void)
{
    char           err[256];
    pl_backend_t  *be = pl_backend_cpu_create(2, err, sizeof(err));
    pl_dtype_t     dts[3] = { PL_DT_F32, PL_DT_F16, PL_DT_BF16 };
    int            i;

    if (!ok(be != NULL, "the CPU backend starts")) {
        diag("%s", err);
        return done_testing();
    }
    ok(pl_backend_cpu_create(-1, err, sizeof(err)) == NULL
       && strstr(err, "threads") != NULL, "negative threads are refused");
    test_conversions();
    test_memory(be);
    test_norms(be, 21);
    test_norms(be, 2100);                       /* on several threads */
    test_opt_ops(be, 21);
    test_opt_ops(be, 9000);                     /* on several threads */
    for (i = 0; i < 3; i++) {
        test_matmul(be, dts[i], 0, 7, 19, 45);
        test_matmul(be, dts[i], 1, 7, 19, 45);
        test_matmul(be, dts[i], 1, 9, 301, 200);    /* on several threads */
    }
    test_qkv_rope_store(be, 1, 1);
    test_qkv_rope_store(be, 6, 1);
    test_qkv_rope_store(be, 300, 1);             /* on several threads */
    test_qkv_rope_store(be, 6, 0);
    test_silu_mul(be, 3);
    test_silu_mul(be, 3000);
    test_elementwise(be);
    test_paged_attention(be);
    be->destroy(be);
    return done_testing();
}
