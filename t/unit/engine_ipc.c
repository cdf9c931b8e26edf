/*
 * The real pagedllm-engine (with the tiny model) driven by fake workers
 * (fake_worker.h): attach, model identity, generation with max_tokens and
 * ignore_eos, batching, seeds, ABORT, invalid SUBMITs, corrupt records that
 * drop only their own connection, workers that vanish mid-generation, a
 * completion ring left full, and a clean stop on SIGTERM.  The engine runs
 * on the CPU unless PAGEDLLM_TEST_DEVICE names another device.
 */

#include <sys/stat.h>

#define FW_WAIT_MS    (30000 * fw_time_scale())

#include "fake_worker.h"

#define MAX_RESULTS   512
#define MAX_TOKENS    2048
#define BULK_BASE     100000
#define BULK_N        30000

typedef struct {
    uint64_t   id;
    int32_t    toks[MAX_TOKENS];
    int        n;
    int        n_records;
    int        finished;
    uint32_t   reason;
    uint32_t   prompt_tokens;
    uint32_t   completion_tokens;
    uint32_t   err_status;
    char       err[256];
    int        order;            /* completion records seen before FINISH */
} result_t;

static result_t  results[MAX_RESULTS];
static int       n_results;
static int       record_clock;
static uint8_t   bulk_state[BULK_N];    /* 0, 1 after ERROR, 2 after FINISH */
static int       bulk_bad;


static result_t *
result_for(uint64_t id)
{
    int  i;

    for (i = 0; i < n_results; i++) {
        if (results[i].id == id) {
            return &results[i];
        }
    }

    memset(&results[n_results], 0, sizeof(result_t));
    results[n_results].id = id;

    return &results[n_results++];
}


typedef struct {
    uint32_t  max_tokens;
    uint32_t  flags;
    float     temperature;
    float     top_p;
    int32_t   top_k;
    uint64_t  seed;
} params_t;

static const params_t  greedy_ignore_eos = { 0, PL_SUBMIT_IGNORE_EOS, 0, 1,
                                             0, 0 };


static int
submit(fw_t *w, uint64_t id, const int32_t *prompt, uint32_t n,
    uint32_t max_tokens, const params_t *p)
{
    pl_rec_submit_t  r = { .req_id = id, .max_tokens = max_tokens,
                           .flags = p->flags,
                           .temperature = p->temperature, .top_p = p->top_p,
                           .top_k = p->top_k, .n_prompt = n,
                           .seed = p->seed };

    result_for(id);

    return fw_submit(w, &r, prompt, NULL, NULL);
}


/* Records of the bulk-rejected requests: ERROR, then FINISH(ERROR). */
static int
take_bulk(uint32_t type, const uint8_t *buf)
{
    uint64_t  id;

    memcpy(&id, buf, 8);
    if (id < BULK_BASE || id >= BULK_BASE + BULK_N) {
        return 0;
    }

    id -= BULK_BASE;
    if (type == PL_REC_ERROR) {
        bulk_bad += bulk_state[id] != 0;
        bulk_state[id] = 1;
    } else {
        bulk_bad += bulk_state[id] != 1 || type != PL_REC_FINISH;
        bulk_state[id] = 2;
    }

    return 1;
}


static void
take_record(uint32_t type, const uint8_t *buf, uint32_t len)
{
    pl_rec_tokens_t  t;
    pl_rec_finish_t  f;
    pl_rec_error_t   e;
    result_t        *r;

    record_clock++;

    if (type != PL_REC_TOKENS && len >= 8 && take_bulk(type, buf)) {
        return;
    }

    if (type == PL_REC_TOKENS && len >= sizeof(t)) {
        memcpy(&t, buf, sizeof(t));
        r = result_for(t.req_id);
        if (r->n + (int) t.n <= MAX_TOKENS) {
            memcpy(r->toks + r->n, buf + sizeof(t), t.n * sizeof(int32_t));
        }
        r->n += (int) t.n;
        r->n_records++;
    } else if (type == PL_REC_FINISH && len >= sizeof(f)) {
        memcpy(&f, buf, sizeof(f));
        r = result_for(f.req_id);
        r->finished++;
        r->reason = f.reason;
        r->prompt_tokens = f.prompt_tokens;
        r->completion_tokens = f.completion_tokens;
        r->order = record_clock;
    } else if (type == PL_REC_ERROR && len >= sizeof(e)) {
        memcpy(&e, buf, sizeof(e));
        r = result_for(e.req_id);
        r->err_status = e.status;
        snprintf(r->err, sizeof(r->err), "%.*s",
                 (int) (e.len < 255 ? e.len : 255),
                 (const char *) buf + sizeof(e));
    } else {
        diag("unexpected completion record type %u len %u", type, len);
    }
}


