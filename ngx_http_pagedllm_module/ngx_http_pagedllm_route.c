
/*
 * ngx_http_pagedllm_route: groups of engines and which engine of its
 * location's group a request goes to.
 *
 *     pagedllm_engines gpu {
 *         engine unix:/run/pagedllm/gpu0.sock;
 *         engine unix:/run/pagedllm/gpu1.sock weight=2;
 *     }
 *     location /v1/ {
 *         pagedllm gpu;
 *         pagedllm_route prefix tokens=64 spill=8;
 *     }
 *
 * Every worker attaches to every engine of every group (one channel
 * each); an engine named in several groups is one engine.  The choice is
 * the worker's, made at submit time from what it sees: each engine's
 * attach state, the stats the engine publishes into the worker's region
 * and the worker's own requests in flight on it.  Only engines attached,
 * serving the request's model (the body's "model", else the model of the
 * group's first attached engine) and holding the tokenizer the prompt
 * was tokenized with are candidates; a detached engine is none, so a
 * crashed engine is skipped from the moment its socket closes, and is a
 * candidate again once it re-attaches.
 *
 * An engine's load is the larger of its published running + waiting +
 * swapped requests (all workers', as of its last loop pass) plus this
 * worker's submits to it since that publication, and this worker's
 * requests in flight on it (exact, with no lag: a burst the worker
 * submits between two publications still spreads, and several workers
 * bursting at once each count what the others had submitted by the
 * engine's last pass).
 *
 *   least_load   the least load / weight; ties (an idle group) go to
 *                the engine with more free KV blocks, then in turn
 *   round_robin  each engine in turn, weight times per round
 *   prefix       the engine that owns the hash of the prompt's first
 *                tokens=K tokens (ngx_http_pagedllm_prefix_hash) by
 *                rendezvous hashing (ngx_http_pagedllm_pick.c), so
 *                ownership is proportional to weight and only the keys
 *                of an engine that leaves or joins move; requests
 *                sharing a system prompt or few-shot prefix meet its
 *                KV in that engine's prefix cache.  K defaults to 64
 *                tokens, as pagedllm_prefix_hash_tokens does: a chat's
 *                template header and the start of its system prompt,
 *                where prompts that share no prefix already differ.
 *                The owner is overloaded when its load exceeds the
 *                least-loaded candidate's by more than spill=N
 *                requests; then least_load decides, and the next
 *                request of the prefix goes back to the owner once it
 *                has caught up.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_channel.h"
#include "ngx_http_pagedllm_pick.h"
#include "ngx_http_pagedllm_prefix.h"


#define NGX_HTTP_PAGEDLLM_MAX_WEIGHT        100
#define NGX_HTTP_PAGEDLLM_PREFIX_TOKENS     64
#define NGX_HTTP_PAGEDLLM_SPILL             8


static ngx_int_t ngx_http_pagedllm_engine_add(ngx_conf_t *cf,
    ngx_http_pagedllm_main_conf_t *pmcf, ngx_str_t *url, ngx_uint_t labeled,
    ngx_uint_t *index);
static char *ngx_http_pagedllm_engines_line(ngx_conf_t *cf,
    ngx_command_t *dummy, void *conf);
static ngx_http_pagedllm_group_t *ngx_http_pagedllm_group_add(ngx_conf_t *cf,
    ngx_http_pagedllm_main_conf_t *pmcf, ngx_str_t *name);
static ngx_int_t ngx_http_pagedllm_served_model(ngx_http_pagedllm_ctx_t *ctx,
    ngx_str_t *model);
static ngx_uint_t ngx_http_pagedllm_candidates(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_group_t *group, ngx_http_pagedllm_channel_t **chs,
    ngx_http_pagedllm_cand_t *cand);
static ngx_int_t ngx_http_pagedllm_same_model(ngx_http_pagedllm_channel_t *ch,
    ngx_str_t *model);


/* ---- configuration ---- */


