/*
 * engine_requests: what comes in through the submission rings.  A SUBMIT
 * record is checked in full (sampling parameters, limits, room in the
 * KV cache for its prompt) before it becomes a sequence group in the
 * scheduler; a bad one is answered with ERROR + FINISH, never trusted.
 * ABORT ends a request's sequences and frees their blocks at once.  Also
 * the lifecycle helpers the loop shares: a connection's list of
 * sequences, finishing, failing and ranking a group.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "pl_params.h"


/* ---- requests ---- */


static void
pl_conn_append(pl_conn_t *c, pl_seq_t *s)
{
    s->conn = c;
    s->conn_prev = c->seqs_tail;
    s->conn_next = NULL;

    if (c->seqs_tail) {
        c->seqs_tail->conn_next = s;
    } else {
        c->seqs_head = s;
    }
    c->seqs_tail = s;
}


void
pl_conn_unlink(pl_conn_t *c, pl_seq_t *s)
{
    if (s->conn_prev) {
        s->conn_prev->conn_next = s->conn_next;
    } else {
        c->seqs_head = s->conn_next;
    }

    if (s->conn_next) {
        s->conn_next->conn_prev = s->conn_prev;
    } else {
        c->seqs_tail = s->conn_prev;
    }
}


/* best_of > n: the n members with the highest cumulative logprob (the
   lower index on ties) become choices 0..n-1. */
static void
pl_engine_rank(pl_seq_t *l)
{
    pl_seq_t  *m;
    int        i, j, rank;

    for (i = 0; i < l->n_members; i++) {
        m = l->members[i];
        rank = 0;
        for (j = 0; j < l->n_members; j++) {
            if (l->members[j]->cum_logprob > m->cum_logprob
                || (l->members[j]->cum_logprob == m->cum_logprob && j < i))
            {
                rank++;
            }
        }
        m->out_index = rank < l->n_return ? rank : -1;
    }
}


/* ms from the request's arrival to t, "-" when t has not come */
static const char *
pl_engine_ms(const pl_seq_t *l, uint64_t t, char *buf, size_t len)
{
    if (t == 0) {
        return "-";
    }

    snprintf(buf, len, "%.1f", (double) (t - l->t_arrival) / 1000.0);

    return buf;
}


/* One line at info for each request that ended, once all its sequences
   have: what operators grep for when a request looks slow or short. */
static void
pl_engine_log_request(const pl_seq_t *l)
{
    static const char  *reasons[] = { "-", "stop", "length", "abort",
                                      "error" };
    char                ttft[32], queue[32];
    int                 i, out = 0, reason;

    for (i = 0; i < l->n_members; i++) {
        out += pl_seq_generated(l->members[i]);
    }

    reason = l->fail_reason ? l->fail_reason : l->finish_reason;

    pl_log(PL_LOG_INFO, "request %u:%llu finished: %s, prompt %d tokens "
           "(%d cached), generated %d in %d sequences, queue %s ms, "
           "ttft %s ms, total %.1f ms, preemptions %d",
           l->conn->worker_id, (unsigned long long) l->req_id,
           reasons[reason >= 0 && reason <= PL_FINISH_ERROR ? reason : 0],
           l->n_prompt, l->cached_tokens, out, l->n_members,
           pl_engine_ms(l, l->t_scheduled, queue, sizeof(queue)),
           pl_engine_ms(l, l->t_first_token, ttft, sizeof(ttft)),
           (double) (pl_now_us() - l->t_arrival) / 1000.0, l->preemptions);
}


/* End sequence s: out of the scheduler (blocks freed); once its whole
   group has ended, the request leaves the live index.  Its remaining
   output and FINISH go out with the next flush. */
