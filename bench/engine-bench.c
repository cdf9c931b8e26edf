/*
 * engine-bench: the engine's own throughput, without nginx.
 *
 * Attaches to pagedllm-engine's socket as an nginx worker does, then for
 * each batch size B submits B greedy requests at once (P random prompt
 * token ids, G generated tokens, ignore_eos) and waits for all of them.
 * Per batch it reports output tokens/s over the whole run, the mean time
 * to first token, and the decode step time (each request's time between
 * its first and last token over G - 1, averaged over requests), which at
 * B = 1 is the model's decode step as a client sees it.  "decode tok/s" is
 * the rate in the window where every request of the batch is decoding:
 * from the moment the last request got its first token (all prompts done)
 * to the moment the first request got its last one, tokens that arrived
 * in that window over its length — the steady decode throughput, without
 * the prefill iterations.
 *
 * With -g FILE (a grammar in the engine's EBNF subset, e.g. a JSON
 * Schema's from pagedllm-grammar --schema S --print) each batch runs twice
 * in the same run: unconstrained, then with every request constrained to
 * the grammar (structured output; min_tokens G keeps eos out, so only the
 * grammar's own end stops one early, and the tokens column says how many
 * came): the cost of the grammar masks at that batch size.
 *
 *   engine-bench -s SOCKET [-b 1,16,64] [-P prompt] [-G gen] [-V vocab]
 *                [-g grammar]
 */

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "pl_cli.h"
#include "pl_client.h"
#include "pl_proto.h"
#include "pl_ring.h"

#define BENCH_MAX_BATCH  1024
#define BENCH_RECBUF     (1 << 20)
#define BENCH_MAX_PROMPT 8192

/* a grammar every request of a constrained batch carries */
typedef struct {
    char      *text;
    uint32_t   len;
} bench_grammar_t;

typedef struct {
    int        fd;
    int        sub_efd;
    int        comp_efd;
    void      *region;
    pl_ring_t  sub;
    pl_ring_t  comp;
} bench_worker_t;

typedef struct {
    int        tokens;
    int        finished;
    double     t_first;
    double     t_last;
} bench_req_t;

/* tokens that arrived at one time, for the decode window */
typedef struct {
    double     t;
    int        n;
} bench_arrival_t;

typedef struct {
    bench_arrival_t  *a;
    size_t            n;
    size_t            cap;
} bench_log_t;


