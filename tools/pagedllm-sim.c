/*
 * pagedllm-sim: the real scheduler and block manager driven by a step-time
 * cost model instead of a model, to measure what the paper's Figures 2,
 * 16 and 17 measure: how much of the KV pool holds real tokens, how large
 * the running batch gets, and the latency that implies, for the paged
 * policy and the Orca baselines on the same workload.
 *
 * Workloads (synthetic, seeded): requests arrive as a Poisson process of
 * the given rate; prompt and output lengths are log-normal, rounded, at
 * least 1, and the output is cut so that prompt + output <= 2048 (the
 * paper's maximum sequence length):
 *     sharegpt  prompt mu 4.58 sigma 1.0 (mean ~161), output mu 5.42
 *               sigma 0.9 (mean ~338)
 *     alpaca    prompt mu 2.76 sigma 0.6 (mean ~19), output mu 3.65
 *               sigma 0.9 (mean ~58)
 * Every request generates exactly its output length (no EOS), which is
 * also the "true output length" the Orca-Pow2 and Orca-Oracle policies
 * reserve for.
 *
 * Cost model of one iteration, for a 13B model (OPT-13B / LLaMA-13B, fp16,
 * 40 layers, hidden 5120) on one A100-40GB:
 *     time = 20 ms                            weights read once (26 GB at
 *                                             ~1.5 TB/s) plus launches
 *          + 0.14 ms x batched tokens          2 x 13e9 flop per token at
 *                                             ~190 Tflop/s
 *          + 0.00053 ms x context tokens read  800 KB of K and V per token
 *                                             at ~1.5 TB/s
 * and a KV pool of 15,728 tokens (12 GiB / 800 KiB per token; the paper's
 * 13B on 40 GB keeps about 12 GB for KV).
 *
 * Reported per policy: KV utilization (slots holding tokens whose KV is
 * kept, over slots allocated, averaged over time), mean and max running
 * batch (sequences per iteration), preemptions, normalized latency (mean
 * over requests of end-to-end latency / output length), throughput, and
 * the share of the 64-token tiles the scheduled sequences hold whose
 * blocks lie side by side (count_tiles).
 */

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_manager.h"
#include "pl_cli.h"
#include "scheduler.h"

#define SIM_NAME        "pagedllm-sim"
#define SIM_MAX_LEN     2048
#define SIM_STEP_MS     20.0
#define SIM_TOKEN_MS    0.14
#define SIM_CONTEXT_MS  0.00053

typedef struct {
    const char  *workload;
    double       rate;
    int          requests;
    int          block_size;
    int          kv_tokens;
    int          max_num_seqs;
    int          max_num_batched_tokens;
    int          preemption_mode;
    unsigned long long  seed;
} sim_config_t;

typedef struct {
    double  arrival;            /* seconds */
    int     in;
    int     out;
} sim_request_t;

typedef struct {
    double    util;             /* time-weighted */
    double    batch_sum;
    int       batch_max;
    int       steps;
    double    norm_latency;     /* s per output token, mean */
    double    makespan;
    uint64_t  preemptions;
    int       finished;
    double    tiles;            /* 64-token tiles of the scheduled
                                   sequences, summed over steps */
    double    tiles_run;        /* of them one run of consecutive blocks */
} sim_result_t;

static uint64_t  rng_state;


static double
uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return ((rng_state * 0x2545f4914f6cdd1dull) >> 11) * (1.0 / 9007199254740992.0);
}


