// loader.c - the ring of prepared batches and the workers that fill it (see loader.h).
//
// Batch j of the walk belongs to worker j % workers and to ring slot j % slots. A worker may start
// batch j once the caller has released batch j - slots (the slot's last user). Ownership: each worker
// alone touches its own sampler copy and index scratch, and the slot it is filling; the caller alone
// reads the slot it holds. The mutex guards only the counters, so batches are assembled without it.
#include "loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/check.h"

#define LOADER_MAX_WORKERS 64

typedef struct LoaderWorker {
    struct Loader *loader;
    int id;
    Sampler sampler;     // this worker's copy (the sampler caches the epoch's order)
    int32_t *indices;    // (batch) int32 scratch
    pthread_t thread;
} LoaderWorker;

struct Loader {
    const Dataset *ds;
    Backend *pinned;           // where the ring's buffers come from (NULL: the heap)
    Batch *ring;               // (slots) batches of sampler.batch samples each
    long *ready;               // (slots) the walk index now ready in each slot, -1 none
    int slots;                 // prefetch + 1
    int batch;                 // samples per buffer
    int accum, steps_per_epoch;
    int epoch0;                // the walk starts at (epoch0, first_flat / (steps * accum), micro 0)
    long first_flat;           // micro-batches of epoch0 before the start
    long total;                // micro-batches in the walk
    LoaderWorker *workers;     // (n_workers); workers[0] also serves the unthreaded path
    int n_workers;

