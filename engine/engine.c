/*
 * engine: the loop that owns the model, the KV cache and every request.
 *
 * One thread, one epoll set: the listening socket, a signalfd, every
 * worker's socket (EOF = the worker is gone) and every worker's submission
 * doorbell.  A pass of the loop:
 *
 *   1. wait for events: not at all while there is work to run, briefly
 *      while output is stuck behind a full completion ring, else up to
 *      200 ms so the published counters stay fresh when idle;
 *   2. accept and attach workers, note the ones that went away;
 *   3. drain every submission ring: SUBMIT becomes a sequence in the
 *      scheduler (or an ERROR + FINISH when it is invalid), ABORT removes
 *      its sequences and frees their blocks at once;
 *   4. close the connections found dead or corrupt, freeing their
 *      requests' blocks;
 *   5. plan one iteration, execute the KV block moves it needs (copies,
 *      swaps), run the model once for the whole batch, sample a token for
 *      every sequence whose tokens are all computed (one sampling call
 *      on the backend for all of them; only the token ids, and the rows
 *      whose log-probabilities are asked for, come to the host), and
 *      check the stop conditions;
 *   6. write each worker's pending TOKENS / FINISH records, ringing its
 *      doorbell at most once; what does not fit stays with the sequence
 *      (n_sent, finish_sent) and is retried next pass, so a full ring
 *      never stalls the batch;
 *   7. publish the counters into every region.
 *
 * Connections are only ever closed in step 4, so no sequence disappears
 * between planning an iteration and sampling its result.
 *
 * Parallel sampling: a request with n (or best_of) > 1 is one sequence
 * until its prompt has run; at its first sample it forks into best_of
 * members sharing the prompt's blocks, each drawing its first token from
 * the same logits with its own random stream, then sampling, stopping
 * and freeing its blocks on its own.  The request is over when all have
 * finished.  With best_of > n nothing is sent until then: the n members
 * with the highest cumulative log-probability go out as choices 0..n-1.
 * Beam search (engine_beam.c) uses the same groups: the members are the
 * beams, stepping together from their rows instead of drawing.
 *
 * This file holds the loop, the connections, one iteration and the
 * output; start-up and shutdown are in engine_start.c, submissions in
 * engine_requests.c, the state they share in engine_internal.h.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine_internal.h"


pl_log_level_t  pl_log_level = PL_LOG_INFO;


void
pl_log(pl_log_level_t level, const char *fmt, ...)
{
    static const char  *names[] = { "error", "warn", "info", "debug" };
    struct timespec     ts;
    struct tm           tm;
    char                when[32];
    va_list             ap;

    if (level > pl_log_level) {
        return;
    }

    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);

    fprintf(stderr, "%s.%03ld [%s] ", when, ts.tv_nsec / 1000000,
            names[level]);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}



/* ---- counters ---- */


static void
pl_engine_stats(const pl_engine_t *e, pl_stats_t *st)
{
    *st = e->totals;
    st->running = (uint32_t) e->sched.running.n;
    st->waiting = (uint32_t) e->sched.waiting.n;
    st->swapped = (uint32_t) e->sched.swapped.n;
    st->preemptions_total = e->sched.preemptions;
    st->kv_blocks_used = (uint32_t) pl_bm_num_used(&e->bm);
    st->kv_blocks_free = (uint32_t) pl_bm_num_free(&e->bm);
    st->kv_blocks_cached = (uint32_t) pl_bm_num_cached(&e->bm);
    st->swap_blocks_total = (uint32_t) e->bm.num_host_blocks;
    st->swap_blocks_used = (uint32_t) pl_bm_num_host_used(&e->bm);
    st->prefix_cache_queries = e->bm.counters.prefix_queries;
    st->prefix_cache_hits = e->bm.counters.prefix_hits;
    st->preemptions_recompute = e->sched.preempted_recompute;
    st->preemptions_swap = e->sched.preempted_swap;
    st->blocks_swapped_out = e->bm.counters.swapped_out;
    st->blocks_swapped_in = e->bm.counters.swapped_in;
    st->preemptions_auto_swap = e->sched.auto_swap;
    st->preemptions_auto_recompute = e->sched.auto_recompute;
    st->preemptions_swap_full = e->sched.swap_full;
    st->heartbeat_us = pl_now_us();
}


/*
 * Every --log-stats-interval seconds while there is anything to tell
 * (tokens went through, or requests are held): throughput since the last
 * line, the queues, KV usage and the prefix cache's hit rate over the
 * interval.
 */
