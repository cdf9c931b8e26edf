
/*
 * ngx_http_pagedllm_limit: token quotas per key, in the spirit of
 * limit_req, counted in prompt and completion tokens.
 *
 *     pagedllm_limit_tokens zone=NAME:SIZE key=$var rate=N/m [burst=M];
 *
 * A zone is a shared memory slab holding one token bucket per value of
 * the key (a red-black tree on the value's crc32, then the value itself,
 * with a queue of the least recently used), so every worker draws from
 * the same buckets and they survive a reload.  A bucket holds up to
 * burst tokens (default: N) and refills at the rate.  A completion is
 * admitted when each of its location's buckets holds its prompt tokens,
 * which are taken then; its completion tokens (usage.completion_tokens:
 * every returned choice, so n times the length for n > 1; with best_of
 * or beam search the returned choices only, as usage counts them) are
 * taken when it finishes, however it finishes, and may drive the bucket
 * below zero: a stream is never cut by its quota, the key's next
 * request waits for the debt to be refilled.  A refusal is a 429 in
 * OpenAI's shape with Retry-After, the seconds until the bucket holds
 * that request's prompt; a prompt larger than the burst can never be
 * admitted and gets a 429 without Retry-After.  A request that never
 * reached the engine (a 503 at submission) has its prompt tokens given
 * back.  An empty key is not counted.
 *
 * Balances are integers in units of 1/60000 token, so that a refill of
 * rate tokens a minute over ms milliseconds adds exactly ms * rate units.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_handler.h"


#define NGX_HTTP_PAGEDLLM_LIMIT_UNIT   60000     /* units in a token */
#define NGX_HTTP_PAGEDLLM_LIMIT_MAX    1000000000000LL


/* One key's bucket. */
typedef struct {
    ngx_rbtree_node_t             node;          /* key: crc32 of data */
    ngx_queue_t                   queue;         /* most recent first */
    ngx_msec_t                    last;          /* refilled up to then */
    int64_t                       balance;       /* units; < 0: debt */
    u_short                       len;
    u_char                        data[1];
} ngx_http_pagedllm_limit_node_t;


typedef struct {
    ngx_rbtree_t                  rbtree;
    ngx_rbtree_node_t             sentinel;
    ngx_queue_t                   queue;
} ngx_http_pagedllm_limit_shctx_t;


/* A zone (its ngx_shm_zone_t's data): the shared part and the
   directive's parameters, the same wherever the zone is named. */
typedef struct {
    ngx_http_pagedllm_limit_shctx_t  *sh;
    ngx_slab_pool_t                  *shpool;
    ngx_str_t                         name;
    ngx_http_complex_value_t          key;
    int64_t                           rate;      /* tokens a minute */
    int64_t                           burst;     /* tokens */
} ngx_http_pagedllm_limit_zone_t;


/* A bucket a request's tokens are taken from. */
typedef struct {
    ngx_http_pagedllm_limit_zone_t   *zone;
    ngx_str_t                         key;
} ngx_http_pagedllm_limit_charge_t;


struct ngx_http_pagedllm_limit_req_s {
    ngx_http_pagedllm_ctx_t          *ctx;
    ngx_http_pagedllm_limit_charge_t *charges;
    ngx_uint_t                        n_charges;
    int64_t                           prompt;    /* tokens taken */
    unsigned                          settled:1;
};


static ngx_int_t ngx_http_pagedllm_limit_zone_init(ngx_shm_zone_t *shm_zone,
    void *data);
static char *ngx_http_pagedllm_limit_parse(ngx_conf_t *cf,
    ngx_http_pagedllm_limit_zone_t *lz, ssize_t *size);
static ngx_int_t ngx_http_pagedllm_limit_rate(ngx_str_t *s, int64_t *rate,
    int64_t *per_unit);
static ngx_int_t ngx_http_pagedllm_limit_take(
    ngx_http_pagedllm_limit_charge_t *c, int64_t tokens, ngx_msec_t *wait,
    ngx_log_t *log);
static void ngx_http_pagedllm_limit_add(ngx_http_pagedllm_limit_charge_t *c,
    int64_t tokens, ngx_log_t *log);
static ngx_http_pagedllm_limit_node_t *ngx_http_pagedllm_limit_node(
    ngx_http_pagedllm_limit_zone_t *lz, ngx_str_t *key, ngx_log_t *log);
