/*
 * decode_pad: decode batches padded to the shapes CUDA graphs record
 * (pl_model.h, PL_DECODE_PADDED) give the logits of the batches as they
 * come, on the CPU backend, where every row is computed on its own: so
 * the padding rows (no slot, no context) disturb nothing and the widened
 * block tables point where the real ones do.  The bundled tiny model and
 * OPT pre-LN from the golden fixtures (learned positions, read through
 * the positions on the backend); nine sequences with shuffled blocks
 * leave one by one (padded sizes 16, 8, 4, 2, 1), the longest context
 * crossing the 256 and 512 buckets.  The CPU backend records no graphs,
 * so the default mode runs eagerly.  Also the profiling run on the CPU:
 * the largest batch prepared, no graphs.
 */

#include <stdint.h>

#include "fixture_model.h"

#define NSEQ        9
#define BLOCK       16
#define MAX_TOKENS  1024
#define MAX_SEQS    16
#define MAX_LEN     576
#define SEQ_BLOCKS  (MAX_LEN / BLOCK)

typedef struct {
    int32_t  tok[MAX_LEN];
    int      len;
    int      prompt;
    int      gen;
    int32_t  table[SEQ_BLOCKS];
} seq_t;

static uint64_t  rng = 12345;


static int
rand_int(int n)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int) ((rng >> 33) % (uint64_t) n);
}


static int
argmax(const float *v, int n)
{
    int  i, best = 0;

    for (i = 1; i < n; i++) {
        best = v[i] > v[best] ? i : best;
    }
    return best;
}


static void
draw_seqs(seq_t *seqs, int vocab, int max_pos)
{
    int32_t  perm[NSEQ * SEQ_BLOCKS];
    int      i, j, at = 0;

    for (i = 0; i < NSEQ * SEQ_BLOCKS; i++) {
        perm[i] = i;
    }
    for (i = NSEQ * SEQ_BLOCKS - 1; i > 0; i--) {
        int      r = rand_int(i + 1);
        int32_t  x = perm[i];

        perm[i] = perm[r];
        perm[r] = x;
    }
    memset(seqs, 0, NSEQ * sizeof(seq_t));
    for (i = 0; i < NSEQ; i++) {
        seq_t  *s = &seqs[i];

        s->gen = i == 0 ? 24 : i == 1 ? 10 : 2 * (NSEQ - i);
        s->prompt = i == 0 ? 245 : i == 1 ? 505 : 3 + rand_int(30);
        if (s->prompt + s->gen >= max_pos) {
            s->prompt = max_pos - s->gen - 1 - rand_int(8);
        }
        s->len = s->prompt;
        for (j = 0; j < s->prompt; j++) {
            s->tok[j] = rand_int(vocab);
        }
        for (j = 0; j < SEQ_BLOCKS; j++) {
            s->table[j] = perm[at++];
        }
    }
}


/* one iteration of the sequences act[0 .. n) on model m: whole prompts
   (prefill) or last tokens; logits [n][vocab] */
static int
iterate(pl_model_t *m, seq_t *seqs, const int *act, int n, int prefill,
    float *logits, int vocab)
{
    static int32_t  ids[MAX_TOKENS], pos[MAX_TOKENS], slots[MAX_TOKENS];
    static int32_t  tables[NSEQ * SEQ_BLOCKS];
    int32_t         qs[NSEQ + 1], cl[NSEQ], rows[NSEQ];
    pl_batch_t      b;
    char            err[256];
    int             i, j, t = 0;

    memset(&b, 0, sizeof(b));
    qs[0] = 0;
    for (i = 0; i < n; i++) {
        seq_t  *s = &seqs[act[i]];
        int     first = prefill ? 0 : s->len - 1;

        for (j = first; j < s->len; j++, t++) {
            ids[t] = s->tok[j];
            pos[t] = j;
            slots[t] = s->table[j / BLOCK] * BLOCK + j % BLOCK;
        }
        qs[i + 1] = t;
        cl[i] = s->len;
        rows[i] = t - 1;
        memcpy(tables + i * SEQ_BLOCKS, s->table, sizeof(s->table));
        b.max_query_len = s->len - first > b.max_query_len
                          ? s->len - first : b.max_query_len;
        b.max_context_len = s->len > b.max_context_len ? s->len
                                                       : b.max_context_len;
    }
    b = (pl_batch_t) {
        .num_tokens = t, .num_seqs = n, .token_ids = ids, .positions = pos,
        .slot_mapping = slots, .query_start = qs, .context_lens = cl,
        .block_tables = tables, .logits_rows = rows,
        .max_blocks_per_seq = SEQ_BLOCKS, .max_query_len = b.max_query_len,
        .max_context_len = b.max_context_len
    };
    for (i = 0; i < n * vocab; i++) {
        logits[i] = NAN;
    }
    if (pl_model_forward(m, &b, logits, err, sizeof(err)) != 0) {
        diag("forward: %s", err);
        return -1;
    }
    return 0;
}


