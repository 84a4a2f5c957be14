// watchdog.h - ends the job when a blocking collective outlives dist.timeout_s.
//
// A rank whose peer died or stalled would otherwise wait inside MPI forever. The communicator brackets
// every blocking call with watchdog_enter / watchdog_leave; a helper thread that makes no MPI call
// itself wakes a few times per timeout, and if the current call began more than timeout_s ago it
// prints one line naming the call and _exit()s with COMM_EXIT_TIMEOUT. mpirun sees a rank end without
// MPI_Finalize and terminates the rest of the job, so nothing hangs.
//
// Exit latency is bounded by timeout_s plus one poll interval (timeout_s / 8, clamped to 10-500 ms).
#ifndef AMPTRAIN_WATCHDOG_H
#define AMPTRAIN_WATCHDOG_H

typedef struct Watchdog Watchdog;

// Starts the helper thread. timeout_s <= 0 disables the watchdog: returns NULL, and every function
// below accepts NULL and does nothing.
Watchdog *watchdog_start(double timeout_s);

// what: a string literal naming the collective ("allreduce_sum"), quoted in the message.
void watchdog_enter(Watchdog *w, const char *what);
void watchdog_leave(Watchdog *w);

// Stops and joins the helper thread, frees w.
void watchdog_stop(Watchdog *w);

#endif
