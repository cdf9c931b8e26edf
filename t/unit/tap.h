/*
 * tap.h: the few TAP helpers our C unit tests need.  Each test program
 * prints "ok N - name" lines and a final plan; prove reads them.
 */

#ifndef PL_TAP_H
#define PL_TAP_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int  tap_n;
static int  tap_failed;

static inline int
tap_ok(int cond, const char *fmt, ...)
{
    va_list  ap;

    tap_n++;
    printf("%sok %d - ", cond ? "" : "not ", tap_n);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!cond) {
        tap_failed++;
    }
    return cond;
}

#define ok(cond, ...)  tap_ok(!!(cond), __VA_ARGS__)

#define is_int(got, want, ...)                                              \
    do {                                                                    \
        long long  g_ = (long long) (got), w_ = (long long) (want);         \
        if (!tap_ok(g_ == w_, __VA_ARGS__)) {                               \
            printf("#   got %lld, want %lld\n", g_, w_);                    \
        }                                                                   \
    } while (0)

#define is_str(got, want, ...)                                              \
    do {                                                                    \
        const char *g_ = (got), *w_ = (want);                               \
        if (!tap_ok(g_ && w_ && strcmp(g_, w_) == 0, __VA_ARGS__)) {        \
            printf("#   got \"%s\", want \"%s\"\n", g_ ? g_ : "(null)",     \
                   w_ ? w_ : "(null)");                                     \
        }                                                                   \
    } while (0)

#define diag(...)  (printf("# "), printf(__VA_ARGS__), printf("\n"))

static inline int
done_testing(void)
{
    printf("1..%d\n", tap_n);
    return tap_failed ? 1 : 0;
}

#endif /* PL_TAP_H */
