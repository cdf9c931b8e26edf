/*
 * pl_proto: the wire protocol between nginx workers and pagedllm-engine.
 *
 * Attach: a worker connects to the engine's unix socket and sends a
 * pl_attach_t.  The engine answers with a pl_hello_t carrying, by
 * SCM_RIGHTS, three descriptors in this order: the memfd of the worker's
 * region, the submission doorbell (eventfd the worker writes to wake the
 * engine) and the completion doorbell (eventfd the engine writes to wake
 * the worker).  The socket then stays open and silent; its EOF means the
 * other side is gone.
 *
 * Region: pl_region_hdr_t at offset 0, then the submission ring (worker
 * produces, engine consumes) at sub_offset and the completion ring (engine
 * produces, worker consumes) at comp_offset.  The engine writes the header
 * once at attach and refreshes `stats` every iteration; it never reads
 * anything back from the header, and it copies every record out of the
 * submission ring and checks it before use.
 *
 * All integers are native-endian: both sides run on the same machine.
 */

#ifndef PL_PROTO_H
#define PL_PROTO_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define PL_PROTO_MAGIC        0x4d4c4c50u      /* "PLLM" */
#define PL_PROTO_VERSION      5u

#define PL_MAX_EOS            8
#define PL_MODEL_NAME_LEN     128
#define PL_PATH_LEN           1024
#define PL_MAX_LOGPROBS       20      /* top entries per token */
#define PL_MAX_LOGIT_BIAS     1024    /* pairs per SUBMIT */
#define PL_MAX_STOP_IDS       256     /* stop token ids per SUBMIT */
#define PL_MAX_SEQS           16      /* n and best_of per SUBMIT */
#define PL_MAX_GRAMMAR        65536   /* bytes of grammar text per SUBMIT */

/* record types: worker -> engine */
#define PL_REC_SUBMIT         1
#define PL_REC_ABORT          2

/* record types: engine -> worker */
#define PL_REC_TOKENS         16
#define PL_REC_FINISH         17
#define PL_REC_ERROR          18

/* pl_rec_submit_t.flags */
#define PL_SUBMIT_IGNORE_EOS  0x1u
#define PL_SUBMIT_HAS_SEED    0x2u
#define PL_SUBMIT_LOGPROBS    0x4u  /* send logprobs with every token */
#define PL_SUBMIT_BEAM_SEARCH 0x8u  /* beam search of width best_of */

/* pl_rec_submit_t.early_stopping (beam search) */
#define PL_EARLY_STOPPING_FALSE  0
#define PL_EARLY_STOPPING_TRUE   1
#define PL_EARLY_STOPPING_NEVER  2

/* pl_rec_tokens_t.flags */
#define PL_TOKENS_LOGPROBS    0x1u

/* pl_rec_finish_t.reason */
#define PL_FINISH_STOP        1     /* an eos or stop token was produced */
#define PL_FINISH_LENGTH      2     /* max_tokens or the context limit */
#define PL_FINISH_ABORT       3     /* aborted by the worker */
#define PL_FINISH_ERROR       4     /* engine-side failure; see ERROR */


typedef struct {
    uint32_t   magic;
    uint32_t   version;
    uint32_t   pid;
    uint32_t   reserved;
} pl_attach_t;


typedef struct {
    uint32_t   magic;
    uint32_t   version;
    uint64_t   region_size;
    uint32_t   worker_id;
    uint32_t   reserved;
} pl_hello_t;


/* Engine state, published into every region; read under stats_seq. */
typedef struct {
    uint64_t   iterations;
    uint64_t   requests_total;
    uint64_t   prompt_tokens_total;
    uint64_t   generation_tokens_total;
    uint64_t   preemptions_total;
    uint32_t   workers;
    uint32_t   running;
    uint32_t   waiting;
    uint32_t   swapped;
    uint32_t   kv_blocks_total;
    uint32_t   kv_blocks_used;
    uint32_t   kv_blocks_free;
    uint32_t   block_size;
    char       device[16];
    /* KV cache manager (issue 4); blocks are counted in blocks */
    uint32_t   kv_blocks_cached;        /* in the prefix cache */
    uint32_t   swap_blocks_total;       /* host pool for swapping */
    uint32_t   swap_blocks_used;
    uint32_t   reserved;                /* keeps the counters below aligned */
    uint64_t   prefix_cache_queries;    /* full blocks looked up */
    uint64_t   prefix_cache_hits;       /* of them reused */
    uint64_t   preemptions_recompute;
    uint64_t   preemptions_swap;
    uint64_t   blocks_swapped_out;
    uint64_t   blocks_swapped_in;
    /* --preemption-mode auto (issue 20) */
    uint64_t   preemptions_auto_swap;       /* chosen by cost */
    uint64_t   preemptions_auto_recompute;
    uint64_t   preemptions_swap_full;       /* swap wanted, host pool full:
                                               recomputed */
} pl_stats_t;


typedef struct {
    uint32_t          magic;
    uint32_t          version;
    uint64_t          region_size;
    uint64_t          sub_offset;
    uint64_t          sub_size;        /* data bytes of the submission ring */
    uint64_t          comp_offset;
    uint64_t          comp_size;       /* data bytes of the completion ring */

    /* model identity: the worker tokenizes with exactly this */
    uint32_t          worker_id;
    uint32_t          vocab_size;
    uint32_t          max_model_len;   /* prompt + completion tokens */
    int32_t           bos_id;          /* -1 when none */
    uint32_t          n_eos;
    int32_t           eos_ids[PL_MAX_EOS];
    uint64_t          tokenizer_hash;  /* FNV-1a 64 of tokenizer.json */
    char              model_name[PL_MODEL_NAME_LEN];
    char              tokenizer_path[PL_PATH_LEN];

    /* sampling defaults from generation_config.json; < 0 when unset */
    float             default_temperature;
    float             default_top_p;
    int32_t           default_top_k;
    uint32_t          reserved;

    _Alignas(64) _Atomic uint64_t  stats_seq;   /* odd while writing */
    pl_stats_t        stats;
} pl_region_hdr_t;


