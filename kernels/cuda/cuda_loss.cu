// cuda_loss.cu - softmax cross-entropy and its backward seed, in fp32 whatever the logits' dtype.
//
// One block per row computes the row's max, log-sum-exp, loss and dlogits. The mean over rows is a
// second, one-block kernel that sums the per-row losses in a fixed tree: the loss is bitwise the same
// on every run (no atomics).
#include "kernels/cuda/cuda_elem.cuh"
#include "kernels/cuda/cuda_internal.h"

#define XENT_THREADS 256  // a multiple of 32; classes (1000) spread over a block's threads
#define XENT_WARPS (XENT_THREADS / 32)

// Reductions over a block of XENT_THREADS threads; every thread gets the result. `scratch` holds one
// float per warp and is reused, hence the barrier before the warps write into it.
static __device__ float block_max(float v, float *scratch) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    __syncthreads();
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    float m = scratch[0];
    for (int i = 1; i < XENT_WARPS; i++) m = fmaxf(m, scratch[i]);
    return m;
}

static __device__ float block_sum(float v, float *scratch) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    __syncthreads();
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < XENT_WARPS; i++) s += scratch[i];
    return s;
}

// Row r of logits (n,classes) T against the target t of backend_ops.def's softmax_xent (one-hot; mixed with
// row r-1's label by mix; smoothed):
// row_loss[r] = -sum_k t_k log softmax(z)_k; dlogits[r] = (softmax(z) - t) * (*scale or 1) * seed_factor, in T.
// With smoothing 0 and mix NULL every value is computed as by the plain one-hot loss.
template <typename T>
__global__ void xent_row_kernel(int n, int classes, const T *logits, const int32_t *labels,
                                const BatchMix *mix, float smoothing, float *row_loss, T *dlogits,
                                const float *scale, float seed_factor) {
    __shared__ float scratch[XENT_WARPS];
    const size_t base = (size_t)blockIdx.x * classes;
    const T *z = logits + base;
    const int label = labels[blockIdx.x];
    const int rolled = mix ? labels[(blockIdx.x + n - 1) % n] : label;
    const float lam = mix ? mix->lam : 1.0f, rest = mix ? mix->rest : 0.0f;
    const float uniform = smoothing / (float)classes;

    float zmax = -INFINITY;
    for (int k = threadIdx.x; k < classes; k += XENT_THREADS) zmax = fmaxf(zmax, to_f32(z[k]));
    zmax = block_max(zmax, scratch);
    float sum = 0.0f;
    for (int k = threadIdx.x; k < classes; k += XENT_THREADS) sum += expf(to_f32(z[k]) - zmax);
    sum = block_sum(sum, scratch);
    const float log_sum = logf(sum);
    // -sum_k t_k log p_k, with -log p_k = log_sum - (z_k - zmax), term by term of t.
    float all = 0.0f;  // sum_k -log p_k, for the smoothing's uniform part
    if (smoothing != 0.0f) {
        for (int k = threadIdx.x; k < classes; k += XENT_THREADS) all += log_sum - (to_f32(z[k]) - zmax);
        all = block_sum(all, scratch);
    }
    if (threadIdx.x == 0) {
        float row = log_sum - (to_f32(z[label]) - zmax);
        if (mix) row = lam * row + rest * (log_sum - (to_f32(z[rolled]) - zmax));
        if (smoothing != 0.0f) row = (1.0f - smoothing) * row + uniform * all;
        row_loss[blockIdx.x] = row;
    }

    // The seed carries the loss scale (fp16), so 16-bit gradients downstream stay clear of underflow.
    const float seed = (scale ? *scale : 1.0f) * seed_factor;
    for (int k = threadIdx.x; k < classes; k += XENT_THREADS) {
        const float p = expf(to_f32(z[k]) - zmax - log_sum);
        float t = k == label ? 1.0f : 0.0f;
        if (mix) t = (k == label ? lam : 0.0f) + (k == rolled ? rest : 0.0f);
        if (smoothing != 0.0f) t = (1.0f - smoothing) * t + uniform;
        from_f32(&dlogits[base + k], (p - t) * seed);
    }
}

// *loss_out = mean of row_loss (n), one block, fixed summation order.
__global__ void xent_mean_kernel(int n, const float *row_loss, float *loss_out) {
    __shared__ float scratch[XENT_WARPS];
    float sum = 0.0f;
    for (int r = threadIdx.x; r < n; r += XENT_THREADS) sum += row_loss[r];
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) *loss_out = sum / (float)n;
}

void cuda_softmax_xent(Backend *be, int n, int classes, DType logits_dt, const void *logits,
                       const int32_t *labels, const BatchMix *mix, float smoothing, float *loss_out,
                       void *dlogits, const float *scale, float seed_factor) {
    if (n == 0) return;
    cudaStream_t stream = cuda_state(be)->stream;
    // Freed right after the launches: the allocator reuses it only for work queued behind them.
    float *row_loss = (float *)be->alloc(be, (size_t)n * sizeof(float));  // (n) fp32
    with_elem(logits_dt, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        xent_row_kernel<T><<<n, XENT_THREADS, 0, stream>>>(n, classes, (const T *)logits, labels, mix,
                                                           smoothing, row_loss, (T *)dlogits, scale,
                                                           seed_factor);
    });
    CUDA_CHECK_LAUNCH();
    xent_mean_kernel<<<1, XENT_THREADS, 0, stream>>>(n, row_loss, loss_out);
    CUDA_CHECK_LAUNCH();
    be->free(be, row_loss);
}