static ngx_http_pagedllm_limit_node_t *ngx_http_pagedllm_limit_lookup(
    ngx_http_pagedllm_limit_zone_t *lz, ngx_str_t *key, uint32_t hash);
static void ngx_http_pagedllm_limit_expire(ngx_http_pagedllm_limit_zone_t *lz,
    ngx_uint_t force, ngx_log_t *log);
static void ngx_http_pagedllm_limit_refill(ngx_http_pagedllm_limit_zone_t *lz,
    ngx_http_pagedllm_limit_node_t *node);
static void ngx_http_pagedllm_limit_insert(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);
static ngx_int_t ngx_http_pagedllm_limit_refuse(ngx_http_request_t *r,
    ngx_http_pagedllm_limit_zone_t *lz, int64_t tokens, ngx_msec_t wait);
static void ngx_http_pagedllm_limit_cleanup(void *data);


/* the tag of the zones: distinct from the module's own (metrics) zone */
static u_char  ngx_http_pagedllm_limit_tag;


/* pagedllm_limit_tokens zone=NAME:SIZE key=$var rate=N/m [burst=M] */
char *
ngx_http_pagedllm_limit_tokens_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_pagedllm_loc_conf_t *plcf = conf;

    char                            *rv;
    ssize_t                          size;
    ngx_uint_t                       i;
    ngx_shm_zone_t                  *shm_zone, **zones, **zp;
    ngx_http_pagedllm_limit_zone_t  *lz, *old;

    lz = ngx_pcalloc(cf->pool, sizeof(ngx_http_pagedllm_limit_zone_t));
    if (lz == NULL) {
        return NGX_CONF_ERROR;
    }

    rv = ngx_http_pagedllm_limit_parse(cf, lz, &size);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    shm_zone = ngx_shared_memory_add(cf, &lz->name, size,
                                     &ngx_http_pagedllm_limit_tag);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    old = shm_zone->data;

    if (old == NULL) {
        shm_zone->init = ngx_http_pagedllm_limit_zone_init;
        shm_zone->data = lz;

    } else if (old->rate != lz->rate || old->burst != lz->burst
               || old->key.value.len != lz->key.value.len
               || ngx_strncmp(old->key.value.data, lz->key.value.data,
                              lz->key.value.len) != 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" is declared with another key, rate "
                           "or burst", &lz->name);
        return NGX_CONF_ERROR;
    }

    if (plcf->limits == NGX_CONF_UNSET_PTR) {
        plcf->limits = ngx_array_create(cf->pool, 1,
                                        sizeof(ngx_shm_zone_t *));
        if (plcf->limits == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    zones = plcf->limits->elts;

    for (i = 0; i < plcf->limits->nelts; i++) {
        if (zones[i] == shm_zone) {
            return "is duplicate";
        }
    }

    zp = ngx_array_push(plcf->limits);
    if (zp == NULL) {
        return NGX_CONF_ERROR;
    }

    *zp = shm_zone;

    return NGX_CONF_OK;
}


static char *
ngx_http_pagedllm_limit_parse(ngx_conf_t *cf,
    ngx_http_pagedllm_limit_zone_t *lz, ssize_t *size)
{
    u_char                            *p;
    int64_t                            per_unit;
    ngx_int_t                          n;
    ngx_str_t                         *value, s;
    ngx_uint_t                         i;
    ngx_http_compile_complex_value_t   ccv;

    value = cf->args->elts;
    *size = 0;
    per_unit = 0;
    lz->burst = -1;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {
            lz->name.data = value[i].data + 5;
            p = (u_char *) ngx_strchr(lz->name.data, ':');

            if (p == NULL) {
                lz->name.len = value[i].len - 5;
                continue;
            }

            lz->name.len = p - lz->name.data;
            s.data = p + 1;
            s.len = value[i].data + value[i].len - s.data;
            *size = ngx_parse_size(&s);

            if (*size == NGX_ERROR || *size < (ssize_t) (8 * ngx_pagesize)) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "zone \"%V\" is too small or its size "
                                   "invalid (\"%V\"; at least 32k)",
                                   &lz->name, &s);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "key=", 4) == 0) {
            s.data = value[i].data + 4;
            s.len = value[i].len - 4;

            ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
            ccv.cf = cf;
            ccv.value = &s;
            ccv.complex_value = &lz->key;

            if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "rate=", 5) == 0) {
            s.data = value[i].data + 5;
            s.len = value[i].len - 5;

            if (ngx_http_pagedllm_limit_rate(&s, &lz->rate, &per_unit)
                != NGX_OK)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid rate \"%V\": tokens a minute "
                                   "or a second, like \"10000/m\"",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "burst=", 6) == 0) {
            n = ngx_atoi(value[i].data + 6, value[i].len - 6);

            if (n <= 0 || n > NGX_HTTP_PAGEDLLM_LIMIT_MAX) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid burst \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            lz->burst = n;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    if (lz->name.len == 0 || lz->key.value.len == 0 || lz->rate == 0) {
        return "needs zone=NAME:SIZE, key=$VARIABLE and rate=N/m";
    }

    if (lz->burst < 0) {
        lz->burst = per_unit;
    }

    return NGX_CONF_OK;
}