/* One step of a loop waiting for a condition: pump; 0 once the ring is
   corrupt or the deadline has passed. */
static int
pump_until(fw_t *w, uint64_t until)
{
    return fw_pump(w, 50) >= 0 && fw_now_ms() < until;
}


static int
finished(int id)
{
    return result_for((uint64_t) id)->finished;
}


static int
wait_finished(fw_t *w, uint64_t id)
{
    return fw_wait(w, finished, (int) id, (int) id + 1);
}


static int
has_token(const result_t *r, int32_t t, int upto)
{
    int  i;

    for (i = 0; i < upto && i < r->n; i++) {
        if (r->toks[i] == t) {
            return 1;
        }
    }

    return 0;
}


/* ---- the tests ---- */


static const int32_t  prompt5[] = { 510, 17, 42, 99, 7 };


static void
test_identity(fw_t *w, const char *build)
{
    char        path[512];
    FILE       *f;
    static char data[1 << 22];
    size_t      n;
    pl_stats_t  st;

    is_int(w->hello.magic, PL_PROTO_MAGIC, "hello carries the magic");
    is_int(w->hello.version, PL_PROTO_VERSION, "and the protocol version");
    is_int(w->hdr->region_size, w->hello.region_size,
           "the region header agrees on the size");
    ok(w->hdr->sub_offset >= sizeof(pl_region_hdr_t)
       && w->hdr->comp_offset >= w->hdr->sub_offset
                                 + pl_ring_bytes(w->hdr->sub_size)
       && w->hdr->comp_offset + pl_ring_bytes(w->hdr->comp_size)
          <= w->size, "the two rings lie inside the region, apart");
    is_int(w->hdr->worker_id, w->hello.worker_id, "worker id in both");
    is_int(w->hdr->vocab_size, 512, "vocab size of the tiny model");
    is_int(w->hdr->bos_id, 510, "its bos id");
    ok(w->hdr->n_eos >= 1 && w->hdr->eos_ids[0] == 511, "its eos id");
    is_int(w->hdr->max_model_len, 2048, "max_model_len from config.json");
    is_str(w->hdr->model_name, "tiny", "model name is the folder's name");

    snprintf(path, sizeof(path), "%s/models/tiny/tokenizer.json", build);
    f = fopen(path, "rb");
    n = f ? fread(data, 1, sizeof(data), f) : 0;
    if (f) {
        fclose(f);
    }
    ok(n > 0 && w->hdr->tokenizer_hash == pl_fnv1a64(data, n),
       "tokenizer hash is FNV-1a 64 of tokenizer.json");
    ok(w->hdr->tokenizer_path[0] == '/'
       && strstr(w->hdr->tokenizer_path, "tokenizer.json"),
       "tokenizer path is absolute (%s)", w->hdr->tokenizer_path);

    st = fw_wait_idle(w);
    is_int(st.kv_blocks_total, 512, "stats: 512 KV blocks");
    is_int(st.block_size, 16, "stats: block size 16");
    is_str(st.device, fw_device(), "stats: device");
    ok(st.workers >= 1, "stats: the worker is counted");
}


static void
test_generate(fw_t *w)
{
    result_t  *a, *b;
    int        bad = 0, i;

    submit(w, 1, prompt5, 5, 8, &greedy_ignore_eos);
    ok(wait_finished(w, 1) == 0, "a request finishes");
    a = result_for(1);
    is_int(a->n, 8, "max_tokens = 8 gives 8 tokens");
    is_int(a->reason, PL_FINISH_LENGTH, "finish reason LENGTH");
    is_int(a->prompt_tokens, 5, "FINISH counts the prompt");
    is_int(a->completion_tokens, 8, "and the completion");
    is_int(a->finished, 1, "exactly one FINISH");
    for (i = 0; i < a->n; i++) {
        bad += a->toks[i] < 0 || a->toks[i] >= 512;
    }
    is_int(bad, 0, "every token id is in the vocabulary");

    submit(w, 2, prompt5, 5, 8, &greedy_ignore_eos);
    wait_finished(w, 2);
    b = result_for(2);
    ok(b->n == 8 && memcmp(a->toks, b->toks, 8 * sizeof(int32_t)) == 0,
       "greedy decoding repeats itself");
}


