// loader.c - the ring of prepared batches and the workers that fill it (see loader.h).
//
// Work goes out in walk order, in chunks of LOADER_CHUNK samples. Batch j lives in ring slot j % slots.
// The first worker to find every chunk of the open batch handed out opens batch j + 1 (once the caller
// has released batch j - slots, the slot's last user): it sets the slot up (the sampler's block into
// the slot's indices, the batch's numbers, the unused rows zeroed) and publishes the chunk count; then
// every worker takes that batch's chunks in turn. So all workers assemble one batch at a time: a batch
// is ready a chunk's time after its last chunk starts, not a whole batch's time after one worker took it,
// and loader_destroy waits for at most one chunk per worker.
// Ownership: the mutex guards the counters; a slot's indices and numbers belong to the worker setting
// it up until it publishes; a chunk's rows to the worker that took it; a ready slot to the caller.
#include "data/loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/clock.h"
#include "data/sources/image_dataset.h"

#define LOADER_MAX_WORKERS 64
#define LOADER_CHUNK 8  // samples per task: a few milliseconds of JPEG decoding

typedef struct LoaderWorker {
    struct Loader *loader;
    Sampler sampler;  // this worker's copy (the sampler caches the epoch's order)
    pthread_t thread;
} LoaderWorker;

typedef struct LoaderSlot {
    Batch batch;
    int32_t *indices;      // (batch) int32: the sampler's block for the walk index made here
    uint8_t *repetitions;  // (batch) each entry's repetition (sampler_block_repetitions)
    long ready;            // the walk index complete in this slot, -1 none
    int chunks_left;       // chunks of the batch being made here that are not done yet
} LoaderSlot;

struct Loader {
    const Dataset *ds;
    Backend *pinned;   // where the ring's buffers come from (NULL: the heap)
    LoaderSlot *ring;  // (slots)
    int slots;         // prefetch + 1
    int batch;         // samples per buffer
    int accum, steps_per_epoch;
    int epoch0;       // the walk starts at (epoch0, first_flat / (steps * accum), micro 0)
    long first_flat;  // micro-batches of epoch0 before the start
    long total;       // micro-batches in the walk
    LoaderOutput output;
    LoaderWorker *workers;  // (n_workers); workers[0] also serves the unthreaded path
    int n_workers;

    int threaded;
    pthread_mutex_t mutex;
    pthread_cond_t changed;         // broadcast on every counter change; both sides wait on it
    long open;                      // the walk index whose chunks are handed out (-1 before the first)
    int open_chunks;                // its chunks; -1 while a worker sets it up
    int next_chunk;                 // the next chunk of `open` to hand out
    long next;                      // the walk index the caller takes next
    int stop;                       // loader_destroy asked the workers to end
    struct Loader *next_abandoned;  // the list abandoned_loaders
};

// Frees the bytes of a slot's jobs (the batch it held was released) and zeroes them.
static void jobs_release(ImageJob *jobs, int n) {
    for (int k = 0; k < n; k++) free((void *)jobs[k].bytes);
    memset(jobs, 0, (size_t)n * sizeof *jobs);
}

// Sets slot j % slots up for walk index j (its numbers, indices and zeroed unused rows); returns its
// number of chunks.
static int loader_setup(Loader *l, LoaderWorker *w, long j) {
    LoaderSlot *s = &l->ring[j % l->slots];
    Batch *b = &s->batch;
    long flat = l->first_flat + j, per_epoch = (long)l->steps_per_epoch * l->accum;
    b->epoch = l->epoch0 + (int)(flat / per_epoch);
    b->step = (int)(flat % per_epoch / l->accum);
    b->micro = (int)(flat % l->accum);
    b->count = sampler_block(&w->sampler, b->epoch, b->step, b->micro, s->indices);
    sampler_block_repetitions(&w->sampler, b->step, b->micro, s->repetitions);
    b->step_total = sampler_step_total(&w->sampler, b->epoch, b->step);
    // Rows past count are zeroed so a whole buffer is as deterministic as its valid part.
    int unused = l->batch - b->count;
    if (b->jobs) {
        jobs_release(b->jobs, l->batch);
    } else {
        size_t bytes = dataset_image_bytes(l->ds);
        memset(b->images + (size_t)b->count * bytes, 0, (size_t)unused * bytes);
    }
    memset(b->labels + b->count, 0, (size_t)unused * sizeof(int32_t));
    return (b->count + LOADER_CHUNK - 1) / LOADER_CHUNK;
}