static void
pl_engine_log_summary(pl_engine_t *e)
{
    pl_stats_t  st, *was = &e->summary_totals;
    uint64_t    now = pl_now_us();
    double      secs, used, queries;

    if (e->cfg.log_stats_interval <= 0
        || now - e->summary_at < (uint64_t) e->cfg.log_stats_interval
                                 * 1000000)
    {
        return;
    }

    pl_engine_stats(e, &st);
    secs = (double) (now - e->summary_at) / 1e6;
    used = 100.0 * st.kv_blocks_used / (st.kv_blocks_total
                                        ? st.kv_blocks_total : 1);
    queries = (double) (st.prefix_cache_queries - was->prefix_cache_queries);

    if (st.prompt_tokens_total != was->prompt_tokens_total
        || st.generation_tokens_total != was->generation_tokens_total
        || st.running || st.waiting || st.swapped)
    {
        pl_log(PL_LOG_INFO, "throughput: prompt %.1f tokens/s, generation "
               "%.1f tokens/s; requests running %u, waiting %u, swapped %u; "
               "KV usage %.1f%% (%u of %u blocks); prefix cache hit rate "
               "%.1f%%",
               (double) (st.prompt_tokens_total - was->prompt_tokens_total)
               / secs,
               (double) (st.generation_tokens_total
                         - was->generation_tokens_total) / secs,
               st.running, st.waiting, st.swapped, used, st.kv_blocks_used,
               st.kv_blocks_total,
               queries > 0 ? 100.0 * (double) (st.prefix_cache_hits
                                               - was->prefix_cache_hits)
                             / queries : 0.0);
    }

    e->summary_at = now;
    *was = st;
}


static void
pl_engine_publish(pl_engine_t *e)
{
    pl_stats_t  st;
    pl_conn_t  *c;

    pl_engine_stats(e, &st);

    for (c = e->conns; c; c = c->next) {
        if (c->attached && !c->dead) {
            pl_stats_publish(c->hdr, &st);
        }
    }
}


/* The live block map into every region, when one is due (block_map.h). */
static void
pl_engine_publish_map(pl_engine_t *e)
{
    uint64_t        now = pl_now_ms();
    pl_conn_t      *c;
    pl_bmap_hdr_t  *m;

    if (!pl_block_map_due(&e->map, &e->sched, now)) {
        return;
    }

    pl_block_map_build(&e->map, &e->bm, &e->sched, now);

    for (c = e->conns; c; c = c->next) {
        if (c->attached && !c->dead
            && (m = pl_ipc_block_map(c)) != NULL)
        {
            pl_bmap_publish(m, e->map.map, e->map.bytes);
        }
    }
}


/* ---- connections ---- */


/* The oldest connection still before its hello other than keep (the
   list holds the newest first), and how many there are. */
static pl_conn_t *
pl_engine_oldest_pending(pl_engine_t *e, const pl_conn_t *keep, int *n)
{
    pl_conn_t  *c, *oldest = NULL;

    *n = 0;
    for (c = e->conns; c; c = c->next) {
        if (!c->attached && !c->dead && c != keep) {
            oldest = c;
            (*n)++;
        }
    }

    return oldest;
}


/* Close a connection that has not said hello at once, freeing its
   descriptor; its struct waits for the reap, after every event of this
   pass that may name it. */
static void
pl_engine_evict(pl_engine_t *e, pl_conn_t *c)
{
    epoll_ctl(e->ep, EPOLL_CTL_DEL, c->fd, NULL);
    pl_ipc_shut(c);
    c->dead = 1;
    e->evicted++;
}


/* The worker's attach is complete: refuse it over --max-workers, before
   any region exists for it; 0 when it may attach. */
static int
pl_engine_admit(pl_engine_t *e, pl_conn_t *c)
{
    if (e->totals.workers < (uint32_t) e->cfg.max_workers) {
        return 0;
    }

    pl_log(PL_LOG_WARN, "connection %u (pid %u): attach refused: %u workers "
           "are attached, --max-workers is %d", c->worker_id, c->pid,
           e->totals.workers, e->cfg.max_workers);
    c->dead = 1;

    return -1;
}


/* Build c's region; out of descriptors, connections still before their
   hello make way for it, the oldest first: a worker that has said hello
   is never kept out by ones that have not. */
static int
pl_engine_build(pl_engine_t *e, pl_conn_t *c, const pl_stats_t *st,
    char *err, size_t errlen)
{
    pl_conn_t  *oldest;
    int         rc, n;

    while ((rc = pl_ipc_attach(c, &e->identity, st, err, errlen)) == -2) {
        oldest = pl_engine_oldest_pending(e, c, &n);
        if (oldest == NULL) {
            return -1;
        }
        pl_engine_evict(e, oldest);
    }

    return rc;
}


