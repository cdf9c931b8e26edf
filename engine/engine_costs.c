/*
 * engine_costs: what --preemption-mode auto weighs, measured once at start
 * on this machine, this backend, this model and this block size.
 *
 *   host link   a few MiB of KV blocks swapped out to the host pool and
 *               back in through the model's swap (the backend's copy op,
 *               per layer and block, exactly as preemption moves them);
 *   prefill     one prompt chunk of up to PL_COSTS_PREFILL_TOKENS tokens
 *               run through the model into the KV cache.
 *
 * Each is the median of PL_COSTS_RUNS timed runs after one untimed run
 * that touches every page and warms the weights and kernels: one run on
 * a machine shared with other work can be off several times either way.
 *
 * Both run before any request exists, on blocks nobody holds yet.  The
 * engine's --preemption-costs gives both rates instead (for tests, which
 * need a choice they can predict).
 */

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

#define PL_COSTS_SWAP_BYTES      (8.0 * PL_MIB)
#define PL_COSTS_PREFILL_TOKENS  512
#define PL_COSTS_RUNS            3


static double
pl_costs_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}


/* The median of PL_COSTS_RUNS (odd) times; sorts them. */
static double
pl_costs_median(double *t)
{
    double  x;
    int     i, j;

    for (i = 1; i < PL_COSTS_RUNS; i++) {
        for (j = i; j > 0 && t[j - 1] > t[j]; j--) {
            x = t[j - 1];
            t[j - 1] = t[j];
            t[j] = x;
        }
    }

    return t[PL_COSTS_RUNS / 2];
}


/* Seconds one round trip of blocks ids[0..n) (device block i to host
   block i and back) takes; -1 when the model refuses it. */
static double
pl_costs_swap_round(pl_engine_t *e, const int32_t *ids, int n)
{
    double  t0 = pl_costs_now();

    if (pl_model_kv_swap(e->model, e->host_pool, ids, ids, n,
                         PL_KV_SWAP_OUT) != 0
        || pl_model_kv_swap(e->model, e->host_pool, ids, ids, n,
                            PL_KV_SWAP_IN) != 0)
    {
        return -1;
    }
    e->be->sync(e->be);

    return pl_costs_now() - t0;
}


/* Bytes a second between the KV cache and the host pool, or -1. */
static double
pl_costs_host_link(pl_engine_t *e, double block_bytes)
{
    int32_t  *ids;
    double    t, runs[PL_COSTS_RUNS + 1];
    int       i, n = (int) (PL_COSTS_SWAP_BYTES / block_bytes);

    n = n < e->num_blocks ? n : e->num_blocks;
    n = n < e->bm.num_host_blocks ? n : e->bm.num_host_blocks;
    n = n > 0 ? n : 1;

    ids = malloc((size_t) n * sizeof(int32_t));
    if (ids == NULL) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        ids[i] = i;
    }

    for (i = 0; i <= PL_COSTS_RUNS; i++) {
        runs[i] = pl_costs_swap_round(e, ids, n);
        if (runs[i] < 0) {
            break;
        }
    }
    t = i > PL_COSTS_RUNS ? pl_costs_median(runs + 1) : -1;
    free(ids);

    return t > 0 ? 2.0 * n * block_bytes / t : -1;
}


/* One sequence's first n tokens, into blocks 0, 1, ... of the cache. */
typedef struct {
    int32_t     *ids;
    int32_t     *positions;
    int32_t     *slots;
    int32_t     *table;
    int32_t      query_start[2];
    int32_t      context_len;
    int32_t      logits_row;
    float       *logits;
    pl_batch_t   batch;
} pl_costs_prompt_t;