// Samples [c * LOADER_CHUNK, ...) of walk index j, already set up in its slot.
// One sample at a time, so that after loader_abandon a worker that comes back from a stuck read stops
// before the next sample (the dataset may be gone by then).
static void loader_produce_chunk(Loader *l, long j, int c) {
    LoaderSlot *s = &l->ring[j % l->slots];
    Batch *b = &s->batch;
    int first = c * LOADER_CHUNK, count = b->count - first < LOADER_CHUNK ? b->count - first : LOADER_CHUNK;
    size_t bytes = b->jobs ? 0 : dataset_image_bytes(l->ds);
    for (int k = first; k < first + count && !__atomic_load_n(&l->stop, __ATOMIC_RELAXED); k++) {
        if (b->jobs)
            dataset_get_job_batch(l->ds, s->indices + k, 1, b->epoch, b->jobs + k, b->labels + k);
        else
            dataset_get_repeated_batch(l->ds, s->indices + k, s->repetitions + k, 1, b->epoch,
                                       b->images + (size_t)k * bytes, b->labels + k);
    }
}

static void *loader_worker(void *arg) {
    LoaderWorker *w = arg;
    Loader *l = w->loader;
    pthread_mutex_lock(&l->mutex);
    while (!l->stop) {
        if (l->open >= 0 && l->open_chunks < 0) {  // another worker is setting the open batch up
            pthread_cond_wait(&l->changed, &l->mutex);
        } else if (l->open >= 0 && l->next_chunk < l->open_chunks) {
            long j = l->open;
            int c = l->next_chunk++;
            pthread_mutex_unlock(&l->mutex);
            loader_produce_chunk(l, j, c);
            pthread_mutex_lock(&l->mutex);
            LoaderSlot *s = &l->ring[j % l->slots];
            if (--s->chunks_left == 0) {
                s->ready = j;
                pthread_cond_broadcast(&l->changed);
            }
        } else {
            long j = l->open + 1;
            if (j >= l->total) break;
            // batch j - slots (the slot's last user) is released once the caller asked for the one after it
            if (j >= l->slots && j - l->slots >= l->next - 1) {
                pthread_cond_wait(&l->changed, &l->mutex);
                continue;
            }
            l->open = j, l->open_chunks = -1, l->next_chunk = 0;
            pthread_mutex_unlock(&l->mutex);
            int chunks = loader_setup(l, w, j);
            pthread_mutex_lock(&l->mutex);
            l->open_chunks = chunks;
            l->ring[j % l->slots].chunks_left = chunks;
            if (chunks == 0) l->ring[j % l->slots].ready = j;
            pthread_cond_broadcast(&l->changed);
        }
    }
    pthread_mutex_unlock(&l->mutex);
    return NULL;
}

static void *buffer_alloc(Loader *l, size_t bytes) {
    if (!l->pinned) return xcalloc(bytes, 1);
    void *p = l->pinned->host_alloc(l->pinned, bytes);
    memset(p, 0, bytes);
    return p;
}

static void buffer_free(Loader *l, void *p) {
    if (l->pinned)
        l->pinned->host_free(l->pinned, p);
    else
        free(p);
}

Loader *loader_create(const Dataset *ds, const Sampler *sampler, LoaderOutput output, int prefetch,
                      int workers, int epoch, int step, int end_epoch, Backend *pinned) {
    AMP_ASSERT(sampler->size == ds->size, "loader: sampler over %d samples, dataset %s has %d", sampler->size,
               ds->name, ds->size);
    AMP_ASSERT(prefetch >= 0, "loader: prefetch %d must be >= 0", prefetch);
    AMP_ASSERT(workers >= 1 && workers <= LOADER_MAX_WORKERS, "loader: %d workers outside 1..%d", workers,
               LOADER_MAX_WORKERS);
    Loader *l = xcalloc(1, sizeof *l);
    AMP_ASSERT(output == LOADER_PIXELS || image_dataset_source(ds), "loader: %s has no JPEG jobs to make",
               ds->name);
    AMP_ASSERT(output == LOADER_PIXELS || sampler->repeats == 1,
               "loader: decode jobs carry no repetition numbers");
    l->ds = ds;
    l->output = output;
    l->pinned = pinned;
    l->batch = sampler->batch;
    l->accum = sampler->accum;
    l->steps_per_epoch = sampler_steps_per_epoch(sampler);
    AMP_ASSERT(epoch >= 0 && step >= 0 && step < l->steps_per_epoch,
               "loader: start at epoch %d step %d, but an epoch has %d steps", epoch, step,
               l->steps_per_epoch);
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
        sampler_init(&w->sampler, sampler->size, sampler->batch, sampler->world, sampler->rank,
                     sampler->accum, sampler->drop_last, (long)sampler->seed);
        sampler_set_repeats(&w->sampler, sampler->repeats);
    }
    l->slots = prefetch + 1;
    l->ring = xcalloc((size_t)l->slots, sizeof *l->ring);
    for (int i = 0; i < l->slots; i++) {
        if (output == LOADER_JOBS)
            l->ring[i].batch.jobs = xcalloc((size_t)sampler->batch, sizeof(ImageJob));
        else
            l->ring[i].batch.images = buffer_alloc(l, (size_t)sampler->batch * dataset_image_bytes(ds));
        l->ring[i].batch.labels = buffer_alloc(l, (size_t)sampler->batch * sizeof(int32_t));
        l->ring[i].indices = xcalloc((size_t)sampler->batch, sizeof(int32_t));
        l->ring[i].repetitions = xcalloc((size_t)sampler->batch, 1);
        l->ring[i].batch.indices = l->ring[i].indices;
        l->ring[i].ready = -1;
    }
    l->open = -1;
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