static double
lognormal(double mu, double sigma)
{
    double  u1 = uniform(), u2 = uniform();

    u1 = u1 > 1e-300 ? u1 : 1e-300;
    return exp(mu + sigma * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}


static int
length(double mu, double sigma)
{
    int  n = (int) lrint(lognormal(mu, sigma));

    return n < 1 ? 1 : n > SIM_MAX_LEN - 1 ? SIM_MAX_LEN - 1 : n;
}


static int
make_workload(const sim_config_t *c, sim_request_t *r)
{
    double  t = 0, in_mu, in_s, out_mu, out_s;
    int     i;

    if (strcmp(c->workload, "sharegpt") == 0) {
        in_mu = 4.58; in_s = 1.0; out_mu = 5.42; out_s = 0.9;
    } else if (strcmp(c->workload, "alpaca") == 0) {
        in_mu = 2.76; in_s = 0.6; out_mu = 3.65; out_s = 0.9;
    } else {
        return -1;
    }

    rng_state = c->seed * 0x9e3779b97f4a7c15ull + 1;
    for (i = 0; i < c->requests; i++) {
        t += -log(1.0 - uniform()) / c->rate;
        r[i].arrival = t;
        r[i].in = length(in_mu, in_s);
        r[i].out = length(out_mu, out_s);
        if (r[i].in + r[i].out > SIM_MAX_LEN) {
            r[i].out = SIM_MAX_LEN - r[i].in;
        }
    }

    return 0;
}


/* Slots holding kept KV, after this step's tokens are computed. */
static double
real_tokens(const pl_scheduler_t *sc)
{
    const pl_seq_t  *s;
    double           n = 0;
    int              i;

    for (s = sc->running.head; s; s = s->next) {
        n += s->n_computed;
    }
    for (i = 0; i < sc->n_entries; i++) {
        n += sc->entries[i].n_query;
    }

    return n;
}


static double
step_ms(const pl_scheduler_t *sc)
{
    double  ctx = 0;
    int     i;

    for (i = 0; i < sc->n_entries; i++) {
        ctx += sc->entries[i].seq->n_computed + sc->entries[i].n_query;
    }

    return SIM_STEP_MS + SIM_TOKEN_MS * sc->n_tokens + SIM_CONTEXT_MS * ctx;
}


/* Sample a token for every sequence whose prompt is done; finish those
   at their output length.  Returns how many finished. */
static int
finish_step(pl_scheduler_t *sc, const sim_request_t *req, double now,
    sim_result_t *res)
{
    pl_seq_t  *fin[sc->n_entries > 0 ? sc->n_entries : 1], *s;
    int        i, n = 0;

    for (i = 0; i < sc->n_entries; i++) {
        s = sc->entries[i].seq;
        if (s->n_computed == s->n_tokens) {
            pl_seq_append(s, 1);
            if (pl_seq_generated(s) == s->max_tokens) {
                fin[n++] = s;
            }
        }
    }

    for (i = 0; i < n; i++) {
        res->norm_latency += (now - req[fin[i]->req_id].arrival)
                             / fin[i]->max_tokens;
        pl_sched_remove(sc, fin[i]);
        pl_seq_free(fin[i]);
    }

    return n;
}


/*
 * The tiles a decode attention kernel reads this step (64 tokens,
 * PL_BM_RUN_TOKENS, of each scheduled sequence's full blocks from its
 * first), and those of them whose blocks lie side by side: the layout
 * kernels/decode_attention.cu reads fastest (docs/BENCHMARKS.md).
 */
static void
count_tiles(const pl_scheduler_t *sc, sim_result_t *res)
{
    int  run = sc->bm->run, i, k, j;

    for (i = 0; i < sc->n_entries; i++) {
        const pl_block_table_t  *t = &sc->entries[i].seq->blocks;

        for (k = 0; k + run <= t->n; k += run) {
            for (j = 1; j < run && t->ids[k + j] == t->ids[k] + j; j++) {
                /* void */
            }
            res->tiles++;
            res->tiles_run += j == run;
        }
    }
}


static pl_seq_t *
make_seq(const sim_request_t *r, int id, int32_t *prompt)
{
    int        i;
    pl_seq_t  *s;

    for (i = 0; i < r->in; i++) {
        prompt[i] = (int32_t) (uniform() * 32000);
    }
    s = pl_seq_create((uint64_t) id, prompt, r->in, r->out);
    if (s) {
        s->arrival = (uint64_t) id + 1;
    }

    return s;
}


static int
simulate(const sim_config_t *c, pl_kv_policy_t policy,
    const sim_request_t *req, sim_result_t *res)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    static int32_t      prompt[SIM_MAX_LEN];
    double              now = 0, dt, alloc, time_sum = 0;
    int                 next = 0;
    pl_seq_t           *s;

    memset(res, 0, sizeof(*res));
    if (pl_bm_init(&bm, c->kv_tokens / c->block_size, c->block_size) != 0
        || pl_bm_init_host(&bm, bm.num_blocks) != 0
        || pl_sched_init(&sc, &bm, c->max_num_seqs,
                         c->max_num_batched_tokens) != 0)
    {
        return -1;
    }
    sc.policy = policy;
    sc.preemption_mode = (pl_preempt_mode_t) c->preemption_mode;
    sc.max_model_len = SIM_MAX_LEN;

    while (res->finished < c->requests) {
        while (next < c->requests && req[next].arrival <= now) {
            if ((s = make_seq(&req[next], next, prompt)) == NULL) {
                return -1;
            }
            pl_sched_add(&sc, s);
            next++;
        }
        if (!pl_sched_has_work(&sc)) {
            now = req[next].arrival;
            continue;
        }
        if (pl_sched_step(&sc) == 0) {
            if (next == c->requests) {
                fprintf(stderr, "pagedllm-sim: stuck with nothing to run\n");
                return -1;
            }
            now = req[next].arrival;
            continue;
        }

        dt = step_ms(&sc) / 1000.0;
        alloc = (double) pl_bm_num_used(&bm) * c->block_size;
        res->util += dt * (alloc > 0 ? real_tokens(&sc) / alloc : 1.0);
        time_sum += dt;
        res->batch_sum += sc.n_entries;
        res->batch_max = sc.n_entries > res->batch_max ? sc.n_entries
                                                       : res->batch_max;
        res->steps++;
        count_tiles(&sc, res);

        now += dt;
        pl_sched_complete(&sc);
        res->finished += finish_step(&sc, req, now, res);
    }

    res->util /= time_sum;
    res->norm_latency /= c->requests;
    res->makespan = now;
    res->preemptions = sc.preemptions;

    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);

    return 0;
}


