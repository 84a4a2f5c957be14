// watchdog.c - the collective timeout (see watchdog.h for the contract).
//
// Why a thread and _exit rather than MPI_Abort: MPI runs at MPI_THREAD_FUNNELED (only the main thread
// calls MPI), and the main thread is exactly the one stuck inside MPI (or blocked on a stream that an
// NCCL kernel holds). _exit from the helper is legal at any thread level, and mpirun reacts to a rank
// ending without MPI_Finalize by killing the others.
#include "dist/watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/log.h"
#include "dist/dist.h"

struct Watchdog {
    double timeout_s;
    char self[320];  // "rank 3 (host gpu7)": which rank of the job's log gave up
    WatchdogHooks hooks;
    int64_t timeout_ns, poll_ns;
    // CLOCK_MONOTONIC time at which the current collective began; 0 while none is in flight.
    _Atomic int64_t entered_ns;
    _Atomic(const char *) what;
    atomic_int aborted;  // the abort hook returned

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

// "step 12", or "start-up" before the first step: where the job was when it failed.
static void watchdog_where(char *buf, size_t n) {
    long step = comm_noted_step();
    if (step > 0)
        snprintf(buf, n, "step %ld", step);
    else
        snprintf(buf, n, "start-up");
}

static void *watchdog_run_abort(void *arg) {
    Watchdog *w = arg;
    w->hooks.abort(w->hooks.arg);
    atomic_store(&w->aborted, 1);
    return NULL;
}

// The communicator's abort on a thread of its own, waited for at most WATCHDOG_ABORT_S: ncclCommAbort
// can itself wait on a peer that is gone, and the job must end either way.
static void watchdog_abort_bounded(Watchdog *w) {
    if (!w->hooks.abort) return;
    pthread_t thread;
    if (pthread_create(&thread, NULL, watchdog_run_abort, w) != 0) return;
    pthread_detach(thread);
    int64_t deadline = monotonic_ns() + (int64_t)(WATCHDOG_ABORT_S * 1e9);
    struct timespec nap = timespec_from_ns(10000000);
    while (!atomic_load(&w->aborted) && monotonic_ns() < deadline) nanosleep(&nap, NULL);
    if (!atomic_load(&w->aborted))
        log_error("the communicator's abort did not finish within %.0f s; exiting without it",
                  WATCHDOG_ABORT_S);
}

static void watchdog_end(Watchdog *w) __attribute__((noreturn));
static void watchdog_end(Watchdog *w) {
    fflush(stdout);
    fflush(stderr);
    watchdog_abort_bounded(w);
    fflush(stderr);
    _exit(COMM_EXIT_TIMEOUT);
}

void watchdog_expire(Watchdog *w, const char *what) {
    AMP_ASSERT(w, "watchdog_expire without a watchdog");
    char where[64];
    watchdog_where(where, sizeof where);
    log_error("collective %s (%s) on %s waited %.1f s for %s (dist.timeout_s); a peer rank died or stalled; "
              "aborting",
              what ? what : "(unknown)", where, w->self, w->timeout_s, comm_noted_peers());
    watchdog_end(w);
}

static void watchdog_fail(Watchdog *w, const char *what, const char *why) {
    char where[64];
    watchdog_where(where, sizeof where);
    log_error("collective %s (%s) on %s failed: %s; aborting", what ? what : "(none in flight)", where,
              w->self, why);
    watchdog_end(w);
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
        if (entered != 0 && monotonic_ns() - entered > w->timeout_ns) watchdog_expire(w, what);
        char why[512];
        if (w->hooks.probe && w->hooks.probe(w->hooks.arg, why, sizeof why)) watchdog_fail(w, what, why);
    }
    pthread_mutex_unlock(&w->mutex);
    return NULL;
}

static void pthread_check(int err, const char *expr, const char *file, int line) {
    if (err != 0) amp_fatal(file, line, "%s failed: %s", expr, strerror(err));
}
#define PTHREAD_CHECK(expr) pthread_check((expr), #expr, __FILE__, __LINE__)

Watchdog *watchdog_start(double timeout_s, const WatchdogHooks *hooks) {
    if (!(timeout_s > 0)) return NULL;
    Watchdog *w = xcalloc(1, sizeof *w);
    // Clamped before the conversion: timeout_s * 1e9 past INT64_MAX would be undefined, and in practice
    // negative, so the first collective would expire at once.
    w->timeout_s = timeout_s < WATCHDOG_MAX_TIMEOUT_S ? timeout_s : WATCHDOG_MAX_TIMEOUT_S;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    snprintf(w->self, sizeof w->self, "rank %d (host %s)", log_rank(), host);
    if (hooks) w->hooks = *hooks;
    w->timeout_ns = (int64_t)(w->timeout_s * 1e9);
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