static void
pl_engine_attach(pl_engine_t *e, pl_conn_t *c)
{
    char        err[256];
    pl_stats_t  st;
    int         rc;

    rc = pl_ipc_read_attach(c, err, sizeof(err));
    if (rc == 0 || (rc > 0 && pl_engine_admit(e, c) != 0)) {
        return;
    }

    if (rc > 0) {
        e->totals.workers++;
        pl_engine_stats(e, &st);
        e->totals.workers--;
        rc = pl_engine_build(e, c, &st, err, sizeof(err));
    }

    if (rc < 0
        || pl_engine_watch(e, c->sub_efd, EPOLLIN, &c->bell_watch) != 0)
    {
        /* a probe that connects and closes is no cause for alarm */
        pl_log(c->attach_got ? PL_LOG_WARN : PL_LOG_DEBUG,
               "connection %u: attach failed: %s", c->worker_id,
               rc < 0 ? err : strerror(errno));
        c->dead = 1;
        return;
    }

    e->totals.workers++;
    pl_log(PL_LOG_INFO, "worker %u (pid %u) attached", c->worker_id, c->pid);
}


/*
 * accept() ran out of descriptors: make one free, when a connection is
 * waiting (accept() runs out before it looks at the backlog).  The oldest
 * connection that has not said hello goes first; when every descriptor
 * belongs to attached workers, the spare one kept for this is closed to
 * accept the newcomer and close it at once, so it is told no instead of
 * waiting in the backlog.  0 when the next accept may succeed.
 */
static int
pl_engine_free_fd(pl_engine_t *e)
{
    struct pollfd  p = { e->lfd, POLLIN, 0 };
    pl_conn_t     *oldest;
    int            n, fd;

    if (poll(&p, 1, 0) != 1) {
        return -1;
    }

    oldest = pl_engine_oldest_pending(e, NULL, &n);
    if (oldest != NULL) {
        pl_engine_evict(e, oldest);
        return 0;
    }

    if (e->spare_fd < 0) {
        return -1;
    }

    close(e->spare_fd);
    fd = accept4(e->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
        pl_log(PL_LOG_WARN, "out of descriptors with every one held by an "
               "attached worker: a connection refused");
        close(fd);
    }
    e->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

    return -1;
}


/* Watch and list a new connection, and read its attach at once: a worker
   sends it right after connecting, so it is usually in already, and a
   worker attached here is never among the connections a flood evicts. */
static void
pl_engine_add_conn(pl_engine_t *e, pl_conn_t *c)
{
    pl_conn_t  *oldest;
    int         n;

    if (pl_engine_watch(e, c->fd, EPOLLIN | EPOLLRDHUP, &c->sock_watch)
        != 0)
    {
        pl_ipc_close(c);
        return;
    }

    c->next = e->conns;
    if (e->conns) {
        e->conns->prev = c;
    }
    e->conns = c;

    pl_engine_attach(e, c);

    oldest = pl_engine_oldest_pending(e, NULL, &n);
    if (n > PL_IPC_MAX_PENDING) {
        pl_engine_evict(e, oldest);
    }
}


/* At most PL_ACCEPT_BATCH connections a pass, so a flood of them cannot
   hold up the batch nor pile up evicted structs before the reap, and a
   worker accepted before its attach arrived has a pass to send it before
   PL_IPC_MAX_PENDING newer connections can evict it. */
static void
pl_engine_accept(pl_engine_t *e)
{
    pl_conn_t  *c;
    int         i;

    for (i = 0; i < PL_ACCEPT_BATCH; i++) {
        c = pl_ipc_accept(e->lfd, e->next_worker_id + 1);
        if (c != NULL) {
            e->next_worker_id++;
            pl_engine_add_conn(e, c);
            continue;
        }
        if ((errno != EMFILE && errno != ENFILE) || pl_engine_free_fd(e) != 0)
        {
            break;
        }
    }
}


static void
pl_engine_socket_event(pl_engine_t *e, pl_conn_t *c, uint32_t events)
{
    if (c->dead) {
        return;
    }

    if (!c->attached) {
        pl_engine_attach(e, c);
        return;
    }

    if (pl_ipc_socket_event(c) != 0 || (events & (EPOLLHUP | EPOLLERR))) {
        pl_log(PL_LOG_INFO, "worker %u (pid %u) detached", c->worker_id,
               c->pid);
        c->dead = 1;
    }
}


/* Free request l's sequences, taking any still scheduled out first;
   whether any was. */
static int
pl_engine_free_group(pl_engine_t *e, pl_seq_t *l)
{
    int  i, live = 0;

    for (i = l->n_members - 1; i >= 0; i--) {
        if (l->members[i]->state != PL_SEQ_FINISHED) {
            pl_sched_remove(&e->sched, l->members[i]);
            live = 1;
        }
        pl_seq_free(l->members[i]);
    }

    return live;
}


