// cuda_augment.cu - TrivialAugmentWide's ops and RandomErasing on a batch of decoded inputs (cuda_augment.h).
//
// One block per image: the block copies the image to its scratch (the ops read the input while they write the
// output), makes the image-level tables the plan needs from block-wide histograms (shared-memory atomics: the
// counts are exact, so the tables are the CPU's), then every thread writes its pixels with augment_pixel, and
// last the erasing box. Built with -fmad=false (CMakeLists.txt): image_augment_ops.h's float and double
// expressions must round operation by operation, as the CPU's do.
#include "kernels/cuda/cuda_augment.h"

#include <string.h>

extern "C" {
#include "image/image_augment.h"
}

#define AUGMENT_THREADS 256

// grid (n): block b runs work[b]. Dynamic shared memory: 2 * side ints, the SCALE pass's tables.
__global__ void augment_kernel(const CudaAugmentJob *work, int side, uint8_t *images, uint8_t *scratch) {
    extern __shared__ int scale_tables[];  // the columns (side), then the rows (side)
    __shared__ uint32_t
        hist[3 * 256];  // Contrast: the luma's in [0, 256); AutoContrast, Equalize: per channel
    __shared__ uint8_t lut[3 * 256];
    __shared__ uint8_t grey;
    const CudaAugmentJob *job = &work[blockIdx.x];
    const AugmentPlan plan = job->plan;
    const int pixels = side * side;
    const size_t bytes = (size_t)pixels * 3;
    uint8_t *img = images + (size_t)job->image * bytes;
    if (plan.pass != AUGMENT_PASS_NONE) {
        uint8_t *in = scratch + (size_t)blockIdx.x * bytes;
        const int luma = plan.pass == AUGMENT_PASS_BLEND && plan.op == AUGMENT_CONTRAST;
        const int levels = plan.pass == AUGMENT_PASS_LUT &&
                           (plan.op == AUGMENT_AUTOCONTRAST || plan.op == AUGMENT_EQUALIZE);
        for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) in[i] = img[i];
        for (int i = threadIdx.x; i < 3 * 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        if (luma)
            for (int i = threadIdx.x; i < pixels; i += blockDim.x)
                atomicAdd(&hist[augment_luma(in + 3 * (size_t)i)], 1u);
        if (levels)
            for (size_t i = threadIdx.x; i < bytes; i += blockDim.x)
                atomicAdd(&hist[256 * (i % 3) + in[i]], 1u);
        __syncthreads();
        if (threadIdx.x == 0 && plan.pass == AUGMENT_PASS_SCALE)
            augment_scale_tables(&plan, side, side, scale_tables, scale_tables + side);
        if (threadIdx.x == 0 && luma) grey = augment_luma_mean(hist, pixels);
        if (threadIdx.x < 3 && plan.pass == AUGMENT_PASS_LUT)
            augment_channel_lut(&plan, hist + 256 * threadIdx.x, lut + 256 * threadIdx.x);
        __syncthreads();
        AugmentTables t = {scale_tables, scale_tables + side, 0, lut};
        if (luma) t.grey = grey;
        for (int i = threadIdx.x; i < pixels; i += blockDim.x)
            augment_pixel(&plan, &t, in, side, side, i % side, i / side, img + 3 * (size_t)i);
    }
    if (job->erase) {
        __syncthreads();  // the op's pixels are all written before the box replaces some of them
        for (int i = threadIdx.x; i < pixels; i += blockDim.x)
            if (augment_erases(job->box, i % side, i / side))
                for (int b = 0; b < 3; b++) img[3 * (size_t)i + b] = job->fill[b];
    }
}

int cuda_augment_plan(const ImageJob *jobs, int count, int side, CudaAugmentJob *out) {
    int n = 0;
    for (int i = 0; i < count; i++) {
        const ImageJobAugment *a = &jobs[i].augment;
        CudaAugmentJob w;
        memset(&w, 0, sizeof w);
        w.image = i;
        image_augment_plan_of(a, side, &w.plan);
        w.erase = a->erase;
        w.box = a->erase_box;
        memcpy(w.fill, a->erase_fill, sizeof w.fill);
        if (w.plan.pass != AUGMENT_PASS_NONE || w.erase) out[n++] = w;
    }
    return n;
}

void cuda_augment_launch(const CudaAugmentJob *work, int n, int side, uint8_t *images, uint8_t *scratch,
                         cudaStream_t stream) {
    if (n == 0) return;
    augment_kernel<<<n, AUGMENT_THREADS, 2 * (size_t)side * sizeof(int), stream>>>(work, side, images,
                                                                                   scratch);
    CUDA_CHECK_LAUNCH();
}
