/*
 * runner: turns the scheduler's plan into the model's batch description
 * (token ids, positions, KV slots, block tables, context lengths, query
 * offsets, logits rows) in host memory, executes the KV block moves the
 * block manager decided, runs the model once for the whole batch and
 * says where its logits are: in the backend's memory, where the sampling
 * operation reads them, or in the runner's host buffer (tensor
 * parallelism gathers them there).  Rows the host needs (log-
 * probabilities) come down one by one into that same buffer.  A sequence
 * that owes its prompt's logprobs gets a logits row for each of its
 * query rows at a prompt position still owed (pl_seq_prompt_rows), as
 * extra rows after the sequences' own.
 */

#ifndef PL_RUNNER_H
#define PL_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "block_manager.h"
#include "pl_model.h"
#include "scheduler.h"

typedef struct {
    int          max_tokens;
    int          max_seqs;
    int          max_blocks_per_seq;
    int          vocab_size;

    int32_t     *token_ids;         /* [max_tokens] */
    int32_t     *positions;         /* [max_tokens] */
    int32_t     *slot_mapping;      /* [max_tokens] */
    int32_t     *query_start;       /* [max_seqs + 1] */
    int32_t     *context_lens;      /* [max_seqs] */
    int32_t     *block_tables;      /* [max_seqs][max_blocks_per_seq] */
    int32_t     *logits_rows;       /* [max_seqs + PL_EXTRA_LOGITS] */
    float       *logits;            /* [max_seqs + PL_EXTRA_LOGITS]
                                       [vocab_size], host */
    /* per entry: its extra rows (from extra_start on, after the
       sequences' rows), for prompt positions from extra_pos on */
    int32_t     *extra_start;       /* [max_seqs] */
    int32_t     *extra_count;       /* [max_seqs] */
    int32_t     *extra_pos;         /* [max_seqs] */

    pl_batch_t   batch;
} pl_runner_t;

/* 0, or -1 when out of memory. */
int  pl_runner_init(pl_runner_t *r, int max_tokens, int max_seqs,
    int max_blocks_per_seq, int vocab_size);
void pl_runner_destroy(pl_runner_t *r);

/*
 * Describe entries[0..n) (n <= max_seqs, their tokens <= max_tokens, blocks
 * already reserved, extra rows <= PL_EXTRA_LOGITS) in r->batch.  Entry i's
 * row of logits will be row i; its extra rows, n + extra_start[i] on.
 */
void pl_runner_build(pl_runner_t *r, const pl_block_manager_t *bm,
    const pl_sched_entry_t *entries, int n);

/*
 * Execute the block moves the scheduler logged (copy-on-write copies,
 * swaps to and from host_pool), in order.  0, or -1 with err.
 */
int  pl_runner_moves(pl_model_t *m,
    const pl_block_manager_t *bm, void *host_pool, char *err, size_t errlen);

/* Run the model on r->batch; *out says where the logits are (valid
   until the next forward).  0, or -1 with err. */
int  pl_runner_forward(pl_runner_t *r, pl_model_t *m, pl_logits_t *out,
    char *err, size_t errlen);

/* Row i of logits as host fp32: in place when they are on the host,
   else brought down from be into r->logits first. */
const float *pl_runner_host_row(pl_runner_t *r, pl_backend_t *be,
    const pl_logits_t *logits, int i);

/* Rows first..first+count-1 of logits as host fp32, brought down in one
   transfer when they are on the device; row i is then at the address
   pl_runner_host_row would give.  The first row's address. */
const float *pl_runner_host_rows(pl_runner_t *r, pl_backend_t *be,
    const pl_logits_t *logits, int first, int count);

#endif /* PL_RUNNER_H */
