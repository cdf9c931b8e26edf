/*
 * conn.c: one HTTP/1.1 connection of pagedllm-load, one request on it.
 *
 * A connection is non-blocking and driven by the run loop's poll(): the
 * request is sent as the socket takes it, then what recv() returns is fed
 * to the HTTP reader (http.c); a 200 streamed body goes on to the SSE
 * reader, whose events set the request's first token, its end at [DONE]
 * and its token counts from the usage event.  Any other body is kept
 * whole: an error's message, a beam search's one JSON response, a
 * /metrics page.  The target (address, Host header, path) is resolved
 * once, and the blocking GET of /v1/models at set-up uses the same
 * connection code.
 */

#include "client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOAD_BUF  65536


/* ---- the target ------------------------------------------------------ */

int
load_target_set(load_target_t *t, const char *host, const char *port,
    const char *path)
{
    struct addrinfo   hints, *ai;

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;

    if (strlen(host) >= sizeof(t->host) || strlen(path) >= sizeof(t->path)
        || getaddrinfo(host, port, &hints, &ai) != 0)
    {
        return -1;
    }

    memcpy(&t->sa, ai->ai_addr, ai->ai_addrlen);
    t->salen = ai->ai_addrlen;
    freeaddrinfo(ai);

    snprintf(t->host, sizeof(t->host), "%s", host);
    snprintf(t->hostport, sizeof(t->hostport), "%s:%s", host, port);
    snprintf(t->path, sizeof(t->path), "%s", path);
    return 0;
}


/* http://HOST[:PORT][/PATH] */
int
load_target_parse_url(load_target_t *t, const char *url)
{
    char         host[256], port[16] = "80";
    const char  *p, *slash, *colon;
    size_t       n;

    if (strncmp(url, "http://", 7) != 0) {
        return -1;
    }

    p = url + 7;
    slash = strchr(p, '/');
    if (slash == NULL) {
        slash = p + strlen(p);
    }
    colon = memchr(p, ':', slash - p);
    n = (colon ? colon : slash) - p;

    if (n == 0 || n >= sizeof(host)) {
        return -1;
    }
    memcpy(host, p, n);
    host[n] = '\0';

    if (colon) {
        n = slash - colon - 1;
        if (n == 0 || n >= sizeof(port)) {
            return -1;
        }
        memcpy(port, colon + 1, n);
        port[n] = '\0';
    }

    return load_target_set(t, host, port, *slash ? slash : "/");
}


static int
target_connect(const load_target_t *t)
{
    int  fd, one = 1;

    fd = socket(t->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    if (connect(fd, (const struct sockaddr *) &t->sa, t->salen) < 0
        && errno != EINPROGRESS)
    {
        close(fd);
        return -1;
    }
    return fd;
}


char *
load_http_request(const load_target_t *t, const char *method, const char *path,
    const char *body, size_t *len)
{
    size_t  blen = body ? strlen(body) : 0, cap = blen + 512;
    char   *req = load_xrealloc(NULL, cap);
    int     n;

    n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path,
                 t->hostport);
    if (body) {
        n += snprintf(req + n, cap - n, "Content-Type: application/json\r\n"
                      "Content-Length: %zu\r\n", blen);
    }
    n += snprintf(req + n, cap - n, "Connection: close\r\n\r\n");
    memcpy(req + n, body ? body : "", blen);
    *len = n + blen;
    return req;
}


/* ---- one connection -------------------------------------------------- */

load_conn_t *
load_conn_new(const load_target_t *t, char *req, size_t req_len)
{
    load_conn_t  *c = load_xrealloc(NULL, sizeof(*c));

    memset(c, 0, sizeof(*c));
    c->req = req;
    c->req_len = req_len;
    load_http_init(&c->http);
    c->fd = target_connect(t);
    if (c->fd < 0) {
        snprintf(c->error, sizeof(c->error), "connect: %s", strerror(errno));
        c->finished = 1;
    }
    return c;
}


