// cuda_augment.h - TrivialAugmentWide's op and RandomErasing's box on the CUDA decoder's inputs
// (nvjpeg_decode.cu runs them after its geometry): image/image_augment_ops.h's functions, one thread block per
// image, on the plans the host makes with image_augment_plan_of, so given the same decoded pixels the bytes are
// the CPU reference's (image_augment_run).
#ifndef AMPTRAIN_CUDA_AUGMENT_H
#define AMPTRAIN_CUDA_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/image_job.h"
#include "image/image_augment_ops.h"
#include "kernels/cuda/cuda_internal.h"

// One image's work: its row in the batch, its op's plan, its erasing box.
typedef struct CudaAugmentJob {
    int image;
    AugmentPlan plan;
    int erase;  // 1: box set to fill after the op
    ImageRect box;
    uint8_t fill[3];
} CudaAugmentJob;

// The jobs[0..count) whose augmentation does something (an op other than Identity or a box), as work for
// images (side, side): into out (count entries); returns how many.
int cuda_augment_plan(const ImageJob *jobs, int count, int side, CudaAugmentJob *out);

// Each of work[0..n) (device memory) on its row of images (rows, side, side, 3) u8, in place, on stream.
// scratch: n * side * side * 3 bytes of device memory, the input copies.
void cuda_augment_launch(const CudaAugmentJob *work, int n, int side, uint8_t *images, uint8_t *scratch,
                         cudaStream_t stream);

#endif