static int
pl_costs_prompt(pl_engine_t *e, pl_costs_prompt_t *p, int n)
{
    int  i, bs = e->cfg.block_size, nb = (n + bs - 1) / bs;

    p->ids = malloc((size_t) n * sizeof(int32_t));
    p->positions = malloc((size_t) n * sizeof(int32_t));
    p->slots = malloc((size_t) n * sizeof(int32_t));
    p->table = malloc((size_t) nb * sizeof(int32_t));
    p->logits = malloc((size_t) e->mc->vocab_size * sizeof(float));
    if (!p->ids || !p->positions || !p->slots || !p->table || !p->logits) {
        return -1;
    }

    for (i = 0; i < n; i++) {
        p->ids[i] = (int32_t) ((i * 7919 + 1) % e->mc->vocab_size);
        p->positions[i] = i;
        p->slots[i] = i;
    }
    for (i = 0; i < nb; i++) {
        p->table[i] = i;
    }
    p->query_start[0] = 0;
    p->query_start[1] = n;
    p->context_len = n;
    p->logits_row = n - 1;

    p->batch = (pl_batch_t) {
        .num_tokens = n,
        .num_seqs = 1,
        .token_ids = p->ids,
        .positions = p->positions,
        .slot_mapping = p->slots,
        .query_start = p->query_start,
        .context_lens = &p->context_len,
        .block_tables = p->table,
        .logits_rows = &p->logits_row,
        .max_blocks_per_seq = nb,
        .max_query_len = n,
        .max_context_len = n,
    };

    return 0;
}


static void
pl_costs_prompt_free(pl_costs_prompt_t *p)
{
    free(p->ids);
    free(p->positions);
    free(p->slots);
    free(p->table);
    free(p->logits);
}


/* Tokens a second the model prefills, or -1. */
static double
pl_costs_prefill(pl_engine_t *e)
{
    pl_costs_prompt_t  p;
    char               err[256];
    double             t0, t = -1, runs[PL_COSTS_RUNS + 1];
    int                i, n = PL_COSTS_PREFILL_TOKENS;

    n = n < e->cfg.max_num_batched_tokens ? n : e->cfg.max_num_batched_tokens;
    n = n < e->max_model_len ? n : e->max_model_len;

    memset(&p, 0, sizeof(p));
    if (pl_costs_prompt(e, &p, n) == 0) {
        for (i = 0; i <= PL_COSTS_RUNS; i++) {
            t0 = pl_costs_now();
            if (pl_model_forward(e->model, &p.batch, p.logits, err,
                                 sizeof(err)) != 0)
            {
                pl_log(PL_LOG_ERROR, "timed prefill: %s", err);
                break;
            }
            runs[i] = pl_costs_now() - t0;
        }
        t = i > PL_COSTS_RUNS ? pl_costs_median(runs + 1) : -1;
    }
    pl_costs_prompt_free(&p);

    return t > 0 ? n / t : -1;
}


int
pl_engine_preemption_costs(pl_engine_t *e)
{
    pl_preempt_costs_t  *c = &e->sched.costs;
    const char          *how = "given";

    c->block_bytes = (double) pl_model_kv_block_bytes(e->model,
                                                      e->cfg.block_size)
                     * pl_model_tp_size(e->model);

    if (e->cfg.preemption_host_gbps > 0) {
        c->host_bytes_per_s = e->cfg.preemption_host_gbps * 1e9;
        c->prefill_tokens_per_s = e->cfg.preemption_prefill_tps;

    } else {
        how = "measured";
        c->host_bytes_per_s = pl_costs_host_link(e, c->block_bytes);
        c->prefill_tokens_per_s = pl_costs_prefill(e);
        if (c->host_bytes_per_s <= 0 || c->prefill_tokens_per_s <= 0) {
            pl_log(PL_LOG_ERROR, "auto preemption: cannot measure the "
                   "host link or the prefill rate");
            return -1;
        }
    }

    pl_log(PL_LOG_INFO, "auto preemption (%s): host link %.2f GB/s, "
           "prefill %.0f tokens/s, blocks of %d tokens %.0f bytes: a group "
           "is swapped when it holds more than %.3g computed tokens per "
           "distinct block", how, c->host_bytes_per_s / 1e9,
           c->prefill_tokens_per_s, e->cfg.block_size, c->block_bytes,
           2.0 * c->block_bytes * c->prefill_tokens_per_s
           / c->host_bytes_per_s);

    return 0;
}
