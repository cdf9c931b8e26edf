/*
 * cli.c: pagedllm-load's command line: --help, the option table and the
 * checks of each value.  A bad value, an unknown flag or flags that do
 * not go together end the program with one line on stderr and status 2
 * before anything is sent.  t/40-load.t checks that --help names every
 * long option of load_options below.
 */

#include "client.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pl_cli.h"


static const char  usage_text[] =
"usage: pagedllm-load [options]\n"
"Drives an OpenAI-style server and writes one JSON line per request rate.\n"
"\n"
"target\n"
"  -H, --host HOST          server address (127.0.0.1)\n"
"  -p, --port PORT          server port (8080)\n"
"      --metrics-url URL    Prometheus text read every 0.5 s for the mean\n"
"                           running requests and KV usage\n"
"                           (http://HOST:PORT/metrics; 'none': not read)\n"
"      --max-model-len N    the model's context (default: GET /v1/models)\n"
"  -V, --vocab N            prompt token ids are drawn from 0..N-1 (512)\n"
"\n"
"arrivals (each rate gets the same requests, drawn from the seed)\n"
"      --rate R[,R...]      Poisson arrivals at R requests/s, one run per\n"
"                           rate in order; 'inf': all at once.  Without\n"
"                           --rate: a closed loop of -c clients\n"
"  -c, --concurrency N      closed loop: clients (16); with --rate: the\n"
"                           most requests in flight (0, no limit)\n"
"  -n, --num-requests N     requests (conversations with --chat-turns) per\n"
"                           rate (64)\n"
"      --duration S         Poisson arrivals for S seconds per rate instead\n"
"                           of a count\n"
"      --seed S             seed of arrivals, lengths and prompts (1)\n"
"      --warmup N           N requests at once, not measured, first\n"
"      --timeout S          fail requests after S s without progress (120)\n"
"\n"
"lengths (output lengths are exact: ignore_eos, max_tokens = the draw)\n"
"      --dist NAME          lognormal lengths with the paper's means\n"
"                           (Fig. 11), each mu set so the clipped mean is\n"
"                           the paper's; at a 2048-token context:\n"
"                           sharegpt (default): input mean 161.31 sigma\n"
"                           1.1 (median 93, p99 1024), output mean 337.99\n"
"                           sigma 0.9 (median 248, p99 1024); long tails\n"
"                           alpaca: input mean 19.31 sigma 0.6 (median 16,\n"
"                           p99 65), output mean 58.45 sigma 0.8 (median\n"
"                           42, p99 273); short and narrow\n"
"                           Inputs are clipped to [1, min(1024, ctx/2)]\n"
"                           less a shared prefix, outputs to [1,\n"
"                           min(2048, ctx) - min(1024, ctx/2)]\n"
"                           fixed: -P and -G\n"
"  -P, --prompt-tokens N    fixed prompt length (selects --dist fixed; 128)\n"
"  -G, --output-tokens N    fixed output length (selects --dist fixed; 128)\n"
"      --dataset FILE       ShareGPT JSON: each human turn is sent as the\n"
"                           prompt text; max_tokens is the gpt reply's\n"
"                           bytes / 4; turns longer than the input limit\n"
"                           are left out\n"
"\n"
"decoding\n"
"      --n N                parallel sampling: N sequences a request (1)\n"
"      --beam-width W       beam search: use_beam_search, n = best_of = W,\n"
"                           temperature 0 (a server without it answers\n"
"                           400; the failures are reported)\n"
"      --temperature T      (0; 1 with --n above 1)\n"
"\n"
"workloads\n"
"      --shared-prefix K    1shot (80 tokens) or 5shot (341 tokens): the\n"
"                           same prefix before every prompt\n"
"      --chat-turns K       conversations of K turns on\n"
"                           /v1/chat/completions; each turn sends the\n"
"                           earlier turns with the actual replies, the\n"
"                           oldest dropped past the input limit\n"
"\n"
"output\n"
"      --out FILE           the JSON lines to FILE (stdout)\n"
"  -h, --help               this help\n"
"      --version            the name and version\n"
"\n"
"Each JSON line: mode, offered_rate, requests, ok, failed, duration_s,\n"
"request_rate (achieved), prompt_tokens, output_tokens,\n"
"output_tokens_per_s, total_tokens_per_s, norm_latency_{mean,p50,p99}_s\n"
"(end-to-end latency / output tokens of a sequence), ttft_{p50,p90,p99}_ms,\n"
"tpot_{p50,p99}_ms, latency_{p50,p99}_s, running_mean, kv_usage_mean,\n"
"errors (by kind) and first_error.  The exit status is 1 when a request\n"
"failed.\n";


