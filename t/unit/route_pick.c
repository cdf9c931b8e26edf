/*
 * The routing policies' arithmetic (ngx_http_pagedllm_pick.c): least
 * load by weight with its tie-breaks, weighted round robin, rendezvous
 * ownership (shares proportional to weight; an engine leaving moves only
 * the hashes it owned), the prefix policy's spill bound and the count of
 * submits the engine's stats do not show yet.  Plain C,
 * compiled here from the module's source.
 */

#include <stdint.h>

#include "tap.h"

#include "../../ngx_http_pagedllm_module/ngx_http_pagedllm_pick.c"


#define HASHES  100000


static void
cand_set(ngx_http_pagedllm_cand_t *c, uint64_t id, uint32_t weight,
    uint32_t load, uint32_t free)
{
    c->id = id;
    c->weight = weight;
    c->load = load;
    c->free = free;
}


static void
test_least_load(void)
{
    ngx_http_pagedllm_cand_t  c[3];
    size_t                    seen[3] = { 0, 0, 0 };
    uint64_t                  turn;

    cand_set(&c[0], 1, 1, 4, 10);
    cand_set(&c[1], 2, 1, 2, 10);
    cand_set(&c[2], 3, 1, 3, 10);
    is_int(ngx_http_pagedllm_pick_least_load(c, 3, 0), 1,
           "least_load: the least loaded");
    is_int(ngx_http_pagedllm_pick_least_load(c, 3, 2), 1,
           "least_load: whatever the turn");

    /* weight 2 with load 5 (2.5 a weight) beats weight 1 with load 3 */
    cand_set(&c[0], 1, 2, 5, 10);
    cand_set(&c[1], 2, 1, 3, 10);
    cand_set(&c[2], 3, 1, 4, 10);
    is_int(ngx_http_pagedllm_pick_least_load(c, 3, 0), 0,
           "least_load: load divided by weight");

    cand_set(&c[0], 1, 1, 2, 10);
    cand_set(&c[1], 2, 1, 2, 30);
    cand_set(&c[2], 3, 1, 2, 20);
    is_int(ngx_http_pagedllm_pick_least_load(c, 3, 0), 1,
           "least_load: a tie to the most free KV blocks");

    cand_set(&c[1], 2, 1, 2, 10);
    cand_set(&c[2], 3, 1, 2, 10);
    for (turn = 0; turn < 30; turn++) {
        seen[ngx_http_pagedllm_pick_least_load(c, 3, turn)]++;
    }
    ok(seen[0] == 10 && seen[1] == 10 && seen[2] == 10,
       "least_load: full ties taken in turn (%zu %zu %zu)", seen[0],
       seen[1], seen[2]);
}


static void
test_round_robin(void)
{
    ngx_http_pagedllm_cand_t  c[3];
    size_t                    got[8];
    uint64_t                  turn;

    cand_set(&c[0], 1, 1, 0, 0);
    cand_set(&c[1], 2, 1, 9, 0);
    cand_set(&c[2], 3, 2, 0, 0);

    for (turn = 0; turn < 8; turn++) {
        got[turn] = ngx_http_pagedllm_pick_round_robin(c, 3, turn);
    }

    ok(got[0] == 0 && got[1] == 1 && got[2] == 2 && got[3] == 2
       && got[4] == 0 && got[5] == 1 && got[6] == 2 && got[7] == 2,
       "round_robin: weights 1, 1, 2 give 0 1 2 2 per round, load "
       "ignored");
}


static void
test_owner(void)
{
    ngx_http_pagedllm_cand_t  c[3], two[2];
    size_t                    share[3] = { 0, 0, 0 }, moved, i, a, b;
    uint64_t                  h;

    cand_set(&c[0], 0x1111, 1, 0, 0);
    cand_set(&c[1], 0x2222, 1, 0, 0);
    cand_set(&c[2], 0x3333, 2, 0, 0);
    two[0] = c[0];
    two[1] = c[2];

    moved = 0;

    for (i = 0; i < HASHES; i++) {
        h = ngx_http_pagedllm_pick_mix(i + 1);
        a = ngx_http_pagedllm_pick_owner(c, 3, h);
        share[a]++;

        /* engine 1 gone: its hashes move, no other */
        b = ngx_http_pagedllm_pick_owner(two, 2, h);
        moved += (a != 1 && two[b].id != c[a].id);
    }

    ok(share[0] > HASHES / 4 - HASHES / 50
       && share[0] < HASHES / 4 + HASHES / 50
       && share[1] > HASHES / 4 - HASHES / 50
       && share[1] < HASHES / 4 + HASHES / 50
       && share[2] > HASHES / 2 - HASHES / 50
       && share[2] < HASHES / 2 + HASHES / 50,
       "owner: shares follow weights 1, 1, 2 within 2%% (%zu %zu %zu)",
       share[0], share[1], share[2]);
    is_int(moved, 0, "owner: an engine leaving moves only its own hashes");
    is_int(ngx_http_pagedllm_pick_owner(c, 3, 42),
           ngx_http_pagedllm_pick_owner(c, 3, 42),
           "owner: the same hash, the same engine");
}


static void
test_prefix(void)
{
    ngx_http_pagedllm_cand_t  c[3];
    size_t                    owner, other;
    uint64_t                  h = 0x0123456789abcdefULL;

    cand_set(&c[0], 0x1111, 1, 0, 0);
    cand_set(&c[1], 0x2222, 1, 0, 0);
    cand_set(&c[2], 0x3333, 1, 0, 0);

    owner = ngx_http_pagedllm_pick_owner(c, 3, h);
    other = (owner + 1) % 3;

    c[owner].load = 8;
    is_int(ngx_http_pagedllm_pick_prefix(c, 3, 0, h, 8), owner,
           "prefix: the owner while its load is within spill of the least");

    c[owner].load = 9;
    ok(ngx_http_pagedllm_pick_prefix(c, 3, 0, h, 8) != owner,
       "prefix: past spill, another engine");

    c[owner].load = 10;
    c[(owner + 2) % 3].load = 9;
    c[other].load = 1;
    is_int(ngx_http_pagedllm_pick_prefix(c, 3, 0, h, 8), other,
           "prefix: past spill, the least loaded");
}


static void
test_unpublished(void)
{
    uint64_t  recent[4] = { 0, 0, 0, 0 }, n = 0, t;

    is_int(ngx_http_pagedllm_pick_unpublished(recent, 4, n, 100), 0,
           "unpublished: no submit yet");

    for (t = 10; t <= 60; t += 10) {
        recent[n++ % 4] = t;
    }

    /* the ring holds 30, 40, 50, 60 */
    is_int(ngx_http_pagedllm_pick_unpublished(recent, 4, n, 45), 2,
           "unpublished: the submits after the heartbeat");
    is_int(ngx_http_pagedllm_pick_unpublished(recent, 4, n, 60), 0,
           "unpublished: none after the last");
    is_int(ngx_http_pagedllm_pick_unpublished(recent, 4, n, 5), 4,
           "unpublished: at most what the ring holds");
}


int
main(void)
{
    test_least_load();
    test_round_robin();
    test_owner();
    test_prefix();
    test_unpublished();

    return done_testing();
}