/* "N/m" or "N/s": tokens a minute, and N as it was written */
static ngx_int_t
ngx_http_pagedllm_limit_rate(ngx_str_t *s, int64_t *rate, int64_t *per_unit)
{
    ngx_int_t  n;

    if (s->len < 3 || s->data[s->len - 2] != '/') {
        return NGX_ERROR;
    }

    n = ngx_atoi(s->data, s->len - 2);

    if (n <= 0 || n > NGX_HTTP_PAGEDLLM_LIMIT_MAX) {
        return NGX_ERROR;
    }

    *per_unit = n;

    switch (s->data[s->len - 1]) {
    case 'm':
        *rate = n;
        return NGX_OK;
    case 's':
        *rate = n * 60;
        return NGX_OK;
    default:
        return NGX_ERROR;
    }
}


static ngx_int_t
ngx_http_pagedllm_limit_zone_init(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_pagedllm_limit_zone_t  *old = data;

    size_t                           len;
    ngx_http_pagedllm_limit_zone_t  *lz;

    lz = shm_zone->data;

    if (old) {
        lz->sh = old->sh;
        lz->shpool = old->shpool;
        return NGX_OK;
    }

    lz->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        lz->sh = lz->shpool->data;
        return NGX_OK;
    }

    lz->sh = ngx_slab_alloc(lz->shpool,
                            sizeof(ngx_http_pagedllm_limit_shctx_t));
    if (lz->sh == NULL) {
        return NGX_ERROR;
    }

    lz->shpool->data = lz->sh;

    ngx_rbtree_init(&lz->sh->rbtree, &lz->sh->sentinel,
                    ngx_http_pagedllm_limit_insert);
    ngx_queue_init(&lz->sh->queue);

    len = sizeof(" in pagedllm_limit_tokens zone \"\"")
          + shm_zone->shm.name.len;

    lz->shpool->log_ctx = ngx_slab_alloc(lz->shpool, len);
    if (lz->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(lz->shpool->log_ctx, " in pagedllm_limit_tokens zone \"%V\"%Z",
                &shm_zone->shm.name);

    /* a full zone forgets its least recently used keys, logged here */
    lz->shpool->log_nomem = 0;

    return NGX_OK;
}


/*
 * Before a completion is submitted: its prompt tokens taken from each of
 * its location's buckets, or a 429.  NGX_DECLINED: admitted (or nothing
 * to count); else the answer sent.
 */
