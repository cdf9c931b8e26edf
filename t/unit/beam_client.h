/*
 * beam_client.h: what the beam-search tests keep of the engine's answers
 * (fake_worker.h plays the worker): per request, each choice's tokens,
 * finish reason and cumulative log-probability, the top log-probabilities
 * of a one-token request (the reference search's query), the FINISH
 * records and any ERROR.  Static functions, one copy per test program.
 */

#ifndef PL_BEAM_CLIENT_H
#define PL_BEAM_CLIENT_H

#include "fake_worker.h"

#define BC_REQ      4096
#define BC_SEQ      16
#define BC_TOK      64

typedef struct {
    int32_t   toks[BC_TOK];
    int       n;
    int       finished;
    uint32_t  reason;
    uint32_t  completion;
    double    cum;
} bc_choice_t;

typedef struct {
    bc_choice_t       c[BC_SEQ];
    int               n_index;      /* choices expected */
    int               finishes;
    int               tokens_records;
    int               bad_index;
    uint32_t          err_status;
    char              err[256];
    uint32_t          fail_reason;
    int               n_top;        /* first token's top logprobs */
    pl_top_logprob_t  top[PL_MAX_LOGPROBS];
} bc_result_t;

static bc_result_t  bc_res[BC_REQ];


static void
bc_take_tokens(const uint8_t *buf)
{
    pl_rec_tokens_t          t;
    const int32_t           *ids;
    const pl_top_logprob_t  *top;
    bc_result_t             *r;
    bc_choice_t             *c;
    uint32_t                 i;

    memcpy(&t, buf, sizeof(t));
    if (t.req_id >= BC_REQ) {
        return;
    }

    r = &bc_res[t.req_id];
    r->tokens_records++;
    if (t.index >= (uint32_t) r->n_index) {
        r->bad_index++;
        return;
    }

    c = &bc_res[t.req_id].c[t.index];
    ids = (const int32_t *) (buf + sizeof(t));
    top = (const pl_top_logprob_t *) (ids + 2 * t.n);
    if ((t.flags & PL_TOKENS_LOGPROBS) && c->n == 0 && t.n > 0) {
        r->n_top = t.n_top;
        memcpy(r->top, top, t.n_top * sizeof(pl_top_logprob_t));
    }

    for (i = 0; i < t.n && c->n < BC_TOK; i++, c->n++) {
        c->toks[c->n] = ids[i];
    }
}


static void
bc_take(uint32_t type, const uint8_t *buf, uint32_t len)
{
    pl_rec_finish_t  f;
    pl_rec_error_t   e;
    bc_result_t     *r;

    if (type == PL_REC_TOKENS && len >= sizeof(pl_rec_tokens_t)) {
        bc_take_tokens(buf);

    } else if (type == PL_REC_FINISH && len >= sizeof(f)) {
        memcpy(&f, buf, sizeof(f));
        if (f.req_id >= BC_REQ) {
            return;
        }
        r = &bc_res[f.req_id];
        r->finishes++;
        if (f.reason == PL_FINISH_ABORT || f.reason == PL_FINISH_ERROR) {
            r->fail_reason = f.reason;
        } else if (f.index < (uint32_t) r->n_index) {
            r->c[f.index].finished++;
            r->c[f.index].reason = f.reason;
            r->c[f.index].completion = f.completion_tokens;
            r->c[f.index].cum = f.cum_logprob;
        } else {
            r->bad_index++;
        }

    } else if (type == PL_REC_ERROR && len >= sizeof(e)) {
        memcpy(&e, buf, sizeof(e));
        if (e.req_id < BC_REQ) {
            r = &bc_res[e.req_id];
            r->err_status = e.status;
            snprintf(r->err, sizeof(r->err), "%.*s",
                     (int) (e.len < len - sizeof(e) ? e.len
                                                    : len - sizeof(e)),
                     (const char *) buf + sizeof(e));
        }
    }
}


static int
bc_done(int id)
{
    bc_result_t  *r = &bc_res[id];
    int           i;

    if (r->fail_reason) {
        return 1;
    }
    for (i = 0; i < r->n_index; i++) {
        if (!r->c[i].finished) {
            return 0;
        }
    }

    return 1;
}


static int
bc_submit(fw_t *w, const pl_rec_submit_t *r, const int32_t *prompt,
    const int32_t *stop)
{
    memset(&bc_res[r->req_id], 0, sizeof(bc_result_t));
    bc_res[r->req_id].n_index = r->n ? (int) r->n : 1;

    return fw_submit(w, r, prompt, NULL, stop);
}


static int
bc_wait(fw_t *w, int lo, int hi)
{
    return fw_wait(w, bc_done, lo, hi);
}


/* A beam-search SUBMIT of width best_of returning n. */
static pl_rec_submit_t
bc_beam(uint64_t id, int n_prompt, int max_tokens, int best_of, int n,
    float length_penalty, int early_stopping)
{
    pl_rec_submit_t  r = {
        .req_id = id, .max_tokens = (uint32_t) max_tokens, .top_p = 1,
        .n_prompt = (uint32_t) n_prompt, .n = (uint32_t) n,
        .best_of = (uint32_t) best_of, .flags = PL_SUBMIT_BEAM_SEARCH,
        .length_penalty = length_penalty,
        .early_stopping = (uint32_t) early_stopping
    };

    return r;
}

#endif /* PL_BEAM_CLIENT_H */
