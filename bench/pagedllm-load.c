/*
 * pagedllm-load: a serving benchmark client.
 *
 * Keeps C connections busy against an OpenAI-style /v1/completions
 * endpoint, each sending streaming requests with a prompt of P token ids
 * and max_tokens G (ignore_eos), until R requests have completed.  It
 * counts SSE events as tokens and reports throughput, time to first token
 * and time per output token.  One thread, non-blocking sockets, poll():
 * the client must never be the bottleneck of what it measures.
 *
 *   pagedllm-load [-h host] [-p port] [-c concurrency] [-n requests]
 *                 [-P prompt_tokens] [-G gen_tokens] [-V vocab]
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LOAD_BUF  65536

typedef struct {
    int       fd;
    char     *req;
    size_t    req_len;
    size_t    sent;
    char      tail[16];       /* last bytes of the previous read */
    size_t    ntail;
    int       tokens;
    int       done;
    double    t_start;
    double    t_first;
    double    t_last;
} load_conn_t;

typedef struct {
    double   *ttft;
    double   *tpot;
    long      n;
    long      tokens;
    long      errors;
} load_stats_t;


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}


static int
cmp_double(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


static char *
make_request(const char *host, int port, int prompt, int gen, int vocab,
    unsigned seed, size_t *len)
{
    size_t   cap = 256 + (size_t) prompt * 8, n = 0;
    char    *body = malloc(cap), *req;
    int      i;

    n += snprintf(body + n, cap - n, "{\"prompt\":[");
    for (i = 0; i < prompt; i++) {
        seed = seed * 1103515245u + 12345u;
        n += snprintf(body + n, cap - n, "%s%u", i ? "," : "",
                      (seed >> 8) % (unsigned) vocab);
    }
    n += snprintf(body + n, cap - n, "],\"max_tokens\":%d,\"ignore_eos\":true,"
                  "\"temperature\":0,\"stream\":true}", gen);

    req = malloc(n + 256);
    *len = snprintf(req, n + 256, "POST /v1/completions HTTP/1.1\r\n"
                    "Host: %s:%d\r\nContent-Type: application/json\r\n"
                    "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                    host, port, n, body);
    free(body);
    return req;
}


static int
conn_open(load_conn_t *c, const struct sockaddr_in *sa)
{
    int  one = 1;

    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0) {
        return -1;
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(c->fd, (const struct sockaddr *) sa, sizeof(*sa)) < 0
        && errno != EINPROGRESS)
    {
        close(c->fd);
        return -1;
    }
    c->sent = 0;
    c->ntail = 0;
    c->tokens = 0;
    c->done = 0;
    c->t_start = now();
    c->t_first = 0;
    return 0;
}


/* Count "data: {" events and spot "data: [DONE]", also across reads. */
static void
conn_scan(load_conn_t *c, const char *buf, size_t n)
{
    static const char  ev[] = "data: {", fin[] = "data: [DONE]";
    char               scan[LOAD_BUF + 16];
    size_t             len = c->ntail + n, i;
    double             t = now();

    memcpy(scan, c->tail, c->ntail);
    memcpy(scan + c->ntail, buf, n);

    for (i = 0; i + sizeof(ev) - 1 <= len; i++) {
        if (memcmp(scan + i, ev, sizeof(ev) - 1) == 0
            && i + sizeof(ev) - 1 > c->ntail)
        {
            if (c->tokens++ == 0) {
                c->t_first = t;
            }
            c->t_last = t;
        }
        if (i + sizeof(fin) - 1 <= len
            && memcmp(scan + i, fin, sizeof(fin) - 1) == 0
            && i + sizeof(fin) - 1 > c->ntail)
        {
            c->done = 1;
        }
    }

    c->ntail = len < sizeof(c->tail) ? len : sizeof(c->tail);
    memcpy(c->tail, scan + len - c->ntail, c->ntail);
}


static void
conn_finish(load_conn_t *c, load_stats_t *st, int gen)
{
    close(c->fd);
    c->fd = -1;

    if (!c->done || c->tokens < gen) {
        st->errors++;
        return;
    }

    st->ttft[st->n] = c->t_first - c->t_start;
    st->tpot[st->n] = c->tokens > 1
                      ? (c->t_last - c->t_first) / (c->tokens - 1) : 0;
    st->n++;
    st->tokens += c->tokens;
}


static double
percentile(double *v, long n, double p)
{
    qsort(v, n, sizeof(double), cmp_double);
    return n ? v[(long) (p * (n - 1) + 0.5)] : 0;
}


int
main(int argc, char **argv)
{
    const char          *host = "127.0.0.1";
    int                  port = 8080, conc = 16, total = 64, prompt = 128;
    int                  gen = 128, vocab = 512, opt, i, started = 0;
    struct sockaddr_in   sa;
    load_conn_t         *conns;
    struct pollfd       *pfd;
    load_stats_t         st = { 0 };
    char                 buf[LOAD_BUF];
    double               t0, wall, mean_tpot = 0;

    while ((opt = getopt(argc, argv, "h:p:c:n:P:G:V:")) != -1) {
        switch (opt) {
        case 'h': host = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'c': conc = atoi(optarg); break;
        case 'n': total = atoi(optarg); break;
        case 'P': prompt = atoi(optarg); break;
        case 'G': gen = atoi(optarg); break;
        case 'V': vocab = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-h host] [-p port] [-c concurrency] "
                    "[-n requests] [-P prompt_tokens] [-G gen_tokens] "
                    "[-V vocab]\n", argv[0]);
            return 2;
        }
    }

    if (conc < 1 || total < 1 || prompt < 1 || gen < 1 || vocab < 1) {
        fprintf(stderr, "pagedllm-load: counts must be positive\n");
        return 2;
    }
    if (conc > total) {
        conc = total;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "pagedllm-load: bad IPv4 address \"%s\"\n", host);
        return 2;
    }

    conns = calloc(conc, sizeof(*conns));
    pfd = calloc(conc, sizeof(*pfd));
    st.ttft = calloc(total, sizeof(double));
    st.tpot = calloc(total, sizeof(double));

    t0 = now();

    for (i = 0; i < conc; i++) {
        conns[i].req = make_request(host, port, prompt, gen, vocab,
                                    (unsigned) i + 1, &conns[i].req_len);
        if (conn_open(&conns[i], &sa) != 0) {
            perror("pagedllm-load: connect");
            return 1;
        }
        started++;
    }

    while (st.n + st.errors < total) {
        for (i = 0; i < conc; i++) {
            pfd[i].fd = conns[i].fd;
            pfd[i].events = conns[i].fd < 0 ? 0
                            : conns[i].sent < conns[i].req_len ? POLLOUT
                            : POLLIN;
            pfd[i].revents = 0;
        }

        if (poll(pfd, conc, 60000) <= 0) {
            fprintf(stderr, "pagedllm-load: no progress for 60 s\n");
            return 1;
        }

        for (i = 0; i < conc; i++) {
            load_conn_t  *c = &conns[i];
            ssize_t       n;

            if (c->fd < 0 || pfd[i].revents == 0) {
                continue;
            }

            if (c->sent < c->req_len) {
                n = send(c->fd, c->req + c->sent, c->req_len - c->sent,
                         MSG_NOSIGNAL);
                if (n < 0 && errno != EAGAIN) {
                    conn_finish(c, &st, gen);
                } else if (n > 0) {
                    c->sent += n;
                }
            } else {
                n = recv(c->fd, buf, sizeof(buf), 0);
                if (n > 0) {
                    conn_scan(c, buf, n);
                    if (!c->done) {
                        continue;
                    }
                } else if (n < 0 && errno == EAGAIN) {
                    continue;
                }
                conn_finish(c, &st, gen);
            }

            if (c->fd < 0 && started < total) {
                if (conn_open(c, &sa) != 0) {
                    perror("pagedllm-load: connect");
                    return 1;
                }
                started++;
            }
        }
    }

    wall = now() - t0;

    for (i = 0; i < st.n; i++) {
        mean_tpot += st.tpot[i];
    }
    mean_tpot = st.n ? mean_tpot / st.n : 0;

    printf("concurrency %d, requests %ld ok / %ld failed, prompt %d, "
           "generated %d\n", conc, st.n, st.errors, prompt, gen);
    printf("wall %.3f s, output %.1f tokens/s, total %.1f tokens/s\n",
           wall, st.tokens / wall, (st.tokens + (double) st.n * prompt) / wall);
    printf("ttft p50 %.2f ms, p99 %.2f ms; tpot mean %.3f ms\n",
           percentile(st.ttft, st.n, 0.5) * 1e3,
           percentile(st.ttft, st.n, 0.99) * 1e3, mean_tpot * 1e3);

    return st.errors ? 1 : 0;
}
