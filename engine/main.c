/*
 * pagedllm-engine: command line.  Parses and checks every flag, sets up
 * signal handling (SIGTERM and SIGINT are blocked here and taken by the
 * loop through a signalfd; SIGPIPE is ignored), and runs the engine.
 */

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "pl_cli.h"
#include "pl_model.h"
#include "pl_ops.h"

#define PL_ENGINE_NAME  "pagedllm-engine"

static const char  usage_text[] =
"usage: pagedllm-engine --model DIR --listen PATH [options]\n"
"\n"
"Serves a Hugging Face model to nginx workers over shared memory.\n"
"\n"
"  --model DIR                    model folder (config.json, safetensors,\n"
"                                 tokenizer.json)\n"
"  --listen PATH                  unix socket the workers attach to\n"
"  --device auto|cpu|cuda|cuda:N  backend (default auto: cuda when a GPU\n"
"                                 is visible); cuda:N pins the engine to\n"
"                                 the Nth device CUDA_VISIBLE_DEVICES\n"
"                                 leaves visible (cuda: the first)\n"
"  --served-model-name NAME       model name for the API (default: the\n"
"                                 model folder's name)\n"
"  --threads N                    CPU threads, 0 = every core (default 0)\n"
"  --block-size N                 tokens per KV block, 1..256 (default 16;\n"
"                                 a power of two on cuda)\n"
"  --kv-cache-memory MB           KV cache size on the CPU (default 512)\n"
"  --gpu-memory-utilization F     share of the GPU the engine may use,\n"
"                                 0 < F <= 1 (default 0.90)\n"
"  --num-blocks N                 KV blocks, overriding the sizing above\n"
"  --max-num-seqs N               sequences per iteration (default 256)\n"
"  --max-num-batched-tokens N     tokens per iteration (default 2048)\n"
"  --max-model-len N              prompt + completion limit (default: the\n"
"                                 model's max_position_embeddings)\n"
"  --socket-mode OCTAL            permissions of the socket (default 0660)\n"
"  --max-workers N                workers attached at once; an attach\n"
"                                 over it is refused (default 64: nginx's\n"
"                                 worker_processes on a large host, with\n"
"                                 old workers still attached across a\n"
"                                 reload)\n"
"  --max-waiting N                requests waiting for an iteration; one\n"
"                                 more is refused with a 429 (default\n"
"                                 1024)\n"
"  --max-queue-time SECONDS       how long a request may wait for its\n"
"                                 first iteration before a 503 (default\n"
"                                 60)\n"
"  --no-prefix-caching            do not reuse the KV of cached prompt\n"
"                                 prefixes\n"
"  --preemption-mode MODE         recompute, swap or auto (default\n"
"                                 recompute): what happens to the newest\n"
"                                 request when KV blocks run out; auto\n"
"                                 swaps it when moving its blocks out and\n"
"                                 back costs less than recomputing its\n"
"                                 tokens, by rates measured at start\n"
"  --swap-space MB                host memory for swapped KV blocks, swap\n"
"                                 and auto modes (default 1024)\n"
"  --preemption-costs GBPS,TPS    for tests: auto's host-link GB/s and\n"
"                                 prefill tokens/s, given instead of\n"
"                                 measured\n"
"  --kv-policy POLICY             paged (default), or a baseline of the\n"
"                                 PagedAttention paper for measurement:\n"
"                                 orca-max, orca-pow2, orca-oracle\n"
"                                 (contiguous reservation per request of\n"
"                                 max-model-len, prompt + next power of two\n"
"                                 of max_tokens, prompt + max_tokens)\n"
"  --tensor-parallel-size N       split the model over N ranks: threads\n"
"                                 on the CPU, GPUs 0..N-1 with cuda; N\n"
"                                 must divide the attention and KV heads\n"
"                                 (default 1)\n"
"  --dtype DTYPE                  activations and KV cache on the GPU:\n"
"                                 auto (default: float16 checkpoints in\n"
"                                 float16 where the backend runs it, all\n"
"                                 others in bfloat16), float16 or\n"
"                                 bfloat16; the CPU computes in float32\n"
"                                 (auto or float32)\n"
"  --enforce-eager                launch every kernel of decode iterations\n"
"                                 from the host instead of replaying CUDA\n"
"                                 graphs (graphs are used on one GPU by\n"
"                                 default)\n"
"  --log-level LEVEL              error, warn, info or debug (default info)\n"
"  --log-stats-interval SEC       a summary line (throughput, queues, KV\n"
"                                 usage) every SEC seconds while busy;\n"
"                                 0 = off (default 10)\n"
"  --help                         this text\n"
"  --version                      the name and version\n";

