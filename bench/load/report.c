/*
 * report.c: the JSON line pagedllm-load writes for each rate.
 *
 * The figures come from the run's records (stats.c), the means of the
 * /metrics readings (scrape.c) and the failures counted by their kind;
 * a figure that needs a successful request or a reading is null without
 * one.  The keys keep their order, so lines of several runs line up.  A
 * run with failures says how many, and the first, on stderr too.
 */

#include "client.h"

#include <math.h>
#include <stdlib.h>


static json_t *
num_or_null(double v, int ok)
{
    return ok ? json_real(v) : json_null();
}


void
load_report(const load_conf_t *cf, load_run_t *run, double rate)
{
    load_summary_t  s;
    json_t         *j = json_object(), *errs = json_object();
    char           *line;
    int             i, m = run->samples > 0;

    if (load_summarize(run->recs, run->nrecs, &s) != 0) {
        fprintf(stderr, "pagedllm-load: out of memory\n");
        exit(1);
    }

#define SET(k, v)  json_object_set_new(j, k, v)
    SET("mode", json_string(rate == 0 ? "closed" : isinf(rate) ? "burst"
                                                               : "poisson"));
    SET("offered_rate", num_or_null(rate, rate > 0 && !isinf(rate)));
    SET("concurrency", cf->concurrency ? json_integer(cf->concurrency)
                                       : json_null());
    SET("dataset", json_string(cf->dataset_file ? cf->dataset_file
                                                : cf->dist));
    SET("seed", json_integer((json_int_t) cf->seed));
    SET("n", json_integer(cf->n));
    SET("beam_width", json_integer(cf->beam));
    SET("shared_prefix_tokens", json_integer(cf->prefix));
    SET("chat_turns", json_integer(cf->chat_turns));
    SET("requests", json_integer(s.requests));
    SET("ok", json_integer(s.ok));
    SET("failed", json_integer(s.failed));
    SET("duration_s", json_real(s.duration));
    SET("request_rate", json_real(s.request_rate));
    SET("prompt_tokens", json_integer(s.prompt_tokens));
    SET("output_tokens", json_integer(s.output_tokens));
    SET("output_tokens_per_s", json_real(s.output_tps));
    SET("total_tokens_per_s", json_real(s.total_tps));
    SET("norm_latency_mean_s", num_or_null(s.norm_mean, s.ok));
    SET("norm_latency_p50_s", num_or_null(s.norm_p50, s.ok));
    SET("norm_latency_p99_s", num_or_null(s.norm_p99, s.ok));
    SET("ttft_p50_ms", num_or_null(s.ttft_p50 * 1e3, s.ok));
    SET("ttft_p90_ms", num_or_null(s.ttft_p90 * 1e3, s.ok));
    SET("ttft_p99_ms", num_or_null(s.ttft_p99 * 1e3, s.ok));
    SET("tpot_p50_ms", num_or_null(s.tpot_p50 * 1e3, s.ok));
    SET("tpot_p99_ms", num_or_null(s.tpot_p99 * 1e3, s.ok));
    SET("latency_p50_s", num_or_null(s.latency_p50, s.ok));
    SET("latency_p99_s", num_or_null(s.latency_p99, s.ok));
    SET("running_mean", num_or_null(run->running_sum / run->samples, m));
    SET("kv_usage_mean", num_or_null(run->kv_sum / run->samples, m));
    SET("metrics_samples", json_integer(run->samples));
    for (i = 0; i < run->nerrors; i++) {
        json_object_set_new(errs, run->errors[i].key,
                            json_integer(run->errors[i].count));
    }
    SET("errors", errs);
    SET("first_error", run->first_error[0] ? json_string(run->first_error)
                                           : json_null());
#undef SET

    line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER
                         | JSON_REAL_PRECISION(6));
    fprintf(cf->json_out, "%s\n", line);
    fflush(cf->json_out);
    free(line);
    json_decref(j);

    if (s.failed) {
        fprintf(stderr, "pagedllm-load: %ld of %ld requests failed; the "
                "first: %s\n", s.failed, s.requests, run->first_error);
    }
}
