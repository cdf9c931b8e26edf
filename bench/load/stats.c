/*
 * stats.c: what a run of pagedllm-load reports, from its records.
 *
 * The paper's metric is the normalized latency: the mean over requests of
 * end-to-end latency divided by the output length.  With n sequences per
 * request the output length is a sequence's (completion tokens / n), as
 * each sequence of a request is as long as the drawn output length.
 * Percentiles interpolate linearly between the two nearest ranks (numpy's
 * default): p of n sorted values is v[p (n - 1)].
 */

#include "load.h"

#include <stdlib.h>
#include <string.h>


static int
cmp_double(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


/* sorts v */
double
load_percentile(double *v, size_t n, double p)
{
    double  k;
    size_t  i;

    if (n == 0) {
        return 0;
    }

    qsort(v, n, sizeof(double), cmp_double);

    k = p * (n - 1);
    i = (size_t) k;

    return i + 1 < n ? v[i] + (k - i) * (v[i + 1] - v[i]) : v[n - 1];
}


int
load_summarize(const load_record_t *r, size_t n, load_summary_t *s)
{
    double  *norm, *ttft, *tpot, *lat, first = 0, last = 0, sum = 0, per;
    size_t   i, k = 0, ktpot = 0;

    memset(s, 0, sizeof(*s));

    norm = malloc((n + 1) * sizeof(double));
    ttft = malloc((n + 1) * sizeof(double));
    tpot = malloc((n + 1) * sizeof(double));
    lat = malloc((n + 1) * sizeof(double));

    if (norm == NULL || ttft == NULL || tpot == NULL || lat == NULL) {
        free(norm);
        free(ttft);
        free(tpot);
        free(lat);
        return -1;
    }

    for (i = 0; i < n; i++) {
        if (i == 0 || r[i].start < first) {
            first = r[i].start;
        }
        if (i == 0 || r[i].end > last) {
            last = r[i].end;
        }

        s->requests++;

        if (!r[i].ok || r[i].output_tokens < 1 || r[i].seqs < 1) {
            s->failed++;
            continue;
        }

        s->ok++;
        s->prompt_tokens += r[i].prompt_tokens;
        s->output_tokens += r[i].output_tokens;

        per = (double) r[i].output_tokens / r[i].seqs;
        lat[k] = r[i].end - r[i].start;
        norm[k] = lat[k] / per;
        ttft[k] = r[i].first - r[i].start;
        sum += norm[k];
        k++;

        if (per > 1) {
            tpot[ktpot++] = (r[i].end - r[i].first) / (per - 1);
        }
    }

    s->duration = last - first;

    if (s->duration > 0) {
        s->request_rate = s->ok / s->duration;
        s->output_tps = s->output_tokens / s->duration;
        s->total_tps = (s->output_tokens + s->prompt_tokens) / s->duration;
    }

    s->norm_mean = k ? sum / k : 0;
    s->norm_p50 = load_percentile(norm, k, 0.5);
    s->norm_p99 = load_percentile(norm, k, 0.99);
    s->ttft_p50 = load_percentile(ttft, k, 0.5);
    s->ttft_p90 = load_percentile(ttft, k, 0.9);
    s->ttft_p99 = load_percentile(ttft, k, 0.99);
    s->tpot_p50 = load_percentile(tpot, ktpot, 0.5);
    s->tpot_p99 = load_percentile(tpot, ktpot, 0.99);
    s->latency_p50 = load_percentile(lat, k, 0.5);
    s->latency_p99 = load_percentile(lat, k, 0.99);

    free(norm);
    free(ttft);
    free(tpot);
    free(lat);
    return 0;
}


/* The sum of the samples of NAME whose labels hold LABEL (any samples when
   LABEL is NULL): one engine's unlabelled line, or every engine's line of
   a pagedllm_engines group (labelled engine="..."); -1 when there is none */
static int
metric_sum(const char *text, size_t len, const char *name, const char *label,
    double *v)
{
    size_t       nlen = strlen(name), i = 0;
    const char  *line, *end, *val, *close;
    int          found = 0;

    *v = 0;
    while (i < len) {
        line = text + i;
        end = memchr(line, '\n', len - i);
        if (end == NULL) {
            end = text + len;
        }
        i = end - text + 1;

        if ((size_t) (end - line) <= nlen + 1
            || memcmp(line, name, nlen) != 0
            || (line[nlen] != ' ' && line[nlen] != '{'))
        {
            continue;
        }
        val = line + nlen;
        if (*val == '{') {
            close = memchr(val, '}', end - val);
            if (close == NULL) {
                continue;
            }
            if (label != NULL
                && memmem(val, close - val, label, strlen(label)) == NULL)
            {
                continue;
            }
            val = close + 1;
        } else if (label != NULL) {
            continue;
        }
        *v += strtod(val, NULL);
        found = 1;
    }
    return found ? 0 : -1;
}


int
load_metrics_parse(const char *text, size_t len, double *running,
    double *kv_used, double *kv_capacity)
{
    if (metric_sum(text, len, "pagedllm_requests_running", NULL, running)
            != 0
        || metric_sum(text, len, "pagedllm_kv_blocks", "state=\"used\"",
                      kv_used) != 0
        || metric_sum(text, len, "pagedllm_kv_blocks_capacity", NULL,
                      kv_capacity) != 0)
    {
        return -1;
    }
    return 0;
}