/*
 * engine unix:PATH of a group or of pagedllm_engine: its index in
 * pmcf->engines, one entry per socket path whatever the groups naming it.
 */
static ngx_int_t
ngx_http_pagedllm_engine_add(ngx_conf_t *cf,
    ngx_http_pagedllm_main_conf_t *pmcf, ngx_str_t *url, ngx_uint_t labeled,
    ngx_uint_t *index)
{
    size_t                            len;
    ngx_url_t                         u;
    ngx_uint_t                        i;
    struct sockaddr_un               *sun;
    ngx_http_pagedllm_engine_conf_t  *ec;

    ngx_memzero(&u, sizeof(ngx_url_t));
    u.url = *url;
    u.no_resolve = 1;

    if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s in \"%V\"",
                           u.err ? u.err : "invalid address", url);
        return NGX_ERROR;
    }

    if (u.family != AF_UNIX || u.naddrs != 1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must be \"unix:PATH\"", url);
        return NGX_ERROR;
    }

    sun = (struct sockaddr_un *) u.addrs[0].sockaddr;
    len = ngx_strlen(sun->sun_path);

    ec = pmcf->engines.elts;

    for (i = 0; i < pmcf->engines.nelts; i++) {
        if (ec[i].path.len == len
            && ngx_strncmp(ec[i].path.data, sun->sun_path, len) == 0)
        {
            ec[i].labeled |= labeled;
            *index = i;
            return NGX_OK;
        }
    }

    ec = ngx_array_push(&pmcf->engines);
    if (ec == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(ec, sizeof(ngx_http_pagedllm_engine_conf_t));

    ec->path.len = len;
    ec->path.data = ngx_pnalloc(cf->pool, len + 1);
    if (ec->path.data == NULL) {
        return NGX_ERROR;
    }

    ngx_cpystrn(ec->path.data, (u_char *) sun->sun_path, len + 1);

    /* the engine's identity in rendezvous hashing: the same in every
       worker and every nginx that names the same path */
    ec->id = ngx_http_pagedllm_pick_mix(ngx_crc32_short(ec->path.data,
                                                        len));

    ec->labeled = labeled;
    *index = pmcf->engines.nelts - 1;

    return NGX_OK;
}