void
pl_engine_finish(pl_engine_t *e, pl_seq_t *s, int reason)
{
    pl_seq_t  *l = s->leader;

    if (s->state != PL_SEQ_FINISHED) {
        pl_sched_remove(&e->sched, s);
    }

    if (s->finish_reason != 0) {
        return;
    }

    s->finish_reason = reason;
    if (reason == PL_FINISH_ABORT || reason == PL_FINISH_ERROR) {
        l->fail_reason = l->fail_reason ? l->fail_reason : reason;
    }

    if (++l->n_finished == l->n_members) {
        pl_engine_log_request(l);
        pl_seq_index_remove(&l->conn->live, l);
        if (l->best_of > l->n_return && l->fail_reason == 0
            && l->beam == NULL)
        {
            pl_engine_rank(l);
        }
    }
}


/* End every member of s's request that is still running with reason. */
static void
pl_engine_end_group(pl_engine_t *e, pl_seq_t *s, int reason)
{
    pl_seq_t  *l = s->leader;
    int        i;

    for (i = 0; i < l->n_members; i++) {
        pl_engine_finish(e, l->members[i], reason);
    }
}


/*
 * The other prompts of s's batched request (none for one prompt) end
 * with ABORT; silent: they send nothing, as s's own FINISH ends the
 * request for the worker.
 */
static void
pl_engine_end_batch(pl_engine_t *e, pl_seq_t *s, int silent)
{
    pl_seq_t  *l = s->leader, *others[PL_MAX_PROMPTS], *o;
    int        i, n = 0;

    if (l->conn == NULL) {
        return;
    }

    for (o = pl_seq_index_find(&l->conn->live, l->req_id);
         o != NULL && n < PL_MAX_PROMPTS; o = pl_seq_index_next(o))
    {
        if (o != l) {
            others[n++] = o;
        }
    }

    for (i = 0; i < n; i++) {
        others[i]->silent = others[i]->silent || silent;
        pl_engine_end_group(e, others[i], PL_FINISH_ABORT);
    }
}


void
pl_engine_fail(pl_engine_t *e, pl_seq_t *s, uint32_t status, const char *msg)
{
    pl_seq_t  *l = s->leader;

    if (l->error == NULL) {
        l->error = strdup(msg);
        l->error_status = status;
    }
    pl_engine_end_batch(e, s, 1);
    pl_engine_end_group(e, s, PL_FINISH_ERROR);
}


/* The value of parameter id in a SUBMIT. */
static double
pl_engine_param_value(const pl_rec_submit_t *r, pl_param_id_t id)
{
#define PL_ENGINE_PARAM_VALUE(name, ...)                                    \
    case PL_P_##name:                                                       \
        return (double) r->name;

    switch (id) {
    PL_PARAMS(PL_ENGINE_PARAM_VALUE)
    default:
        return NAN;
    }

#undef PL_ENGINE_PARAM_VALUE
}


/* Every parameter of PL_PARAMS within its range (0 where that is "off"),
   or what is wrong. */
static const char *
pl_engine_check_params(pl_engine_t *e, const pl_rec_submit_t *r, char *buf,
    size_t len)
{
    int                id;
    double             v;
    const pl_param_t  *p;

    for (id = 0; id < PL_P_COUNT; id++) {
        p = pl_param(id);
        v = pl_engine_param_value(r, id);

        if ((p->zero_off && v == 0)
            || pl_param_in_range(p, v, e->max_model_len, e->mc->vocab_size))
        {
            continue;
        }

        snprintf(buf, len, "%s must be in %s%g, %g]%s, got %g", p->name,
                 p->open_lo ? "(" : "[", p->lo,
                 pl_param_hi(p, e->max_model_len, e->mc->vocab_size),
                 p->zero_off ? " or 0" : "", v);
        return buf;
    }

    return NULL;
}