void
pl_engine_close(pl_engine_t *e, pl_conn_t *c)
{
    pl_seq_t  *s, *next;
    int        aborted = 0;

    for (s = c->seqs_head; s; s = next) {
        next = s->conn_next;
        aborted += pl_engine_free_group(e, s);
    }

    if (aborted) {
        pl_log(PL_LOG_INFO, "worker %u: %d requests aborted, their blocks "
               "freed", c->worker_id, aborted);
    }

    if (c->fd >= 0) {
        epoll_ctl(e->ep, EPOLL_CTL_DEL, c->fd, NULL);
    }
    if (c->attached) {
        epoll_ctl(e->ep, EPOLL_CTL_DEL, c->sub_efd, NULL);
        e->totals.workers--;
    }

    if (c->prev) {
        c->prev->next = c->next;
    } else {
        e->conns = c->next;
    }
    if (c->next) {
        c->next->prev = c->prev;
    }

    pl_ipc_close(c);
}


static void
pl_engine_reap(pl_engine_t *e)
{
    pl_conn_t  *c, *next;
    uint64_t    now = pl_now_ms();

    if (e->evicted) {
        pl_log(PL_LOG_WARN, "%u connections closed before their attach "
               "to make room (at most %d wait for theirs)", e->evicted,
               PL_IPC_MAX_PENDING);
        e->evicted = 0;
    }

    for (c = e->conns; c; c = next) {
        next = c->next;

        if (!c->attached && !c->dead && now > c->deadline_ms) {
            pl_log(PL_LOG_WARN, "connection %u: no attach within %d ms",
                   c->worker_id, PL_IPC_ATTACH_TIMEOUT);
            c->dead = 1;
        }

        if (c->dead) {
            pl_engine_close(e, c);
        }
    }
}


/* ---- one iteration ---- */


static int
pl_engine_is_eos(const pl_engine_t *e, int32_t t)
{
    uint32_t  i;

    for (i = 0; i < e->identity.n_eos; i++) {
        if (e->identity.eos_ids[i] == t) {
            return 1;
        }
    }

    return 0;
}


static int
pl_engine_is_stop_id(const pl_seq_t *s, int32_t t)
{
    uint32_t  i;

    for (i = 0; i < s->sampling.n_stop_ids; i++) {
        if (s->sampling.stop_ids[i] == t) {
            return 1;
        }
    }

    return 0;
}


/* eos (unless ignored) and the request's stop ids end it, but only once
   min_tokens are out: the sampler masks them before that. */
static int
pl_engine_stop_reason(const pl_engine_t *e, const pl_seq_t *s, int32_t t)
{
    if (pl_seq_generated(s) >= s->sampling.min_tokens
        && ((!s->ignore_eos && pl_engine_is_eos(e, t))
            || pl_engine_is_stop_id(s, t)))
    {
        return PL_FINISH_STOP;
    }

    if (pl_seq_generated(s) >= s->max_tokens
        || s->n_tokens >= e->max_model_len)
    {
        return PL_FINISH_LENGTH;
    }

    return 0;
}


static void
pl_engine_forward_failed(pl_engine_t *e, const char *err)
{
    pl_seq_t  *failed[e->sched.n_entries > 0 ? e->sched.n_entries : 1];
    char       msg[600];
    int        i, n = e->sched.n_entries;

    pl_log(PL_LOG_ERROR, "model forward failed: %s", err);
    snprintf(msg, sizeof(msg), "the model failed: %s", err);

    for (i = 0; i < n; i++) {
        failed[i] = e->sched.entries[i].seq;
    }
    for (i = 0; i < n; i++) {
        pl_engine_fail(e, failed[i], 500, msg);
    }
}


/* Room for one more token's logprobs: 0, or -1 when out of memory. */
static int
pl_engine_logprobs_room(pl_seq_t *s)
{
    pl_logprobs_t  *lp;
    int             cap;

    if (pl_seq_generated(s) < s->logprobs_cap) {
        return 0;
    }

    cap = s->logprobs_cap ? s->logprobs_cap * 2 : 16;
    cap = cap < s->max_tokens ? cap : s->max_tokens;

    lp = realloc(s->logprobs, (size_t) cap * sizeof(pl_logprobs_t));
    if (lp == NULL) {
        return -1;
    }

    s->logprobs = lp;
    s->logprobs_cap = cap;

    return 0;
}


/* Queue s's next draw, from logits row row, in the sampler's batch,
   restricted to the tokens its grammar allows there, if it has one: the
   mask of its state is cached with the state, or computed here, on the
   host, after the forward pass was queued on the device (pl_engine_iterate
   queues draws after pl_runner_forward), so on CUDA it overlaps the
   forward; -1 when out of memory. */
static int
pl_engine_queue(pl_engine_t *e, pl_seq_t *s, int row)
{
    pl_history_t     h = { s->tokens, s->n_prompt, s->n_tokens };
    const uint64_t  *mask;
    int              i;

    i = pl_sampler_add(&e->sampler, row, &s->sampling, &h,
                       pl_seq_stream_seed(s->leader->seed, s->index),
                       (uint64_t) pl_seq_generated(s));
    if (i < 0) {
        return -1;
    }
    e->draws[i] = s;
    if (s->grammar != NULL) {
        mask = pl_grammar_mask(s->grammar->g, e->grammars.vocab,
                               s->grammar_state);
        if (mask == NULL || pl_sampler_restrict(&e->sampler, i, mask) != 0) {
            return -1;
        }
    }

    return 0;
}