/* pagedllm_engines NAME { engine unix:PATH [weight=N]; ... } */
char *
ngx_http_pagedllm_engines_block(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_pagedllm_main_conf_t *pmcf = conf;

    char                       *rv;
    ngx_str_t                  *value;
    ngx_conf_t                  save;
    ngx_http_pagedllm_group_t  *group;

    value = cf->args->elts;

    if (value[1].len == 0) {
        return "needs a name";
    }

    group = ngx_http_pagedllm_group_add(cf, pmcf, &value[1]);
    if (group == NULL) {
        return NGX_CONF_ERROR;
    }

    save = *cf;
    cf->handler = ngx_http_pagedllm_engines_line;
    cf->handler_conf = (char *) group;

    rv = ngx_conf_parse(cf, NULL);

    *cf = save;

    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (group->members.nelts == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "pagedllm_engines \"%V\" has no engine",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* pagedllm_engine unix:PATH: the unnamed group of that one engine */
char *
ngx_http_pagedllm_engine_set(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pagedllm_main_conf_t *pmcf = conf;

    ngx_str_t                    name = ngx_null_string, *value;
    ngx_http_pagedllm_group_t   *group;
    ngx_http_pagedllm_member_t  *m;

    value = cf->args->elts;

    group = ngx_http_pagedllm_group_add(cf, pmcf, &name);
    if (group == NULL) {
        return NGX_CONF_ERROR;
    }

    m = ngx_array_push(&group->members);
    if (m == NULL) {
        return NGX_CONF_ERROR;
    }

    m->weight = 1;

    if (ngx_http_pagedllm_engine_add(cf, pmcf, &value[1], 0, &m->engine)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static ngx_http_pagedllm_group_t *
ngx_http_pagedllm_group_add(ngx_conf_t *cf,
    ngx_http_pagedllm_main_conf_t *pmcf, ngx_str_t *name)
{
    ngx_uint_t                  i;
    ngx_http_pagedllm_group_t  *group;

    group = pmcf->groups.elts;

    for (i = 0; i < pmcf->groups.nelts; i++) {
        if (group[i].name.len == name->len
            && ngx_strncmp(group[i].name.data, name->data, name->len) == 0)
        {
            if (name->len == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"pagedllm_engine\" is duplicate");
            } else {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "duplicate pagedllm_engines \"%V\"", name);
            }

            return NULL;
        }
    }

    group = ngx_array_push(&pmcf->groups);
    if (group == NULL) {
        return NULL;
    }

    ngx_memzero(group, sizeof(ngx_http_pagedllm_group_t));
    group->name = *name;

    if (ngx_array_init(&group->members, cf->pool, 4,
                       sizeof(ngx_http_pagedllm_member_t))
        != NGX_OK)
    {
        return NULL;
    }

    return group;
}


static char *
ngx_http_pagedllm_engines_line(ngx_conf_t *cf, ngx_command_t *dummy,
    void *conf)
{
    ngx_http_pagedllm_group_t *group = conf;

    ngx_int_t                       w;
    ngx_str_t                      *value;
    ngx_uint_t                      i, engine;
    ngx_http_pagedllm_member_t     *m;
    ngx_http_pagedllm_main_conf_t  *pmcf;

    value = cf->args->elts;

    if (cf->args->nelts < 2 || cf->args->nelts > 3
        || value[0].len != sizeof("engine") - 1
        || ngx_strcmp(value[0].data, "engine") != 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "a pagedllm_engines group takes only "
                           "\"engine unix:PATH [weight=N];\"");
        return NGX_CONF_ERROR;
    }

    if (group->members.nelts == NGX_HTTP_PAGEDLLM_MAX_ENGINES) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "a group has at most %d engines",
                           NGX_HTTP_PAGEDLLM_MAX_ENGINES);
        return NGX_CONF_ERROR;
    }

    w = 1;

    if (cf->args->nelts == 3) {
        w = (ngx_strncmp(value[2].data, "weight=", 7) == 0)
            ? ngx_atoi(value[2].data + 7, value[2].len - 7) : NGX_ERROR;

        if (w < 1 || w > NGX_HTTP_PAGEDLLM_MAX_WEIGHT) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\": weight=N, N from "
                               "1 to %d", &value[2],
                               NGX_HTTP_PAGEDLLM_MAX_WEIGHT);
            return NGX_CONF_ERROR;
        }
    }

    pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_pagedllm_module);

    if (ngx_http_pagedllm_engine_add(cf, pmcf, &value[1], 1, &engine)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    m = group->members.elts;

    for (i = 0; i < group->members.nelts; i++) {
        if (m[i].engine == engine) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "engine \"%V\" is duplicate in the group",
                               &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    m = ngx_array_push(&group->members);
    if (m == NULL) {
        return NGX_CONF_ERROR;
    }

    m->engine = engine;
    m->weight = (ngx_uint_t) w;

    return NGX_CONF_OK;
}


/*
 * pagedllm_route least_load | round_robin | prefix [tokens=K] [spill=N]
 */
char *
ngx_http_pagedllm_route_set(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pagedllm_loc_conf_t *plcf = conf;

    ngx_int_t                        n;
    ngx_str_t                       *value;
    ngx_uint_t                       i;
    ngx_http_pagedllm_route_conf_t  *rc = &plcf->route;

    if (rc->policy != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "least_load") == 0) {
        rc->policy = NGX_HTTP_PAGEDLLM_ROUTE_LEAST_LOAD;

    } else if (ngx_strcmp(value[1].data, "round_robin") == 0) {
        rc->policy = NGX_HTTP_PAGEDLLM_ROUTE_ROUND_ROBIN;

    } else if (ngx_strcmp(value[1].data, "prefix") == 0) {
        rc->policy = NGX_HTTP_PAGEDLLM_ROUTE_PREFIX;

    } else {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid policy \"%V\": least_load, round_robin "
                           "or prefix", &value[1]);
        return NGX_CONF_ERROR;
    }

    for (i = 2; i < cf->args->nelts; i++) {

        if (rc->policy == NGX_HTTP_PAGEDLLM_ROUTE_PREFIX
            && ngx_strncmp(value[i].data, "tokens=", 7) == 0)
        {
            n = ngx_atoi(value[i].data + 7, value[i].len - 7);
            if (n < 1) {
                goto invalid;
            }

            rc->tokens = (size_t) n;
            continue;
        }

        if (rc->policy == NGX_HTTP_PAGEDLLM_ROUTE_PREFIX
            && ngx_strncmp(value[i].data, "spill=", 6) == 0)
        {
            n = ngx_atoi(value[i].data + 6, value[i].len - 6);
            if (n == NGX_ERROR) {
                goto invalid;
            }

            rc->spill = (ngx_uint_t) n;
            continue;
        }

        goto invalid;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"",
                       &value[i]);
    return NGX_CONF_ERROR;
}


