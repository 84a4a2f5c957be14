// loader.c - the ring of prepared batches and the thread that fills it (see loader.h).
//
// Ownership: the producer (the thread, or the caller when prefetch is 0) alone touches the sampler, the
// index scratch and the slot it is filling; the caller alone reads the slot it holds. The mutex guards
// only the ring's counters, so a batch is assembled without holding it.
#include "loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"

struct Loader {
    const Dataset *ds;
    Sampler sampler;           // the producer's copy
    int32_t *indices;          // (batch) int32, the producer's scratch
    Batch *ring;               // (slots) batches of sampler.batch samples each
    int slots;                 // prefetch + 1
    int steps_per_epoch, end_epoch;
    int epoch, step, micro;    // the producer's next position

    int threaded;
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t changed;    // broadcast on every counter change; both sides wait on it
    int head;                  // the next ready slot
    int filled;                // ready slots, from head on
    int held;                  // 1 while the caller holds the slot before head
    int done;                  // the producer has produced the last batch
    int stop;                  // loader_destroy asked the producer to end
};

// The producer's next position is past the end.
static int loader_finished(const Loader *l) { return l->epoch >= l->end_epoch; }

// Assembles the batch at the producer's position into b, then moves the position on (micro fastest).
static void loader_produce(Loader *l, Batch *b) {
    const Dataset *ds = l->ds;
    b->epoch = l->epoch;
    b->step = l->step;
    b->micro = l->micro;
    b->count = sampler_block(&l->sampler, l->epoch, l->step, l->micro, l->indices);
    b->step_total = sampler_step_total(&l->sampler, l->epoch, l->step);
    dataset_get_batch(ds, l->indices, b->count, l->epoch, b->images, b->labels);
    // Rows past count are zeroed so a whole buffer is as deterministic as its valid part.
    size_t floats = dataset_image_floats(ds);
    int unused = l->sampler.batch - b->count;
    memset(b->images + (size_t)b->count * floats, 0, (size_t)unused * floats * sizeof(float));
    memset(b->labels + b->count, 0, (size_t)unused * sizeof(int32_t));
    if (++l->micro == l->sampler.accum) {
        l->micro = 0;
        if (++l->step == l->steps_per_epoch) {
            l->step = 0;
            l->epoch++;
        }
    }
}

static void *loader_thread(void *arg) {
    Loader *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->mutex);
        while (!l->stop && l->filled + l->held == l->slots) pthread_cond_wait(&l->changed, &l->mutex);
        int tail = (l->head + l->filled) % l->slots;
        int stop = l->stop;
        pthread_mutex_unlock(&l->mutex);
        if (stop) break;
        if (loader_finished(l)) {
            pthread_mutex_lock(&l->mutex);
            l->done = 1;
            pthread_cond_broadcast(&l->changed);
            pthread_mutex_unlock(&l->mutex);
            break;
        }
        loader_produce(l, &l->ring[tail]);
        pthread_mutex_lock(&l->mutex);
        l->filled++;
        pthread_cond_broadcast(&l->changed);
        pthread_mutex_unlock(&l->mutex);
    }
    return NULL;
}

Loader *loader_create(const Dataset *ds, const Sampler *sampler, int prefetch, int epoch, int step,
                      int end_epoch) {
    AMP_ASSERT(sampler->size == ds->size, "loader: sampler over %d samples, dataset %s has %d",
               sampler->size, ds->name, ds->size);
    AMP_ASSERT(prefetch >= 0, "loader: prefetch %d must be >= 0", prefetch);
    Loader *l = xcalloc(1, sizeof *l);
    l->ds = ds;
    sampler_init(&l->sampler, sampler->size, sampler->batch, sampler->world, sampler->rank, sampler->accum,
                 sampler->drop_last, (long)sampler->seed);
    l->steps_per_epoch = sampler_steps_per_epoch(&l->sampler);
    AMP_ASSERT(epoch >= 0 && step >= 0 && step < l->steps_per_epoch,
               "loader: start at epoch %d step %d, but an epoch has %d steps", epoch, step, l->steps_per_epoch);
    l->epoch = epoch;
    l->step = step;
    l->end_epoch = end_epoch;
    l->indices = xcalloc((size_t)sampler->batch, sizeof(int32_t));
    l->slots = prefetch + 1;
    l->ring = xcalloc((size_t)l->slots, sizeof(Batch));
    for (int i = 0; i < l->slots; i++) {
        l->ring[i].images = xcalloc((size_t)sampler->batch * dataset_image_floats(ds), sizeof(float));
        l->ring[i].labels = xcalloc((size_t)sampler->batch, sizeof(int32_t));
    }
    l->threaded = prefetch > 0;
    if (l->threaded) {
        AMP_ASSERT(pthread_mutex_init(&l->mutex, NULL) == 0, "loader: pthread_mutex_init failed");
        AMP_ASSERT(pthread_cond_init(&l->changed, NULL) == 0, "loader: pthread_cond_init failed");
        int rc = pthread_create(&l->thread, NULL, loader_thread, l);
        AMP_ASSERT(rc == 0, "loader: pthread_create failed: %s", strerror(rc));
    }
    return l;
}

const Batch *loader_next(Loader *l) {
    if (!l->threaded) {
        if (loader_finished(l)) return NULL;
        loader_produce(l, &l->ring[0]);
        return &l->ring[0];
    }
    pthread_mutex_lock(&l->mutex);
    if (l->held) {
        l->held = 0;
        pthread_cond_broadcast(&l->changed);
    }
    while (l->filled == 0 && !l->done) pthread_cond_wait(&l->changed, &l->mutex);
    const Batch *b = NULL;
    if (l->filled > 0) {
        b = &l->ring[l->head];
        l->head = (l->head + 1) % l->slots;
        l->filled--;
        l->held = 1;
    }
    pthread_mutex_unlock(&l->mutex);
    return b;
}

void loader_destroy(Loader *l) {
    if (!l) return;
    if (l->threaded) {
        pthread_mutex_lock(&l->mutex);
        l->stop = 1;
        pthread_cond_broadcast(&l->changed);
        pthread_mutex_unlock(&l->mutex);
        pthread_join(l->thread, NULL);
        pthread_cond_destroy(&l->changed);
        pthread_mutex_destroy(&l->mutex);
    }
    for (int i = 0; i < l->slots; i++) {
        free(l->ring[i].images);
        free(l->ring[i].labels);
    }
    free(l->ring);
    free(l->indices);
    sampler_free(&l->sampler);
    free(l);
}