/*
 * followed by int32_t prompt[n_prompt], pl_bias_pair_t bias[n_logit_bias],
 * int32_t stop_ids[n_stop_ids], char grammar[n_grammar] (structured
 * outputs: the text in grammar/grammar.h's EBNF subset the output must
 * match; 0: none); the record is exactly that long (rounded
 * up to 8).  Zero is "off" for every field after seed, except the two
 * beam search fields, which are read only with PL_SUBMIT_BEAM_SEARCH
 * (there a length_penalty of 0 is a real value).
 */
typedef struct {
    uint64_t   req_id;
    uint32_t   max_tokens;
    uint32_t   flags;
    float      temperature;     /* 0 = greedy */
    float      top_p;           /* 1 = off */
    int32_t    top_k;           /* 0 = off */
    uint32_t   n_prompt;
    uint64_t   seed;
    float      min_p;           /* [0, 1]; 0 = off */
    float      repetition_penalty;  /* > 0; 0 or 1 = off */
    float      presence_penalty;    /* [-2, 2] */
    float      frequency_penalty;   /* [-2, 2] */
    uint32_t   min_tokens;      /* <= max_tokens */
    uint32_t   logprobs;        /* top-N with PL_SUBMIT_LOGPROBS, <= 20 */
    uint32_t   n_logit_bias;    /* <= PL_MAX_LOGIT_BIAS */
    uint32_t   n_stop_ids;      /* <= PL_MAX_STOP_IDS */
    uint32_t   n;               /* sequences returned; 0 = 1 */
    uint32_t   best_of;         /* sequences generated, >= n; 0 = n */
    float      length_penalty;  /* beam search: score = cum / len ** it */
    uint32_t   early_stopping;  /* beam search: PL_EARLY_STOPPING_* */
    uint32_t   n_grammar;       /* <= PL_MAX_GRAMMAR */
    uint32_t   reserved;
} pl_rec_submit_t;


typedef struct {
    int32_t    id;
    float      bias;            /* [-100, 100] */
} pl_bias_pair_t;


typedef struct {
    uint64_t   req_id;
} pl_rec_abort_t;


/*
 * followed by int32_t ids[n]; with PL_TOKENS_LOGPROBS then float
 * logprob[n] (of each token) and, for each token in turn, n_top
 * pl_top_logprob_t (the most likely ids first).  index: which of the
 * request's n sequences (choices) the tokens belong to.
 */
typedef struct {
    uint64_t   req_id;
    uint32_t   n;
    uint16_t   flags;
    uint16_t   n_top;           /* <= PL_MAX_LOGPROBS */
    uint32_t   index;           /* < the request's n */
    uint32_t   reserved;
} pl_rec_tokens_t;


typedef struct {
    int32_t    id;
    float      logprob;
} pl_top_logprob_t;


typedef struct {
    uint64_t   req_id;
    uint32_t   reason;
    uint32_t   prompt_tokens;
    uint32_t   completion_tokens;   /* of this sequence */
    uint32_t   index;           /* the sequence; any for ABORT, ERROR */
    double     cum_logprob;     /* beam search: of the beam's tokens */
} pl_rec_finish_t;


/* followed by char message[len], not NUL-terminated; FINISH follows */
typedef struct {
    uint64_t   req_id;
    uint32_t   status;          /* HTTP status the worker should answer */
    uint32_t   len;
} pl_rec_error_t;


/* Seqlock around pl_region_hdr_t.stats; the engine is the only writer. */
static inline void
pl_stats_publish(pl_region_hdr_t *h, const pl_stats_t *s)
{
    uint64_t  seq = atomic_load_explicit(&h->stats_seq, memory_order_relaxed);

    atomic_store_explicit(&h->stats_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    memcpy(&h->stats, s, sizeof(*s));
    atomic_store_explicit(&h->stats_seq, seq + 2, memory_order_release);
}


/* Returns 0 with a consistent copy, -1 if the writer kept it busy. */
static inline int
pl_stats_read(const pl_region_hdr_t *h, pl_stats_t *out)
{
    uint64_t  s1, s2;
    int       tries;

    for (tries = 0; tries < 1000; tries++) {
        s1 = atomic_load_explicit(&((pl_region_hdr_t *) h)->stats_seq,
                                  memory_order_acquire);
        if (s1 & 1) {
            continue;
        }
        memcpy(out, (const void *) &h->stats, sizeof(*out));
        atomic_thread_fence(memory_order_acquire);
        s2 = atomic_load_explicit(&((pl_region_hdr_t *) h)->stats_seq,
                                  memory_order_relaxed);
        if (s1 == s2) {
            return 0;
        }
    }

    return -1;
}


/* FNV-1a 64, used for the tokenizer fingerprint. */
static inline uint64_t
pl_fnv1a64(const void *data, size_t len)
{
    const uint8_t  *p = data;
    uint64_t        h = 0xcbf29ce484222325ull;
    size_t          i;

    for (i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }

    return h;
}

#endif /* PL_PROTO_H */