static double *
parse_rates(const char *s, int *n)
{
    double  *r = NULL;
    char    *copy = strdup(s), *tok, *save, *end;

    *n = 0;
    for (tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save))
    {
        r = load_xrealloc(r, (*n + 1) * sizeof(double));
        if (strcmp(tok, "inf") == 0) {
            r[*n] = INFINITY;
        } else {
            r[*n] = strtod(tok, &end);
            if (*end || !(r[*n] > 0) || isinf(r[*n])) {
                load_die("--rate: '%s' is not a positive rate or inf", tok);
            }
        }
        (*n)++;
    }
    free(copy);

    if (*n == 0) {
        load_die("--rate: no rate in '%s'", s);
    }
    return r;
}


static long
parse_long(const char *s, const char *flag, long min)
{
    char  *end;
    long   v = strtol(s, &end, 10);

    if (*s == '\0' || *end || v < min) {
        exit(pl_cli_error(LOAD_NAME, "%s: '%s' is not an integer >= %ld",
                          flag, s, min));
    }
    return v;
}


static double
parse_double(const char *s, const char *flag)
{
    char    *end;
    double   v = strtod(s, &end);

    if (*s == '\0' || *end || !(v >= 0) || isinf(v)) {
        load_die("%s: not a non-negative number", flag);
    }
    return v;
}


enum {
    OPT_RATE = 256, OPT_DURATION, OPT_SEED, OPT_WARMUP, OPT_TIMEOUT,
    OPT_DIST, OPT_DATASET, OPT_N, OPT_BEAM, OPT_TEMP, OPT_PREFIX, OPT_CHAT,
    OPT_METRICS, OPT_MAXLEN, OPT_OUT
};

static const struct option  load_options[] = {
    { "host", required_argument, NULL, 'H' },
    { "port", required_argument, NULL, 'p' },
    { "metrics-url", required_argument, NULL, OPT_METRICS },
    { "max-model-len", required_argument, NULL, OPT_MAXLEN },
    { "vocab", required_argument, NULL, 'V' },
    { "rate", required_argument, NULL, OPT_RATE },
    { "concurrency", required_argument, NULL, 'c' },
    { "num-requests", required_argument, NULL, 'n' },
    { "duration", required_argument, NULL, OPT_DURATION },
    { "seed", required_argument, NULL, OPT_SEED },
    { "warmup", required_argument, NULL, OPT_WARMUP },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "dist", required_argument, NULL, OPT_DIST },
    { "prompt-tokens", required_argument, NULL, 'P' },
    { "output-tokens", required_argument, NULL, 'G' },
    { "dataset", required_argument, NULL, OPT_DATASET },
    { "n", required_argument, NULL, OPT_N },
    { "beam-width", required_argument, NULL, OPT_BEAM },
    { "temperature", required_argument, NULL, OPT_TEMP },
    { "shared-prefix", required_argument, NULL, OPT_PREFIX },
    { "chat-turns", required_argument, NULL, OPT_CHAT },
    { "out", required_argument, NULL, OPT_OUT },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 }
};


/* the defaults --help names */
static void
conf_defaults(load_conf_t *cf)
{
    memset(cf, 0, sizeof(*cf));
    cf->dist = "sharegpt";
    cf->fixed_in = 128;
    cf->fixed_out = 128;
    cf->n = 1;
    cf->vocab = 512;
    cf->requests = 64;
    cf->concurrency = 16;
    cf->seed = 1;
    cf->timeout = 120;
}