void
load_conn_free(load_conn_t *c)
{
    if (c->fd >= 0) {
        close(c->fd);
    }
    free(c->req);
    free(c->body);
    free(c->reply);
    load_sse_free(&c->sse);
    free(c);
}


void
load_conn_fail(load_conn_t *c, const char *what)
{
    if (c->error[0] == '\0') {
        snprintf(c->error, sizeof(c->error), "%s", what);
    }
    c->finished = 1;
}


/* an error body's message: {"error": {"message": ...}} */
static void
error_message(const char *text, char *out, size_t size)
{
    json_t      *j = json_loads(text, JSON_DECODE_ANY, NULL);
    const char  *m = json_string_value(json_object_get(
                         json_object_get(j, "error"), "message"));

    snprintf(out, size, "%s", m ? m : text);
    json_decref(j);
}


static void
event_usage(load_conn_t *c, const char *p, size_t n)
{
    json_t  *j = json_loadb(p, n, JSON_ALLOW_NUL, NULL), *u;

    u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        c->rec.prompt_tokens = json_integer_value(
                                   json_object_get(u, "prompt_tokens"));
        c->rec.output_tokens = json_integer_value(
                                   json_object_get(u, "completion_tokens"));
        c->got_usage = 1;
    }
    json_decref(j);
}


/* a chat chunk: 1 when it carries text; choice 0's text is kept */
static int
event_chat_text(load_conn_t *c, const char *p, size_t n)
{
    json_t  *j = json_loadb(p, n, JSON_ALLOW_NUL, NULL), *ch, *text;
    size_t   len;

    ch = json_array_get(json_object_get(j, "choices"), 0);
    text = json_object_get(json_object_get(ch, "delta"), "content");
    len = json_is_string(text) ? json_string_length(text) : 0;

    if (len && json_integer_value(json_object_get(ch, "index")) == 0) {
        load_append(&c->reply, &c->reply_len, &c->reply_cap,
                    json_string_value(text), len);
    }
    json_decref(j);
    return len > 0;
}


static void
on_event(void *data, const char *p, size_t n)
{
    load_conn_t  *c = data;
    char          msg[400];
    int           token;

    if (n == 6 && memcmp(p, "[DONE]", 6) == 0) {
        c->got_done = 1;
        c->rec.end = c->t_read;
        return;
    }

    if (n > 9 && memcmp(p, "{\"error\":", 9) == 0) {
        char  *s = strndup(p, n);

        error_message(s, msg, sizeof(msg));
        free(s);
        snprintf(c->error, sizeof(c->error), "stream error: %s", msg);
        return;
    }

    if (memmem(p, n, "\"choices\":[]", 12) != NULL) {
        event_usage(c, p, n);
        return;
    }

    token = c->conv->history
            ? event_chat_text(c, p, n)
            : memmem(p, n, "\"text\":\"\"", 9) == NULL;

    if (token && c->rec.first == 0) {
        c->rec.first = c->t_read;
    }
}


static void
on_body(void *data, const char *p, size_t n)
{
    load_conn_t  *c = data;

    if (c->http.status == 200 && !c->is_metrics && !c->whole) {
        if (load_sse_feed(&c->sse, p, n, on_event, c) != 0) {
            load_conn_fail(c, "out of memory");
        }
        return;
    }
    load_append(&c->body, &c->body_len, &c->body_cap, p, n);
}


/* A beam search's one JSON response: its usage, choice 0's text (chat),
   and its end as both its first token and its last. */
static void
whole_response(load_conn_t *c)
{
    json_t  *j, *text;

    c->rec.first = c->rec.end = c->t_read;
    event_usage(c, c->body ? c->body : "", c->body_len);
    if (!c->got_usage) {
        load_conn_fail(c, "the response carried no usage");
        return;
    }

    j = json_loadb(c->body, c->body_len, JSON_ALLOW_NUL, NULL);
    text = json_object_get(json_object_get(json_array_get(
               json_object_get(j, "choices"), 0), "message"), "content");
    if (c->conv->history && json_is_string(text)) {
        load_append(&c->reply, &c->reply_len, &c->reply_cap,
                    json_string_value(text), json_string_length(text));
    }
    json_decref(j);
}