static void
test_eos(fw_t *w)
{
    params_t   p = { 0, 0, 1.0f, 1.0f, 0, 0 };
    result_t  *r;
    int        i, stops = 0, consistent = 1;

    for (i = 0; i < 16; i++) {
        p.seed = (uint64_t) i;
        p.flags = PL_SUBMIT_HAS_SEED;
        submit(w, 100 + i, prompt5, 5, 300, &p);
    }
    for (i = 0; i < 16; i++) {
        wait_finished(w, 100 + i);
        r = result_for(100 + i);
        if (r->reason == PL_FINISH_STOP) {
            stops++;
            consistent &= r->n >= 1 && r->toks[r->n - 1] == 511
                          && !has_token(r, 511, r->n - 1);
        } else {
            consistent &= r->reason == PL_FINISH_LENGTH && r->n == 300
                          && !has_token(r, 511, r->n);
        }
    }

    ok(consistent, "without ignore_eos a request stops right at eos, or "
       "runs to max_tokens without one (%d of 16 stopped)", stops);
}


static void
test_batching(fw_t *w)
{
    pl_stats_t  before, after;
    result_t   *a, *b, *alone;
    uint64_t    iters;
    static const int32_t  other[] = { 510, 300, 301, 302, 303, 304, 305 };

    submit(w, 3, prompt5, 5, 40, &greedy_ignore_eos);
    wait_finished(w, 3);
    alone = result_for(3);

    before = fw_wait_idle(w);
    submit(w, 4, prompt5, 5, 40, &greedy_ignore_eos);
    submit(w, 5, other, 7, 40, &greedy_ignore_eos);
    wait_finished(w, 4);
    wait_finished(w, 5);
    after = fw_wait_idle(w);

    a = result_for(4);
    b = result_for(5);
    iters = after.iterations - before.iterations;

    ok(a->n == 40 && b->n == 40, "two concurrent requests get 40 tokens "
       "each");
    ok(iters <= 60, "they ran in the same iterations (%llu for 80 tokens)",
       (unsigned long long) iters);
    ok(a->n_records > 1 && b->n_records > 1
       && a->order > b->order - b->n_records
       && b->order > a->order - a->n_records,
       "their streams interleave (records %d and %d)", a->n_records,
       b->n_records);
    ok(memcmp(a->toks, alone->toks, 40 * sizeof(int32_t)) == 0,
       "batching does not change greedy output");
    is_int(after.kv_blocks_used, 0, "no block in use when idle");
}


static void
test_seed(fw_t *w)
{
    params_t   p = { 0, PL_SUBMIT_HAS_SEED | PL_SUBMIT_IGNORE_EOS, 0.9f,
                     0.95f, 50, 1234 };
    result_t  *a, *b, *c;
    static const int32_t  other[] = { 510, 5, 6 };

    submit(w, 6, prompt5, 5, 30, &p);
    wait_finished(w, 6);

    submit(w, 7, other, 3, 50, &greedy_ignore_eos);
    submit(w, 8, prompt5, 5, 30, &p);
    p.seed = 999;
    submit(w, 9, prompt5, 5, 30, &p);
    wait_finished(w, 7);
    wait_finished(w, 8);
    wait_finished(w, 9);

    a = result_for(6);
    b = result_for(8);
    c = result_for(9);
    ok(a->n == 30 && b->n == 30
       && memcmp(a->toks, b->toks, 30 * sizeof(int32_t)) == 0,
       "the same seed gives the same tokens alone and in a batch");
    ok(memcmp(a->toks, c->toks, 30 * sizeof(int32_t)) != 0,
       "another seed gives other tokens");
}


static void
test_abort(fw_t *w)
{
    result_t    *r = result_for(10);
    uint64_t     until = fw_now_ms() + FW_WAIT_MS;
    pl_stats_t   st;

    submit(w, 10, prompt5, 5, 2000, &greedy_ignore_eos);
    while (r->n < 3 && fw_now_ms() < until) {
        fw_pump(w, 20);
    }
    ok(r->n >= 3 && !r->finished, "a long request is generating");

    fw_abort(w, 10);
    ok(wait_finished(w, 10) == 0 && r->reason == PL_FINISH_ABORT,
       "ABORT ends it with FINISH(ABORT)");
    ok(r->n < 2000, "before max_tokens (%d tokens)", r->n);

    st = fw_wait_idle(w);
    is_int(st.running, 0, "stats: nothing running after the abort");
    is_int(st.kv_blocks_used, 0, "stats: its blocks are free");
    is_int(st.kv_blocks_free, 512, "stats: all 512 blocks free");

    fw_abort(w, 12345);
    submit(w, 11, prompt5, 5, 2, &greedy_ignore_eos);
    ok(wait_finished(w, 11) == 0 && result_for(11)->n == 2,
       "an ABORT of an unknown id is harmless");
}