void
load_parse_args(load_conf_t *cf, int argc, char **argv)
{
    const char  *host = "127.0.0.1", *port = "8080", *murl = NULL;
    const char  *out = NULL;
    int          opt, conc_set = 0, temp_set = 0;
    char         url[400];

    pl_cli_standard(argc, argv, LOAD_NAME, usage_text);
    conf_defaults(cf);
    opterr = 0;

    while ((opt = getopt_long(argc, argv, ":H:p:V:c:n:P:G:h", load_options,
                              NULL)) != -1)
    {
        switch (opt) {
        case 'H': host = optarg; break;
        case 'p': port = optarg; break;
        case OPT_METRICS: murl = optarg; break;
        case OPT_MAXLEN:
            cf->max_model_len = parse_long(optarg, "--max-model-len", 2);
            break;
        case 'V': cf->vocab = parse_long(optarg, "--vocab", 1); break;
        case OPT_RATE: cf->rates = parse_rates(optarg, &cf->nrates); break;
        case 'c':
            cf->concurrency = parse_long(optarg, "--concurrency", 0);
            conc_set = 1;
            break;
        case 'n': cf->requests = parse_long(optarg, "--num-requests", 1);
            break;
        case OPT_DURATION:
            cf->duration = parse_double(optarg, "--duration");
            break;
        case OPT_SEED:
            cf->seed = (uint64_t) parse_long(optarg, "--seed", 0);
            break;
        case OPT_WARMUP: cf->warmup = parse_long(optarg, "--warmup", 0);
            break;
        case OPT_TIMEOUT:
            cf->timeout = parse_double(optarg, "--timeout");
            break;
        case OPT_DIST: cf->dist = optarg; break;
        case 'P':
            cf->fixed_in = parse_long(optarg, "--prompt-tokens", 1);
            cf->dist = "fixed";
            break;
        case 'G':
            cf->fixed_out = parse_long(optarg, "--output-tokens", 1);
            cf->dist = "fixed";
            break;
        case OPT_DATASET: cf->dataset_file = optarg; break;
        case OPT_N: cf->n = parse_long(optarg, "--n", 1); break;
        case OPT_BEAM: cf->beam = parse_long(optarg, "--beam-width", 1);
            break;
        case OPT_TEMP:
            cf->temperature = parse_double(optarg, "--temperature");
            temp_set = 1;
            break;
        case OPT_PREFIX:
            cf->prefix = strcmp(optarg, "1shot") == 0 ? 80
                         : strcmp(optarg, "5shot") == 0 ? 341 : -1;
            if (cf->prefix < 0) {
                load_die("--shared-prefix: '%s' is neither 1shot nor 5shot",
                         optarg);
            }
            break;
        case OPT_CHAT:
            cf->chat_turns = parse_long(optarg, "--chat-turns", 1);
            if (cf->chat_turns > LOAD_MAX_TURNS) {
                exit(pl_cli_error(LOAD_NAME, "--chat-turns: at most %d",
                                  LOAD_MAX_TURNS));
            }
            break;
        case OPT_OUT: out = optarg; break;
        case 'h': fputs(usage_text, stdout); exit(0);
        case ':':
            exit(pl_cli_error(LOAD_NAME, "%s needs a value",
                              argv[optind - 1]));
        default:
            exit(pl_cli_error(LOAD_NAME, "unknown option '%s'",
                              argv[optind - 1]));
        }
    }

    if (optind < argc) {
        load_die("unexpected argument '%s'", argv[optind]);
    }

    if (strcmp(cf->dist, "fixed") != 0) {
        cf->ds = load_dataset_find(cf->dist);
        if (cf->ds == NULL) {
            load_die("--dist: '%s' is none of sharegpt, alpaca, fixed",
                     cf->dist);
        }
    }
    if (cf->prefix && cf->chat_turns) {
        load_die("%s", "--shared-prefix and --chat-turns do not go together");
    }
    if (cf->n > 1 && cf->beam) {
        load_die("%s", "--n and --beam-width do not go together");
    }
    if (!temp_set && cf->n > 1) {
        cf->temperature = 1.0;
    }
    if (cf->rates == NULL) {
        cf->rates = load_xrealloc(NULL, sizeof(double));
        cf->rates[0] = 0;
        cf->nrates = 1;
        if (cf->concurrency == 0) {
            cf->concurrency = 16;
        }
        if (cf->duration > 0) {
            load_die("%s", "--duration needs --rate");
        }
    } else if (!conc_set) {
        cf->concurrency = 0;
    }

    if (load_target_set(&cf->api, host, port, "/") != 0) {
        load_die("cannot resolve host '%s'", host);
    }

    if (murl == NULL) {
        snprintf(url, sizeof(url), "http://%s:%s/metrics", host, port);
        murl = url;
    }
    cf->metrics_on = strcmp(murl, "none") != 0;
    if (cf->metrics_on && load_target_parse_url(&cf->metrics, murl) != 0) {
        load_die("--metrics-url: '%s' is not http://HOST[:PORT]/PATH", murl);
    }

    cf->json_out = stdout;
    if (out && (cf->json_out = fopen(out, "w")) == NULL) {
        load_die("cannot write %s", out);
    }
}