static const char  usage_text[] =
"usage: pagedllm-sim [options]\n"
"  --workload sharegpt|alpaca     length distributions (default sharegpt)\n"
"  --rate R                       requests per second (default 1.0)\n"
"  --requests N                   (default 1000)\n"
"  --block-size N                 (default 16)\n"
"  --kv-tokens N                  KV pool in tokens (default 15728)\n"
"  --max-num-seqs N               (default 256)\n"
"  --max-num-batched-tokens N     (default 2048)\n"
"  --preemption-mode recompute|swap  (default recompute; the engine's\n"
"                                 auto needs a host link the model lacks)\n"
"  --seed N                       (default 1)\n"
"  --help                         this text\n"
"  --version                      the name and version\n";


static int
parse(int argc, char **argv, sim_config_t *c)
{
    static const struct option  opts[] = {
        { "workload", required_argument, NULL, 'w' },
        { "rate", required_argument, NULL, 'r' },
        { "requests", required_argument, NULL, 'n' },
        { "block-size", required_argument, NULL, 'b' },
        { "kv-tokens", required_argument, NULL, 'k' },
        { "max-num-seqs", required_argument, NULL, 's' },
        { "max-num-batched-tokens", required_argument, NULL, 't' },
        { "preemption-mode", required_argument, NULL, 'p' },
        { "seed", required_argument, NULL, 'S' },
        { NULL, 0, NULL, 0 }
    };
    int  o;

    *c = (sim_config_t) { "sharegpt", 1.0, 1000, 16, 15728, 256, 2048, 0, 1 };

    opterr = 0;
    while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (o) {
        case 'w': c->workload = optarg; break;
        case 'r': c->rate = atof(optarg); break;
        case 'n': c->requests = atoi(optarg); break;
        case 'b': c->block_size = atoi(optarg); break;
        case 'k': c->kv_tokens = atoi(optarg); break;
        case 's': c->max_num_seqs = atoi(optarg); break;
        case 't': c->max_num_batched_tokens = atoi(optarg); break;
        case 'p':
            if (strcmp(optarg, "recompute") != 0
                && strcmp(optarg, "swap") != 0)
            {
                return pl_cli_error(SIM_NAME, "--preemption-mode %s: "
                                    "recompute or swap", optarg);
            }
            c->preemption_mode = strcmp(optarg, "swap") == 0;
            break;
        case 'S': c->seed = strtoull(optarg, NULL, 10); break;
        case ':':
            return pl_cli_error(SIM_NAME, "%s needs a value",
                                argv[optind - 1]);
        default:
            return pl_cli_error(SIM_NAME, "unknown option '%s'",
                                argv[optind - 1]);
        }
    }
    if (optind < argc) {
        return pl_cli_error(SIM_NAME, "unexpected argument '%s'",
                            argv[optind]);
    }

    if (!(c->rate > 0 && c->requests > 0 && c->block_size >= 1
          && c->block_size <= 256 && c->kv_tokens >= SIM_MAX_LEN
          && c->max_num_seqs > 0
          && c->max_num_batched_tokens >= SIM_MAX_LEN))
    {
        return pl_cli_error(SIM_NAME, "rate, requests and max-num-seqs "
                            "must be positive, block-size 1..256, kv-tokens "
                            "and max-num-batched-tokens at least %d",
                            SIM_MAX_LEN);
    }

    return 0;
}