static void
padded_equals_eager(pl_backend_t *be, const char *dir, const char *label)
{
    pl_model_t  *eager = fm_load(dir, be, MAX_TOKENS, MAX_SEQS,
                                 NSEQ * SEQ_BLOCKS, BLOCK);
    pl_model_t  *padded = fm_load(dir, be, MAX_TOKENS, MAX_SEQS,
                                  NSEQ * SEQ_BLOCKS, BLOCK);
    float       *le = NULL, *lp = NULL;
    seq_t        seqs[NSEQ];
    int          act[NSEQ], i, n, it, vocab, differ = 0, decodes = 0;
    int          longest = 0;
    long         rec, rep;

    if (!ok(eager != NULL && padded != NULL, "%s: loads twice", label)) {
        goto done;
    }
    pl_model_set_decode_mode(eager, PL_DECODE_EAGER);
    pl_model_set_decode_mode(padded, PL_DECODE_PADDED);
    vocab = pl_model_config(eager)->vocab_size;
    le = malloc((size_t) NSEQ * vocab * sizeof(float));
    lp = malloc((size_t) NSEQ * vocab * sizeof(float));
    draw_seqs(seqs, vocab, pl_model_config(eager)->max_position_embeddings);

    for (it = 0;; it++) {
        for (i = 0, n = 0; i < NSEQ; i++) {
            if (seqs[i].len < seqs[i].prompt + seqs[i].gen) {
                act[n++] = i;
                longest = seqs[i].len > longest ? seqs[i].len : longest;
            }
        }
        if (n == 0) {
            break;
        }
        if (iterate(eager, seqs, act, n, it == 0, le, vocab) != 0
            || iterate(padded, seqs, act, n, it == 0, lp, vocab) != 0)
        {
            ok(0, "%s: every iteration runs", label);
            goto done;
        }
        differ += memcmp(le, lp, (size_t) n * vocab * sizeof(float)) != 0;
        decodes += it > 0;
        for (i = 0; i < n; i++) {
            seq_t  *s = &seqs[act[i]];

            s->tok[s->len++] = argmax(le + (size_t) i * vocab, vocab);
        }
    }
    ok(differ == 0, "%s: padded decode iterations give the eager logits "
       "bit for bit (%d of %d iterations differ; contexts to %d)", label,
       differ, decodes + 1, longest);
    pl_model_graph_counts(padded, &rec, &rep);
    ok(rec == 0 && rep == 0, "%s: nothing recorded on the CPU", label);

done:
    free(le);
    free(lp);
    pl_model_free(eager);
    pl_model_free(padded);
}


/* the default mode on a backend without recordings: eager */
static void
default_mode_runs_eagerly(pl_backend_t *be, const char *dir)
{
    pl_model_t  *m = fm_load(dir, be, MAX_TOKENS, MAX_SEQS,
                             NSEQ * SEQ_BLOCKS, BLOCK);
    seq_t        seqs[NSEQ];
    float       *l;
    int          act[1] = { 2 }, vocab, rc;
    long         rec = -1, rep = -1;

    if (!ok(m != NULL, "default mode: loads")) {
        return;
    }
    vocab = pl_model_config(m)->vocab_size;
    l = malloc((size_t) vocab * sizeof(float));
    draw_seqs(seqs, vocab, 64);
    rc = iterate(m, seqs, act, 1, 1, l, vocab);
    seqs[2].tok[seqs[2].len++] = argmax(l, vocab);
    rc |= iterate(m, seqs, act, 1, 0, l, vocab);
    ok(rc == 0, "default mode: a prefill and a decode run");
    pl_model_graph_counts(m, &rec, &rep);
    ok(rec == 0 && rep == 0, "default mode: no recordings without "
       "graphs_run");
    free(l);
    pl_model_free(m);
}


static void
profiling_run(pl_backend_t *be, const char *dir)
{
    pl_model_profile_t  prof;
    char                err[256];
    pl_model_t         *m = pl_model_load(dir, be, err, sizeof(err));

    if (!ok(m != NULL && pl_model_prepare(m, 300, 7, err, sizeof(err)) == 0,
            "profiling: loads and prepares"))
    {
        pl_model_free(m);
        return;
    }
    if (!ok(pl_model_profile(m, BLOCK, 2048, &prof, err, sizeof(err)) == 0,
            "profiling: the run succeeds"))
    {
        diag("%s", err);
    }
    ok(prof.tokens == 300 && prof.seqs == 7, "profiling: 300 tokens in 7 "
       "sequences ran (%d in %d)", prof.tokens, prof.seqs);
    is_int(prof.kv_bytes, 4 * pl_model_kv_block_bytes(m, BLOCK),
           "profiling: a temporary cache of four blocks");
    ok(prof.graph_bytes == 0 && prof.graph_shapes == 0,
       "profiling: no graphs on the CPU");
    ok(pl_model_kv_alloc(m, 32, BLOCK, err, sizeof(err)) == 0,
       "profiling: the real cache replaces the temporary one");
    pl_model_free(m);
}


int
main(void)
{
    const char    *build = getenv("PAGEDLLM_BUILD");
    char           tiny[1024], err[256];
    pl_backend_t  *be = pl_backend_cpu_create(2, err, sizeof(err));

    if (!ok(be != NULL, "the CPU backend starts")) {
        diag("%s", err);
        return done_testing();
    }
    snprintf(tiny, sizeof(tiny), "%s/models/tiny", build ? build : "build");
    padded_equals_eager(be, tiny, "tiny");
    padded_equals_eager(be, "t/fixtures/golden/opt_pre_ln", "opt pre-LN");
    default_mode_runs_eagerly(be, tiny);
    profiling_run(be, tiny);
    be->destroy(be);
    return done_testing();
}
