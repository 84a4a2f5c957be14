// decode_feed.c - the decode thread and its hand-over with the training thread (see decode_feed.h).
// Ownership: the mutex guards the counters and ready[]; a slot belongs to the thread from the moment its
// previous batch is released until the batch decoded into it is published, then to the training thread.
#include "train/decode_feed.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"

struct DecodeFeed {
    Backend *be;
    Loader *loader;
    DecodeBatchFn decode;
    void *decode_ctx;
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t changed;                 // broadcast on every counter change
    MicroBatch ready[BACKEND_INPUT_SLOTS];  // batch n, once decoded, in ready[n % BACKEND_INPUT_SLOTS]
    long decoded;                           // batches decoded and published
    long taken;                             // batches decode_feed_next returned
    long released;                          // batches whose slot the training thread gave back
    int ended;                              // the loader ran out
    int cut_short;                          // a wait for the loader or a host read ended on `halt`
    int in_host_read;                       // the thread is inside decode_feed_host_read_begin / _end
    int finished;                           // the thread is about to return
    struct DecodeFeed *next_abandoned;      // the list abandoned_feeds
    volatile sig_atomic_t halt;             // decode_feed_stop ends the thread; the loader polls it too
    MicroBatch current;
};

// AMPTRAIN_DECODE_LOG=1: per batch, the thread's time waiting for the loader, in the decode call and waiting
// for the decode to reach the device (the CUDA decoder logs its own phases beside it).
static void *decode_thread(void *arg) {
    DecodeFeed *f = arg;
    Backend *be = f->be;
    const int log = log_env_flag("AMPTRAIN_DECODE_LOG");
    for (long n = 0;; n++) {
        const int slot = (int)(n % BACKEND_INPUT_SLOTS);
        pthread_mutex_lock(&f->mutex);
        while (!f->halt && n - f->released >= BACKEND_INPUT_SLOTS) pthread_cond_wait(&f->changed, &f->mutex);
        const int halt = f->halt;
        pthread_mutex_unlock(&f->mutex);
        if (halt) break;
        // releases batch n - 1, whose decode (and its jobs' bytes) input_upload_wait below has seen through
        const double t0 = log ? clock_seconds() : 0;
        const Batch *b = loader_next_unless(f->loader, NULL, &f->halt);
        if (b) {
            const double t1 = log ? clock_seconds() : 0;
            if (!f->decode(f->decode_ctx, slot, b, f)) {
                b = NULL;  // halted inside a host read: the feed may be abandoned, the backend is not ours now
            } else {
                const double t2 = log ? clock_seconds() : 0;
                be->input_upload_wait(be, slot);
                if (log)
                    fprintf(
                        stderr,
                        "decode thread: batch %ld: loader %.2f ms, decode %.2f ms, to the device %.2f ms\n",
                        n, 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (clock_seconds() - t2));
            }
        }
        pthread_mutex_lock(&f->mutex);
        if (b)
            f->ready[slot] =
                (MicroBatch){.count = b->count, .step_total = b->step_total, .uploaded = 1, .slot = slot},
            f->decoded = n + 1;
        else if (f->halt)
            f->cut_short = 1;
        else
            f->ended = 1;
        pthread_cond_broadcast(&f->changed);
        pthread_mutex_unlock(&f->mutex);
        if (!b) break;
    }
    pthread_mutex_lock(&f->mutex);
    f->finished = 1;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->mutex);
    return NULL;
}

void decode_feed_host_read_begin(DecodeFeed *f) {
    if (!f) return;
    pthread_mutex_lock(&f->mutex);
    f->in_host_read = 1;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->mutex);
}

int decode_feed_host_read_end(DecodeFeed *f) {
    if (!f) return 0;
    pthread_mutex_lock(&f->mutex);
    f->in_host_read = 0;
    const int halt = f->halt;
    pthread_mutex_unlock(&f->mutex);
    return halt;
}

DecodeFeed *decode_feed_start(Backend *be, Loader *loader, DecodeBatchFn decode, void *ctx) {
    DecodeFeed *f = xcalloc(1, sizeof *f);
    f->be = be, f->loader = loader, f->decode = decode, f->decode_ctx = ctx;
    AMP_ASSERT(pthread_mutex_init(&f->mutex, NULL) == 0, "decode feed: pthread_mutex_init failed");
    AMP_ASSERT(pthread_cond_init(&f->changed, NULL) == 0, "decode feed: pthread_cond_init failed");
    int rc = pthread_create(&f->thread, NULL, decode_thread, f);
    AMP_ASSERT(rc == 0, "decode feed: pthread_create failed: %s", strerror(rc));
    return f;
}

const MicroBatch *decode_feed_next(DecodeFeed *f, double *waited, volatile sig_atomic_t *stop) {
    pthread_mutex_lock(&f->mutex);
    f->released = f->taken;  // the batch returned last was staged (its input_release issued) before this call
    pthread_cond_broadcast(&f->changed);
    if (f->decoded == f->taken && !f->ended) {
        const double start = clock_seconds();
        while (f->decoded == f->taken && !f->ended && !(stop && *stop)) {
            if (stop)
                clock_cond_wait_ms(&f->changed, &f->mutex, LOADER_STOP_POLL_MS);
            else
                pthread_cond_wait(&f->changed, &f->mutex);
        }
        if (waited) *waited += clock_seconds() - start;
    }
    const MicroBatch *mb = NULL;
    if (f->decoded > f->taken) {
        f->current = f->ready[f->taken % BACKEND_INPUT_SLOTS];
        f->taken++;
        mb = &f->current;
    }
    pthread_mutex_unlock(&f->mutex);
    return mb;
}

// Feeds given up with their thread in a host read: kept, and reachable, until the process exits (the thread
// still uses the feed's mutex, condition and counters should its read ever return).
static DecodeFeed *abandoned_feeds;
static pthread_mutex_t abandoned_mutex = PTHREAD_MUTEX_INITIALIZER;

int decode_feed_stop(DecodeFeed *f, int may_abandon) {
    if (!f) return 0;
    pthread_mutex_lock(&f->mutex);
    f->halt = 1;
    pthread_cond_broadcast(&f->changed);
    // the host read's _end sees `halt` under this mutex, so a thread found inside one touches nothing more
    while (!f->finished && !(may_abandon && f->in_host_read))
        clock_cond_wait_ms(&f->changed, &f->mutex, LOADER_STOP_POLL_MS);
    const int left_in_read = !f->finished;
    pthread_mutex_unlock(&f->mutex);
    if (left_in_read) {
        pthread_detach(f->thread);
        pthread_mutex_lock(&abandoned_mutex);
        f->next_abandoned = abandoned_feeds;
        abandoned_feeds = f;
        pthread_mutex_unlock(&abandoned_mutex);
        return 1;
    }
    pthread_join(f->thread, NULL);
    const int cut_short = f->cut_short;
    pthread_cond_destroy(&f->changed);
    pthread_mutex_destroy(&f->mutex);
    free(f);
    return cut_short;
}
