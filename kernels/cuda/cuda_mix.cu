// cuda_mix.cu - MixUp and CutMix of a normalised batch (batch_mix), in place.
//
// Image i takes from image i-1 (image 0 from image n-1), so writing image i in parallel with a reader of
// it would race. One thread owns one position p of the (h, w, c) image and walks the n images in order,
// carrying the original value of the image before: in place without a copy of the batch. Adjacent threads
// own adjacent positions, so each image's loads and stores are coalesced.
#include "kernels/cuda/cuda_elem.cuh"
#include "kernels/cuda/cuda_internal.h"

template <typename T>
__global__ void batch_mix_kernel(int n, int h, int w, int c, T *x, const BatchMix *mix) {
    const size_t image = (size_t)h * w * c;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const BatchMix m = *mix;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < image; p += stride) {
        const int row = (int)(p / ((size_t)w * c)), col = (int)(p / c % w);
        const int pasted = row >= m.y1 && row < m.y2 && col >= m.x1 && col < m.x2;
        if (!m.blend && !pasted) continue;  // CutMix keeps what lies outside its box
        float before = to_f32(x[(size_t)(n - 1) * image + p]);
        for (int i = 0; i < n; i++) {
            T *v = &x[(size_t)i * image + p];
            const float own = to_f32(*v);
            // Rounded as the CPU and torch round: two products, then their sum (no fused multiply-add).
            from_f32(v, m.blend ? __fadd_rn(__fmul_rn(before, m.rest), __fmul_rn(own, m.lam)) : before);
            before = own;
        }
    }
}

void cuda_batch_mix(Backend *be, DType dt, void *x, int n, int h, int w, int c, const BatchMix *mix) {
    const size_t image = (size_t)h * w * c;
    if (n == 0 || image == 0) return;
    cudaStream_t stream = cuda_state(be)->stream;
    const unsigned threads = 256;
    const size_t want = (image + threads - 1) / threads;
    const unsigned blocks = (unsigned)(want < 8192 ? want : 8192);
    with_elem(dt, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        batch_mix_kernel<T><<<blocks, threads, 0, stream>>>(n, h, w, c, (T *)x, mix);
    });
    CUDA_CHECK_LAUNCH();
}