static void
expect_400(fw_t *w, uint64_t id, const char *what)
{
    result_t  *r = result_for(id);

    wait_finished(w, id);
    ok(r->err_status == 400 && r->finished && r->reason == PL_FINISH_ERROR
       && r->err[0] != '\0' && r->n == 0,
       "%s: ERROR 400 + FINISH(ERROR) (\"%s\")", what, r->err);
}


static void
test_invalid(fw_t *w)
{
    params_t  p;
    int32_t   big[2000];
    uint64_t  until;
    int       i;

    for (i = 0; i < 2000; i++) {
        big[i] = i % 500;
    }

    submit(w, 20, prompt5, 0, 5, &greedy_ignore_eos);
    expect_400(w, 20, "empty prompt");
    submit(w, 21, prompt5, 5, 0, &greedy_ignore_eos);
    expect_400(w, 21, "max_tokens 0");
    submit(w, 22, big, 2000, 49, &greedy_ignore_eos);
    expect_400(w, 22, "prompt + max_tokens over max_model_len");

    p = greedy_ignore_eos;
    p.temperature = NAN;
    submit(w, 23, prompt5, 5, 5, &p);
    expect_400(w, 23, "temperature NaN");
    p.temperature = -0.5f;
    submit(w, 24, prompt5, 5, 5, &p);
    expect_400(w, 24, "negative temperature");
    p = greedy_ignore_eos;
    p.top_p = 0;
    submit(w, 25, prompt5, 5, 5, &p);
    expect_400(w, 25, "top_p 0");
    p.top_p = 1.5f;
    submit(w, 26, prompt5, 5, 5, &p);
    expect_400(w, 26, "top_p 1.5");

    submit(w, 27, prompt5, 5, 1500, &greedy_ignore_eos);
    submit(w, 27, prompt5, 5, 5, &greedy_ignore_eos);
    until = fw_now_ms() + FW_WAIT_MS;
    while (result_for(27)->err_status == 0 && pump_until(w, until)) {
        /* wait for the duplicate's error */
    }
    ok(result_for(27)->err_status == 400 && result_for(27)->finished == 1
       && result_for(27)->reason == PL_FINISH_ERROR,
       "a duplicate live req_id gets ERROR 400 + FINISH(ERROR) (\"%s\")",
       result_for(27)->err);
    fw_abort(w, 27);
    until = fw_now_ms() + FW_WAIT_MS;
    while (result_for(27)->finished < 2 && pump_until(w, until)) {
        /* wait for the original's end */
    }
    ok(result_for(27)->finished == 2 && result_for(27)->reason
       == PL_FINISH_ABORT && result_for(27)->n > 0,
       "while the original keeps generating until it is aborted");

    submit(w, 28, big, 2000, 48, &greedy_ignore_eos);
    ok(wait_finished(w, 28) == 0 && result_for(28)->n == 48,
       "the connection still serves: prompt + max_tokens = max_model_len "
       "is allowed");
    is_int(result_for(28)->reason, PL_FINISH_LENGTH, "and ends with LENGTH");
}