enum {
    OPT_MODEL = 256, OPT_LISTEN, OPT_DEVICE, OPT_NAME, OPT_THREADS,
    OPT_BLOCK_SIZE, OPT_KV_MB, OPT_GPU_UTIL, OPT_NUM_BLOCKS, OPT_MAX_SEQS,
    OPT_MAX_TOKENS, OPT_MAX_LEN, OPT_SOCKET_MODE, OPT_LOG_LEVEL,
    OPT_NO_PREFIX_CACHING, OPT_PREEMPTION_MODE, OPT_SWAP_SPACE, OPT_KV_POLICY,
    OPT_TP_SIZE, OPT_ENFORCE_EAGER, OPT_DTYPE, OPT_PREEMPTION_COSTS,
    OPT_MAX_WORKERS, OPT_LOG_STATS_INTERVAL, OPT_MAX_WAITING,
    OPT_MAX_QUEUE_TIME
};

static const struct option  options[] = {
    { "model",                   required_argument, NULL, OPT_MODEL },
    { "listen",                  required_argument, NULL, OPT_LISTEN },
    { "device",                  required_argument, NULL, OPT_DEVICE },
    { "served-model-name",       required_argument, NULL, OPT_NAME },
    { "threads",                 required_argument, NULL, OPT_THREADS },
    { "block-size",              required_argument, NULL, OPT_BLOCK_SIZE },
    { "kv-cache-memory",         required_argument, NULL, OPT_KV_MB },
    { "gpu-memory-utilization",  required_argument, NULL, OPT_GPU_UTIL },
    { "num-blocks",              required_argument, NULL, OPT_NUM_BLOCKS },
    { "max-num-seqs",            required_argument, NULL, OPT_MAX_SEQS },
    { "max-num-batched-tokens",  required_argument, NULL, OPT_MAX_TOKENS },
    { "max-model-len",           required_argument, NULL, OPT_MAX_LEN },
    { "socket-mode",             required_argument, NULL, OPT_SOCKET_MODE },
    { "max-workers",             required_argument, NULL, OPT_MAX_WORKERS },
    { "max-waiting",             required_argument, NULL, OPT_MAX_WAITING },
    { "max-queue-time",          required_argument, NULL,
      OPT_MAX_QUEUE_TIME },
    { "log-level",               required_argument, NULL, OPT_LOG_LEVEL },
    { "log-stats-interval",      required_argument, NULL,
      OPT_LOG_STATS_INTERVAL },
    { "no-prefix-caching",       no_argument,       NULL,
      OPT_NO_PREFIX_CACHING },
    { "preemption-mode",         required_argument, NULL,
      OPT_PREEMPTION_MODE },
    { "preemption-costs",        required_argument, NULL,
      OPT_PREEMPTION_COSTS },
    { "swap-space",              required_argument, NULL, OPT_SWAP_SPACE },
    { "kv-policy",               required_argument, NULL, OPT_KV_POLICY },
    { "tensor-parallel-size",    required_argument, NULL, OPT_TP_SIZE },
    { "enforce-eager",           no_argument,       NULL,
      OPT_ENFORCE_EAGER },
    { "dtype",                   required_argument, NULL, OPT_DTYPE },
    { NULL, 0, NULL, 0 }
};

static pl_model_options_t  model_options = { 1, PL_MODEL_DTYPE_AUTO };


/* in the order of pl_preempt_mode_t and pl_kv_policy_t */
static const char *const  preemption_modes[] = {
    "recompute", "swap", "auto"
};
static const char *const  kv_policies[] = {
    "paged", "orca-max", "orca-pow2", "orca-oracle"
};


