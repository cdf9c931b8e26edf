/*
 * Sampling through the real pagedllm-engine (tiny model, CPU) driven by a
 * fake worker (fake_worker.h): a seeded request gives the same tokens
 * alone and in a batch of 32 with every sampling parameter on, logprobs
 * arrive with every token (n_top entries, the chosen one <= 0, the top-1
 * under greedy), protocol v2 values the engine must refuse get ERROR 400
 * + FINISH, and a SUBMIT whose counts do not match its length drops the
 * connection.
 */

#include "fake_worker.h"

#define N_REQ      40
#define N_TOK      32
#define BATCH      32

typedef struct {
    int32_t   toks[N_TOK];
    float     lp[N_TOK];
    int32_t   top1[N_TOK];
    int       n;
    int       n_top_bad;
    int       finished;
    uint32_t  reason;
    uint32_t  err_status;
} result_t;

static result_t  res[N_REQ];


static void
take_tokens(const uint8_t *buf, uint32_t len)
{
    pl_rec_tokens_t          t;
    const int32_t           *ids;
    const float             *lp;
    const pl_top_logprob_t  *top;
    result_t                *r;
    uint32_t                 i;

    memcpy(&t, buf, sizeof(t));
    if (t.req_id >= N_REQ) {
        return;
    }

    r = &res[t.req_id];
    ids = (const int32_t *) (buf + sizeof(t));
    lp = (const float *) (ids + t.n);
    top = (const pl_top_logprob_t *) (lp + t.n);

    if ((t.flags & PL_TOKENS_LOGPROBS)
        && sizeof(t) + t.n * (8 + 8 * (uint64_t) t.n_top) > len)
    {
        r->n_top_bad++;
        return;
    }

    for (i = 0; i < t.n && r->n < N_TOK; i++, r->n++) {
        r->toks[r->n] = ids[i];
        if (t.flags & PL_TOKENS_LOGPROBS) {
            r->lp[r->n] = lp[i];
            r->top1[r->n] = t.n_top ? top[i * t.n_top].id : -1;
            r->n_top_bad += t.n_top != 3;
        }
    }
}


static void
take(uint32_t type, const uint8_t *buf, uint32_t len)
{
    pl_rec_finish_t  f;
    pl_rec_error_t   e;

    if (type == PL_REC_TOKENS) {
        take_tokens(buf, len);
    } else if (type == PL_REC_FINISH) {
        memcpy(&f, buf, sizeof(f));
        if (f.req_id < N_REQ) {
            res[f.req_id].finished++;
            res[f.req_id].reason = f.reason;
        }
    } else if (type == PL_REC_ERROR) {
        memcpy(&e, buf, sizeof(e));
        if (e.req_id < N_REQ) {
            res[e.req_id].err_status = e.status;
        }
    }
}


static int
finished(int id)
{
    return res[id].finished;
}


/* Pump the completion ring until ids [lo, hi) have all finished. */
static int
wait_all(fw_t *w, int lo, int hi)
{
    return fw_wait(w, finished, lo, hi);
}


static pl_rec_submit_t
hot(uint64_t id, uint64_t seed)
{
    return (pl_rec_submit_t) {
        .req_id = id, .max_tokens = N_TOK,
        .flags = PL_SUBMIT_IGNORE_EOS | PL_SUBMIT_HAS_SEED,
        .temperature = 0.9f, .top_p = 0.95f, .top_k = 100, .n_prompt = 4,
        .seed = seed, .min_p = 0.02f, .repetition_penalty = 1.2f,
        .presence_penalty = 0.3f, .frequency_penalty = 0.2f,
        .min_tokens = 4, .n_logit_bias = 1, .n_stop_ids = 1,
    };
}


static void
test_seed_in_batch(fw_t *w)
{
    int32_t          prompt[4] = { 510, 40, 41, 42 }, other[4];
    pl_bias_pair_t   bias = { 77, 1.5f };
    int32_t          stop = 3;
    pl_rec_submit_t  r;
    int              i, same, differ;

    r = hot(0, 4242);
    fw_submit(w, &r, prompt, &bias, &stop);
    ok(wait_all(w, 0, 1) == 0, "a seeded request alone finishes");
    ok(res[0].n >= 4, "and generates (%d tokens)", res[0].n);

    for (i = 1; i <= BATCH; i++) {
        other[0] = 510;
        other[1] = 40 + i;
        other[2] = 100 + i;
        other[3] = 7 * i;
        r = hot((uint64_t) i, i == 17 ? 4242 : 1000 + (uint64_t) i);
        fw_submit(w, &r, i == 17 ? prompt : other, &bias, &stop);
    }

    ok(wait_all(w, 1, BATCH + 1) == 0, "a batch of %d finishes", BATCH);

    same = res[17].n == res[0].n
           && memcmp(res[17].toks, res[0].toks, res[0].n * 4) == 0;
    ok(same, "the same seed in a batch of %d gives the same %d tokens as "
       "alone", BATCH, res[0].n);

    for (differ = 0, i = 1; i <= BATCH; i++) {
        differ += i != 17 && (res[i].n != res[0].n
                              || memcmp(res[i].toks, res[0].toks,
                                        res[0].n * 4) != 0);
    }
    is_int(differ, BATCH - 1, "the other seeds and prompts go their own way");
}


