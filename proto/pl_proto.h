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
 * produces, engine consumes) at sub_offset, the completion ring (engine
 * produces, worker consumes) at comp_offset and the live KV block map
 * (engine writes) at map_offset.  The engine writes the header once at
 * attach, refreshes `stats` every iteration and the map while requests
 * run; it never reads anything back from the header, and it copies every
 * record out of the submission ring and checks it before use.
 *
 * All integers are native-endian: both sides run on the same machine.
 */

#ifndef PL_PROTO_H
#define PL_PROTO_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define PL_PROTO_MAGIC        0x4d4c4c50u      /* "PLLM" */
#define PL_PROTO_VERSION      7u

#define PL_MAX_EOS            8
#define PL_MODEL_NAME_LEN     128
#define PL_PATH_LEN           1024
#define PL_MAX_LOGPROBS       20      /* top entries per token */
#define PL_MAX_LOGIT_BIAS     1024    /* pairs per SUBMIT */
#define PL_MAX_STOP_IDS       256     /* stop token ids per SUBMIT */
#define PL_MAX_SEQS           16      /* n and best_of per SUBMIT */
#define PL_MAX_GRAMMAR        65536   /* bytes of grammar text per SUBMIT */
#define PL_MAX_PROMPTS        64      /* batched prompts per SUBMIT */

/* the engine's longest gap between two stats publications while its
   loop runs and no iteration is in progress (its idle wait) */
#define PL_HEARTBEAT_MS       200

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
#define PL_SUBMIT_PROMPT_LOGPROBS 0x10u  /* send the prompt's logprobs */

/* pl_rec_submit_t.early_stopping (beam search) */
#define PL_EARLY_STOPPING_FALSE  0
#define PL_EARLY_STOPPING_TRUE   1
#define PL_EARLY_STOPPING_NEVER  2

/* pl_rec_tokens_t.flags */
#define PL_TOKENS_LOGPROBS    0x1u
#define PL_TOKENS_PROMPT      0x2u  /* prompt tokens, with their logprobs */

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
    /* liveness (issue 22): CLOCK_MONOTONIC of this publication, in us;
       the engine publishes at least every PL_HEARTBEAT_MS while alive */
    uint64_t   heartbeat_us;
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

    /* the live KV block map (pl_bmap_hdr_t), page-aligned; 0 when none */
    uint64_t          map_offset;
    uint64_t          map_size;
} pl_region_hdr_t;


/*
 * The live KV block map: every physical block of the device pool, then
 * every block of the host (swap) pool, with the request that owns it.
 * The engine rewrites it at most every PL_BMAP_INTERVAL_MS while requests
 * run (and once more when they are gone), under the seqlock `seq`, so a
 * reader copies it whole and retries on a change.  One request is one
 * owner whatever its n: its sequences share blocks, and a block several
 * requests hold (a shared prefix) names the first one found and has
 * refcount > 1.
 */
#define PL_BMAP_INTERVAL_MS   100
#define PL_BMAP_MAX_OWNERS    1024

/* pl_bmap_block_t.flags */
#define PL_BMAP_CACHED        0x1u    /* a prefix-cache entry (device) */

/* pl_bmap_owner_t.state */
#define PL_BMAP_RUNNING       1
#define PL_BMAP_SWAPPED       2

typedef struct {
    uint16_t   owner;           /* 0: none; else owners[owner - 1] */
    uint8_t    refcount;        /* saturates at 255 */
    uint8_t    flags;           /* PL_BMAP_* */
} pl_bmap_block_t;

typedef struct {
    uint64_t   req_id;          /* as the worker chose it */
    uint32_t   pid;             /* the worker's, as it said at attach */
    uint32_t   state;           /* PL_BMAP_RUNNING or PL_BMAP_SWAPPED */
    uint32_t   n_seqs;          /* sequences holding blocks */
    uint32_t   n_tokens;        /* the longest sequence's */
} pl_bmap_owner_t;

/* followed by pl_bmap_block_t blocks[num_blocks + num_host_blocks] */
typedef struct {
    _Alignas(64) _Atomic uint64_t  seq;     /* odd while writing */
    uint64_t          updates;          /* publications so far */
    uint64_t          time_ms;          /* engine's monotonic clock */
    uint32_t          num_blocks;       /* device pool */
    uint32_t          num_host_blocks;  /* host pool (swap space) */
    uint32_t          block_size;       /* tokens per block */
    uint32_t          n_owners;         /* <= PL_BMAP_MAX_OWNERS */
    uint32_t          owners_dropped;   /* requests past the table */
    uint32_t          reserved;
    pl_bmap_owner_t   owners[PL_BMAP_MAX_OWNERS];
} pl_bmap_hdr_t;


static inline uint64_t
pl_bmap_bytes(uint32_t num_blocks, uint32_t num_host_blocks)
{
    return sizeof(pl_bmap_hdr_t)
           + ((uint64_t) num_blocks + num_host_blocks)
             * sizeof(pl_bmap_block_t);
}