/* Whole-string integer in [lo, hi] in the given base; 0 or -1. */
static int
parse_int(const char *s, int base, long lo, long hi, int *out)
{
    char  *end;
    long   v;

    if (*s == '\0') {
        return -1;
    }

    v = strtol(s, &end, base);
    if (*end != '\0' || v < lo || v > hi) {
        return -1;
    }

    *out = (int) v;

    return 0;
}


static int
parse_log_level(const char *s)
{
    static const char  *names[] = { "error", "warn", "info", "debug" };
    int                 i;

    for (i = 0; i < 4; i++) {
        if (strcmp(s, names[i]) == 0) {
            pl_log_level = (pl_log_level_t) i;
            return 0;
        }
    }

    return -1;
}


/* Index of s in names[0..n), or -1. */
static int
parse_name(const char *s, const char *const *names, int n, int *out)
{
    int  i;

    for (i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }

    return -1;
}


static int
parse_fraction(const char *s, double *out)
{
    char    *end;
    double   v = strtod(s, &end);

    if (*s == '\0' || *end != '\0' || !(v > 0 && v <= 1)) {
        return -1;
    }

    *out = v;

    return 0;
}


/* "GBPS,TPS": two positive rates for auto preemption; 0 or -1. */
static int
parse_costs(const char *s, pl_engine_config_t *cfg)
{
    char    *end;
    double   gbps, tps;

    gbps = strtod(s, &end);
    if (end == s || *end != ',') {
        return -1;
    }

    s = end + 1;
    tps = strtod(s, &end);
    if (end == s || *end != '\0' || !(gbps > 0 && gbps < 1e9)
        || !(tps > 0 && tps < 1e12))
    {
        return -1;
    }

    cfg->preemption_host_gbps = gbps;
    cfg->preemption_prefill_tps = tps;

    return 0;
}


/* Apply one option; 0, or -1 for a value it does not take. */
static int
apply_option(pl_engine_config_t *cfg, int opt, const char *arg)
{
    int  mode = 0, bad = 0;

    switch (opt) {
    case OPT_MODEL:       cfg->model_dir = arg; break;
    case OPT_LISTEN:      cfg->listen_path = arg; break;
    case OPT_NAME:        cfg->served_model_name = arg; break;
    case OPT_DEVICE:
        cfg->device = arg;
        cfg->cuda_device = -1;
        if (strncmp(arg, "cuda:", 5) == 0) {
            cfg->device = "cuda";
            bad = parse_int(arg + 5, 10, 0, 1023, &cfg->cuda_device);
            break;
        }
        bad = strcmp(arg, "auto") && strcmp(arg, "cpu") && strcmp(arg, "cuda");
        break;
    case OPT_THREADS:
        bad = parse_int(arg, 10, 0, 4096, &cfg->threads);
        break;
    case OPT_BLOCK_SIZE:
        bad = parse_int(arg, 10, 1, 256, &cfg->block_size);
        break;
    case OPT_KV_MB:
        bad = parse_int(arg, 10, 1, INT_MAX, &cfg->kv_cache_mb);
        break;
    case OPT_GPU_UTIL:
        bad = parse_fraction(arg, &cfg->gpu_memory_utilization);
        break;
    case OPT_NUM_BLOCKS:
        bad = parse_int(arg, 10, 1, INT_MAX, &cfg->num_blocks);
        break;
    case OPT_MAX_SEQS:
        bad = parse_int(arg, 10, 1, 65536, &cfg->max_num_seqs);
        break;
    case OPT_MAX_TOKENS:
        bad = parse_int(arg, 10, 1, 1 << 24, &cfg->max_num_batched_tokens);
        break;
    case OPT_MAX_LEN:
        bad = parse_int(arg, 10, 1, 1 << 24, &cfg->max_model_len);
        break;
    case OPT_SOCKET_MODE:
        bad = parse_int(arg, 8, 0, 0777, &mode);
        cfg->socket_mode = bad ? cfg->socket_mode : (unsigned) mode;
        break;
    case OPT_MAX_WORKERS:
        bad = parse_int(arg, 10, 1, 65536, &cfg->max_workers);
        break;
    case OPT_LOG_STATS_INTERVAL:
        bad = parse_int(arg, 10, 0, 86400, &cfg->log_stats_interval);
        break;
    case OPT_MAX_WAITING:
        bad = parse_int(arg, 10, 1, 65536, &cfg->max_waiting);
        break;
    case OPT_MAX_QUEUE_TIME:
        bad = parse_int(arg, 10, 1, 86400, &cfg->max_queue_time);
        break;
    case OPT_NO_PREFIX_CACHING:
        cfg->prefix_caching = 0;
        break;
    case OPT_ENFORCE_EAGER:
        cfg->enforce_eager = 1;
        break;
    case OPT_PREEMPTION_MODE:
        bad = parse_name(arg, preemption_modes, 3, &cfg->preemption_mode);
        break;
    case OPT_PREEMPTION_COSTS:
        bad = parse_costs(arg, cfg);
        break;
    case OPT_SWAP_SPACE:
        bad = parse_int(arg, 10, 1, 1 << 24, &cfg->swap_space_mb);
        break;
    case OPT_KV_POLICY:
        bad = parse_name(arg, kv_policies, 4, &cfg->kv_policy);
        break;
    case OPT_TP_SIZE:
        bad = parse_int(arg, 10, 1, 256, &model_options.tensor_parallel_size);
        break;
    case OPT_DTYPE:
        bad = pl_model_dtype_parse(arg, &model_options.dtype);
        break;
    case OPT_LOG_LEVEL:
        bad = parse_log_level(arg);
        break;
    default:
        bad = -1;
    }

    return bad;
}


