/*
 * ipc: the engine's side of the worker protocol (proto/pl_proto.h).  The
 * unix socket a worker attaches through, the shared-memory region and the
 * two doorbells each attached worker gets, decoding and checking of the
 * records a worker submits, and writing of the records it receives.
 * Request semantics (what a SUBMIT means) belong to the engine loop.
 */

#ifndef PL_IPC_H
#define PL_IPC_H

#include <stddef.h>
#include <stdint.h>

#include "pl_proto.h"
#include "pl_ring.h"
#include "sequence.h"

#define PL_IPC_RING_SIZE        (4u << 20)
#define PL_IPC_ATTACH_TIMEOUT   2000            /* ms */
#define PL_IPC_BACKLOG          64
#define PL_IPC_MAX_PENDING      64      /* connections still before hello */

/* What the engine serves, as told to every worker at attach. */
typedef struct {
    char       model_name[PL_MODEL_NAME_LEN];
    char       tokenizer_path[PL_PATH_LEN];
    uint64_t   tokenizer_hash;
    uint32_t   vocab_size;
    uint32_t   max_model_len;
    int32_t    bos_id;
    uint32_t   n_eos;
    int32_t    eos_ids[PL_MAX_EOS];
    float      default_temperature;     /* < 0: unset */
    float      default_top_p;
    int32_t    default_top_k;
    const pl_bmap_hdr_t  *map;  /* the live block map, the latest built */
    size_t     map_bytes;       /* its size (pl_bmap_bytes); 0: none */
} pl_ipc_identity_t;

typedef enum {
    PL_WATCH_LISTEN = 1,
    PL_WATCH_SIGNAL,
    PL_WATCH_SOCKET,
    PL_WATCH_DOORBELL
} pl_watch_kind_t;

struct pl_conn_s;

/* epoll's data.ptr points at one of these */
typedef struct {
    pl_watch_kind_t     kind;
    struct pl_conn_s   *conn;
} pl_watch_t;

typedef struct pl_conn_s  pl_conn_t;

struct pl_conn_s {
    uint32_t          worker_id;
    uint32_t          pid;              /* as the worker claims */
    int               fd;
    int               sub_efd;          /* worker -> engine doorbell */
    int               comp_efd;         /* engine -> worker doorbell */
    int               attached;
    int               dead;             /* close at the next safe point */
    uint64_t          deadline_ms;      /* attach must complete by then */
    uint8_t           attach_buf[sizeof(pl_attach_t)];
    size_t            attach_got;

    void             *region;
    size_t            region_size;
    pl_region_hdr_t  *hdr;
    pl_ring_t         sub;
    pl_ring_t         comp;
    uint64_t          map_offset;       /* the live block map's */
    size_t            map_size;         /* 0: none */
    int               ring_doorbell;    /* completions written this pass */
    int               comp_full;        /* the last write did not fit */

    pl_seq_index_t    live;             /* by req_id, until finished */
    pl_seq_t         *seqs_head;        /* every sequence with state here, */
    pl_seq_t         *seqs_tail;        /* in submission order */

    pl_watch_t        sock_watch;
    pl_watch_t        bell_watch;
    pl_conn_t        *prev;
    pl_conn_t        *next;
};

/* A record from a submission ring, checked for structure. */
typedef struct {
    uint32_t           type;            /* PL_REC_SUBMIT or PL_REC_ABORT */
    pl_rec_submit_t    submit;
    const int32_t     *prompt;          /* these point into the read */
    const uint32_t    *prompt_lens;     /* n_prompts > 1: each prompt's */
    const pl_bias_pair_t  *bias;        /* buffer: n_logit_bias pairs */
    const int32_t     *stop_ids;        /* n_stop_ids */
    const char        *grammar;         /* n_grammar bytes */
    uint64_t           abort_id;
} pl_ipc_msg_t;

/* Monotonic milliseconds. */
uint64_t   pl_now_ms(void);
/* the same clock in microseconds */
uint64_t   pl_now_us(void);

/* Unix socket listening at path (a stale file is replaced), created with
   mode and never wider. fd or -1. */
int        pl_ipc_listen(const char *path, unsigned mode, char *err,
    size_t errlen);

/* Accept one connection; NULL when none is pending or on failure (errno
   says which: EAGAIN, EMFILE, ...). */
pl_conn_t *pl_ipc_accept(int lfd, uint32_t worker_id);

/* Read what the worker sent so far of its pl_attach_t: 1 complete and
   valid, 0 more to read, -1 closed or bad (err says why). */
int        pl_ipc_read_attach(pl_conn_t *c, char *err, size_t errlen);

/* The live block map in c's region. */
pl_bmap_hdr_t *pl_ipc_block_map(pl_conn_t *c);

/* After a complete attach: build the worker's region (identity, current
   stats and block map filled in) and send pl_hello_t with the
   descriptors.
   1 attached, -1 failed (err says why), -2 the process is out of
   descriptors: nothing is kept, and it may be called again once some are
   free. */
int        pl_ipc_attach(pl_conn_t *c, const pl_ipc_identity_t *id,
    const pl_stats_t *stats, char *err, size_t errlen);

/* The socket of an attached worker is readable: 0 when it just woke us,
   -1 when the worker is gone or broke the protocol by talking. */
int        pl_ipc_socket_event(pl_conn_t *c);

/* Reset the submission doorbell's counter. */
void       pl_ipc_doorbell_clear(pl_conn_t *c);

/*
 * Next submitted record into msg, copied into buf (cap bytes, at least
 * the ring's largest payload) and checked for structure: sizes, counts
 * (logit bias pairs and stop ids within their limits), prompt token ids
 * below vocab_size.  The values of the sampling fields are the engine's
 * to check.  1 got one, 0 ring empty, -1 corrupt (err says what).
 */
int        pl_ipc_next(pl_conn_t *c, void *buf, uint32_t cap,
    uint32_t vocab_size, pl_ipc_msg_t *msg, char *err, size_t errlen);

/* Completion records; 0, or -1 when the ring is full now.  index is the
   request's sequence (choice) they are about; lp (NULL: none) holds the
   n tokens' log-probabilities with n_top best each (and, with
   PL_TOKENS_PROMPT in flags, their ranks); FINISH carries the
   sequence's cumulative log-probability (beam search; 0 otherwise). */
int        pl_ipc_send_tokens(pl_conn_t *c, uint64_t req_id, uint32_t index,
    const int32_t *ids, uint32_t n, const pl_logprobs_t *lp, uint32_t n_top,
    uint16_t flags);
int        pl_ipc_send_finish(pl_conn_t *c, const pl_rec_finish_t *r);
int        pl_ipc_send_error(pl_conn_t *c, uint64_t req_id, uint32_t status,
    const char *msg);

/* Most tokens one TOKENS record may carry (with n_top logprobs each, or
   none when logprobs is 0; with ranks when flags has PL_TOKENS_PROMPT). */
uint32_t   pl_ipc_max_tokens_per_record(const pl_conn_t *c, int logprobs,
    uint32_t n_top, uint16_t flags);

/* Write the completion doorbell if anything was written this pass. */
void       pl_ipc_flush_doorbell(pl_conn_t *c);

/* Close the connection's socket at once (the rest waits for
   pl_ipc_close): its descriptor is free for the next accept. */
void       pl_ipc_shut(pl_conn_t *c);

/* Unmap and close everything; the caller has dealt with its sequences. */
void       pl_ipc_close(pl_conn_t *c);

#endif /* PL_IPC_H */
