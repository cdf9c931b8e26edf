
/*
 * ngx_http_pagedllm_pick: the routing policies over a list of candidate
 * engines (ngx_http_pagedllm_pick.h); what each one means for a request
 * is told in ngx_http_pagedllm_route.c.
 *
 * Prefix ownership is rendezvous (highest random weight) hashing: an
 * engine of weight w draws w scores mix(hash ^ mix(id + i)) and the
 * highest score of all owns the hash, so an engine owns a share of the
 * hashes proportional to its weight, and when an engine leaves or
 * returns only the hashes it owns move.  Integer-only, with no table to
 * rebuild when the set of attached engines changes.
 */


#include "ngx_http_pagedllm_pick.h"


/* the least load / weight; ties to more free KV blocks, then to the
   first from position turn on */
size_t
ngx_http_pagedllm_pick_least_load(const ngx_http_pagedllm_cand_t *c,
    size_t n, uint64_t turn)
{
    size_t    i, j, best;
    uint64_t  a, b;

    best = (size_t) (turn % n);

    for (j = 1; j < n; j++) {
        i = (size_t) ((turn + j) % n);

        a = (uint64_t) c[i].load * c[best].weight;
        b = (uint64_t) c[best].load * c[i].weight;

        if (a < b || (a == b && c[i].free > c[best].free)) {
            best = i;
        }
    }

    return best;
}


/* position turn of a round in which each candidate comes weight times */
size_t
ngx_http_pagedllm_pick_round_robin(const ngx_http_pagedllm_cand_t *c,
    size_t n, uint64_t turn)
{
    size_t    i;
    uint64_t  total, pos;

    total = 0;

    for (i = 0; i < n; i++) {
        total += c[i].weight;
    }

    pos = turn % total;

    for (i = 0; pos >= c[i].weight; i++) {
        pos -= c[i].weight;
    }

    return i;
}


size_t
ngx_http_pagedllm_pick_owner(const ngx_http_pagedllm_cand_t *c, size_t n,
    uint64_t hash)
{
    size_t    i, owner;
    uint32_t  v;
    uint64_t  score, best;

    owner = 0;
    best = 0;

    for (i = 0; i < n; i++) {
        for (v = 0; v < c[i].weight; v++) {
            score = ngx_http_pagedllm_pick_mix(hash
                        ^ ngx_http_pagedllm_pick_mix(c[i].id + v));

            if (score >= best) {
                best = score;
                owner = i;
            }
        }
    }

    return owner;
}


/* the owner of hash, unless its load exceeds the least-loaded
   candidate's by more than spill: then the least-loaded */
size_t
ngx_http_pagedllm_pick_prefix(const ngx_http_pagedllm_cand_t *c, size_t n,
    uint64_t turn, uint64_t hash, uint32_t spill)
{
    size_t  owner, least;

    owner = ngx_http_pagedllm_pick_owner(c, n, hash);
    least = ngx_http_pagedllm_pick_least_load(c, n, turn);

    return (uint64_t) c[owner].load > (uint64_t) c[least].load + spill
           ? least : owner;
}


/* splitmix64's finalizer: every input bit moves every output bit */
uint64_t
ngx_http_pagedllm_pick_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;

    return x;
}


/* the newest first, until one the heartbeat came after */
uint32_t
ngx_http_pagedllm_pick_unpublished(const uint64_t *recent, size_t cap,
    uint64_t n, uint64_t heartbeat)
{
    uint64_t  k, last;

    last = n < cap ? n : cap;

    for (k = 0; k < last; k++) {
        if (recent[(n - 1 - k) % cap] <= heartbeat) {
            break;
        }
    }

    return (uint32_t) k;
}