ngx_int_t
ngx_http_pagedllm_limit_admit(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_int_t                          rc;
    ngx_str_t                          key;
    ngx_msec_t                         wait;
    ngx_uint_t                         i;
    ngx_shm_zone_t                   **zones;
    ngx_http_cleanup_t                *cln;
    ngx_http_pagedllm_limit_req_t     *lr;
    ngx_http_pagedllm_loc_conf_t      *plcf;
    ngx_http_pagedllm_limit_zone_t    *lz;
    ngx_http_pagedllm_limit_charge_t  *c;

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pagedllm_module);

    if (plcf->limits == NULL) {
        return NGX_DECLINED;
    }

    lr = ngx_pcalloc(r->pool, sizeof(ngx_http_pagedllm_limit_req_t));
    if (lr == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    lr->charges = ngx_palloc(r->pool, plcf->limits->nelts
                             * sizeof(ngx_http_pagedllm_limit_charge_t));
    if (lr->charges == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    lr->ctx = ctx;
    lr->prompt = (int64_t) ctx->params.n_prompt;
    zones = plcf->limits->elts;

    for (i = 0; i < plcf->limits->nelts; i++) {
        lz = zones[i]->data;

        if (ngx_http_complex_value(r, &lz->key, &key) != NGX_OK) {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
            goto refused;
        }

        if (key.len == 0) {
            continue;
        }

        if (key.len > 65535) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "pagedllm: the key of zone \"%V\" is more than "
                          "65535 bytes long", &lz->name);
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
            goto refused;
        }

        c = &lr->charges[lr->n_charges];
        c->zone = lz;
        c->key = key;

        rc = ngx_http_pagedllm_limit_take(c, lr->prompt, &wait,
                                          r->connection->log);

        if (rc == NGX_ERROR) {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
            goto refused;
        }

        if (rc == NGX_BUSY) {
            rc = ngx_http_pagedllm_limit_refuse(r, lz, lr->prompt, wait);
            goto refused;
        }

        lr->n_charges++;
    }

    if (lr->n_charges == 0) {
        return NGX_DECLINED;
    }

    cln = ngx_http_cleanup_add(r, 0);
    if (cln == NULL) {
        rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        goto refused;
    }

    cln->handler = ngx_http_pagedllm_limit_cleanup;
    cln->data = lr;
    ctx->limit = lr;

    return NGX_DECLINED;

refused:

    for (i = 0; i < lr->n_charges; i++) {
        ngx_http_pagedllm_limit_add(&lr->charges[i], lr->prompt,
                                    r->connection->log);
    }

    return rc;
}


/*
 * The request finished (or went away): its completion tokens taken from
 * its buckets, once.
 */
void
ngx_http_pagedllm_limit_finish(ngx_http_pagedllm_ctx_t *ctx)
{
    int64_t                         tokens;
    ngx_uint_t                      i;
    ngx_http_pagedllm_limit_req_t  *lr = ctx->limit;

    if (lr == NULL || lr->settled) {
        return;
    }

    lr->settled = 1;
    tokens = (int64_t) ngx_http_pagedllm_completion_tokens(ctx);

    for (i = 0; i < lr->n_charges; i++) {
        ngx_http_pagedllm_limit_add(&lr->charges[i], -tokens,
                                    ctx->request->connection->log);
    }
}


/* Every way out: a request never submitted gets its prompt back. */
static void
ngx_http_pagedllm_limit_cleanup(void *data)
{
    ngx_http_pagedllm_limit_req_t  *lr = data;

    ngx_uint_t  i;

    if (lr->settled) {
        return;
    }

    if (lr->ctx->node.key != 0) {
        ngx_http_pagedllm_limit_finish(lr->ctx);
        return;
    }

    lr->settled = 1;

    for (i = 0; i < lr->n_charges; i++) {
        ngx_http_pagedllm_limit_add(&lr->charges[i], lr->prompt,
                                    lr->ctx->request->connection->log);
    }
}


/*
 * Takes tokens from c's bucket if it holds them: NGX_OK; NGX_BUSY with
 * *wait, the ms until it will (0: never, more than the burst); NGX_ERROR
 * when the zone has no room for the key.
 */
static ngx_int_t
ngx_http_pagedllm_limit_take(ngx_http_pagedllm_limit_charge_t *c,
    int64_t tokens, ngx_msec_t *wait, ngx_log_t *log)
{
    int64_t                          need;
    ngx_int_t                        rc;
    ngx_http_pagedllm_limit_node_t  *node;
    ngx_http_pagedllm_limit_zone_t  *lz = c->zone;

    need = tokens * NGX_HTTP_PAGEDLLM_LIMIT_UNIT;
    *wait = 0;

    ngx_shmtx_lock(&lz->shpool->mutex);

    node = ngx_http_pagedllm_limit_node(lz, &c->key, log);

    if (node == NULL) {
        rc = NGX_ERROR;

    } else if (node->balance >= need) {
        node->balance -= need;
        rc = NGX_OK;

    } else {
        if (tokens <= lz->burst) {
            *wait = (ngx_msec_t) ((need - node->balance + lz->rate - 1)
                                  / lz->rate);
        }

        rc = NGX_BUSY;
    }

    ngx_shmtx_unlock(&lz->shpool->mutex);

    return rc;
}


