
/*
 * ngx_http_pagedllm_channel.h: the worker's engine connections (one
 * channel per configured engine) as the files of the channel share them:
 * ngx_http_pagedllm_channel.c (what the rest of the module calls; submit
 * and abort records), ngx_http_pagedllm_attach.c (attach and re-attach),
 * ngx_http_pagedllm_drain.c (the completion ring drained and dispatched)
 * and ngx_http_pagedllm_route.c (which channel a request goes to).
 */


#ifndef _NGX_HTTP_PAGEDLLM_CHANNEL_H_INCLUDED_
#define _NGX_HTTP_PAGEDLLM_CHANNEL_H_INCLUDED_


#include "ngx_http_pagedllm_module.h"


/* submits remembered per channel to count those the engine's stats do
   not show yet (ngx_http_pagedllm_route.c) */
#define NGX_HTTP_PAGEDLLM_RECENT            64


typedef enum {
    NGX_HTTP_PAGEDLLM_DETACHED = 0,
    NGX_HTTP_PAGEDLLM_CONNECTING,
    NGX_HTTP_PAGEDLLM_LOADING,              /* the tokenizer, on a thread */
    NGX_HTTP_PAGEDLLM_ATTACHED
} ngx_http_pagedllm_channel_state_e;


struct ngx_http_pagedllm_channel_s {
    ngx_http_pagedllm_main_conf_t      *conf;
    ngx_http_pagedllm_engine_conf_t    *ec;          /* its engine */
    ngx_log_t                          *log;
    ngx_http_pagedllm_channel_state_e   state;
    ngx_uint_t                          generation;
    ngx_uint_t                          attempt;     /* of attaching */

    ngx_connection_t                   *sock;
    ngx_connection_t                   *bell;
    ngx_fd_t                            sub_bell;
    ngx_fd_t                            comp_bell;   /* until started */

    u_char                             *region;
    size_t                              region_size;
    pl_region_hdr_t                    *hdr;
    pl_ring_t                           sub;
    pl_ring_t                           comp;
    u_char                             *rec;
    uint32_t                            rec_cap;

    ngx_http_pagedllm_engine_t          engine;
    u_char                              model[PL_MODEL_NAME_LEN];

    ngx_rbtree_t                        tree;
    ngx_rbtree_node_t                   sentinel;
    ngx_queue_t                         parked;
    ngx_queue_t                         dirty;
    uint64_t                            next_id;
    ngx_uint_t                          inflight;    /* in tree */
    uint64_t                            recent[NGX_HTTP_PAGEDLLM_RECENT];
                                                     /* submit times, us */
    uint64_t                            nsubmits;

    ngx_event_t                         timer;
    uint64_t                           *aborts;
    ngx_uint_t                          naborts;
    ngx_uint_t                          aborts_cap;

    unsigned                            logged_down:1;
};


/* channel */
ngx_http_pagedllm_channel_t *ngx_http_pagedllm_channel_get(ngx_uint_t i);
void ngx_http_pagedllm_flush_aborts(ngx_http_pagedllm_channel_t *ch);
void ngx_http_pagedllm_untrack(ngx_http_pagedllm_channel_t *ch,
    ngx_http_pagedllm_ctx_t *ctx);
ngx_http_pagedllm_tok_t *ngx_http_pagedllm_shared_tok(
    ngx_http_pagedllm_channel_t *ch, const char *path, uint64_t hash);

/* attach */
ngx_int_t ngx_http_pagedllm_connect(ngx_http_pagedllm_channel_t *ch);
void ngx_http_pagedllm_lost(ngx_http_pagedllm_channel_t *ch);
void ngx_http_pagedllm_detach(ngx_http_pagedllm_channel_t *ch);
void ngx_http_pagedllm_timer_handler(ngx_event_t *ev);

/* drain */
void ngx_http_pagedllm_bell_handler(ngx_event_t *ev);
void ngx_http_pagedllm_drain(ngx_http_pagedllm_channel_t *ch);
void ngx_http_pagedllm_mark(ngx_http_pagedllm_channel_t *ch,
    ngx_http_pagedllm_ctx_t *ctx);
void ngx_http_pagedllm_flush_dirty(ngx_http_pagedllm_channel_t *ch);

/* route */
ngx_http_pagedllm_channel_t *ngx_http_pagedllm_route_model(
    ngx_http_request_t *r, ngx_str_t *model);
ngx_http_pagedllm_channel_t *ngx_http_pagedllm_route_pick(
    ngx_http_pagedllm_ctx_t *ctx);
void ngx_http_pagedllm_route_commit(ngx_http_pagedllm_ctx_t *ctx);

#endif /* _NGX_HTTP_PAGEDLLM_CHANNEL_H_INCLUDED_ */