/* The SUBMIT's sampling values, or NULL when they are all fine. */
static const char *
pl_engine_check_sampling(pl_engine_t *e, const pl_ipc_msg_t *m, char *buf,
    size_t len)
{
    const pl_rec_submit_t  *r = &m->submit;
    const char             *why;
    uint32_t                i;

    why = pl_engine_check_params(e, r, buf, len);
    if (why) {
        return why;
    }
    if (r->min_tokens > r->max_tokens) {
        return "min_tokens must not exceed max_tokens";
    }

    for (i = 0; i < r->n_logit_bias; i++) {
        if (m->bias[i].id < 0 || m->bias[i].id >= e->mc->vocab_size) {
            snprintf(buf, len, "logit_bias token %d is outside the "
                     "vocabulary", m->bias[i].id);
            return buf;
        }
        if (!(m->bias[i].bias >= PL_PARAM_BIAS_LO
              && m->bias[i].bias <= PL_PARAM_BIAS_HI))
        {
            snprintf(buf, len, "logit_bias values must be in [%d, %d]",
                     PL_PARAM_BIAS_LO, PL_PARAM_BIAS_HI);
            return buf;
        }
    }

    for (i = 0; i < r->n_stop_ids; i++) {
        if (m->stop_ids[i] < 0 || m->stop_ids[i] >= e->mc->vocab_size) {
            snprintf(buf, len, "stop token %d is outside the vocabulary",
                     m->stop_ids[i]);
            return buf;
        }
    }

    return NULL;
}


/* The first parameter beam search scores without that r sets, as
   "NAME is not supported with beam search"; NULL when none. */
static const char *
pl_engine_beam_unsupported(const pl_rec_submit_t *r)
{
    if (r->min_p != 0) {
        return "min_p is not supported with beam search";
    }
    if (r->repetition_penalty != 0 && r->repetition_penalty != 1) {
        return "repetition_penalty is not supported with beam search";
    }
    if (r->presence_penalty != 0) {
        return "presence_penalty is not supported with beam search";
    }
    if (r->frequency_penalty != 0) {
        return "frequency_penalty is not supported with beam search";
    }
    if (r->n_logit_bias != 0) {
        return "logit_bias is not supported with beam search";
    }
    if (r->flags & PL_SUBMIT_LOGPROBS) {
        return "logprobs is not supported with beam search";
    }

    return NULL;
}


/*
 * Beam search's parameters and what it cannot be combined with (vLLM's
 * rules: width best_of > 1, greedy scoring, so temperature 0, top_p 1,
 * top_k off; here also none of the logit processors, which beam search
 * scores without, nor per-token logprobs; length_penalty's range is the
 * parameter table's); without beam search early_stopping must be false
 * (length_penalty is then ignored).  NULL when all is well.
 */
static const char *
pl_engine_check_beam(const pl_rec_submit_t *r)
{
    uint32_t  n = r->n ? r->n : 1;

    if (!(r->flags & PL_SUBMIT_BEAM_SEARCH)) {
        return r->early_stopping != PL_EARLY_STOPPING_FALSE
               ? "early_stopping needs use_beam_search" : NULL;
    }

    if ((r->best_of ? r->best_of : n) < 2) {
        return "best_of must be greater than 1 when using beam search";
    }
    if (r->temperature != 0) {
        return "temperature must be 0 when using beam search";
    }
    if (r->top_p != 1) {
        return "top_p must be 1 when using beam search";
    }
    if (r->top_k != 0) {
        return "top_k must be -1 when using beam search";
    }
    if (r->early_stopping > PL_EARLY_STOPPING_NEVER) {
        return "early_stopping must be true, false or \"never\"";
    }

    return pl_engine_beam_unsupported(r);
}


/* The SUBMIT's prompts (batched prompts: more than one). */
static uint32_t
pl_engine_prompts(const pl_rec_submit_t *r)
{
    return r->n_prompts > 1 ? r->n_prompts : 1;
}


/* Prompt k of the SUBMIT: its length, its tokens in *tokens. */
static uint32_t
pl_engine_prompt(const pl_ipc_msg_t *m, uint32_t k, const int32_t **tokens)
{
    uint32_t  i, at = 0;

    if (m->submit.n_prompts <= 1) {
        *tokens = m->prompt;
        return m->submit.n_prompt;
    }

    for (i = 0; i < k; i++) {
        at += m->prompt_lens[i];
    }
    *tokens = m->prompt + at;

    return m->prompt_lens[k];
}