/*
 * followed by int32_t prompt[n_prompt], uint32_t prompt_lens[n_prompts]
 * (only when n_prompts > 1), pl_bias_pair_t bias[n_logit_bias], int32_t
 * stop_ids[n_stop_ids], char grammar[n_grammar] (structured outputs: the
 * text in grammar/grammar.h's EBNF subset the output must match; 0:
 * none); the record is exactly that long (rounded up to 8).  Zero is
 * "off" for every field after seed, except the two beam search fields,
 * which are read only with PL_SUBMIT_BEAM_SEARCH (there a length_penalty
 * of 0 is a real value).
 *
 * Batched prompts (n_prompts > 1): prompt[] holds the prompts end to end,
 * prompt_lens[] their lengths (each > 0, summing to n_prompt).  Each
 * prompt is a request of its own in the engine with every other field of
 * the record (n sequences, best_of, ...), all under the one req_id:
 * prompt k's sequences are sent as indexes k * n .. k * n + n - 1, ABORT
 * ends them all, and an ERROR of one ends the others (ABORT, no records).
 *
 * Prompt logprobs (PL_SUBMIT_PROMPT_LOGPROBS; vLLM's prompt_logprobs, or
 * echo with logprobs): each sequence's first TOKENS records, before any
 * generated token, carry its prompt (all n_prompt ids of its prompt, in
 * order, over as many records as it takes) with PL_TOKENS_PROMPT |
 * PL_TOKENS_LOGPROBS: the logprob of
 * each prompt token given the ones before it and the prompt_logprobs most
 * likely ids there, and its rank; the first token has none (NaN, its
 * top ids -1, rank 0).
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
    uint32_t   n_prompts;       /* <= PL_MAX_PROMPTS; 0 = 1 */
    uint32_t   prompt_logprobs; /* top-N with PL_SUBMIT_PROMPT_LOGPROBS,
                                   <= 20 */
    uint32_t   reserved;        /* 0 */
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
 * pl_top_logprob_t (the most likely ids first).  PL_TOKENS_PROMPT: the
 * ids are prompt tokens (see pl_rec_submit_t), not generated ones, and
 * uint32_t rank[n] follows: each token's rank there, the ids whose
 * logprob is at least its own (1: the most likely; 0 for the first
 * token, which has none).
 * index: which of the request's n sequences (choices; n per prompt when
 * batched) the tokens belong to.
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


/*
 * The record is exactly this long.  cached_tokens and queue_time_us are
 * the request's (the same in each of its FINISH records): the prompt
 * tokens whose KV came from the prefix cache at its admission (never
 * more than prompt_tokens), and the time from the engine taking the
 * SUBMIT to the first iteration that scheduled it; both are 0 for ABORT
 * and ERROR.
 */
typedef struct {
    uint64_t   req_id;
    uint32_t   reason;
    uint32_t   prompt_tokens;
    uint32_t   completion_tokens;   /* of this sequence */
    uint32_t   index;           /* the sequence; any for ABORT, ERROR */
    double     cum_logprob;     /* beam search: of the beam's tokens */
    uint32_t   cached_tokens;
    uint32_t   reserved;        /* 0 */
    uint64_t   queue_time_us;
} pl_rec_finish_t;


/* followed by char message[len], not NUL-terminated; FINISH follows */
typedef struct {
    uint64_t   req_id;
    uint32_t   status;          /* HTTP status the worker should answer */
    uint32_t   len;
} pl_rec_error_t;


/*
 * Seqlocks: the engine, the only writer, copies n bytes from src to dst
 * in shared memory with *seq odd while it writes; a reader copies dst
 * out and retries while *seq was odd or changed.
 */
static inline void
pl_seqlock_write(_Atomic uint64_t *seq, void *dst, const void *src, size_t n)
{
    uint64_t  s = atomic_load_explicit(seq, memory_order_relaxed);

    atomic_store_explicit(seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    memcpy(dst, src, n);
    atomic_store_explicit(seq, s + 2, memory_order_release);
}


/* 0 with a consistent copy in out, -1 if the writer kept it busy. */
static inline int
pl_seqlock_read(const _Atomic uint64_t *seq, const void *src, void *out,
    size_t n)
{
    uint64_t  s1, s2;
    int       tries;

    for (tries = 0; tries < 1000; tries++) {
        s1 = atomic_load_explicit((_Atomic uint64_t *) seq,
                                  memory_order_acquire);
        if (s1 & 1) {
            continue;
        }
        memcpy(out, src, n);
        atomic_thread_fence(memory_order_acquire);
        s2 = atomic_load_explicit((_Atomic uint64_t *) seq,
                                  memory_order_relaxed);
        if (s1 == s2) {
            return 0;
        }
    }

    return -1;
}


/* pl_region_hdr_t.stats under stats_seq. */
static inline void
pl_stats_publish(pl_region_hdr_t *h, const pl_stats_t *s)
{
    pl_seqlock_write(&h->stats_seq, &h->stats, s, sizeof(*s));
}


static inline int
pl_stats_read(const pl_region_hdr_t *h, pl_stats_t *out)
{
    return pl_seqlock_read(&h->stats_seq, (const void *) &h->stats, out,
                           sizeof(*out));
}


/*
 * The block map under its seq: the engine copies a map it built in its
 * own memory (src, `bytes` long, its seq ignored) over the region's; a
 * reader copies size bytes of region memory at m into out and checks the
 * counts in the copy against size.
 */
static inline void
pl_bmap_publish(pl_bmap_hdr_t *m, const pl_bmap_hdr_t *src, size_t bytes)
{
    pl_seqlock_write(&m->seq, (uint8_t *) m + sizeof(m->seq),
                     (const uint8_t *) src + sizeof(src->seq),
                     bytes - sizeof(m->seq));
}


static inline int
pl_bmap_read(const pl_bmap_hdr_t *m, size_t size, pl_bmap_hdr_t *out)
{
    return pl_seqlock_read(&m->seq, (const uint8_t *) m + sizeof(m->seq),
                           (uint8_t *) out + sizeof(out->seq),
                           size - sizeof(m->seq));
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