    int threaded;
    pthread_mutex_t mutex;
    pthread_cond_t changed;    // broadcast on every counter change; both sides wait on it
    long next;                 // the walk index the caller takes next
    int stop;                  // loader_destroy asked the workers to end
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Assembles walk index j into b.
static void loader_produce(Loader *l, LoaderWorker *w, long j, Batch *b) {
    const Dataset *ds = l->ds;
    long flat = l->first_flat + j, per_epoch = (long)l->steps_per_epoch * l->accum;
    b->epoch = l->epoch0 + (int)(flat / per_epoch);
    b->step = (int)(flat % per_epoch / l->accum);
    b->micro = (int)(flat % l->accum);
    b->count = sampler_block(&w->sampler, b->epoch, b->step, b->micro, w->indices);
    b->step_total = sampler_step_total(&w->sampler, b->epoch, b->step);
    dataset_get_batch(ds, w->indices, b->count, b->epoch, b->images, b->labels);
    // Rows past count are zeroed so a whole buffer is as deterministic as its valid part.
    size_t bytes = dataset_image_bytes(ds);
    int unused = l->batch - b->count;
    memset(b->images + (size_t)b->count * bytes, 0, (size_t)unused * bytes);
    memset(b->labels + b->count, 0, (size_t)unused * sizeof(int32_t));
}

static void *loader_worker(void *arg) {
    LoaderWorker *w = arg;
    Loader *l = w->loader;
    for (long j = w->id; j < l->total; j += l->n_workers) {
        int slot = (int)(j % l->slots);
        pthread_mutex_lock(&l->mutex);
        // batch j - slots (the slot's last user) is released once the caller asked for the one after it
        while (!l->stop && j >= l->slots && j - l->slots >= l->next - 1) pthread_cond_wait(&l->changed, &l->mutex);
        int stop = l->stop;
        pthread_mutex_unlock(&l->mutex);
        if (stop) break;
        loader_produce(l, w, j, &l->ring[slot]);
        pthread_mutex_lock(&l->mutex);
        l->ready[slot] = j;
        pthread_cond_broadcast(&l->changed);
        pthread_mutex_unlock(&l->mutex);
    }
    return NULL;
}

static void *buffer_alloc(Loader *l, size_t bytes) {
    if (!l->pinned) return xcalloc(bytes, 1);
    void *p = l->pinned->host_alloc(l->pinned, bytes);
    memset(p, 0, bytes);
    return p;
}

static void buffer_free(Loader *l, void *p) {
    if (l->pinned) l->pinned->host_free(l->pinned, p);
    else free(p);
}

Loader *loader_create(const Dataset *ds, const Sampler *sampler, int prefetch, int workers, int epoch, int step,
                      int end_epoch, Backend *pinned) {
    AMP_ASSERT(sampler->size == ds->size, "loader: sampler over %d samples, dataset %s has %d",
               sampler->size, ds->name, ds->size);
    AMP_ASSERT(prefetch >= 0, "loader: prefetch %d must be >= 0", prefetch);
    AMP_ASSERT(workers >= 1 && workers <= LOADER_MAX_WORKERS, "loader: %d workers outside 1..%d", workers,
               LOADER_MAX_WORKERS);
    Loader *l = xcalloc(1, sizeof *l);
    l->ds = ds;
    l->pinned = pinned;
    l->batch = sampler->batch;
    l->accum = sampler->accum;
    l->steps_per_epoch = sampler_steps_per_epoch(sampler);
    AMP_ASSERT(epoch >= 0 && step >= 0 && step < l->steps_per_epoch,
               "loader: start at epoch %d step %d, but an epoch has %d steps", epoch, step, l->steps_per_epoch);
    l->epoch0 = epoch;
    l->first_flat = (long)step * l->accum;
    long per_epoch = (long)l->steps_per_epoch * l->accum;
    l->total = end_epoch > epoch ? (long)(end_epoch - epoch) * per_epoch - l->first_flat : 0;
    l->threaded = prefetch > 0;
    l->n_workers = l->threaded ? workers : 1;
    l->workers = xcalloc((size_t)l->n_workers, sizeof *l->workers);
    for (int i = 0; i < l->n_workers; i++) {
        LoaderWorker *w = &l->workers[i];
        w->loader = l;
        w->id = i;
        sampler_init(&w->sampler, sampler->size, sampler->batch, sampler->world, sampler->rank, sampler->accum,
                     sampler->drop_last, (long)sampler->seed);
        w->indices = xcalloc((size_t)sampler->batch, sizeof(int32_t));
    }
    l->slots = (l->threaded && workers > prefetch ? workers : prefetch) + 1;
    l->ring = xcalloc((size_t)l->slots, sizeof(Batch));
    l->ready = xcalloc((size_t)l->slots, sizeof(long));
    for (int i = 0; i < l->slots; i++) {
        l->ring[i].images = buffer_alloc(l, (size_t)sampler->batch * dataset_image_bytes(ds));
        l->ring[i].labels = buffer_alloc(l, (size_t)sampler->batch * sizeof(int32_t));
        l->ready[i] = -1;
    }
    if (l->threaded) {
        AMP_ASSERT(pthread_mutex_init(&l->mutex, NULL) == 0, "loader: pthread_mutex_init failed");
        AMP_ASSERT(pthread_cond_init(&l->changed, NULL) == 0, "loader: pthread_cond_init failed");
        for (int i = 0; i < l->n_workers; i++) {
            int rc = pthread_create(&l->workers[i].thread, NULL, loader_worker, &l->workers[i]);
            AMP_ASSERT(rc == 0, "loader: pthread_create failed: %s", strerror(rc));
        }
    }
    return l;
}

const Batch *loader_next(Loader *l, double *waited) {
    if (l->next >= l->total) return NULL;
    long j = l->next;
    Batch *b = &l->ring[j % l->slots];
    if (!l->threaded) {
        double start = waited ? now_seconds() : 0;
        loader_produce(l, &l->workers[0], j, b);
        l->next++;
        if (waited) *waited += now_seconds() - start;
        return b;
    }
    pthread_mutex_lock(&l->mutex);
    l->next++;  // releases batch j - 1
    pthread_cond_broadcast(&l->changed);
    if (l->ready[j % l->slots] != j) {
        double start = waited ? now_seconds() : 0;
        while (l->ready[j % l->slots] != j) pthread_cond_wait(&l->changed, &l->mutex);
        if (waited) *waited += now_seconds() - start;
    }
    pthread_mutex_unlock(&l->mutex);
    return b;
}

int loader_auto_workers(int local_ranks) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long share = cores / (local_ranks > 0 ? local_ranks : 1) - 1;
    return share < 1 ? 1 : share > LOADER_MAX_WORKERS ? LOADER_MAX_WORKERS : (int)share;
}

void loader_destroy(Loader *l) {
    if (!l) return;
    if (l->threaded) {
        pthread_mutex_lock(&l->mutex);
        l->stop = 1;
        pthread_cond_broadcast(&l->changed);
        pthread_mutex_unlock(&l->mutex);
        for (int i = 0; i < l->n_workers; i++) pthread_join(l->workers[i].thread, NULL);
        pthread_cond_destroy(&l->changed);
        pthread_mutex_destroy(&l->mutex);
    }
    for (int i = 0; i < l->slots; i++) {
        buffer_free(l, l->ring[i].images);
        buffer_free(l, l->ring[i].labels);
    }
    for (int i = 0; i < l->n_workers; i++) {
        free(l->workers[i].indices);
        sampler_free(&l->workers[i].sampler);
    }
    free(l->workers);
    free(l->ring);
    free(l->ready);
    free(l);
}