static void
corrupt_and_check(fw_t *ok_w, int how, const char *what)
{
    fw_t             bad;
    pl_rec_submit_t  r = { .req_id = 40 + how, .max_tokens = 4, .top_p = 1,
                           .n_prompt = 3 };
    int32_t          toks[3] = { 1, 2, 600 };
    uint8_t          junk[24] = { 0 };
    uint64_t         id = 50 + how, until = fw_now_ms() + FW_WAIT_MS;

    if (fw_attach(&bad, take_record) != 0) {
        ok(0, "%s: second worker attaches", what);
        return;
    }

    submit(&bad, 60 + how, prompt5, 5, 1500, &greedy_ignore_eos);
    while (result_for(60 + how)->n < 2 && pump_until(&bad, until)) {
        /* a request of this worker is generating */
    }

    if (how == 0) {
        pl_ring_write(&bad.sub, 99, junk, sizeof(junk), NULL, 0);
    } else if (how == 1) {
        pl_ring_write(&bad.sub, PL_REC_SUBMIT, &r, sizeof(r), toks,
                      sizeof(toks));
    } else if (how == 2) {
        r.n_prompt = 9;
        pl_ring_write(&bad.sub, PL_REC_SUBMIT, &r, sizeof(r), toks,
                      sizeof(toks));
    } else {
        atomic_store(&bad.sub.sh->head, bad.sub.local + 12);
    }
    fw_doorbell(&bad);

    ok(fw_closed(bad.fd), "%s: the engine drops that connection", what);

    submit(ok_w, id, prompt5, 5, 3, &greedy_ignore_eos);
    ok(wait_finished(ok_w, id) == 0 && result_for(id)->n == 3,
       "%s: the other worker is still served", what);
    is_int(fw_wait_idle(ok_w).kv_blocks_used, 0,
           "%s: the dropped worker's blocks are freed", what);

    fw_detach(&bad);
}


static void
test_vanishing_worker(fw_t *w)
{
    fw_t        v;
    pl_stats_t  st, before = fw_stats(w);
    uint64_t    until = fw_now_ms() + FW_WAIT_MS;
    int         i;

    if (fw_attach(&v, take_record) != 0) {
        ok(0, "a third worker attaches");
        return;
    }
    for (i = 0; i < 4; i++) {
        submit(&v, 70 + i, prompt5, 5, 1500, &greedy_ignore_eos);
    }
    while (result_for(73)->n < 2 && pump_until(&v, until)) {
        /* generating */
    }
    ok(fw_stats(w).kv_blocks_used > 0, "its requests hold blocks");
    ok(fw_stats(w).workers == before.workers + 1, "it is counted");

    fw_detach(&v);

    st = fw_wait_idle(w);
    is_int(st.kv_blocks_used, 0, "closing its socket mid-generation frees "
           "every block");
    is_int(st.running, 0, "and leaves nothing running");

    for (i = 0; i < 100 && fw_stats(w).workers != before.workers; i++) {
        usleep(20000);
    }
    is_int(fw_stats(w).workers, before.workers, "the worker count drops back");
}


static void
test_bad_attach(void)
{
    pl_attach_t  a = { 0x12345678, PL_PROTO_VERSION, 1, 0 };
    int          fd = fw_connect();
    int          fd2 = fw_connect();

    ok(write(fd, &a, sizeof(a)) == sizeof(a) && fw_closed(fd),
       "a bad attach magic gets the connection closed");

    ok(fw_closed(fd2),
       "a client that never attaches is closed after the timeout");

    close(fd);
    close(fd2);
}


static int
bulk_done(void)
{
    int  i, n = 0;

    for (i = 0; i < BULK_N; i++) {
        n += bulk_state[i] == 2;
    }

    return n;
}


/*
 * 30000 rejected requests produce about 4.3 MB of ERROR + FINISH records,
 * more than the 4 MiB completion ring holds; nobody drains it while four
 * valid requests run.  The batch must go on, and nothing may be lost once
 * the worker drains.
 */
static void
test_full_completion_ring(fw_t *w)
{
    fw_t             f;
    pl_rec_submit_t  r = { .max_tokens = 3000, .top_p = 1, .n_prompt = 1 };
    int32_t          tok = 5;
    uint64_t         until, head, tail;
    pl_stats_t       st, before = fw_wait_idle(w);
    int              i, all = 1, pending, refused = 0;

    if (fw_attach(&f, take_record) != 0) {
        ok(0, "a fourth worker attaches");
        return;
    }

    for (i = 0; i < BULK_N; i++) {
        r.req_id = BULK_BASE + i;
        refused += pl_ring_write(&f.sub, PL_REC_SUBMIT, &r, sizeof(r), &tok,
                                 sizeof(tok)) != 0;
    }
    fw_doorbell(&f);
    is_int(refused, 0, "30000 bad SUBMITs fit the submission ring");

    for (i = 0; i < 4; i++) {
        submit(&f, 300 + i, prompt5, 5, 64, &greedy_ignore_eos);
    }

    until = fw_now_ms() + FW_WAIT_MS;
    do {
        usleep(20000);
        st = fw_stats(w);
    } while (st.requests_total < before.requests_total + 4
             || ((st.running || st.waiting) && fw_now_ms() < until));

    head = atomic_load(&f.comp.sh->head);
    tail = atomic_load(&f.comp.sh->tail);
    ok(f.comp.size - (head - tail) < 256, "the completion ring is full "
       "(%llu bytes free)", (unsigned long long) (f.comp.size - (head - tail)));
    ok(!st.running && !st.waiting, "the batch still ran the valid requests "
       "to the end");

    until = fw_now_ms() + FW_WAIT_MS;
    do {
        fw_pump(&f, 20);
        pending = BULK_N - bulk_done();
        for (i = 0; i < 4; i++) {
            pending += !result_for(300 + i)->finished;
        }
    } while (pending && fw_now_ms() < until);

    is_int(bulk_done(), BULK_N, "once drained, all 30000 rejections arrive");
    is_int(bulk_bad, 0, "each as ERROR then FINISH, exactly once");
    for (i = 0; i < 4; i++) {
        all &= result_for(300 + i)->n == 64
               && result_for(300 + i)->finished == 1;
    }
    ok(all, "and the valid requests got all 64 tokens and their FINISH");

    fw_detach(&f);
}