/* The SUBMIT's longest prompt, which the length checks hold to. */
static uint32_t
pl_engine_longest(const pl_ipc_msg_t *m)
{
    const int32_t  *t;
    uint32_t        k, n, longest = 0;

    for (k = 0; k < pl_engine_prompts(&m->submit); k++) {
        n = pl_engine_prompt(m, k, &t);
        longest = n > longest ? n : longest;
    }

    return longest;
}


/* Whether the queue has room for the SUBMIT's prompts and req_id is
   free on c. */
static const char *
pl_engine_check_room(pl_engine_t *e, pl_conn_t *c, const pl_rec_submit_t *r,
    char *buf, size_t len, uint32_t *status)
{
    uint64_t  req_id = r->req_id;

    if (pl_seq_index_find(&c->live, req_id)) {
        snprintf(buf, len, "request id %llu is already in flight",
                 (unsigned long long) req_id);
        return buf;
    }
    if (e->sched.waiting.n + (int) pl_engine_prompts(r) - 1
        >= e->cfg.max_waiting)
    {
        *status = 429;
        snprintf(buf, len, "too many requests are waiting (%d, the "
                 "engine's --max-waiting), try again later",
                 e->sched.waiting.n);
        return buf;
    }

    return NULL;
}


/* n and best_of (0: the default) within their limits, and the whole
   group, each member at its longest, within the KV cache (so the oldest
   group can always finish). */
static const char *
pl_engine_check_group(pl_engine_t *e, const pl_ipc_msg_t *m, char *buf,
    size_t len)
{
    const pl_rec_submit_t  *r = &m->submit;
    uint32_t                n = r->n ? r->n : 1;
    uint32_t                best_of = r->best_of ? r->best_of : n;
    uint32_t                longest = pl_engine_longest(m);
    int                     blocks;

    if (best_of < n) {
        return "best_of must be at least n";
    }
    if ((int) best_of > e->cfg.max_num_seqs) {
        snprintf(buf, len, "best_of (or n) %u exceeds the engine's "
                 "--max-num-seqs %d", best_of, e->cfg.max_num_seqs);
        return buf;
    }

    blocks = pl_bm_blocks_for(&e->bm, (int) (longest + r->max_tokens));
    if (best_of > 1 && (int64_t) blocks * best_of > e->num_blocks) {
        snprintf(buf, len, "%u sequences of %u tokens (prompt plus "
                 "max_tokens) do not fit the KV cache of %d blocks", best_of,
                 longest + r->max_tokens, e->num_blocks);
        return buf;
    }

    return NULL;
}


/* What is wrong with this SUBMIT, or NULL; status gets the HTTP status. */
static const char *
pl_engine_check_submit(pl_engine_t *e, pl_conn_t *c, const pl_ipc_msg_t *m,
    char *buf, size_t len, uint32_t *status)
{
    const pl_rec_submit_t  *r = &m->submit;
    const char             *why;
    uint32_t                longest = pl_engine_longest(m);

    *status = 400;

    if (r->n_prompt == 0) {
        return "the prompt is empty";
    }
    if ((uint64_t) longest + r->max_tokens > (uint64_t) e->max_model_len) {
        snprintf(buf, len, "the prompt (%u tokens) plus max_tokens (%u) "
                 "exceeds the model's context of %d tokens", longest,
                 r->max_tokens, e->max_model_len);
        return buf;
    }
    if (r->flags & ~(PL_SUBMIT_IGNORE_EOS | PL_SUBMIT_HAS_SEED
                     | PL_SUBMIT_LOGPROBS | PL_SUBMIT_BEAM_SEARCH
                     | PL_SUBMIT_PROMPT_LOGPROBS))
    {
        snprintf(buf, len, "unknown flags 0x%x", r->flags);
        return buf;
    }

    if ((r->flags & PL_SUBMIT_PROMPT_LOGPROBS)
        && r->prompt_logprobs > PL_MAX_LOGPROBS)
    {
        return "prompt_logprobs must be at most 20";
    }
    if ((r->flags & PL_SUBMIT_PROMPT_LOGPROBS)
        && (r->flags & PL_SUBMIT_BEAM_SEARCH))
    {
        return "prompt logprobs are not supported with beam search";
    }
    if (r->n_grammar && (r->flags & PL_SUBMIT_BEAM_SEARCH)) {
        return "a grammar (structured output) is not supported with beam "
               "search";
    }
    if (r->n_grammar && (r->flags & PL_SUBMIT_IGNORE_EOS)) {
        return "a grammar (structured output) ends the output: ignore_eos "
               "cannot be set with it";
    }

    why = pl_engine_check_sampling(e, m, buf, len);
    if (why == NULL) {
        why = pl_engine_check_beam(r);
    }
    if (why == NULL) {
        why = pl_engine_check_group(e, m, buf, len);
    }
    if (why) {
        return why;
    }

    return pl_engine_check_room(e, c, r, buf, len, status);
}


