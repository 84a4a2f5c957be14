// clock.h - the host code's one clock for durations: seconds on CLOCK_MONOTONIC (never steps back with the
// wall clock), for the step metrics, the loaders' and decoders' waits, the benchmarks and the NCCL timeouts.
#ifndef AMPTRAIN_CLOCK_H
#define AMPTRAIN_CLOCK_H

#include <pthread.h>

double clock_seconds(void);

// Waits on cond (default attributes: CLOCK_REALTIME) for a broadcast or at most ms milliseconds: for the
// waits that must also look at a flag nobody broadcasts for, such as a stop flag set by a signal handler.
void clock_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mutex, int ms);

#endif