/* Fork leader l, whose prompt has just run, into its best_of members. */
static int
pl_engine_fork(pl_engine_t *e, pl_seq_t *l)
{
    pl_seq_t  *c;

    while (l->n_members < l->best_of) {
        c = pl_seq_fork(l, l->n_members);
        if (c == NULL) {
            return -1;
        }
        if (pl_bm_fork(&e->bm, &l->blocks, &c->blocks) != 0) {
            pl_seq_free(c);
            return -1;
        }
        l->members[l->n_members++] = c;
        pl_sched_fork(&e->sched, c);
    }

    return 0;
}


/* Queue the draws from s's row of logits: one for s, or, at a
   request's first sample, one for each member of the group it forks
   into (every member reads the same row). */
static void
pl_engine_queue_row(pl_engine_t *e, pl_seq_t *s, int row)
{
    int  i;

    if (s->n_members >= s->best_of) {
        if (pl_engine_queue(e, s, row) != 0) {
            pl_engine_fail(e, s, 503, "the engine is out of memory");
        }
        return;
    }

    if (pl_engine_fork(e, s) != 0) {
        pl_engine_fail(e, s, 503, "the engine is out of memory");
        return;
    }

    for (i = 0; i < s->n_members; i++) {
        if (pl_engine_queue(e, s->members[i], row) != 0) {
            pl_engine_fail(e, s, 503, "the engine is out of memory");
            return;
        }
    }
}


/* Every queued draw at once: on the backend, where the logits are, or on
   the host when tensor parallelism gathered them there. */
static void
pl_engine_draw(pl_engine_t *e, const pl_logits_t *logits)
{
    pl_sampler_t  *sm = &e->sampler;

    if (sm->n_reqs == 0) {
        return;
    }

    if (logits->on_host) {
        pl_sample_host(e->tokens, logits->data, e->mc->vocab_size, sm->reqs,
                       sm->n_reqs, sm->adjust, sm->n_adjust, sm->masks,
                       sm->n_masks);
    } else {
        e->be->sample(e->be, e->tokens, logits->data, logits->dtype,
                      e->mc->vocab_size, sm->reqs, sm->n_reqs, sm->adjust,
                      sm->n_adjust, sm->masks, sm->n_masks);
    }
}


/* Row row of logits on the host; the draws of one row come one after
   the other, so the last row brought down is kept. */
const float *
pl_engine_host_row(pl_engine_t *e, const pl_logits_t *logits, int row)
{
    if (e->host_row != row) {
        e->host_row_data = pl_runner_host_row(&e->runner, e->be, logits,
                                              row);
        e->host_row = row;
    }

    return e->host_row_data;
}


/* The log-probabilities of s drawing t from row, where the request asks
   for them, and its cumulative logprob when best_of ranks the group;
   -1 when its logprobs have no memory. */
static int
pl_engine_logprobs(pl_engine_t *e, pl_seq_t *s, int32_t t,
    const pl_logits_t *logits, int row)
{
    int             ranks = s->leader->best_of > s->leader->n_return;
    pl_logprobs_t  *lp, chosen;
    const float    *host;

    if (!s->sampling.logprobs && !ranks) {
        return 0;
    }

    lp = &chosen;
    if (s->sampling.logprobs) {
        if (pl_engine_logprobs_room(s) != 0) {
            return -1;
        }
        lp = &s->logprobs[pl_seq_generated(s)];
    }

    host = pl_engine_host_row(e, logits, row);
    pl_sampler_logprobs(&e->sampler, host, t,
                        s->sampling.logprobs ? s->sampling.logprobs - 1 : 0,
                        lp);

    if (ranks) {
        s->cum_logprob += lp->logprob;
    }

    return 0;
}


/* s's grammar follows t: 0; or -1 when t leaves the language, which a
   draw does only when its mask allowed nothing (min_tokens keeping eos
   out where the grammar allows only eos): s ends there with STOP, t left
   out, its output complete; or, out of memory, it fails. */
static int
pl_engine_grammar_step(pl_engine_t *e, pl_seq_t *s, int32_t t)
{
    int32_t  next = pl_grammar_advance(s->grammar->g, e->grammars.vocab,
                                       s->grammar_state, t);

    if (next >= 0) {
        s->grammar_state = next;
        return 0;
    }

    if (pl_grammar_accepts(s->grammar->g, s->grammar_state)) {
        pl_engine_finish(e, s, PL_FINISH_STOP);
    } else {
        pl_engine_fail(e, s, 503, "the engine is out of memory");
    }

    return -1;
}