/* The SUBMIT's sampling parameters, logit bias and stop ids into s: 0,
   or -1 when out of memory. */
static int
pl_engine_sampling(pl_seq_t *s, const pl_ipc_msg_t *m)
{
    const pl_rec_submit_t  *r = &m->submit;
    pl_sampling_params_t   *p = &s->sampling;
    size_t                  nb = r->n_logit_bias, ns = r->n_stop_ids;

    *p = (pl_sampling_params_t) {
        .temperature = r->temperature,
        .top_p = r->top_p,
        .top_k = r->top_k,
        .min_p = r->min_p,
        .repetition_penalty = r->repetition_penalty,
        .presence_penalty = r->presence_penalty,
        .frequency_penalty = r->frequency_penalty,
        .min_tokens = (int32_t) r->min_tokens,
        .logprobs = (r->flags & PL_SUBMIT_LOGPROBS)
                    ? (int32_t) r->logprobs + 1 : 0,
    };

    if (nb) {
        p->bias = malloc(nb * sizeof(pl_logit_bias_t));
        if (p->bias == NULL) {
            return -1;
        }
        memcpy(p->bias, m->bias, nb * sizeof(pl_logit_bias_t));
        p->n_bias = (uint32_t) nb;
    }

    if (ns) {
        p->stop_ids = malloc(ns * sizeof(int32_t));
        if (p->stop_ids == NULL) {
            return -1;
        }
        memcpy(p->stop_ids, m->stop_ids, ns * sizeof(int32_t));
        p->n_stop_ids = (uint32_t) ns;
    }

    return 0;
}


/* The SUBMIT's grammar, compiled or shared, on s: 0, or -1 with err. */
static int
pl_engine_grammar(pl_engine_t *e, pl_seq_t *s, const pl_ipc_msg_t *m,
    char *err, size_t errlen)
{
    char  why[200];

    s->grammar = pl_grammar_cache_take(&e->grammars, m->grammar,
                                       m->submit.n_grammar, why, sizeof(why));
    if (s->grammar == NULL) {
        snprintf(err, errlen, "the grammar cannot be used: %s", why);
        return -1;
    }
    s->grammar_state = pl_grammar_start(s->grammar->g);

    return 0;
}


static void
pl_engine_reject(pl_conn_t *c, uint64_t req_id, uint32_t status,
    const char *why)
{
    pl_seq_t  *s = pl_seq_create(req_id, NULL, 0, 0);

    pl_log(PL_LOG_DEBUG, "worker %u request %llu rejected (%u): %s",
           c->worker_id, (unsigned long long) req_id, status, why);

    if (s == NULL || (s->error = strdup(why)) == NULL) {
        c->dead = 1;
        pl_log(PL_LOG_ERROR, "out of memory: dropping worker %u",
               c->worker_id);
        if (s) {
            pl_seq_free(s);
        }
        return;
    }

    s->error_status = status;
    s->finish_reason = PL_FINISH_ERROR;
    s->fail_reason = PL_FINISH_ERROR;
    s->n_finished = 1;
    s->state = PL_SEQ_FINISHED;
    pl_conn_append(c, s);
}


