// watchdog.h - ends the job when a collective outlives dist.timeout_s.
//
// A rank whose peer died or stalled (crashed, SIGSTOPped, stuck) would otherwise wait forever: inside
// MPI on the host, or in an NCCL kernel on the device with the host blocked on the stream. A
// communicator brackets each collective with watchdog_enter / watchdog_leave - the MPI one around every
// blocking call, the NCCL one from host callbacks on its stream when the collective starts and ends on
// the device. A helper thread that makes no MPI call itself wakes a few times per timeout; if the
// current collective began more than timeout_s ago, or the communicator's probe reports a failure of its
// own (NCCL's asynchronous error), it prints one line naming the collective, the training step
// (comm_note_step), this rank and its host, and the ranks it waited for (comm_note_peers), runs the communicator's abort (ncclCommAbort, bounded in time) and _exit()s with
// COMM_EXIT_TIMEOUT. mpirun sees a rank end without MPI_Finalize and terminates the rest of the job
// (a stopped rank included: it is sent SIGCONT before SIGTERM), so nothing hangs.
//
// Exit latency is bounded by timeout_s plus one poll interval (timeout_s / 8, clamped to 10-500 ms),
// plus at most WATCHDOG_ABORT_S for the abort.
#ifndef AMPTRAIN_WATCHDOG_H
#define AMPTRAIN_WATCHDOG_H

#include <stddef.h>

typedef struct Watchdog Watchdog;

// How long the abort hook may take before the process ends without it.
#define WATCHDOG_ABORT_S 5.0

// The longest timeout (a week): dist.timeout_s's ceiling. In nanoseconds it is far inside int64_t, which
// ends near 9.2e9 s; a longer timeout_s given to watchdog_start counts as this one.
#define WATCHDOG_MAX_TIMEOUT_S (7 * 86400.0)

// What a communicator adds to the clock; every member may be NULL.
typedef struct WatchdogHooks {
    // Called from the helper thread each poll: nonzero when the communicator failed on its own, with one
    // line in why (n bytes) saying how.
    int (*probe)(void *arg, char *why, size_t n);
    // Called from the helper thread once, before the process ends: frees what the device waits on.
    void (*abort)(void *arg);
    void *arg;
} WatchdogHooks;

// Starts the helper thread. timeout_s <= 0 (or NaN) disables the watchdog: returns NULL, and every
// function below accepts NULL and does nothing. More than WATCHDOG_MAX_TIMEOUT_S waits that long. hooks
// may be NULL.
Watchdog *watchdog_start(double timeout_s, const WatchdogHooks *hooks);

// what: a string literal naming the collective ("allreduce_sum"), quoted in the message. Callable from
// any one thread at a time (the host thread, or CUDA's callback thread for a stream).
void watchdog_enter(Watchdog *w, const char *what);
void watchdog_leave(Watchdog *w);

// The timeout, now: what the helper thread does when `what` has waited too long, for a caller that
// timed the wait itself (an NCCL call still in progress on the host). Does not return.
void watchdog_expire(Watchdog *w, const char *what) __attribute__((noreturn));

// Stops and joins the helper thread, frees w.
void watchdog_stop(Watchdog *w);

#endif
