// watchdog.c - the collective timeout (see watchdog.h for the contract).
//
// Why a thread and _exit rather than MPI_Abort: MPI runs at MPI_THREAD_FUNNELED (only the main thread
// calls MPI), and the main thread is exactly the one stuck inside MPI. _exit from the helper is legal at
// any thread level, and mpirun reacts to a rank ending without MPI_Finalize by killing the others.
#include "watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/check.h"
#include "../core/log.h"
#include "dist.h"

struct Watchdog {
    double timeout_s;
    int64_t timeout_ns, poll_ns;
    // CLOCK_MONOTONIC time at which the current collective began; 0 while none is in flight.
    _Atomic int64_t entered_ns;
    _Atomic(const char *) what;

    pthread_mutex_t mutex;  // guards stopping; the condition lets watchdog_stop wake the thread at once
    pthread_cond_t wake;
    int stopping;
    pthread_t thread;
};

static int64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct timespec timespec_from_ns(int64_t ns) {
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    return ts;
}

static void watchdog_fire(const Watchdog *w, const char *what) {
    log_error("collective %s waited %.1f s for other ranks (dist.timeout_s); a peer rank died or stalled; "
              "aborting",
              what ? what : "(unknown)", w->timeout_s);
    fflush(stdout);
    fflush(stderr);
    _exit(COMM_EXIT_TIMEOUT);
}

static void *watchdog_main(void *arg) {
    Watchdog *w = arg;
    pthread_mutex_lock(&w->mutex);
    while (!w->stopping) {
        struct timespec deadline = timespec_from_ns(monotonic_ns() + w->poll_ns);
        pthread_cond_timedwait(&w->wake, &w->mutex, &deadline);
        if (w->stopping) break;
        // entered_ns is published after what (release), so reading it first (acquire) pairs them.
        int64_t entered = atomic_load_explicit(&w->entered_ns, memory_order_acquire);
        const char *what = atomic_load_explicit(&w->what, memory_order_relaxed);
        if (entered != 0 && monotonic_ns() - entered > w->timeout_ns) watchdog_fire(w, what);
    }
    pthread_mutex_unlock(&w->mutex);
    return NULL;
}

static void pthread_check(int err, const char *expr, const char *file, int line) {
    if (err != 0) amp_fatal(file, line, "%s failed: %s", expr, strerror(err));
}
#define PTHREAD_CHECK(expr) pthread_check((expr), #expr, __FILE__, __LINE__)

Watchdog *watchdog_start(double timeout_s) {
    if (!(timeout_s > 0)) return NULL;
    Watchdog *w = xcalloc(1, sizeof *w);
    w->timeout_s = timeout_s;
    w->timeout_ns = (int64_t)(timeout_s * 1e9);
    int64_t poll = w->timeout_ns / 8;
    w->poll_ns = poll < 10000000 ? 10000000 : poll > 500000000 ? 500000000 : poll;
    atomic_init(&w->entered_ns, 0);
    atomic_init(&w->what, NULL);

    pthread_condattr_t attr;
    PTHREAD_CHECK(pthread_condattr_init(&attr));
    // Deadlines on the monotonic clock, so a wall-clock jump neither fires nor starves the watchdog.
    PTHREAD_CHECK(pthread_condattr_setclock(&attr, CLOCK_MONOTONIC));
    PTHREAD_CHECK(pthread_cond_init(&w->wake, &attr));
    PTHREAD_CHECK(pthread_condattr_destroy(&attr));
    PTHREAD_CHECK(pthread_mutex_init(&w->mutex, NULL));
    PTHREAD_CHECK(pthread_create(&w->thread, NULL, watchdog_main, w));
    return w;
}

void watchdog_enter(Watchdog *w, const char *what) {
    if (!w) return;
    atomic_store_explicit(&w->what, what, memory_order_relaxed);
    atomic_store_explicit(&w->entered_ns, monotonic_ns(), memory_order_release);
}

void watchdog_leave(Watchdog *w) {
    if (!w) return;
    atomic_store_explicit(&w->entered_ns, 0, memory_order_release);
}

void watchdog_stop(Watchdog *w) {
    if (!w) return;
    PTHREAD_CHECK(pthread_mutex_lock(&w->mutex));
    w->stopping = 1;
    PTHREAD_CHECK(pthread_cond_signal(&w->wake));
    PTHREAD_CHECK(pthread_mutex_unlock(&w->mutex));
    PTHREAD_CHECK(pthread_join(w->thread, NULL));
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mutex);
    free(w);
}