/* s owes its prompt's logprobs, top entries each: position 0 has none.
   0, or -1 when out of memory. */
static int
pl_engine_prompt_lp_init(pl_seq_t *s, uint32_t top)
{
    int  j;

    s->prompt_lp = calloc((size_t) s->n_prompt, sizeof(pl_logprobs_t));
    if (s->prompt_lp == NULL) {
        return -1;
    }

    s->prompt_lp[0].logprob = NAN;
    s->prompt_lp[0].n_top = (int32_t) top;
    for (j = 0; j < (int) top; j++) {
        s->prompt_lp[0].top_ids[j] = -1;
        s->prompt_lp[0].top_logprobs[j] = NAN;
    }
    s->prompt_lp_top = (int) top;
    s->prompt_lp_next = 1;

    return 0;
}


/*
 * Prompt k of SUBMIT m as a sequence group in the scheduler: 0, or -1
 * with the status and the reason.
 */
static int
pl_engine_submit_prompt(pl_engine_t *e, pl_conn_t *c, const pl_ipc_msg_t *m,
    uint32_t k, uint32_t *status, char *why, size_t len)
{
    const pl_rec_submit_t  *r = &m->submit;
    const int32_t          *prompt;
    uint32_t                n_prompt = pl_engine_prompt(m, k, &prompt);
    pl_seq_t               *s;

    *status = 503;
    snprintf(why, len, "the engine is out of memory");

    s = pl_seq_create(r->req_id, prompt, (int) n_prompt, (int) r->max_tokens);
    if (s == NULL || pl_engine_sampling(s, m) != 0
        || pl_seq_index_add(&c->live, s) != 0)
    {
        if (s) {
            pl_seq_free(s);
        }
        return -1;
    }

    if ((r->flags & PL_SUBMIT_PROMPT_LOGPROBS)
        && pl_engine_prompt_lp_init(s, r->prompt_logprobs) != 0)
    {
        pl_seq_index_remove(&c->live, s);
        pl_seq_free(s);
        return -1;
    }

    if (r->n_grammar && pl_engine_grammar(e, s, m, why, len) != 0) {
        *status = 400;
        pl_seq_index_remove(&c->live, s);
        pl_seq_free(s);
        return -1;
    }

    s->ignore_eos = (r->flags & PL_SUBMIT_IGNORE_EOS) != 0;
    s->seed = (r->flags & PL_SUBMIT_HAS_SEED) ? r->seed : e->seed_counter++;
    s->arrival = ++e->arrivals;
    s->t_arrival = pl_now_us();
    s->n_return = r->n ? (int) r->n : 1;
    s->best_of = r->best_of ? (int) r->best_of : s->n_return;
    s->out_index = s->best_of > s->n_return ? -1 : 0;
    s->index_base = (int) k * s->n_return;

    if ((r->flags & PL_SUBMIT_BEAM_SEARCH) && pl_engine_beam_init(e, s, r) != 0)
    {
        pl_seq_index_remove(&c->live, s);
        pl_seq_free(s);
        return -1;
    }

    pl_conn_append(c, s);
    pl_sched_add(&e->sched, s);

    e->totals.requests_total++;
    e->totals.prompt_tokens_total += n_prompt;

    return 0;
}