void
ngx_http_pagedllm_route_merge(ngx_http_pagedllm_route_conf_t *conf,
    ngx_http_pagedllm_route_conf_t *prev)
{
    if (conf->policy == NGX_CONF_UNSET_UINT) {
        *conf = *prev;
    }

    ngx_conf_init_uint_value(conf->policy,
                             NGX_HTTP_PAGEDLLM_ROUTE_LEAST_LOAD);
    ngx_conf_init_size_value(conf->tokens, NGX_HTTP_PAGEDLLM_PREFIX_TOKENS);
    ngx_conf_init_uint_value(conf->spill, NGX_HTTP_PAGEDLLM_SPILL);
}


/*
 * The group of "pagedllm [NAME]": NAME's, or without one the group of
 * pagedllm_engine, else the only pagedllm_engines group; none configured
 * at all leaves the location without an engine (answered 503).
 */
char *
ngx_http_pagedllm_group_find(ngx_conf_t *cf,
    ngx_http_pagedllm_loc_conf_t *plcf)
{
    ngx_uint_t                      i;
    ngx_http_pagedllm_group_t      *group;
    ngx_http_pagedllm_main_conf_t  *pmcf;

    pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_pagedllm_module);
    group = pmcf->groups.elts;

    for (i = 0; i < pmcf->groups.nelts; i++) {
        /* the unnamed group's name is { 0, NULL }: no strncmp on NULL */
        if (group[i].name.len == plcf->group_name.len
            && (plcf->group_name.len == 0
                || ngx_strncmp(group[i].name.data, plcf->group_name.data,
                               plcf->group_name.len) == 0))
        {
            plcf->group = &group[i];
            return NGX_CONF_OK;
        }
    }

    if (plcf->group_name.len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "no pagedllm_engines \"%V\"", &plcf->group_name);
        return NGX_CONF_ERROR;
    }

    if (pmcf->groups.nelts > 1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"pagedllm\" needs a group's name: several "
                           "pagedllm_engines groups are defined");
        return NGX_CONF_ERROR;
    }

    plcf->group = pmcf->groups.nelts ? &group[0] : NULL;

    return NGX_CONF_OK;
}


/* ---- routing ---- */


/*
 * The engine a request naming model (NULL: none) is parsed with: the
 * first attached engine of its location's group (of all, for a location
 * without one) that serves model, or with none serving it the first
 * attached engine, which answers 404 for an unknown model.  NULL when
 * none is attached, or when model is one that only detached engines
 * served: it is down, not unknown.
 */
