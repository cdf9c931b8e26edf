
/*
 * ngx_http_pagedllm_health: GET /health as vLLM answers it, for load
 * balancers and orchestrators.
 *
 *     location = /health { pagedllm_health [MAX_AGE]; }
 *
 * 200 with an empty body while this worker is attached to an engine (of
 * any group) whose last stats publication is at most MAX_AGE old
 * (default 5s); 503 otherwise, with an OpenAI-style error body and
 * Retry-After.  The engine publishes its stats into every worker's
 * region after each pass of its loop, and an idle loop wakes every
 * PL_HEARTBEAT_MS (200 ms), so the publication's monotonic time is a
 * heartbeat: fresh means the engine's loop ran within MAX_AGE, not
 * merely that its socket is open.  A stopped or wedged engine keeps its
 * socket open and its region mapped, and only the heartbeat's age shows
 * it; a dead one closes the socket, the worker detaches, and the answer
 * is 503 at once.  MAX_AGE must exceed the longest iteration the engine
 * runs, since the loop publishes between iterations.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_handler.h"


#define NGX_HTTP_PAGEDLLM_HEALTH_MAX_AGE  5000    /* ms */


char *
ngx_http_pagedllm_health_set(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pagedllm_loc_conf_t *plcf = conf;

    ngx_str_t                 *value;
    ngx_http_core_loc_conf_t  *clcf;

    if (plcf->health_max_age != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    plcf->health_max_age = NGX_HTTP_PAGEDLLM_HEALTH_MAX_AGE;

    if (cf->args->nelts == 2) {
        value = cf->args->elts;

        plcf->health_max_age = ngx_parse_time(&value[1], 0);

        if (plcf->health_max_age == (ngx_msec_t) NGX_ERROR
            || plcf->health_max_age == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid max age \"%V\"", &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_pagedllm_health_handler;

    return NGX_CONF_OK;
}


/*
 * Healthy while one engine at least is attached with a fresh heartbeat:
 * with several engines behind it, this nginx still serves (routing skips
 * the others) while one of them does.
 */
ngx_int_t
ngx_http_pagedllm_health_handler(ngx_http_request_t *r)
{
    u_char                            reason[NGX_HTTP_PAGEDLLM_ERR_LEN];
    uint64_t                          now, age, youngest;
    ngx_int_t                         rc;
    ngx_uint_t                        i, attached, unread;
    pl_stats_t                        stats;
    ngx_http_pagedllm_engine_t       *engine;
    ngx_http_pagedllm_loc_conf_t     *plcf;
    ngx_http_pagedllm_engine_conf_t  *ec;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pagedllm_module);

    now = ngx_http_pagedllm_now_us();
    youngest = (uint64_t) -1;
    attached = 0;
    unread = 0;

    for (i = 0; i < ngx_http_pagedllm_channel_count(); i++) {
        rc = ngx_http_pagedllm_channel_stats(i, &ec, &engine, &stats);

        if (rc == NGX_DECLINED) {
            continue;
        }

        attached++;

        if (rc != NGX_OK) {
            unread++;
            continue;
        }

        age = now > stats.heartbeat_us ? now - stats.heartbeat_us : 0;
        youngest = ngx_min(youngest, age);
    }

    if (attached == 0) {
        return ngx_http_pagedllm_unavailable(r,
                   "this worker is not attached to the engine");
    }

    if (attached == unread) {
        return ngx_http_pagedllm_unavailable(r,
                   "the engine's state could not be read");
    }

    if (youngest > (uint64_t) plcf->health_max_age * 1000) {
        ngx_snprintf(reason, sizeof(reason) - 1,
                     "the engine has not run its loop for %uL ms%Z",
                     youngest / 1000);
        return ngx_http_pagedllm_unavailable(r, (char *) reason);
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = 0;
    r->header_only = 1;

    return ngx_http_send_header(r);
}
