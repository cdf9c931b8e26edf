/*
 * util.c: what every part of pagedllm-load leans on: the one clock a
 * run's times are read on (monotonic), the exit on a bad command line
 * (status 2), and memory that is there or the program ends (status 1).
 */

#include "client.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pl_cli.h"


double
load_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}


void
load_die(const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: ", LOAD_NAME);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "; try '%s --help'\n", LOAD_NAME);
    exit(PL_CLI_USAGE);
}


void *
load_xrealloc(void *p, size_t size)
{
    p = realloc(p, size);
    if (p == NULL) {
        fprintf(stderr, "pagedllm-load: out of memory\n");
        exit(1);
    }
    return p;
}


void
load_append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *buf = load_xrealloc(*buf, *cap);
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
}