static void
conn_complete(load_conn_t *c)
{
    char  msg[400];

    c->finished = 1;

    if (c->is_metrics || c->error[0]) {
        return;
    }

    if (c->http.status != 200) {
        error_message(c->body ? c->body : "", msg, sizeof(msg));
        snprintf(c->error, sizeof(c->error), "HTTP %d: %s", c->http.status,
                 msg);
    } else if (c->whole) {
        whole_response(c);
    } else if (!c->got_done) {
        load_conn_fail(c, "the stream ended without [DONE]");
    } else if (!c->got_usage) {
        load_conn_fail(c, "the stream carried no usage");
    }
}


void
load_conn_io(load_conn_t *c, short revents)
{
    char     buf[LOAD_BUF], msg[128];
    ssize_t  n;
    int      rc;

    if (c->sent < c->req_len) {
        if (!(revents & (POLLOUT | POLLERR | POLLHUP))) {
            return;
        }
        n = send(c->fd, c->req + c->sent, c->req_len - c->sent,
                 MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN) {
            snprintf(msg, sizeof(msg), "%s: %s",
                     c->sent ? "send" : "connect", strerror(errno));
            load_conn_fail(c, msg);
        } else if (n > 0) {
            c->sent += n;
        }
        return;
    }

    n = recv(c->fd, buf, sizeof(buf), 0);
    c->t_read = load_now();

    if (n < 0) {
        if (errno != EAGAIN) {
            snprintf(msg, sizeof(msg), "recv: %s", strerror(errno));
            load_conn_fail(c, msg);
        }
        return;
    }

    rc = n ? load_http_feed(&c->http, buf, n, on_body, c)
           : load_http_eof(&c->http);

    if (rc == LOAD_HTTP_ERROR) {
        load_conn_fail(c, n ? "a malformed HTTP response"
                            : "the connection closed mid-response");
    } else if (rc == LOAD_HTTP_DONE) {
        conn_complete(c);
    }
}


/* ---- set-up ---------------------------------------------------------- */

/* GET path on the API's server, whole, blocking */
static char *
fetch(const load_conf_t *cf, const char *path, int *status)
{
    size_t          len;
    char           *req = load_http_request(&cf->api, "GET", path, NULL, &len);
    load_conn_t    *c = load_conn_new(&cf->api, req, len);
    struct pollfd   p;
    char           *body;
    double          deadline = load_now() + 10;

    c->is_metrics = 1;

    while (!c->finished && load_now() < deadline) {
        p.fd = c->fd;
        p.events = c->sent < c->req_len ? POLLOUT : POLLIN;
        p.revents = 0;
        if (poll(&p, 1, 1000) > 0) {
            load_conn_io(c, p.revents);
        }
    }

    *status = c->finished && c->error[0] == '\0' ? c->http.status : 0;
    if (*status == 0) {
        fprintf(stderr, "pagedllm-load: GET http://%s%s: %s\n",
                cf->api.hostport, path, c->error[0] ? c->error : "timeout");
    }
    body = c->body;
    c->body = NULL;
    load_conn_free(c);
    return body;
}


int
load_fetch_max_model_len(const load_conf_t *cf)
{
    int      status;
    char    *body = fetch(cf, "/v1/models", &status);
    json_t  *j = body ? json_loads(body, 0, NULL) : NULL;
    int      len;

    len = (int) json_integer_value(json_object_get(json_array_get(
              json_object_get(j, "data"), 0), "max_model_len"));
    json_decref(j);
    free(body);

    if (status == 200 && len <= 0) {
        fprintf(stderr, "pagedllm-load: /v1/models names no max_model_len; "
                "give --max-model-len\n");
    }
    return status == 200 ? len : 0;
}
