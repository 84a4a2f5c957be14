// loader.h - this rank's micro-batches, in order, optionally prepared ahead on a thread.
//
// The loader walks (epoch, step, micro) from a starting (epoch, step) (0, 0 for a fresh run; the
// checkpoint's position on resume) through the end of epoch end_epoch - 1, one micro-batch per call,
// micro fastest. Each batch is the sampler's block for this rank, assembled by dataset_get_batch.
//
// prefetch = P > 0: a pthread fills up to P batches ahead in a ring of P + 1 buffers (the extra one is
// the batch the caller holds), blocking when the ring is full. prefetch = 0: loader_next assembles the
// batch on the caller's thread. Every value is a pure function of (seed, epoch, index), so both paths
// give bitwise-identical batches.
#ifndef AMPTRAIN_LOADER_H
#define AMPTRAIN_LOADER_H

#include <stdint.h>

#include "dataset.h"
#include "sampler.h"

typedef struct Batch {
    float *images;      // (batch, side, side, 3) float32 NHWC; rows [0, count) are valid
    int32_t *labels;    // (batch) int32; [0, count) valid
    int count;          // samples in this micro-batch, 0..batch (short or 0 only in an epoch's last step)
    int step_total;     // samples in this optimizer step over all ranks (sampler_step_total)
    int epoch, step, micro;
} Batch;

typedef struct Loader Loader;

// ds must outlive the loader; the sampler is copied (its parameters, not its cached order), so the
// caller's sampler stays the caller's. Starts at (epoch, step, micro 0); end_epoch > epoch.
Loader *loader_create(const Dataset *ds, const Sampler *sampler, int prefetch, int epoch, int step,
                      int end_epoch);

// The next micro-batch, or NULL after the last one. The batch stays valid until the next call.
const Batch *loader_next(Loader *l);

// Stops and joins the thread (also mid-epoch), frees the buffers.
void loader_destroy(Loader *l);

#endif