ngx_http_pagedllm_channel_t *
ngx_http_pagedllm_route_model(ngx_http_request_t *r, ngx_str_t *model)
{
    ngx_uint_t                     i, n, down;
    ngx_http_pagedllm_channel_t   *ch, *first;
    ngx_http_pagedllm_group_t     *group;
    ngx_http_pagedllm_member_t    *member;
    ngx_http_pagedllm_loc_conf_t  *plcf;

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pagedllm_module);
    group = plcf->group;

    member = group ? group->members.elts : NULL;
    n = group ? group->members.nelts : ngx_http_pagedllm_channel_count();

    first = NULL;
    down = 0;

    for (i = 0; i < n; i++) {
        ch = ngx_http_pagedllm_channel_get(member ? member[i].engine : i);

        if (ch == NULL) {
            continue;
        }

        if (ch->state != NGX_HTTP_PAGEDLLM_ATTACHED) {
            down |= (model != NULL
                     && ngx_http_pagedllm_same_model(ch, model) == NGX_OK);
            continue;
        }

        if (model == NULL
            || ngx_http_pagedllm_same_model(ch, model) == NGX_OK)
        {
            return ch;
        }

        if (first == NULL) {
            first = ch;
        }
    }

    return down ? NULL : first;
}


/* The engine ctx, tokenized, is submitted to; NULL: none can take it. */
ngx_http_pagedllm_channel_t *
ngx_http_pagedllm_route_pick(ngx_http_pagedllm_ctx_t *ctx)
{
    size_t                          i;
    uint64_t                        hash;
    ngx_uint_t                      n;
    ngx_http_pagedllm_cand_t        cand[NGX_HTTP_PAGEDLLM_MAX_ENGINES];
    ngx_http_pagedllm_channel_t    *chs[NGX_HTTP_PAGEDLLM_MAX_ENGINES];
    ngx_http_pagedllm_group_t      *group;
    ngx_http_pagedllm_loc_conf_t   *plcf;

    plcf = ngx_http_get_module_loc_conf(ctx->request,
                                        ngx_http_pagedllm_module);
    group = plcf->group;

    if (group == NULL) {
        return NULL;
    }

    n = ngx_http_pagedllm_candidates(ctx, group, chs, cand);

    if (n == 0) {
        return NULL;
    }

    switch (plcf->route.policy) {

    case NGX_HTTP_PAGEDLLM_ROUTE_ROUND_ROBIN:
        i = ngx_http_pagedllm_pick_round_robin(cand, n, group->rr);
        break;

    case NGX_HTTP_PAGEDLLM_ROUTE_PREFIX:
        hash = ngx_http_pagedllm_prefix_hash(ctx->params.prompt,
                                             ctx->params.n_prompt,
                                             plcf->route.tokens);
        i = ngx_http_pagedllm_pick_prefix(cand, n, group->rr, hash,
                                          (uint32_t) plcf->route.spill);
        break;

    default:
        i = ngx_http_pagedllm_pick_least_load(cand, n, group->rr);
    }

    return chs[i];
}


/* The attached engines of r's group, one per model served (at most
   NGX_HTTP_PAGEDLLM_MAX_ENGINES): what GET models lists. */
ngx_uint_t
ngx_http_pagedllm_channel_models(ngx_http_request_t *r,
    ngx_http_pagedllm_engine_t **engines)
{
    ngx_uint_t                     i, j, n;
    ngx_http_pagedllm_channel_t   *ch;
    ngx_http_pagedllm_member_t    *member;
    ngx_http_pagedllm_loc_conf_t  *plcf;

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pagedllm_module);

    if (plcf->group == NULL) {
        return 0;
    }

    member = plcf->group->members.elts;
    n = 0;

    for (i = 0; i < plcf->group->members.nelts; i++) {
        ch = ngx_http_pagedllm_channel_get(member[i].engine);

        if (ch->state != NGX_HTTP_PAGEDLLM_ATTACHED) {
            continue;
        }

        for (j = 0; j < n; j++) {
            if (ngx_http_pagedllm_same_model(ch, &engines[j]->model)
                == NGX_OK)
            {
                break;
            }
        }

        if (j == n) {
            engines[n++] = &ch->engine;
        }
    }

    return n;
}


