
/*
 * ngx_http_pagedllm_pick.h: the routing policies' arithmetic, plain C
 * with no nginx type, so that t/unit/route_pick.c checks it and
 * bench/route.c times it as the module runs it.
 * ngx_http_pagedllm_route.c gathers the candidates (attached engines of
 * the request's group and model) and calls these.
 */


#ifndef _NGX_HTTP_PAGEDLLM_PICK_H_INCLUDED_
#define _NGX_HTTP_PAGEDLLM_PICK_H_INCLUDED_


#include <stddef.h>
#include <stdint.h>


/* An engine a request may go to, with what routing weighs. */
typedef struct {
    uint64_t                            id;          /* affinity identity */
    uint32_t                            weight;      /* >= 1 */
    uint32_t                            load;        /* requests */
    uint32_t                            free;        /* KV blocks */
} ngx_http_pagedllm_cand_t;


/* Each returns the index of the candidate picked among n >= 1; turn is
   the group's count of submits, which moves ties and rounds on. */
size_t ngx_http_pagedllm_pick_least_load(const ngx_http_pagedllm_cand_t *c,
    size_t n, uint64_t turn);
size_t ngx_http_pagedllm_pick_round_robin(const ngx_http_pagedllm_cand_t *c,
    size_t n, uint64_t turn);
size_t ngx_http_pagedllm_pick_owner(const ngx_http_pagedllm_cand_t *c,
    size_t n, uint64_t hash);
size_t ngx_http_pagedllm_pick_prefix(const ngx_http_pagedllm_cand_t *c,
    size_t n, uint64_t turn, uint64_t hash, uint32_t spill);
uint64_t ngx_http_pagedllm_pick_mix(uint64_t x);

/* of the last min(n, cap) submit times in the ring recent (the newest at
   (n - 1) % cap), how many came after heartbeat */
uint32_t ngx_http_pagedllm_pick_unpublished(const uint64_t *recent,
    size_t cap, uint64_t n, uint64_t heartbeat);

#endif /* _NGX_HTTP_PAGEDLLM_PICK_H_INCLUDED_ */
