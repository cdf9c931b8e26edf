/*
 * http.c: the server's answers as pagedllm-load reads them.
 *
 * An HTTP/1.1 response is fed in whatever pieces recv() returns: the
 * status line and headers are collected line by line, then the body is
 * unframed (chunked, Content-Length, or up to the close) and handed on.
 * SSE events ("data: ...\n\n") may be cut anywhere by the chunking and by
 * the reads, so the SSE reader keeps the unfinished event between calls.
 */

#include "load.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>


enum {
    HTTP_STATUS = 0,
    HTTP_HEADER,
    HTTP_BODY,
    HTTP_CHUNK_SIZE,
    HTTP_CHUNK_DATA,
    HTTP_CHUNK_CRLF,
    HTTP_TRAILER,
    HTTP_DONE
};


void
load_http_init(load_http_t *h)
{
    memset(h, 0, sizeof(*h));
    h->length = -1;
}


static int
http_header(load_http_t *h)
{
    const char  *l = h->line;

    if (strncasecmp(l, "Content-Length:", 15) == 0) {
        h->length = strtol(l + 15, NULL, 10);

    } else if (strncasecmp(l, "Transfer-Encoding:", 18) == 0
               && strstr(l + 18, "chunked") != NULL)
    {
        h->chunked = 1;
    }
    return 0;
}


/* a whole line (without its CRLF) in h->line */
static int
http_line(load_http_t *h)
{
    char  *end;

    switch (h->state) {

    case HTTP_STATUS:
        if (strncmp(h->line, "HTTP/1.", 7) != 0 || strlen(h->line) < 12) {
            return LOAD_HTTP_ERROR;
        }
        h->status = (int) strtol(h->line + 9, NULL, 10);
        h->state = HTTP_HEADER;
        return LOAD_HTTP_MORE;

    case HTTP_HEADER:
        if (h->nline > 0) {
            return http_header(h);
        }
        if (h->chunked) {
            h->state = HTTP_CHUNK_SIZE;
        } else if (h->length == 0) {
            h->state = HTTP_DONE;
            return LOAD_HTTP_DONE;
        } else {
            h->left = h->length;
            h->state = HTTP_BODY;
        }
        return LOAD_HTTP_MORE;

    case HTTP_CHUNK_SIZE:
        h->left = strtol(h->line, &end, 16);
        if (end == h->line || h->left < 0) {
            return LOAD_HTTP_ERROR;
        }
        h->state = h->left ? HTTP_CHUNK_DATA : HTTP_TRAILER;
        return LOAD_HTTP_MORE;

    case HTTP_CHUNK_CRLF:
        if (h->nline != 0) {
            return LOAD_HTTP_ERROR;
        }
        h->state = HTTP_CHUNK_SIZE;
        return LOAD_HTTP_MORE;

    case HTTP_TRAILER:
        if (h->nline == 0) {
            h->state = HTTP_DONE;
            return LOAD_HTTP_DONE;
        }
        return LOAD_HTTP_MORE;
    }

    return LOAD_HTTP_ERROR;
}


/* the states that read lines take one byte at a time */
static int
http_byte(load_http_t *h, char c)
{
    int  rc;

    if (c == '\n') {
        if (h->nline && h->line[h->nline - 1] == '\r') {
            h->nline--;
        }
        h->line[h->nline] = '\0';
        rc = http_line(h);
        h->nline = 0;
        return rc;
    }

    if (h->nline + 1 >= sizeof(h->line)) {
        return LOAD_HTTP_ERROR;
    }
    h->line[h->nline++] = c;
    return LOAD_HTTP_MORE;
}


int
load_http_feed(load_http_t *h, const char *p, size_t n, load_body_pt body,
    void *data)
{
    size_t  take;
    int     rc;

    while (n > 0) {
        switch (h->state) {

        case HTTP_DONE:
            return LOAD_HTTP_DONE;

        case HTTP_BODY:
        case HTTP_CHUNK_DATA:
            take = n;
            if ((h->chunked || h->length >= 0) && (long) take > h->left) {
                take = h->left;
            }
            body(data, p, take);
            p += take;
            n -= take;
            h->left -= take;

            if (h->left == 0 && h->chunked) {
                h->state = HTTP_CHUNK_CRLF;
            } else if (h->left == 0 && h->length >= 0) {
                h->state = HTTP_DONE;
                return LOAD_HTTP_DONE;
            }
            break;

        default:
            rc = http_byte(h, *p);
            p++;
            n--;
            if (rc != LOAD_HTTP_MORE) {
                return rc;
            }
        }
    }

    return h->state == HTTP_DONE ? LOAD_HTTP_DONE : LOAD_HTTP_MORE;
}


/* the connection closed: a body read to the close is complete */
int
load_http_eof(load_http_t *h)
{
    if (h->state == HTTP_DONE
        || (h->state == HTTP_BODY && !h->chunked && h->length < 0))
    {
        h->state = HTTP_DONE;
        return LOAD_HTTP_DONE;
    }
    return LOAD_HTTP_ERROR;
}


int
load_sse_feed(load_sse_t *s, const char *p, size_t n, load_event_pt ev,
    void *data)
{
    char    *nb, *e;
    size_t   at = 0, cap;

    if (s->len + n + 1 > s->cap) {
        cap = (s->len + n + 1) * 2;
        nb = realloc(s->buf, cap);
        if (nb == NULL) {
            return -1;
        }
        s->buf = nb;
        s->cap = cap;
    }

    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = '\0';

    while ((e = strstr(s->buf + at, "\n\n")) != NULL) {
        if (strncmp(s->buf + at, "data: ", 6) == 0) {
            ev(data, s->buf + at + 6, e - (s->buf + at + 6));
        }
        at = e + 2 - s->buf;
    }

    memmove(s->buf, s->buf + at, s->len - at);
    s->len -= at;
    return 0;
}


void
load_sse_free(load_sse_t *s)
{
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
}