/* Adds tokens (taken when negative) to c's bucket, up to the burst. */
static void
ngx_http_pagedllm_limit_add(ngx_http_pagedllm_limit_charge_t *c,
    int64_t tokens, ngx_log_t *log)
{
    int64_t                          full;
    ngx_http_pagedllm_limit_node_t  *node;
    ngx_http_pagedllm_limit_zone_t  *lz = c->zone;

    full = lz->burst * NGX_HTTP_PAGEDLLM_LIMIT_UNIT;

    ngx_shmtx_lock(&lz->shpool->mutex);

    node = ngx_http_pagedllm_limit_node(lz, &c->key, log);

    if (node != NULL) {
        node->balance += tokens * NGX_HTTP_PAGEDLLM_LIMIT_UNIT;

        if (node->balance > full) {
            node->balance = full;
        }
    }

    ngx_shmtx_unlock(&lz->shpool->mutex);
}


/*
 * The key's bucket, refilled to now and made the most recently used;
 * a new one is full.  With the zone locked.
 */
static ngx_http_pagedllm_limit_node_t *
ngx_http_pagedllm_limit_node(ngx_http_pagedllm_limit_zone_t *lz,
    ngx_str_t *key, ngx_log_t *log)
{
    size_t                           size;
    uint32_t                         hash;
    ngx_http_pagedllm_limit_node_t  *node;

    hash = ngx_crc32_short(key->data, key->len);

    node = ngx_http_pagedllm_limit_lookup(lz, key, hash);

    if (node != NULL) {
        ngx_queue_remove(&node->queue);
        ngx_queue_insert_head(&lz->sh->queue, &node->queue);
        ngx_http_pagedllm_limit_refill(lz, node);
        return node;
    }

    ngx_http_pagedllm_limit_expire(lz, 0, log);

    size = offsetof(ngx_http_pagedllm_limit_node_t, data) + key->len;

    node = ngx_slab_alloc_locked(lz->shpool, size);

    if (node == NULL) {
        ngx_http_pagedllm_limit_expire(lz, 1, log);

        node = ngx_slab_alloc_locked(lz->shpool, size);
        if (node == NULL) {
            ngx_log_error(NGX_LOG_ALERT, log, 0,
                          "pagedllm: could not allocate a key in "
                          "pagedllm_limit_tokens zone \"%V\"", &lz->name);
            return NULL;
        }
    }

    node->node.key = hash;
    node->len = (u_short) key->len;
    ngx_memcpy(node->data, key->data, key->len);
    node->last = ngx_current_msec;
    node->balance = lz->burst * NGX_HTTP_PAGEDLLM_LIMIT_UNIT;

    ngx_rbtree_insert(&lz->sh->rbtree, &node->node);
    ngx_queue_insert_head(&lz->sh->queue, &node->queue);

    return node;
}


static ngx_http_pagedllm_limit_node_t *
ngx_http_pagedllm_limit_lookup(ngx_http_pagedllm_limit_zone_t *lz,
    ngx_str_t *key, uint32_t hash)
{
    ngx_int_t                        rc;
    ngx_rbtree_node_t               *n, *sentinel;
    ngx_http_pagedllm_limit_node_t  *node;

    n = lz->sh->rbtree.root;
    sentinel = lz->sh->rbtree.sentinel;

    while (n != sentinel) {

        if (hash != n->key) {
            n = (hash < n->key) ? n->left : n->right;
            continue;
        }

        node = (ngx_http_pagedllm_limit_node_t *) n;

        rc = ngx_memn2cmp(key->data, node->data, key->len,
                          (size_t) node->len);

        if (rc == 0) {
            return node;
        }

        n = (rc < 0) ? n->left : n->right;
    }

    return NULL;
}


/*
 * Frees up to two least recently used buckets that have refilled to the
 * burst (the same as no bucket); force frees the least recently used one
 * whatever it holds, forgetting its debt, when the zone is full.
 */