const Batch *loader_next_unless(Loader *l, double *waited, volatile sig_atomic_t *stop) {
    if (l->next >= l->total) return NULL;
    long j = l->next;
    LoaderSlot *s = &l->ring[j % l->slots];
    if (!l->threaded) {
        double start = waited ? clock_seconds() : 0;
        int chunks = loader_setup(l, &l->workers[0], j);
        for (int c = 0; c < chunks; c++) loader_produce_chunk(l, j, c);
        l->next++;
        if (waited) *waited += clock_seconds() - start;
        return &s->batch;
    }
    pthread_mutex_lock(&l->mutex);
    l->next++;  // releases batch j - 1
    pthread_cond_broadcast(&l->changed);
    if (s->ready != j) {
        double start = waited ? clock_seconds() : 0;
        while (s->ready != j && !(stop && *stop)) {
            if (!stop) {
                pthread_cond_wait(&l->changed, &l->mutex);
                continue;
            }
            // A worker may be stuck in a read (a hung file system): the stop flag is looked at every
            // LOADER_STOP_POLL_MS whatever the workers do.
            clock_cond_wait_ms(&l->changed, &l->mutex, LOADER_STOP_POLL_MS);
        }
        if (waited) *waited += clock_seconds() - start;
    }
    int ready = s->ready == j;
    pthread_mutex_unlock(&l->mutex);
    return ready ? &s->batch : NULL;
}

const Batch *loader_next(Loader *l, double *waited) { return loader_next_unless(l, waited, NULL); }

int loader_auto_workers(int local_cpus, int local_ranks) {
    int share = local_cpus / (local_ranks > 0 ? local_ranks : 1) - 1;
    return share < 1 ? 1 : share > LOADER_MAX_WORKERS ? LOADER_MAX_WORKERS : share;
}

// Loaders given up with a thread still in them: kept, and reachable, until the process exits (their threads
// may still write the buffers).
static Loader *abandoned_loaders;
static pthread_mutex_t abandoned_mutex = PTHREAD_MUTEX_INITIALIZER;

void loader_abandon(Loader *l) {
    if (!l || !l->threaded) {
        loader_destroy(l);
        return;
    }
    pthread_mutex_lock(&abandoned_mutex);
    l->next_abandoned = abandoned_loaders;
    abandoned_loaders = l;
    pthread_mutex_unlock(&abandoned_mutex);
    pthread_mutex_lock(&l->mutex);
    l->stop = 1;
    pthread_cond_broadcast(&l->changed);
    pthread_mutex_unlock(&l->mutex);
    for (int i = 0; i < l->n_workers; i++) pthread_detach(l->workers[i].thread);
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
        if (l->ring[i].batch.jobs) jobs_release(l->ring[i].batch.jobs, l->batch);
        free(l->ring[i].batch.jobs);
        if (l->ring[i].batch.images) buffer_free(l, l->ring[i].batch.images);
        buffer_free(l, l->ring[i].batch.labels);
        free(l->ring[i].indices);
        free(l->ring[i].repetitions);
    }
    for (int i = 0; i < l->n_workers; i++) sampler_free(&l->workers[i].sampler);
    free(l->workers);
    free(l->ring);
    free(l);
}