static int
bench_attach(bench_worker_t *w, const char *path)
{
    pl_hello_t  hello;
    int         fds[3];

    w->fd = pl_client_connect(path);
    if (w->fd < 0) {
        fprintf(stderr, "engine-bench: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (pl_client_attach(w->fd, 60000, &hello, fds) != 0
        || hello.magic != PL_PROTO_MAGIC || hello.version != PL_PROTO_VERSION)
    {
        fprintf(stderr, "engine-bench: bad hello from the engine\n");
        return -1;
    }
    w->sub_efd = fds[1];
    w->comp_efd = fds[2];
    w->region = pl_client_map(&hello, fds[0], &w->sub, &w->comp);
    if (w->region == NULL) {
        perror("engine-bench: mmap");
        return -1;
    }
    return 0;
}


static void
bench_doorbell(bench_worker_t *w)
{
    uint64_t  one = 1;

    if (write(w->sub_efd, &one, sizeof(one)) != (ssize_t) sizeof(one)) {
        perror("engine-bench: doorbell");
    }
}


/* One greedy request; g: its grammar, or NULL. */
static int
bench_submit(bench_worker_t *w, uint64_t id, int prompt, int gen, int vocab,
    uint32_t *seed, const bench_grammar_t *g)
{
    static uint8_t   body[BENCH_MAX_PROMPT * sizeof(int32_t)
                          + PL_MAX_GRAMMAR];
    pl_rec_submit_t  r = { 0 };
    int32_t          ids[BENCH_MAX_PROMPT];
    uint32_t         len;
    int              i;

    if (prompt > BENCH_MAX_PROMPT) {
        return -1;
    }
    for (i = 0; i < prompt; i++) {
        *seed = *seed * 1103515245u + 12345u;
        ids[i] = (int32_t) ((*seed >> 8) % (uint32_t) vocab);
    }
    r.req_id = id;
    r.max_tokens = (uint32_t) gen;
    r.flags = g ? 0 : PL_SUBMIT_IGNORE_EOS;
    r.min_tokens = g ? (uint32_t) gen : 0;
    r.top_p = 1.0f;
    r.n_prompt = (uint32_t) prompt;
    r.n_grammar = g ? g->len : 0;

    len = (uint32_t) (prompt * sizeof(int32_t));
    memcpy(body, ids, len);
    if (g) {
        memcpy(body + len, g->text, g->len);
        len += g->len;
    }

    while (pl_ring_write(&w->sub, PL_REC_SUBMIT, &r, sizeof(r), body, len)
           != 0)
    {
        bench_doorbell(w);
        usleep(100);
    }
    return 0;
}


/* Reads every completion record there is; -1 on an engine error. */
static void
bench_log_add(bench_log_t *log, double t, int n)
{
    if (log->n == log->cap) {
        return;     /* sized for every record a batch can produce */
    }
    log->a[log->n].t = t;
    log->a[log->n].n = n;
    log->n++;
}


/* Tokens per second in (from, to], or 0 when the window is empty. */
static double
bench_log_rate(const bench_log_t *log, double from, double to)
{
    long    tokens = 0;
    size_t  i;

    if (to <= from) {
        return 0;
    }
    for (i = 0; i < log->n; i++) {
        if (log->a[i].t > from && log->a[i].t <= to) {
            tokens += log->a[i].n;
        }
    }
    return tokens / (to - from);
}


static int
bench_drain(bench_worker_t *w, bench_req_t *reqs, uint64_t base, int n,
    int *done, bench_log_t *log)
{
    static uint8_t    buf[BENCH_RECBUF];
    pl_rec_tokens_t   tk;
    pl_rec_finish_t   fin;
    uint32_t          type, len;
    uint64_t          k;
    double            t = bench_now_s();
    int               rc;

    while ((rc = pl_ring_read(&w->comp, &type, buf, sizeof(buf), &len)) == 1)
    {
        if (type == PL_REC_TOKENS) {
            memcpy(&tk, buf, sizeof(tk));
            k = tk.req_id - base;
            if (k < (uint64_t) n) {
                if (reqs[k].tokens == 0) {
                    reqs[k].t_first = t;
                }
                reqs[k].tokens += (int) tk.n;
                reqs[k].t_last = t;
                bench_log_add(log, t, (int) tk.n);
            }
        } else if (type == PL_REC_FINISH) {
            memcpy(&fin, buf, sizeof(fin));
            k = fin.req_id - base;
            if (k < (uint64_t) n && !reqs[k].finished) {
                reqs[k].finished = 1;
                (*done)++;
            }
        } else if (type == PL_REC_ERROR) {
            fprintf(stderr, "engine-bench: the engine refused a request: "
                    "%.*s\n", (int) (len - sizeof(pl_rec_error_t)),
                    (char *) buf + sizeof(pl_rec_error_t));
            return -1;
        }
    }
    return rc < 0 ? -1 : 0;
}


static int
bench_batch(bench_worker_t *w, int batch, int prompt, int gen, int vocab,
    uint64_t base, const bench_grammar_t *g)
{
    bench_req_t    *reqs = calloc(batch, sizeof(*reqs));
    struct pollfd   pfd = { w->comp_efd, POLLIN, 0 };
    uint32_t        seed = 12345u + (uint32_t) base;
    uint64_t        ev;
    double          t0, wall, ttft = 0, step = 0, from = 0, to = 1e300;
    long            tokens = 0;
    int             i, done = 0;
    bench_log_t     log = { 0 };

    log.cap = (size_t) batch * gen + batch;
    log.a = malloc(log.cap * sizeof(bench_arrival_t));
    if (reqs == NULL || log.a == NULL) {
        free(reqs);
        free(log.a);
        return -1;
    }

    t0 = bench_now_s();
    for (i = 0; i < batch; i++) {
        if (bench_submit(w, base + i, prompt, gen, vocab, &seed, g) != 0) {
            return -1;
        }
    }
    bench_doorbell(w);

    while (done < batch) {
        if (poll(&pfd, 1, 60000) <= 0) {
            fprintf(stderr, "engine-bench: no progress for 60 s\n");
            return -1;
        }
        if (read(w->comp_efd, &ev, sizeof(ev)) < 0 && errno != EAGAIN) {
            return -1;
        }
        if (bench_drain(w, reqs, base, batch, &done, &log) != 0) {
            return -1;
        }
    }
    wall = bench_now_s() - t0;

    for (i = 0; i < batch; i++) {
        tokens += reqs[i].tokens;
        ttft += reqs[i].t_first - t0;
        step += reqs[i].tokens > 1
                ? (reqs[i].t_last - reqs[i].t_first) / (reqs[i].tokens - 1)
                : 0;
        from = reqs[i].t_first > from ? reqs[i].t_first : from;
        to = reqs[i].t_last < to ? reqs[i].t_last : to;
    }
    printf("%-8d %-12s %-16.1f %-16.1f %-14.2f %-12.3f %ld\n", batch,
           g ? "grammar" : "none", tokens / wall,
           bench_log_rate(&log, from, to), ttft / batch * 1e3,
           step / batch * 1e3, tokens);
    free(log.a);
    free(reqs);
    return g || tokens == (long) batch * gen ? 0 : -1;
}


/* The grammar file's text into g: 0, or -1 with a message. */
static int
bench_grammar_load(const char *path, bench_grammar_t *g)
{
    FILE  *f = fopen(path, "rb");
    long   n;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0
        || n > PL_MAX_GRAMMAR || fseek(f, 0, SEEK_SET) != 0
        || (g->text = malloc((size_t) n)) == NULL
        || fread(g->text, 1, (size_t) n, f) != (size_t) n)
    {
        fprintf(stderr, "engine-bench: %s: unreadable, empty or over %d "
                "bytes\n", path, PL_MAX_GRAMMAR);
        if (f) {
            fclose(f);
        }
        return -1;
    }
    fclose(f);
    g->len = (uint32_t) n;

    return 0;
}