/* s drew t from row: append it; s finishes when it stops.  Nothing when
   its request failed while the draws were queued. */
static void
pl_engine_step(pl_engine_t *e, pl_seq_t *s, int32_t t,
    const pl_logits_t *logits, int row)
{
    int  reason;

    if (s->finish_reason != 0) {
        return;
    }

    if (s->grammar != NULL && pl_engine_grammar_step(e, s, t) != 0) {
        return;
    }

    if (pl_engine_logprobs(e, s, t, logits, row) != 0) {
        pl_engine_fail(e, s, 503, "the engine is out of memory");
        return;
    }
    pl_seq_append(s, t);
    e->totals.generation_tokens_total++;

    reason = pl_engine_stop_reason(e, s, t);
    if (reason) {
        pl_engine_finish(e, s, reason);
    }
}


/* The requests the plan runs for the first time: their queue time ends
   now, and the prompt tokens their admission found in the prefix cache
   (computed before the plan runs) are their cached tokens. */
static void
pl_engine_mark_scheduled(const pl_sched_entry_t *plan, int n)
{
    uint64_t   now = pl_now_us();
    pl_seq_t  *l;
    int        i;

    for (i = 0; i < n; i++) {
        l = plan[i].seq->leader;
        if (l->t_scheduled == 0) {
            l->t_scheduled = now;
            l->cached_tokens = l->n_computed;
        }
    }
}


/* The requests whose first token this iteration drew. */
static void
pl_engine_mark_first_tokens(pl_seq_t *const *planned, int n)
{
    uint64_t   now = pl_now_us();
    pl_seq_t  *l;
    int        i;

    for (i = 0; i < n; i++) {
        l = planned[i]->leader;
        if (l->t_first_token == 0 && pl_seq_generated(planned[i]) > 0) {
            l->t_first_token = now;
        }
    }
}


/* The prompt logprob of s's token at position pos + 1, from row. */
static void
pl_engine_prompt_lp_at(pl_engine_t *e, pl_seq_t *s, int pos,
    const pl_logits_t *logits, int row)
{
    const float  *host = pl_engine_host_row(e, logits, row);

    pl_sampler_logprobs(&e->sampler, host, s->tokens[pos + 1],
                        s->prompt_lp_top, &s->prompt_lp[pos + 1]);
}


/*
 * The prompt logprobs s, entry i of the n just run, owed and this
 * iteration's rows give: its extra rows (the runner's), then its own row
 * when the chunk ended before the prompt's last token.  Its KV now covers
 * positions up to n_computed - 1, whose rows predict the tokens up to
 * n_computed: those are no longer owed.
 */
static void
pl_engine_prompt_logprobs(pl_engine_t *e, pl_seq_t *s, int i, int n,
    const pl_logits_t *logits)
{
    pl_runner_t  *r = &e->runner;
    int           k, last = s->n_computed - 1;

    for (k = 0; k < r->extra_count[i]; k++) {
        pl_engine_prompt_lp_at(e, s, r->extra_pos[i] + k, logits,
                               n + r->extra_start[i] + k);
    }

    if (last <= s->n_prompt - 2 && last + 1 >= s->prompt_lp_next) {
        pl_engine_prompt_lp_at(e, s, last, logits, i);
    }

    k = s->n_computed < s->n_prompt - 1 ? s->n_computed : s->n_prompt - 1;
    s->prompt_lp_next = k + 1 > s->prompt_lp_next ? k + 1
                                                  : s->prompt_lp_next;
}


static void
pl_engine_iterate(pl_engine_t *e)
{
    pl_scheduler_t  *sc = &e->sched;
    pl_seq_t        *planned[sc->max_num_seqs];
    pl_logits_t      logits;
    int              i, n;
    pl_seq_t        *s;
    char             err[512];

    n = pl_sched_step(sc);
    pl_engine_mark_scheduled(sc->entries, n);

    /* copies and swaps first, even when nothing runs: a swap-out must
       land before the next plan reuses its blocks */
    if (pl_runner_moves(e->model, &e->bm, e->host_pool, err, sizeof(err))
        != 0)
    {
        pl_engine_forward_failed(e, err);
        return;
    }
    if (n == 0) {
        return;
    }

    pl_runner_build(&e->runner, &e->bm, sc->entries, n);
    if (pl_runner_forward(&e->runner, e->model, &logits, err, sizeof(err))
        != 0)
    {
        pl_engine_forward_failed(e, err);
        return;
    }

    pl_sched_complete(sc);
    e->totals.iterations++;

    /* finishing a sequence voids the plan: walk a copy of it */
    for (i = 0; i < n; i++) {
        planned[i] = sc->entries[i].seq;
    }

    e->host_row = -1;
    for (i = 0; i < n; i++) {
        if (pl_seq_owes_prompt_lp(planned[i])) {
            pl_engine_prompt_logprobs(e, planned[i], i, n, &logits);
        }
    }

    /* one draw per sequence whose tokens are all computed, all drawn in
       one call, then appended in the plan's order; beam search reads its
       rows itself */
    pl_sampler_reset(&e->sampler);
    for (i = 0; i < n; i++) {
        s = planned[i];
        if (s->state == PL_SEQ_FINISHED || s->n_computed < s->n_tokens
            || s->leader->beam != NULL)
        {
            continue;       /* failed, a prompt chunk, or a beam */
        }
        pl_engine_queue_row(e, s, i);
    }

    pl_engine_draw(e, &logits);

    e->host_row = -1;
    for (i = 0; i < e->sampler.n_reqs; i++) {
        pl_engine_step(e, e->draws[i], e->tokens[i], &logits,
                       e->sampler.reqs[i].row);
    }

    pl_engine_beam_rows(e, planned, n, &logits);
    pl_engine_mark_first_tokens(planned, n);
}