/* A submit went to the engine picked: the next pick moves on a step. */
void
ngx_http_pagedllm_route_commit(ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_http_pagedllm_loc_conf_t  *plcf;

    plcf = ngx_http_get_module_loc_conf(ctx->request,
                                        ngx_http_pagedllm_module);

    if (plcf->group) {
        plcf->group->rr++;
    }
}


/* The model the request is served by: its body's, else the model of the
   first attached engine holding its tokenizer. */
static ngx_int_t
ngx_http_pagedllm_served_model(ngx_http_pagedllm_ctx_t *ctx,
    ngx_str_t *model)
{
    json_t                        *v;
    ngx_uint_t                     i;
    ngx_http_pagedllm_channel_t   *ch;
    ngx_http_pagedllm_member_t    *member;
    ngx_http_pagedllm_loc_conf_t  *plcf;

    v = ctx->decode.root ? json_object_get(ctx->decode.root, "model") : NULL;

    if (json_is_string(v)) {
        model->data = (u_char *) json_string_value(v);
        model->len = json_string_length(v);
        return NGX_OK;
    }

    plcf = ngx_http_get_module_loc_conf(ctx->request,
                                        ngx_http_pagedllm_module);
    member = plcf->group->members.elts;

    for (i = 0; i < plcf->group->members.nelts; i++) {
        ch = ngx_http_pagedllm_channel_get(member[i].engine);

        if (ch->state == NGX_HTTP_PAGEDLLM_ATTACHED
            && ch->engine.tok == ctx->tok)
        {
            *model = ch->engine.model;
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


static ngx_uint_t
ngx_http_pagedllm_candidates(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_group_t *group, ngx_http_pagedllm_channel_t **chs,
    ngx_http_pagedllm_cand_t *cand)
{
    uint32_t                      published;
    ngx_str_t                     model;
    ngx_uint_t                    i, n;
    pl_stats_t                    st;
    ngx_http_pagedllm_channel_t  *ch;
    ngx_http_pagedllm_member_t   *member;

    if (ngx_http_pagedllm_served_model(ctx, &model) != NGX_OK) {
        return 0;
    }

    member = group->members.elts;
    n = 0;

    for (i = 0; i < group->members.nelts; i++) {
        ch = ngx_http_pagedllm_channel_get(member[i].engine);

        if (ch->state != NGX_HTTP_PAGEDLLM_ATTACHED
            || ch->engine.tok != ctx->tok
            || ngx_http_pagedllm_same_model(ch, &model) != NGX_OK)
        {
            continue;
        }

        published = 0;
        cand[n].free = 0;

        if (pl_stats_read(ch->hdr, &st) == 0) {
            published = st.running + st.waiting + st.swapped
                        + ngx_http_pagedllm_pick_unpublished(ch->recent,
                              NGX_HTTP_PAGEDLLM_RECENT, ch->nsubmits,
                              st.heartbeat_us);
            cand[n].free = st.kv_blocks_free;
        }

        chs[n] = ch;
        cand[n].id = ch->ec->id;
        cand[n].weight = (uint32_t) member[i].weight;
        cand[n].load = ngx_max(published, (uint32_t) ch->inflight);
        n++;
    }

    return n;
}


/* the model ch serves, or served when it was last attached */
static ngx_int_t
ngx_http_pagedllm_same_model(ngx_http_pagedllm_channel_t *ch,
    ngx_str_t *model)
{
    return (ch->engine.model.len == model->len
            && ngx_strncmp(ch->engine.model.data, model->data, model->len)
               == 0)
           ? NGX_OK : NGX_DECLINED;
}
