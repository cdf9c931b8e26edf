/*
 * scrape.c: the server's /metrics read during a run, every
 * LOAD_SCRAPE_EVERY seconds on a connection of its own, for the mean
 * number of running requests and the mean share of KV blocks in use.  A
 * server without the endpoint, or without pagedllm_ series in it, is
 * said once on stderr and the run goes on without the readings.
 */

#include "client.h"

#include <stdio.h>


static int  load_metrics_warned;


/* a reading sent when one is due and none is on its way */
void
load_scrape_start(load_run_t *run)
{
    load_target_t  *m = &run->cf->metrics;
    size_t          len;
    char           *req;
    double          t = load_now();

    if (!run->record || !run->cf->metrics_on || run->scrape
        || t < run->next_scrape)
    {
        return;
    }

    run->next_scrape = t + LOAD_SCRAPE_EVERY;
    req = load_http_request(m, "GET", m->path, NULL, &len);
    run->scrape = load_conn_new(m, req, len);
    run->scrape->is_metrics = 1;
}


/* a reading ended: added to the means, or the readings stop */
void
load_scrape_done(load_run_t *run, load_conn_t *c)
{
    double  running, used, cap;

    if (c->error[0] == '\0' && c->http.status == 200 && c->body
        && load_metrics_parse(c->body, c->body_len, &running, &used, &cap)
           == 0 && cap > 0)
    {
        run->running_sum += running;
        run->kv_sum += used / cap;
        run->samples++;
        return;
    }

    if (!load_metrics_warned) {
        fprintf(stderr, "pagedllm-load: no metrics from http://%s%s (%s); "
                "running and KV means are left out\n",
                run->cf->metrics.hostport, run->cf->metrics.path,
                c->error[0] ? c->error : "no pagedllm_ series");
        load_metrics_warned = 1;
    }
    run->cf->metrics_on = 0;
}