/* ---- output ---- */


/* s's FINISH as choice index: a normal end carries its tokens and the
   request's cache use and queue time, ABORT and ERROR carry none. */
static int
pl_engine_send_finish(pl_conn_t *c, const pl_seq_t *s, uint32_t index,
    uint32_t reason)
{
    const pl_seq_t   *l = s->leader;
    int               ended = reason == PL_FINISH_STOP
                              || reason == PL_FINISH_LENGTH;
    pl_rec_finish_t   r = {
        .req_id = s->req_id,
        .reason = reason,
        .prompt_tokens = (uint32_t) s->n_prompt,
        .index = index,
    };

    if (ended) {
        r.completion_tokens = (uint32_t) pl_seq_generated(s);
        r.cum_logprob = l->beam ? s->cum_logprob : 0;
        r.cached_tokens = (uint32_t) l->cached_tokens;
        r.queue_time_us = l->t_scheduled ? l->t_scheduled - l->t_arrival
                                         : 0;
    }

    return pl_ipc_send_finish(c, &r);
}


/* Send member s's prompt with its logprobs, once the leader has them
   all: 0 when sent (or none are asked), 1 while they are owed, -1 when
   the ring filled up. */
static int
pl_engine_flush_prompt(pl_conn_t *c, pl_seq_t *s, uint32_t index)
{
    const pl_seq_t  *l = s->leader;
    uint32_t         top = (uint32_t) l->prompt_lp_top, n;
    uint32_t         max = pl_ipc_max_tokens_per_record(c, 1, top,
                                                        PL_TOKENS_PROMPT);

    if (l->prompt_lp == NULL) {
        return 0;
    }
    if (pl_seq_owes_prompt_lp(l)) {
        return 1;
    }

    while (s->prompt_sent < s->n_prompt) {
        n = (uint32_t) (s->n_prompt - s->prompt_sent);
        n = n < max ? n : max;
        if (pl_ipc_send_tokens(c, s->req_id, index,
                               s->tokens + s->prompt_sent, n,
                               l->prompt_lp + s->prompt_sent, top,
                               PL_TOKENS_PROMPT) != 0)
        {
            return -1;
        }
        s->prompt_sent += (int) n;
    }

    return 0;
}


/* Send member s's pending tokens, and its FINISH once it stopped
   normally; -1 when the ring filled up. */
static int
pl_engine_flush_seq(pl_conn_t *c, pl_seq_t *s)
{
    int       want_lp = s->logprobs != NULL;
    uint32_t  n_top = want_lp ? (uint32_t) s->sampling.logprobs - 1 : 0;
    uint32_t  max = pl_ipc_max_tokens_per_record(c, want_lp, n_top, 0), n;
    uint32_t  index = (uint32_t) (s->leader->index_base + s->out_index);
    int       rc = pl_engine_flush_prompt(c, s, index);

    if (rc != 0) {
        return rc < 0 ? -1 : 0;
    }

    while (s->n_prompt + s->n_sent < s->n_tokens) {
        n = (uint32_t) (s->n_tokens - s->n_prompt - s->n_sent);
        n = n < max ? n : max;
        if (pl_ipc_send_tokens(c, s->req_id, index,
                               s->tokens + s->n_prompt + s->n_sent, n,
                               want_lp ? s->logprobs + s->n_sent : NULL,
                               n_top, 0) != 0)
        {
            return -1;
        }
        s->n_sent += (int) n;
    }

    if ((s->finish_reason == PL_FINISH_STOP
         || s->finish_reason == PL_FINISH_LENGTH) && !s->finish_sent)
    {
        if (pl_engine_send_finish(c, s, index, (uint32_t) s->finish_reason)
            != 0)
        {
            return -1;
        }
        s->finish_sent = 1;
    }

    return 0;
}


