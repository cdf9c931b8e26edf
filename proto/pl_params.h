/*
 * pl_params.h: the sampling parameters a request may set, defined once.
 *
 * Each row of PL_PARAMS is one field of the OpenAI (or vLLM) request body
 * that is also the pl_rec_submit_t member of the same name; the nginx
 * module's parser, the engine's validation of a SUBMIT, the model's
 * generation defaults and the integration test t/19-params.t all take the
 * parameter's type, range and default from here.  A row is
 *
 *   X(name, type, lo, hi, limit, open_lo, zero_off, dflt)
 *
 *   type      PL_PARAM_FLOAT (a JSON number, a float on the wire) or
 *             PL_PARAM_INT (a JSON integer; an integral number such as
 *             2.0 counts as one)
 *   lo, hi    the range a request may ask for: [lo, hi], or (lo, hi]
 *             when open_lo; with a limit, hi is the model's context
 *             (PL_PARAM_CONTEXT) or vocabulary size (PL_PARAM_VOCAB)
 *             instead
 *   zero_off  0 on the wire means "off" (or "the default") whatever the
 *             range: records written without the field stay valid
 *   dflt      the value of a request that leaves the field out (the
 *             model's generation_config.json may set temperature, top_p
 *             and top_k instead)
 *
 * The ranges are OpenAI's where OpenAI has the parameter (temperature
 * 0..2, top_p 0..1, penalties -2..2, logprobs 0..20, n 1..16 here) and
 * vLLM's otherwise.  top_k -1 is vLLM's "off", sent as 0.  length_penalty
 * (beam search's; vLLM and transformers take any number) is held to
 * [-10, 10], past which length ** it only overflows; it is read only with
 * use_beam_search, where 0 is a real value, so it is not zero_off.
 * PL_PARAM_BIAS_* bound each logit_bias value, which travels after the
 * record.
 */

#ifndef PL_PARAMS_H
#define PL_PARAMS_H

#include "pl_proto.h"

#define PL_PARAM_FLOAT      0
#define PL_PARAM_INT        1

#define PL_PARAM_FIXED      0
#define PL_PARAM_CONTEXT    1
#define PL_PARAM_VOCAB      2

#define PL_PARAMS(X)                                                       \
    X(temperature,        PL_PARAM_FLOAT, 0,  2,   PL_PARAM_FIXED,   0, 0, 1) \
    X(top_p,              PL_PARAM_FLOAT, 0,  1,   PL_PARAM_FIXED,   1, 0, 1) \
    X(min_p,              PL_PARAM_FLOAT, 0,  1,   PL_PARAM_FIXED,   0, 0, 0) \
    X(repetition_penalty, PL_PARAM_FLOAT, 0,  100, PL_PARAM_FIXED,   1, 1, 1) \
    X(presence_penalty,   PL_PARAM_FLOAT, -2, 2,   PL_PARAM_FIXED,   0, 0, 0) \
    X(frequency_penalty,  PL_PARAM_FLOAT, -2, 2,   PL_PARAM_FIXED,   0, 0, 0) \
    X(max_tokens,         PL_PARAM_INT,   1,  0,   PL_PARAM_CONTEXT, 0, 0, 16) \
    X(min_tokens,         PL_PARAM_INT,   0,  0,   PL_PARAM_CONTEXT, 0, 0, 0) \
    X(top_k,              PL_PARAM_INT,   -1, 0,   PL_PARAM_VOCAB,   0, 1, 0) \
    X(n,                  PL_PARAM_INT,   1,  PL_MAX_SEQS,                    \
                                               PL_PARAM_FIXED,   0, 1, 1) \
    X(best_of,            PL_PARAM_INT,   1,  PL_MAX_SEQS,                    \
                                               PL_PARAM_FIXED,   0, 1, 0) \
    X(logprobs,           PL_PARAM_INT,   0,  PL_MAX_LOGPROBS,                \
                                               PL_PARAM_FIXED,   0, 0, 0) \
    X(length_penalty,     PL_PARAM_FLOAT, -10, 10, PL_PARAM_FIXED,   0, 0, 1)

#define PL_PARAM_BIAS_LO    (-100)
#define PL_PARAM_BIAS_HI    100


/* Every row is a 32-bit member of the SUBMIT record: float for a FLOAT
   parameter, an integer for an INT one. */
#define PL_PARAM_WIRE_CHECK(name, type, lo, hi, limit, open_lo, zero_off,    \
                            dflt)                                            \
    _Static_assert(sizeof(((pl_rec_submit_t *) 0)->name) == 4,               \
                   #name " is a 32-bit member of pl_rec_submit_t");          \
    _Static_assert((type == PL_PARAM_FLOAT)                                  \
                   == _Generic(((pl_rec_submit_t *) 0)->name,                \
                               float: 1, default: 0),                        \
                   #name " has the table's type on the wire");

PL_PARAMS(PL_PARAM_WIRE_CHECK)


typedef struct {
    const char  *name;
    int          type;
    double       lo;
    double       hi;
    int          limit;
    int          open_lo;
    int          zero_off;
    double       dflt;
} pl_param_t;

#define PL_PARAM_ID(name, ...)  PL_P_##name,

typedef enum {
    PL_PARAMS(PL_PARAM_ID)
    PL_P_COUNT
} pl_param_id_t;

#define PL_PARAM_ROW(name, type, lo, hi, limit, open_lo, zero_off, dflt)     \
    { #name, type, lo, hi, limit, open_lo, zero_off, dflt },


/* The row of parameter id. */
static inline const pl_param_t *
pl_param(pl_param_id_t id)
{
    static const pl_param_t  rows[] = { PL_PARAMS(PL_PARAM_ROW) };

    return &rows[id];
}


/* A row's hi, its limit resolved. */
static inline double
pl_param_hi(const pl_param_t *p, double context, double vocab)
{
    return p->limit == PL_PARAM_CONTEXT ? context
           : p->limit == PL_PARAM_VOCAB ? vocab : p->hi;
}


/* Whether v is within a row's range (NaN never is). */
static inline int
pl_param_in_range(const pl_param_t *p, double v, double context,
    double vocab)
{
    return v <= pl_param_hi(p, context, vocab)
           && (p->open_lo ? v > p->lo : v >= p->lo);
}

#endif /* PL_PARAMS_H */