static void
ngx_http_pagedllm_limit_expire(ngx_http_pagedllm_limit_zone_t *lz,
    ngx_uint_t force, ngx_log_t *log)
{
    ngx_uint_t                       i;
    ngx_queue_t                     *q;
    ngx_http_pagedllm_limit_node_t  *node;

    for (i = 0; i < 3; i++) {

        if (ngx_queue_empty(&lz->sh->queue)) {
            return;
        }

        q = ngx_queue_last(&lz->sh->queue);
        node = ngx_queue_data(q, ngx_http_pagedllm_limit_node_t, queue);

        if (force && i == 0) {
            ngx_log_error(NGX_LOG_WARN, log, 0,
                          "pagedllm: pagedllm_limit_tokens zone \"%V\" is "
                          "full, forgetting its least recently used key",
                          &lz->name);

        } else {
            ngx_http_pagedllm_limit_refill(lz, node);

            if (i == 2
                || node->balance < lz->burst * NGX_HTTP_PAGEDLLM_LIMIT_UNIT)
            {
                return;
            }
        }

        ngx_queue_remove(q);
        ngx_rbtree_delete(&lz->sh->rbtree, &node->node);
        ngx_slab_free_locked(lz->shpool, node);
    }
}


/* rate tokens a minute since the last refill, up to the burst */
static void
ngx_http_pagedllm_limit_refill(ngx_http_pagedllm_limit_zone_t *lz,
    ngx_http_pagedllm_limit_node_t *node)
{
    int64_t         full;
    ngx_msec_int_t  ms;

    full = lz->burst * NGX_HTTP_PAGEDLLM_LIMIT_UNIT;
    ms = (ngx_msec_int_t) (ngx_current_msec - node->last);
    node->last = ngx_current_msec;

    if (ms <= 0 || node->balance >= full) {
        return;
    }

    if ((uint64_t) ms > (uint64_t) (full - node->balance) / lz->rate) {
        node->balance = full;
        return;
    }

    node->balance += (int64_t) ms * lz->rate;
}


static void
ngx_http_pagedllm_limit_insert(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t              **p;
    ngx_http_pagedllm_limit_node_t  *ln, *lt;

    for ( ;; ) {

        if (node->key != temp->key) {
            p = (node->key < temp->key) ? &temp->left : &temp->right;

        } else {
            ln = (ngx_http_pagedllm_limit_node_t *) node;
            lt = (ngx_http_pagedllm_limit_node_t *) temp;

            p = (ngx_memn2cmp(ln->data, lt->data, ln->len, lt->len) < 0)
                ? &temp->left : &temp->right;
        }

        if (*p == sentinel) {
            break;
        }

        temp = *p;
    }

    *p = node;
    node->parent = temp;
    node->left = sentinel;
    node->right = sentinel;
    ngx_rbt_red(node);
}


/* 429 as OpenAI answers a tokens-per-minute limit; Retry-After unless the
   prompt is larger than the burst (wait 0) */
static ngx_int_t
ngx_http_pagedllm_limit_refuse(ngx_http_request_t *r,
    ngx_http_pagedllm_limit_zone_t *lz, int64_t tokens, ngx_msec_t wait)
{
    time_t                     sec;
    ngx_str_t                  value;
    ngx_http_pagedllm_error_t  err;

    if (wait == 0) {
        ngx_http_pagedllm_error_set(&err, NGX_HTTP_TOO_MANY_REQUESTS, NULL,
                                    "Request too large for the token "
                                    "quota: %L prompt tokens, the limit is "
                                    "%L tokens at %L tokens per minute",
                                    tokens, lz->burst, lz->rate);

    } else {
        sec = (time_t) ((wait + 999) / 1000);

        value.data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
        if (value.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        value.len = ngx_sprintf(value.data, "%T", sec) - value.data;

        if (ngx_http_pagedllm_add_header(r, "Retry-After", &value) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_http_pagedllm_error_set(&err, NGX_HTTP_TOO_MANY_REQUESTS, NULL,
                                    "Token quota reached: %L tokens per "
                                    "minute, up to %L at once; this "
                                    "request's %L prompt tokens fit in %T s",
                                    lz->rate, lz->burst, tokens, sec);
    }

    err.type = "tokens";
    err.code = "rate_limit_exceeded";

    return ngx_http_pagedllm_send_error(r, &err);
}