/*
 * Send what request l has pending: its ERROR first, then each returned
 * member's tokens and FINISH (nothing while best_of still ranks), and
 * after an abort or error one FINISH of that reason for the request.
 * 1 when everything is out, 0 when more is to come, -1 when the ring
 * filled up.
 */
static int
pl_engine_flush_group(pl_conn_t *c, pl_seq_t *l)
{
    int  i, all = l->n_finished == l->n_members;

    if (l->silent) {
        return all;
    }

    if (l->error && !l->error_sent) {
        if (pl_ipc_send_error(c, l->req_id, l->error_status, l->error) != 0) {
            return -1;
        }
        l->error_sent = 1;
    }

    for (i = 0; i < l->n_members && l->fail_reason != PL_FINISH_ABORT; i++) {
        if (l->members[i]->out_index >= 0
            && pl_engine_flush_seq(c, l->members[i]) != 0)
        {
            return -1;
        }
    }

    if (!all) {
        return 0;
    }

    if (l->fail_reason) {
        if (!l->fail_sent
            && pl_engine_send_finish(c, l, 0, (uint32_t) l->fail_reason)
               != 0)
        {
            return -1;
        }
        l->fail_sent = 1;
    }

    return 1;
}


static void
pl_engine_flush(pl_engine_t *e)
{
    pl_conn_t  *c;
    pl_seq_t   *s, *next;
    int         rc;

    e->output_stuck = 0;

    for (c = e->conns; c; c = c->next) {
        if (!c->attached || c->dead) {
            continue;
        }

        for (s = c->seqs_head; s; s = next) {
            next = s->conn_next;
            rc = pl_engine_flush_group(c, s);
            if (rc < 0) {
                e->output_stuck = 1;
                break;
            }
            if (rc > 0) {
                pl_conn_unlink(c, s);
                pl_engine_free_group(e, s);
            }
        }
    }
}


/* Wake every worker that got records this pass, each at most once. */
static void
pl_engine_ring(pl_engine_t *e)
{
    pl_conn_t  *c;

    for (c = e->conns; c; c = c->next) {
        if (c->attached && !c->dead) {
            pl_ipc_flush_doorbell(c);
        }
    }
}


/* ---- the loop ---- */


static void
pl_engine_events(pl_engine_t *e)
{
    struct epoll_event   ev[PL_MAX_EVENTS];
    struct signalfd_siginfo  si;
    pl_watch_t          *w;
    int                  i, n, timeout;

    timeout = pl_sched_has_work(&e->sched) ? 0
              : e->output_stuck ? 1 : PL_IDLE_TIMEOUT_MS;

    n = epoll_wait(e->ep, ev, PL_MAX_EVENTS, timeout);

    for (i = 0; i < n; i++) {
        w = ev[i].data.ptr;

        switch (w->kind) {
        case PL_WATCH_LISTEN:
            pl_engine_accept(e);
            break;
        case PL_WATCH_SIGNAL:
            if (read(e->sfd, &si, sizeof(si)) == (ssize_t) sizeof(si)) {
                pl_log(PL_LOG_INFO, "signal %u: stopping", si.ssi_signo);
                e->stop = 1;
            }
            break;
        case PL_WATCH_SOCKET:
            pl_engine_socket_event(e, w->conn, ev[i].events);
            break;
        case PL_WATCH_DOORBELL:
            pl_ipc_doorbell_clear(w->conn);
            break;
        }
    }
}


static void
pl_engine_pass(pl_engine_t *e)
{
    pl_conn_t  *c;

    pl_engine_events(e);

    for (c = e->conns; c; c = c->next) {
        if (c->attached && !c->dead) {
            pl_engine_drain(e, c);
        }
    }

    pl_engine_reap(e);
    pl_engine_expire_waiting(e);

    if (pl_sched_has_work(&e->sched)) {
        pl_engine_iterate(e);
    }

    pl_engine_flush(e);

    /* the state first, then the doorbells: a worker woken here answers
       its client at once, and that client may ask any worker how the
       engine stands */
    pl_engine_publish(e);
    pl_engine_publish_map(e);
    pl_engine_ring(e);

    pl_engine_log_summary(e);
}



int
pl_engine_main(const pl_engine_config_t *cfg)
{
    static pl_engine_t  engine;
    pl_engine_t        *e = &engine;
    int                 rc = 0;

    e->cfg = *cfg;
    e->lfd = e->sfd = e->ep = e->spare_fd = -1;

    if (pl_engine_start(e) != 0) {
        rc = 1;
    } else {
        pl_log(PL_LOG_INFO, "ready");
        while (!e->stop) {
            pl_engine_pass(e);
        }
        pl_log(PL_LOG_INFO, "stopped after %llu iterations, %llu requests",
               (unsigned long long) e->totals.iterations,
               (unsigned long long) e->totals.requests_total);
    }

    pl_engine_shutdown(e);

    return rc;
}