int
main(int argc, char **argv)
{
    static const char *const  names[] = {
        "paged", "orca-max", "orca-pow2", "orca-oracle"
    };
    sim_config_t    c;
    sim_request_t  *req;
    sim_result_t    r;
    double          in = 0, out = 0;
    int             p, i;

    pl_cli_standard(argc, argv, SIM_NAME, usage_text);
    if (parse(argc, argv, &c) != 0) {
        return PL_CLI_USAGE;
    }

    req = malloc((size_t) c.requests * sizeof(*req));
    if (req == NULL) {
        fputs("pagedllm-sim: out of memory\n", stderr);
        return 1;
    }
    if (make_workload(&c, req) != 0) {
        free(req);
        return pl_cli_error(SIM_NAME, "--workload %s: sharegpt or alpaca",
                            c.workload);
    }
    for (i = 0; i < c.requests; i++) {
        in += req[i].in;
        out += req[i].out;
    }

    printf("# %s: %d requests at %.2f req/s, mean prompt %.1f, mean output "
           "%.1f; KV pool %d tokens in blocks of %d; seed %llu\n",
           c.workload, c.requests, c.rate, in / c.requests,
           out / c.requests, c.kv_tokens, c.block_size, c.seed);
    printf("%-12s %8s %10s %9s %11s %14s %10s %9s\n", "policy", "kv_util",
           "mean_batch", "max_batch", "preemptions", "norm_lat_s/tok",
           "req/s", "tiles_run");

    for (p = 0; p < 4; p++) {
        if (simulate(&c, (pl_kv_policy_t) p, req, &r) != 0) {
            fprintf(stderr, "pagedllm-sim: %s failed\n", names[p]);
            free(req);
            return 1;
        }
        printf("%-12s %7.1f%% %10.1f %9d %11llu %14.4f %10.2f %8.1f%%\n",
               names[p], 100.0 * r.util, r.batch_sum / r.steps, r.batch_max,
               (unsigned long long) r.preemptions, r.norm_latency,
               c.requests / r.makespan,
               r.tiles > 0 ? 100.0 * r.tiles_run / r.tiles : 0.0);
    }

    free(req);

    return 0;
}
