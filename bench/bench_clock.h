/*
 * bench_clock.h: the monotonic clock in seconds (or microseconds), as a
 * double, for the benchmarks in bench/: sub-microsecond resolution, which
 * the engine's integer pl_now_us() does not keep.
 */
#ifndef BENCH_CLOCK_H
#define BENCH_CLOCK_H

#include <time.h>


static inline double
bench_now_s(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


static inline double
bench_now_us(void)
{
    return bench_now_s() * 1e6;
}

#endif
