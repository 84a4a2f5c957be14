// loader.h - this rank's micro-batches, in order, prepared ahead by worker threads.
//
// The loader walks (epoch, step, micro) from a starting (epoch, step) (0, 0 for a fresh run; the
// checkpoint's position on resume) through the end of epoch end_epoch - 1, one micro-batch per call,
// micro fastest. Each batch is the sampler's block for this rank, assembled by dataset_get_repeated_batch
// (with the block's repetition numbers) as raw bytes (pixels.h): the device normalises them.
//
// prefetch = P > 0: `workers` threads fill up to P batches ahead in a ring of one more buffer (the batch
// the caller holds), all of them on one batch at a time, a chunk of samples each, in walk order: a batch
// is ready soon after its turn comes, and the threads stop within a chunk. prefetch = 0: loader_next
// assembles the batch on the caller's thread. Every value is a pure function of (seed, epoch, index),
// so every path gives bitwise-identical batches.
// The buffers come from `pinned` (Backend.host_alloc: page-locked on CUDA, so the copy stream reads them
// directly) or from the heap when it is NULL.
#ifndef AMPTRAIN_LOADER_H
#define AMPTRAIN_LOADER_H

#include <signal.h>
#include <stdint.h>

#include "core/backend.h"
#include "data/dataset.h"
#include "data/sampler.h"

typedef enum LoaderOutput {
    LOADER_PIXELS,  // Batch.images
    LOADER_JOBS,    // Batch.jobs
} LoaderOutput;

typedef struct Batch {
    uint8_t *images;  // LOADER_PIXELS: (batch, side, side, 3) u8 NHWC raw bytes; rows [0, count) are
                      // valid, the rest 0. LOADER_JOBS: NULL
    ImageJob *jobs;   // LOADER_JOBS: (batch) [0, count) the samples' jobs, their bytes owned by the loader
                      // (valid until the batch is released), the rest zero. LOADER_PIXELS: NULL
    const int32_t *indices;  // (batch) the samples asked for, [0, count) valid (a job's sample may be a
                             // replacement's; dataset_replace_failed takes the index asked for)
    int32_t *labels;         // (batch) int32; [0, count) valid, the rest 0
    int count;       // samples in this micro-batch, 0..batch (short or 0 only in an epoch's last step)
    int step_total;  // samples in this optimizer step over all ranks (sampler_step_total)
    int epoch, step, micro;
} Batch;

typedef struct Loader Loader;

// ds must outlive the loader; the sampler is copied (its parameters, not its cached order), so the
// caller's sampler stays the caller's. Starts at (epoch, step, micro 0); end_epoch > epoch.
// workers >= 1 (only used when prefetch > 0).
// LOADER_JOBS needs an image dataset (imagefolder, webdataset) and a sampler without repeats.
Loader *loader_create(const Dataset *ds, const Sampler *sampler, LoaderOutput output, int prefetch,
                      int workers, int epoch, int step, int end_epoch, Backend *pinned);

// The next micro-batch, or NULL after the last one. The batch stays valid until the next call (which
// releases it: its buffers and its jobs' bytes may then be refilled).
// Adds the seconds this call waited for a worker to *waited (when not NULL).
const Batch *loader_next(Loader *l, double *waited);
// How often a wait that a stop flag ends looks at the flag (milliseconds): nothing wakes it when it is set.
#define LOADER_STOP_POLL_MS 50
// loader_next, but a wait for the workers ends as soon as *stop is set (looked at every
// LOADER_STOP_POLL_MS, whatever the workers are doing): then NULL, and the loader can only be abandoned or
// destroyed. Without worker threads (prefetch 0) the caller makes the batch itself and cannot be
// interrupted.
const Batch *loader_next_unless(Loader *l, double *waited, volatile sig_atomic_t *stop);

// data.workers = 0: local_cpus, the CPUs the local_ranks ranks of this host may use together (Comm.local_cpus:
// their affinity masks and cgroup quota, not the host's online count), shared out, one of each share left
// to its rank's training thread; at least 1.
int loader_auto_workers(int local_cpus, int local_ranks);

// Stops and joins the threads (also mid-epoch), frees the buffers.
void loader_destroy(Loader *l);
// After an interrupted loader_next_unless: asks the threads to end and detaches them without waiting for
// one stuck in a read; the buffers stay allocated (such a thread may still write them) until the process
// exits, and so must the dataset (such a thread finishes the sample it is reading, then stops). Without
// threads, loader_destroy.
void loader_abandon(Loader *l);

#endif