static void
test_logprobs(fw_t *w)
{
    int32_t          prompt[3] = { 510, 60, 61 };
    pl_rec_submit_t  r = { .req_id = 33, .max_tokens = 8, .top_p = 1,
                           .n_prompt = 3, .logprobs = 3,
                           .flags = PL_SUBMIT_IGNORE_EOS
                                    | PL_SUBMIT_LOGPROBS };
    int              i, bad_lp = 0, bad_top = 0;

    fw_submit(w, &r, prompt, NULL, NULL);
    ok(wait_all(w, 33, 34) == 0 && res[33].n == 8,
       "greedy with logprobs 3 gives its 8 tokens");
    is_int(res[33].n_top_bad, 0, "every token carries 3 top entries");

    for (i = 0; i < res[33].n; i++) {
        bad_lp += !(res[33].lp[i] <= 0);
        bad_top += res[33].top1[i] != res[33].toks[i];
    }
    is_int(bad_lp, 0, "every chosen logprob is <= 0");
    is_int(bad_top, 0, "under greedy the top-1 entry is the chosen token");
}


static void
test_refusals(fw_t *w)
{
    int32_t          prompt[2] = { 510, 5 }, bad_stop = 9999;
    pl_bias_pair_t   bad_bias = { 3, 500.0f };
    pl_rec_submit_t  base = { .max_tokens = 4, .top_p = 1, .n_prompt = 2 };
    pl_rec_submit_t  r[6];
    int              i, all = 1;

    for (i = 0; i < 6; i++) {
        r[i] = base;
        r[i].req_id = 34 + i;
    }
    r[0].min_p = 1.5f;
    r[1].presence_penalty = 3;
    r[2].logprobs = 21;
    r[3].min_tokens = 5;
    r[4].n_logit_bias = 1;
    r[5].n_stop_ids = 1;

    for (i = 0; i < 6; i++) {
        fw_submit(w, &r[i], prompt, &bad_bias, &bad_stop);
    }

    ok(wait_all(w, 34, 40) == 0, "six bad SUBMITs all finish");
    for (i = 34; i < 40; i++) {
        all &= res[i].err_status == 400 && res[i].reason == PL_FINISH_ERROR
               && res[i].n == 0;
    }
    ok(all, "min_p 1.5, presence 3, logprobs 21, min_tokens > max_tokens, "
       "a bias of 500 and a stop id outside the vocabulary: ERROR 400 + "
       "FINISH(ERROR) each");
}


static void
test_malformed(void)
{
    fw_t             w;
    int32_t          prompt[2] = { 510, 5 };
    pl_rec_submit_t  r = { .req_id = 1, .max_tokens = 4, .top_p = 1,
                           .n_prompt = 2, .n_stop_ids = 3 };

    ok(fw_attach(&w, take) == 0, "a second worker attaches");
    pl_ring_write(&w.sub, PL_REC_SUBMIT, &r, sizeof(r), prompt,
                  sizeof(prompt));
    fw_doorbell(&w);
    ok(fw_closed(w.fd),
       "n_stop_ids beyond the record's length: the engine drops the "
       "connection");
    fw_detach(&w);
}


int
main(void)
{
    static const char *const  flags[] = {
        "--device", "cpu", "--num-blocks", "512", "--max-num-seqs", "64",
        NULL
    };
    const char  *build = getenv("PAGEDLLM_BUILD");
    fw_t         w;

    if (build == NULL) {
        build = "build";
    }

    if (fw_setup("samp") != 0) {
        ok(0, "temporary folder");
        return done_testing();
    }

    if (!ok(fw_engine_start(build, flags, NULL) == 0, "the engine starts")
        || !ok(fw_attach(&w, take) == 0, "a fake worker attaches"))
    {
        return done_testing();
    }

    is_int(w.hdr->version, PL_PROTO_VERSION, "protocol version 2");
    ok(w.hdr->default_temperature < 0 && w.hdr->default_top_k < 0,
       "no sampling defaults in the tiny model's generation_config.json: "
       "published as unset");

    test_seed_in_batch(&w);
    test_logprobs(&w);
    test_refusals(&w);
    test_malformed();

    ok(fw_engine_stop() == 0,
       "the engine survived everything and stops cleanly");

    if (tap_failed) {
        fw_show_log();
    }

    fw_detach(&w);
    fw_cleanup();

    return done_testing();
}