static const char  usage_text[] =
"usage: engine-bench -s SOCKET [-b 1,16,64] [-P PROMPT] [-G GEN] [-V VOCAB]\n"
"                    [-g GRAMMAR]\n"
"\n"
"Attaches to a running pagedllm-engine as a worker would and measures\n"
"greedy generation at each batch size, without nginx.\n"
"\n"
"  -s SOCKET    the engine's --listen socket\n"
"  -b LIST      batch sizes, comma separated (default 1,16,64)\n"
"  -P N         prompt tokens (default 128)\n"
"  -G N         generated tokens, at least 2 (default 128)\n"
"  -V N         the model's vocabulary, for random prompts (default 512)\n"
"  -g FILE      also run each batch with every request constrained to\n"
"               this grammar (the engine's EBNF subset)\n"
"  --help       this text\n"
"  --version    the name and version\n";


int
main(int argc, char **argv)
{
    const char      *sock = NULL;
    char            *list = "1,16,64", *tok;
    const char      *grammar = NULL;
    int              prompt = 128, gen = 128, vocab = 512, opt, b, rc = 0;
    uint64_t         base = 1;
    bench_worker_t   w;
    bench_grammar_t  g = { 0 };
    static const struct option  no_long[] = { { NULL, 0, NULL, 0 } };

    pl_cli_standard(argc, argv, "engine-bench", usage_text);
    opterr = 0;

    while ((opt = getopt_long(argc, argv, ":s:b:P:G:V:g:", no_long, NULL))
           != -1)
    {
        switch (opt) {
        case 's': sock = optarg; break;
        case 'b': list = optarg; break;
        case 'P': prompt = atoi(optarg); break;
        case 'G': gen = atoi(optarg); break;
        case 'V': vocab = atoi(optarg); break;
        case 'g': grammar = optarg; break;
        case ':':
            return pl_cli_error("engine-bench", "-%c needs a value", optopt);
        default:
            return optopt
                   ? pl_cli_error("engine-bench", "unknown option '-%c'",
                                  optopt)
                   : pl_cli_error("engine-bench", "unknown option '%s'",
                                  argv[optind - 1]);
        }
    }
    if (optind < argc) {
        return pl_cli_error("engine-bench", "unexpected argument '%s'",
                            argv[optind]);
    }
    if (sock == NULL || prompt < 1 || gen < 2 || vocab < 1) {
        return pl_cli_error("engine-bench", "-s SOCKET is required, -P and "
                            "-V at least 1, -G at least 2");
    }
    if ((grammar && bench_grammar_load(grammar, &g) != 0)
        || bench_attach(&w, sock) != 0)
    {
        return 1;
    }

    printf("prompt %d, generated %d, greedy\n", prompt, gen);
    printf("%-8s %-12s %-16s %-16s %-14s %-12s %s\n", "batch", "constraint",
           "output tok/s", "decode tok/s", "ttft mean ms", "step ms",
           "tokens");

    for (tok = strtok(list, ","); tok != NULL && rc == 0;
         tok = strtok(NULL, ","))
    {
        b = atoi(tok);
        if (b < 1 || b > BENCH_MAX_BATCH) {
            return pl_cli_error("engine-bench", "batch %s out of 1..%d", tok,
                                BENCH_MAX_BATCH);
        }
        rc = bench_batch(&w, b, prompt, gen, vocab, base, NULL);
        base += (uint64_t) b;
        if (rc == 0 && grammar) {
            rc = bench_batch(&w, b, prompt, gen, vocab, base, &g);
            base += (uint64_t) b;
        }
    }

    free(g.text);

    return rc == 0 ? 0 : 1;
}
