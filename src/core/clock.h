// clock.h - the host code's one clock for durations: seconds on CLOCK_MONOTONIC (never steps back with the
// wall clock), for the step metrics, the loaders' and decoders' waits, the benchmarks and the NCCL timeouts.
#ifndef AMPTRAIN_CLOCK_H
#define AMPTRAIN_CLOCK_H

double clock_seconds(void);

#endif
