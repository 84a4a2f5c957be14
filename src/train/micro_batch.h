// micro_batch.h - one micro-batch as the training step takes it (step.h) and the input feeds hand it over
// (input.h, decode_feed.h).
#ifndef AMPTRAIN_MICRO_BATCH_H
#define AMPTRAIN_MICRO_BATCH_H

#include <stdint.h>

#include "core/dtype.h"

// One micro-batch of this rank: raw bytes on the host (uploaded through an input slot, maybe already on
// their way: `uploaded`), or already in backend memory (the benchmark keeps a few batches resident, as
// torch_baseline.py does; tests pass fp32 images that are already normalised).
typedef struct MicroBatch {
    int count;                   // samples of this rank (0 allowed in an epoch's partial last step)
    int step_total;              // samples of the whole optimizer step over all ranks
    const uint8_t *host_images;  // (count, side, side, 3) u8 or NULL (NULL too when decoded into the slot)
    const int32_t *host_labels;  // (count) or NULL
    int uploaded;                // 1: input_slot_upload or the decode feed already filled the slot
    int slot;                    // the input slot it went to
    const void *device_images;   // backend memory, used when host_images is NULL
    DType device_dt;             // DTYPE_U8 (normalised by the dataset's norm) or DTYPE_F32 (as is)
    const int32_t *device_labels;
} MicroBatch;

// Supplies micro-batch k (0..n_micro-1) of the current step; it stays valid until the next call.
typedef const MicroBatch *(*MicroBatchFn)(void *ctx, int k);

#endif
