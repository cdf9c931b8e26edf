
/*
 * ngx_http_pagedllm_ui: the playground page and the live KV block map.
 *
 *     location /ui/ { pagedllm_ui; }
 *
 * GET /ui/ answers the page (ui/index.html, compiled into the module by
 * tools/embed-ui.sh, so there is nothing to install); GET /ui/blockmap
 * answers the engine's block map (pl_bmap_hdr_t in this worker's region)
 * as JSON.  Blocks go out run-length encoded, each run
 * [owner, refcount, flags, count]: a pool is mostly long runs of free or
 * same-request blocks, so a map of thousands of blocks is a few hundred
 * bytes.  The page asks for it several times a second.
 */


#include "ngx_http_pagedllm_handler.h"
#include "ngx_http_pagedllm_ui_page.h"


#define NGX_HTTP_PAGEDLLM_UI_RUN_LEN    48    /* "[65535,255,255,N]," */
#define NGX_HTTP_PAGEDLLM_UI_OWNER_LEN  160


static ngx_int_t ngx_http_pagedllm_ui_page_send(ngx_http_request_t *r);
static ngx_int_t ngx_http_pagedllm_ui_map_send(ngx_http_request_t *r);
static u_char *ngx_http_pagedllm_ui_owners(u_char *p, u_char *last,
    pl_bmap_hdr_t *m);
static ngx_uint_t ngx_http_pagedllm_ui_nruns(pl_bmap_block_t *b,
    uint32_t n);
static u_char *ngx_http_pagedllm_ui_runs(u_char *p, u_char *last,
    pl_bmap_block_t *b, uint32_t n);


ngx_int_t
ngx_http_pagedllm_ui_handler(ngx_http_request_t *r)
{
    ngx_str_t  map = ngx_string("/blockmap");

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (r->uri.len >= map.len
        && ngx_strncmp(r->uri.data + r->uri.len - map.len, map.data,
                       map.len) == 0)
    {
        return ngx_http_pagedllm_ui_map_send(r);
    }

    if (r->uri.len > 0 && r->uri.data[r->uri.len - 1] == '/') {
        return ngx_http_pagedllm_ui_page_send(r);
    }

    return NGX_HTTP_NOT_FOUND;
}


static ngx_int_t
ngx_http_pagedllm_ui_page_send(ngx_http_request_t *r)
{
    ngx_buf_t  *b;
    ngx_str_t   cache = ngx_string("no-cache");
    ngx_str_t   type = ngx_string("text/html; charset=utf-8");

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->pos = (u_char *) ngx_http_pagedllm_ui_page;
    b->last = b->pos + sizeof(ngx_http_pagedllm_ui_page);
    b->memory = 1;

    if (ngx_http_pagedllm_add_header(r, "Cache-Control", &cache) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_pagedllm_send(r, NGX_HTTP_OK, &type, b);
}


static ngx_int_t
ngx_http_pagedllm_ui_map_send(ngx_http_request_t *r)
{
    size_t            size;
    ngx_int_t         rc;
    ngx_buf_t        *b;
    ngx_str_t         cache = ngx_string("no-store");
    ngx_str_t         type = ngx_string("application/json");
    pl_bmap_hdr_t    *m;
    pl_bmap_block_t  *blocks;

    rc = ngx_http_pagedllm_channel_block_map(r->pool, &m);

    if (rc == NGX_DECLINED) {
        return ngx_http_pagedllm_unavailable(r,
                   "no engine attached: no block map");
    }

    if (rc != NGX_OK) {
        return NGX_HTTP_SERVICE_UNAVAILABLE;
    }

    blocks = (pl_bmap_block_t *) (m + 1);

    size = 256 + (size_t) m->n_owners * NGX_HTTP_PAGEDLLM_UI_OWNER_LEN
           + (ngx_http_pagedllm_ui_nruns(blocks, m->num_blocks)
              + ngx_http_pagedllm_ui_nruns(blocks + m->num_blocks,
                                           m->num_host_blocks))
             * NGX_HTTP_PAGEDLLM_UI_RUN_LEN;

    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_slprintf(b->last, b->end,
                  "{\"updates\":%uL,\"time_ms\":%uL,\"block_size\":%uD,"
                  "\"num_blocks\":%uD,\"num_host_blocks\":%uD,"
                  "\"owners_dropped\":%uD,\"owners\":[",
                  m->updates, m->time_ms, m->block_size, m->num_blocks,
                  m->num_host_blocks, m->owners_dropped);
    b->last = ngx_http_pagedllm_ui_owners(b->last, b->end, m);
    b->last = ngx_slprintf(b->last, b->end, "],\"device\":[");
    b->last = ngx_http_pagedllm_ui_runs(b->last, b->end, blocks,
                                        m->num_blocks);
    b->last = ngx_slprintf(b->last, b->end, "],\"host\":[");
    b->last = ngx_http_pagedllm_ui_runs(b->last, b->end,
                                        blocks + m->num_blocks,
                                        m->num_host_blocks);
    b->last = ngx_slprintf(b->last, b->end, "]}\n");

    if (ngx_http_pagedllm_add_header(r, "Cache-Control", &cache) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_pagedllm_send(r, NGX_HTTP_OK, &type, b);
}


/* Each owner with the suffix of its "cmpl-" / "chatcmpl-" id (the
   worker's pid and the request id, as X-Request-Id has them). */
static u_char *
ngx_http_pagedllm_ui_owners(u_char *p, u_char *last, pl_bmap_hdr_t *m)
{
    uint32_t          i;
    pl_bmap_owner_t  *o;

    for (i = 0; i < m->n_owners; i++) {
        o = &m->owners[i];
        p = ngx_slprintf(p, last,
                "%s{\"owner\":%uD,\"id\":\"%08xD%016xL\",\"state\":\"%s\","
                "\"seqs\":%uD,\"tokens\":%uD}",
                i ? "," : "", i + 1, o->pid, o->req_id,
                o->state == PL_BMAP_SWAPPED ? "swapped" : "running",
                o->n_seqs, o->n_tokens);
    }

    return p;
}


static ngx_inline ngx_uint_t
ngx_http_pagedllm_ui_same(pl_bmap_block_t *a, pl_bmap_block_t *b)
{
    return a->owner == b->owner && a->refcount == b->refcount
           && a->flags == b->flags;
}


/* How many runs ngx_http_pagedllm_ui_runs() writes for n blocks. */
static ngx_uint_t
ngx_http_pagedllm_ui_nruns(pl_bmap_block_t *b, uint32_t n)
{
    uint32_t    i;
    ngx_uint_t  runs;

    for (runs = n ? 1 : 0, i = 1; i < n; i++) {
        runs += !ngx_http_pagedllm_ui_same(&b[i], &b[i - 1]);
    }

    return runs;
}


static u_char *
ngx_http_pagedllm_ui_runs(u_char *p, u_char *last, pl_bmap_block_t *b,
    uint32_t n)
{
    uint32_t  i, start;

    for (start = 0, i = 1; i <= n; i++) {
        if (i < n && ngx_http_pagedllm_ui_same(&b[i], &b[start])) {
            continue;
        }

        p = ngx_slprintf(p, last, "%s[%uD,%uD,%uD,%uD]", start ? "," : "",
                         (uint32_t) b[start].owner,
                         (uint32_t) b[start].refcount,
                         (uint32_t) b[start].flags, i - start);
        start = i;
    }

    return p;
}
