// bench_timing.h - the one way the benches time a call: the median (and range) of repeated calls, each
// between the backend's timing marks 0 and 1 (events on its compute stream, backend_ops.def). C and CUDA.
#ifndef AMPTRAIN_BENCH_TIMING_H
#define AMPTRAIN_BENCH_TIMING_H

#include <stdlib.h>

#include "core/backend.h"

#define BENCH_MAX_TIMED 64  // timed calls one bench_time may take

// A call of a bench: what it runs is ctx's, arg says which variant (a phase, a side, a kind).
typedef void (*BenchCall)(void *ctx, int arg);

typedef struct BenchMs {
    float median, min, max;  // ms over the timed calls
} BenchMs;

static int bench_compare_ms(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// `timed` (1..BENCH_MAX_TIMED) calls of run(ctx, arg) after `warmup` untimed ones; before each, when given,
// before(ctx, arg) runs outside the marks (what the timed call reads, such as the forward before a backward).
static inline BenchMs bench_time(Backend *be, int warmup, int timed, BenchCall before, BenchCall run,
                                 void *ctx, int arg) {
    float ms[BENCH_MAX_TIMED];
    if (timed < 1) timed = 1;
    if (timed > BENCH_MAX_TIMED) timed = BENCH_MAX_TIMED;
    for (int i = 0; i < warmup + timed; i++) {
        if (before) before(ctx, arg);
        be->mark_record(be, 0);
        run(ctx, arg);
        be->mark_record(be, 1);
        const float t = be->mark_elapsed_ms(be, 0, 1);
        if (i >= warmup) ms[i - warmup] = t;
    }
    qsort(ms, (size_t)timed, sizeof ms[0], bench_compare_ms);
    BenchMs r = {ms[timed / 2], ms[0], ms[timed - 1]};
    return r;
}

#endif