/*
 * Ten requests of 600 + 600 tokens need 750 blocks of a pool of 512: the
 * engine must preempt (by recompute) and still finish every one of them
 * with exactly the tokens it would have produced alone.
 */
static void
test_preemption(fw_t *w)
{
    static int32_t  prompt[10][600];
    pl_stats_t      before = fw_wait_idle(w), after;
    result_t       *alone, *r;
    int             i, j, all = 1;

    for (i = 0; i < 10; i++) {
        for (j = 0; j < 600; j++) {
            prompt[i][j] = (i * 31 + j * 7) % 500;
        }
    }

    submit(w, 400, prompt[9], 600, 600, &greedy_ignore_eos);
    wait_finished(w, 400);
    alone = result_for(400);

    for (i = 0; i < 10; i++) {
        submit(w, 410 + i, prompt[i], 600, 600, &greedy_ignore_eos);
    }
    for (i = 0; i < 10; i++) {
        wait_finished(w, 410 + i);
        r = result_for(410 + i);
        all &= r->n == 600 && r->reason == PL_FINISH_LENGTH;
    }
    after = fw_wait_idle(w);

    ok(after.preemptions_total > before.preemptions_total,
       "a pool too small for the load preempts (%llu times)",
       (unsigned long long) (after.preemptions_total
                             - before.preemptions_total));
    ok(all, "every request still gets its 600 tokens");
    ok(memcmp(result_for(419)->toks, alone->toks, 600 * sizeof(int32_t)) == 0,
       "recomputation gives the tokens the request produces alone");
    is_int(after.kv_blocks_used, 0, "and every block comes back");
}


int
main(void)
{
    static const char *const  flags[] = {
        "--device", NULL, "--num-blocks", "512", "--block-size", "16",
        "--max-num-seqs", "128", "--log-level", "info", NULL
    };
    const char  *build = getenv("PAGEDLLM_BUILD");
    const char  *args[sizeof(flags) / sizeof(flags[0])];
    fw_t         w;
    struct stat  st;

    if (build == NULL) {
        build = "build";
    }
    memcpy(args, flags, sizeof(flags));
    args[1] = fw_device();

    if (fw_setup("ipc") != 0) {
        ok(0, "temp dir");
        return done_testing();
    }

    if (!ok(fw_engine_start(build, args, NULL) == 0, "the engine starts (%s)",
            build))
    {
        fw_show_log();
        return done_testing();
    }

    if (!ok(fw_attach(&w, take_record) == 0, "a worker attaches")) {
        fw_show_log();
    } else {
        test_identity(&w, build);
        test_generate(&w);
        test_eos(&w);
        test_batching(&w);
        test_seed(&w);
        test_abort(&w);
        test_invalid(&w);
        test_preemption(&w);
        corrupt_and_check(&w, 0, "unknown record type");
        corrupt_and_check(&w, 1, "token id >= vocab");
        corrupt_and_check(&w, 2, "n_prompt larger than the record");
        corrupt_and_check(&w, 3, "ring head corrupted");
        test_vanishing_worker(&w);
        test_bad_attach();
        test_full_completion_ring(&w);
        fw_detach(&w);
    }

    ok(fw_engine_stop() == 0, "SIGTERM stops the engine cleanly");
    ok(stat(fw_sock, &st) != 0, "and removes its socket");

    if (tap_failed) {
        fw_show_log();
    }
    fw_cleanup();

    return done_testing();
}