static void
block_signals(void)
{
    sigset_t  sigs;

    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}


/* --block-size against what the backend --device picks takes (auto: the
   one the engine will open); 0, or the usage exit status */
static int
check_block_size(const pl_engine_config_t *cfg)
{
    const char  *kind = cfg->device, *sizes;

    if (strcmp(kind, "auto") == 0) {
        kind = pl_cuda_available() ? "cuda" : "cpu";
    }
    if (pl_block_size_ok(kind, cfg->block_size, &sizes)) {
        return 0;
    }
    return pl_cli_error(PL_ENGINE_NAME, "--block-size %d is not supported "
                        "by the %s backend, which takes %s",
                        cfg->block_size, kind, sizes);
}


int
main(int argc, char **argv)
{
    pl_engine_config_t  cfg;
    int                 opt, rc, longindex;

    pl_cli_standard(argc, argv, PL_ENGINE_NAME, usage_text);
    pl_engine_config_defaults(&cfg);
    opterr = 0;

    while ((opt = getopt_long(argc, argv, ":", options, &longindex)) != -1) {
        if (opt == ':') {
            return pl_cli_error(PL_ENGINE_NAME, "%s needs a value",
                                argv[optind - 1]);
        }
        if (opt == '?') {
            return pl_cli_error(PL_ENGINE_NAME, "unknown option '%s'",
                                argv[optind - 1]);
        }
        if (apply_option(&cfg, opt, optarg) != 0) {
            return pl_cli_error(PL_ENGINE_NAME, "--%s: bad value '%s'",
                                options[longindex].name, optarg);
        }
    }

    if (optind < argc) {
        return pl_cli_error(PL_ENGINE_NAME, "unexpected argument '%s'",
                            argv[optind]);
    }
    if (cfg.model_dir == NULL || cfg.listen_path == NULL) {
        return pl_cli_error(PL_ENGINE_NAME,
                            "--model and --listen are required");
    }
    if (cfg.cuda_device > 0 && model_options.tensor_parallel_size > 1) {
        return pl_cli_error(PL_ENGINE_NAME, "--device cuda:%d pins one "
                            "device; tensor parallel ranks take devices 0.."
                            "N-1: choose them with CUDA_VISIBLE_DEVICES",
                            cfg.cuda_device);
    }
    rc = check_block_size(&cfg);
    if (rc != 0) {
        return rc;
    }
    pl_model_set_default_options(&model_options);
    block_signals();

    return pl_engine_main(&cfg);
}