static void
pl_engine_submit(pl_engine_t *e, pl_conn_t *c, const pl_ipc_msg_t *m)
{
    const pl_rec_submit_t  *r = &m->submit;
    const char             *why;
    char                    buf[256];
    uint32_t                status, k;
    pl_seq_t               *first;

    why = pl_engine_check_submit(e, c, m, buf, sizeof(buf), &status);
    if (why) {
        pl_engine_reject(c, r->req_id, status, why);
        return;
    }

    for (k = 0; k < pl_engine_prompts(r); k++) {
        if (pl_engine_submit_prompt(e, c, m, k, &status, buf, sizeof(buf))
            == 0)
        {
            continue;
        }

        /* the prompts queued so far go with the request's error */
        first = pl_seq_index_find(&c->live, r->req_id);
        if (first == NULL) {
            pl_engine_reject(c, r->req_id, status, buf);
        } else {
            pl_engine_fail(e, first, status, buf);
        }
        return;
    }

    pl_log(PL_LOG_DEBUG, "worker %u request %llu: %u prompt tokens in %u "
           "prompts, max_tokens %u, n %u, best_of %u%s", c->worker_id,
           (unsigned long long) r->req_id, r->n_prompt, pl_engine_prompts(r),
           r->max_tokens, r->n ? r->n : 1,
           r->best_of ? r->best_of : (r->n ? r->n : 1),
           (r->flags & PL_SUBMIT_BEAM_SEARCH) ? ", beam search" : "");
}


/* Whether s is a request that has given its client nothing yet: nothing
   computed (never run, or preempted back to nothing) nor generated, not
   forked. */
static int
pl_engine_never_ran(const pl_seq_t *s)
{
    return s->leader == s && s->n_members == 1 && s->n_computed == 0
           && pl_seq_generated(s) == 0;
}


void
pl_engine_expire_waiting(pl_engine_t *e)
{
    uint64_t   now = pl_now_us();
    uint64_t   limit = (uint64_t) e->cfg.max_queue_time * 1000000;
    pl_seq_t  *s, *next;
    char       msg[128];

    /* the queue is in arrival order, so in order of t_arrival: the first
       one young enough ends the walk */
    for (s = e->sched.waiting.head; s; s = next) {
        next = s->next;

        if (now - s->t_arrival <= limit) {
            break;
        }
        if (!pl_engine_never_ran(s)) {
            continue;
        }

        snprintf(msg, sizeof(msg), "the request waited %llu ms for the "
                 "engine (--max-queue-time %d s), try again later",
                 (unsigned long long) (now - s->t_arrival) / 1000,
                 e->cfg.max_queue_time);
        pl_log(PL_LOG_DEBUG, "worker %u request %llu expired in the queue",
               s->conn->worker_id, (unsigned long long) s->req_id);
        pl_engine_fail(e, s, 503, msg);
    }
}


static void
pl_engine_abort(pl_engine_t *e, pl_conn_t *c, uint64_t req_id)
{
    pl_seq_t  *s = pl_seq_index_find(&c->live, req_id);

    if (s == NULL) {
        pl_log(PL_LOG_DEBUG, "worker %u: abort of %llu, not in flight",
               c->worker_id, (unsigned long long) req_id);
        return;
    }

    pl_engine_end_batch(e, s, 0);
    pl_engine_end_group(e, s, PL_FINISH_ABORT);

    pl_log(PL_LOG_DEBUG, "worker %u request %llu aborted", c->worker_id,
           (unsigned long long) req_id);
}


void
pl_engine_drain(pl_engine_t *e, pl_conn_t *c)
{
    pl_ipc_msg_t  m;
    char          err[256];
    int           rc;

    while (!c->dead) {
        rc = pl_ipc_next(c, e->recbuf, e->recbuf_cap,
                         (uint32_t) e->mc->vocab_size, &m, err, sizeof(err));
        if (rc == 0) {
            return;
        }
        if (rc < 0) {
            pl_log(PL_LOG_WARN, "worker %u: %s; dropping the connection",
                   c->worker_id, err);
            c->dead = 1;
            return;
        }

        if (m.type == PL_REC_SUBMIT) {
            pl_engine_submit(e, c, &m);
        } else {
            pl_engine_abort(e, c, m.abort_id);
        }
    }
}

