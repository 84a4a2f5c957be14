// cuda_optim.cu - the AMP end of the step on the device: the inf/NaN check over gradient buffers, the
// global gradient norm, the fused unscale + clip + SGD update of fp32 masters (writing the 16-bit compute
// copies), GradScaler's one-thread update, the weight average (EMA), and casts between fp32, fp16 and bf16.
//
// These kernels are pure memory traffic (the SGD step moves 20 bytes per parameter: 16-bit grad in, fp32
// master and momentum in and out, 16-bit copy out), so each thread moves 16-byte vectors through a
// grid-stride loop. Buffers may start anywhere in a flat gradient buffer: a few leading elements are
// handled one at a time until the pointers reach a vector boundary, and the rest of the tail likewise.
// The SGD arithmetic uses explicit _rn intrinsics so nvcc cannot fuse it into FMAs: the result then
// matches the CPU reference (kernels/cpu/cpu_optim.c) to the last bit.
#include "kernels/cuda/cuda_elem.cuh"
#include "kernels/cuda/cuda_internal.h"
#include "amp/update_rules.h"

#define OPTIM_THREADS 256
#define OPTIM_MAX_BLOCKS 1056  // 8 blocks of 256 threads on each of the H200's 132 SMs

// How n elements split between vector and scalar work: elements [head, head + nvec * vec) go as
// vectors; the `rest` others (the head and the tail) one at a time.
typedef struct VecSplit {
    size_t head, nvec, rest;
} VecSplit;

// One pointer taking part in a vectorised loop: its address and element size.
typedef struct VecOperand {
    const void *ptr;
    size_t elem;
} VecOperand;

// The head is chosen so the first operand is vector-aligned; if the others are not aligned at the
// same element (different offsets into their buffers), everything goes the scalar way.
static VecSplit vec_split(size_t n, int vec, const VecOperand *ops, int count) {
    VecSplit sp = {n, 0, n};
    const size_t span0 = (size_t)vec * ops[0].elem;
    const uintptr_t addr0 = (uintptr_t)ops[0].ptr;
    if (addr0 % ops[0].elem != 0) return sp;
    size_t head = ((span0 - addr0 % span0) % span0) / ops[0].elem;
    if (head >= n) return sp;
    for (int k = 1; k < count; k++) {
        if (!ops[k].ptr) continue;
        if (((uintptr_t)ops[k].ptr + head * ops[k].elem) % ((size_t)vec * ops[k].elem) != 0) return sp;
    }
    sp.head = head;
    sp.nvec = (n - head) / vec;
    sp.rest = n - sp.nvec * vec;
    return sp;
}

static unsigned optim_blocks(size_t work) {
    return grid_stride_blocks(work, OPTIM_THREADS, OPTIM_MAX_BLOCKS);
}

// Index of the r-th scalar element: the head first, then the tail after the vector body.
static __device__ __forceinline__ size_t scalar_index(size_t r, VecSplit sp, int vec) {
    return r < sp.head ? r : r + sp.nvec * vec;
}

// ---- nonfinite_check ---------------------------------------------------------------------------------

// grad (n) T -> *flag = 1 if any element is inf or NaN. Threads that see one store the same value, so
// the race is harmless; nobody ever stores 0.
template <typename T>
__global__ void nonfinite_check_kernel(const T *grad, VecSplit sp, float *flag) {
    constexpr int VEC = 16 / sizeof(T);
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    bool bad = false;
    for (size_t v = tid; v < sp.nvec; v += stride) {
        const ElemPack<T, VEC> pk = *(const ElemPack<T, VEC> *)(grad + sp.head + v * VEC);
#pragma unroll
        for (int j = 0; j < VEC; j++) bad |= !isfinite(to_f32(pk.e[j]));
    }
    for (size_t r = tid; r < sp.rest; r += stride) bad |= !isfinite(to_f32(grad[scalar_index(r, sp, VEC)]));
    if (bad) *flag = 1.0f;
}

void cuda_nonfinite_check(Backend *be, DType dt, const void *grad, size_t n, float *flag) {
    if (n == 0) return;
    cudaStream_t stream = cuda_state(be)->stream;
    const int vec = (int)(16 / dtype_size(dt));
    const VecOperand ops[1] = {{grad, dtype_size(dt)}};
    const VecSplit sp = vec_split(n, vec, ops, 1);
    const unsigned blocks = optim_blocks(sp.nvec > sp.rest ? sp.nvec : sp.rest);
    with_elem(dt, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        nonfinite_check_kernel<T><<<blocks, OPTIM_THREADS, 0, stream>>>((const T *)grad, sp, flag);
    });
    CUDA_CHECK_LAUNCH();
}

// ---- grad_norm -----------------------------------------------------------------------------------------

#define NORM_THREADS 256  // the block size of both kernels; a power of two for the tree

// The sum of the NORM_THREADS values in s[] (shared), left in s[0]: a tree in a fixed order, so the same
// inputs give the same bits.
static __device__ __forceinline__ void block_tree_sum(float *s) {
    for (int width = NORM_THREADS / 2; width > 0; width /= 2) {
        __syncthreads();
        if ((int)threadIdx.x < width) s[threadIdx.x] = __fadd_rn(s[threadIdx.x], s[threadIdx.x + width]);
    }
    __syncthreads();
}

// grad (n) T -> partial[blockIdx.x] = this block's sum of (grad * (1/S))^2 in fp32. Every thread walks a
// fixed set of elements in a fixed order: the grid depends on n (and grad's alignment) only.
template <typename T>
__global__ void grad_sumsq_kernel(const T *grad, VecSplit sp, const ScalerState *state, float *partial) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ float s[NORM_THREADS];
    const float inv_scale = __fdiv_rn(1.0f, state->scale);
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (size_t v = tid; v < sp.nvec; v += stride) {
        const ElemPack<T, VEC> pk = *(const ElemPack<T, VEC> *)(grad + sp.head + v * VEC);
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const float u = __fmul_rn(to_f32(pk.e[j]), inv_scale);
            acc = __fmaf_rn(u, u, acc);
        }
    }
    for (size_t r = tid; r < sp.rest; r += stride) {
        const float u = __fmul_rn(to_f32(grad[scalar_index(r, sp, VEC)]), inv_scale);
        acc = __fmaf_rn(u, u, acc);
    }
    s[threadIdx.x] = acc;
    block_tree_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

// partial (count) -> *norm = sqrt of their sum, one block.
__global__ void grad_norm_finish_kernel(const float *partial, unsigned count, float *norm) {
    __shared__ float s[NORM_THREADS];
    float acc = 0.0f;
    for (unsigned i = threadIdx.x; i < count; i += NORM_THREADS) acc = __fadd_rn(acc, partial[i]);
    s[threadIdx.x] = acc;
    block_tree_sum(s);
    if (threadIdx.x == 0) *norm = __fsqrt_rn(s[0]);
}

void cuda_grad_norm(Backend *be, DType dt, const void *grad, size_t n, const ScalerState *state,
                    float *norm) {
    CudaBackend *cb = cuda_state(be);
    cudaStream_t stream = cb->stream;
    const int vec = (int)(16 / dtype_size(dt));
    const VecOperand ops[1] = {{grad, dtype_size(dt)}};
    const VecSplit sp = vec_split(n, vec, ops, 1);
    static_assert(NORM_THREADS == OPTIM_THREADS, "optim_blocks counts blocks of OPTIM_THREADS");
    const unsigned blocks = optim_blocks(sp.nvec > sp.rest ? sp.nvec : sp.rest);
    float *partial = (float *)cuda_scratch_get(cb, blocks * sizeof(float));
    with_elem(dt, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        grad_sumsq_kernel<T><<<blocks, NORM_THREADS, 0, stream>>>((const T *)grad, sp, state, partial);
    });
    CUDA_CHECK_LAUNCH();
    grad_norm_finish_kernel<<<1, NORM_THREADS, 0, stream>>>(partial, blocks, norm);
    CUDA_CHECK_LAUNCH();
    cuda_scratch_put(cb, partial);  // stream order: the next user's kernels queue behind these
}

// ---- sgd_step ------------------------------------------------------------------------------------------

#define SGD_VEC 4  // 16 bytes of fp32 master and momentum, 8 (or 16) bytes of gradient, 8 of 16-bit copy

// grad (n) G; master, mom (n) fp32; copy (n) G (a 16-bit G) or NULL; decay_group (ceil(n / SGD_DECAY_SPAN))
// u8 or NULL (a byte per span, read from L1 by the threads of a span); grad_norm (1) or NULL. Skipped as a
// whole when the agreed verdict in state->found_inf is set, so a skipped step leaves every buffer bitwise as
// it was and never reads the norm.
template <typename G>
__global__ void sgd_step_kernel(VecSplit sp, const G *grad, float *master, float *mom, G *copy, SgdParams p,
                                const uint8_t *decay_group, const float *lr_ptr, const float *grad_norm,
                                const ScalerState *state) {
    if (state->found_inf != 0.0f) return;
    const float lr = *lr_ptr;
    // 1/S once, then a multiply, as GradScaler.unscale_ does (exact for S = 2^k).
    const float inv_scale = __fdiv_rn(1.0f, state->scale);
    const float clip = grad_norm ? clip_factor_rule(*grad_norm, p.max_norm) : 1.0f;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t v = tid; v < sp.nvec; v += stride) {
        const size_t i = sp.head + v * SGD_VEC;
        const ElemPack<G, SGD_VEC> g = *(const ElemPack<G, SGD_VEC> *)(grad + i);
        ElemPack<float, SGD_VEC> w = *(const ElemPack<float, SGD_VEC> *)(master + i);
        ElemPack<float, SGD_VEC> m = *(const ElemPack<float, SGD_VEC> *)(mom + i);
#pragma unroll
        for (int j = 0; j < SGD_VEC; j++)
            sgd_update_rule(to_f32(g.e[j]), inv_scale, clip, sgd_decay_of(&p, decay_group, i + j), lr, &p,
                            &w.e[j], &m.e[j]);
        *(ElemPack<float, SGD_VEC> *)(master + i) = w;
        *(ElemPack<float, SGD_VEC> *)(mom + i) = m;
        if (copy) pack_store<G, SGD_VEC>(copy + i, w.e);
    }
    for (size_t r = tid; r < sp.rest; r += stride) {
        const size_t i = scalar_index(r, sp, SGD_VEC);
        sgd_update_rule(to_f32(grad[i]), inv_scale, clip, sgd_decay_of(&p, decay_group, i), lr, &p,
                        &master[i], &mom[i]);
        if (copy) from_f32(&copy[i], master[i]);
    }
}

void cuda_sgd_step(Backend *be, size_t n, DType grad_dt, const void *grad, float *master, float *mom,
                   void *copy, const SgdParams *p, const uint8_t *decay_group, const float *lr,
                   const float *grad_norm, const ScalerState *state) {
    if (n == 0) return;
    AMP_ASSERT(!copy || dtype_is_16bit(grad_dt), "sgd_step: a compute copy in %s", dtype_name(grad_dt));
    cudaStream_t stream = cuda_state(be)->stream;
    const VecOperand ops[4] = {{master, 4},
                               {mom, 4},
                               {grad, dtype_size(grad_dt)},
                               {copy, dtype_size(grad_dt)}};
    const VecSplit sp = vec_split(n, SGD_VEC, ops, 4);
    const unsigned blocks = optim_blocks(sp.nvec > sp.rest ? sp.nvec : sp.rest);
    with_elem(grad_dt, [&](auto pk) {
        typedef typename decltype(pk)::type G;
        sgd_step_kernel<G><<<blocks, OPTIM_THREADS, 0, stream>>>(sp, (const G *)grad, master, mom, (G *)copy,
                                                                 *p, decay_group, lr, grad_norm, state);
    });
    CUDA_CHECK_LAUNCH();
}

// ---- scaler_update -------------------------------------------------------------------------------------

// GradScaler's rule on the device, one thread (src/amp/update_rules.h, as the CPU backend).
__global__ void scaler_update_kernel(ScalerState *state, float growth, float backoff, int interval,
                                     int dynamic) {
    scaler_update_rule(state, growth, backoff, interval, dynamic);
}

void cuda_scaler_update(Backend *be, ScalerState *state, float growth, float backoff, int interval,
                        int dynamic) {
    scaler_update_kernel<<<1, 1, 0, cuda_state(be)->stream>>>(state, growth, backoff, interval, dynamic);
    CUDA_CHECK_LAUNCH();
}

// ---- ema_update ----------------------------------------------------------------------------------------

#define EMA_VEC 4

// avg, src (n) fp32; nothing written when ctl->mode is EMA_SKIP.
__global__ void ema_update_kernel(VecSplit sp, float *avg, const float *src, const EmaControl *ctl_ptr) {
    const EmaControl ctl = *ctl_ptr;
    if (ctl.mode == EMA_SKIP) return;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t v = tid; v < sp.nvec; v += stride) {
        const size_t i = sp.head + v * EMA_VEC;
        ElemPack<float, EMA_VEC> a = *(const ElemPack<float, EMA_VEC> *)(avg + i);
        const ElemPack<float, EMA_VEC> x = *(const ElemPack<float, EMA_VEC> *)(src + i);
#pragma unroll
        for (int j = 0; j < EMA_VEC; j++) a.e[j] = ema_update_rule(&ctl, a.e[j], x.e[j]);
        *(ElemPack<float, EMA_VEC> *)(avg + i) = a;
    }
    for (size_t r = tid; r < sp.rest; r += stride) {
        const size_t i = scalar_index(r, sp, EMA_VEC);
        avg[i] = ema_update_rule(&ctl, avg[i], src[i]);
    }
}

void cuda_ema_update(Backend *be, size_t n, float *avg, const float *src, const EmaControl *ctl) {
    if (n == 0) return;
    const VecOperand ops[2] = {{avg, 4}, {src, 4}};
    const VecSplit sp = vec_split(n, EMA_VEC, ops, 2);
    const unsigned blocks = optim_blocks(sp.nvec > sp.rest ? sp.nvec : sp.rest);
    ema_update_kernel<<<blocks, OPTIM_THREADS, 0, cuda_state(be)->stream>>>(sp, avg, src, ctl);
    CUDA_CHECK_LAUNCH();
}

// ---- cast ------------------------------------------------------------------------------------------------

#define CAST_VEC 4

// src (n) S -> dst (n) D; narrowing rounds to nearest even and overflows to inf (__float2half_rn,
// __float2bfloat16_rn).
template <typename S, typename D>
__global__ void cast_kernel(VecSplit sp, const S *src, D *dst) {
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t v = tid; v < sp.nvec; v += stride) {
        const size_t i = sp.head + v * CAST_VEC;
        const ElemPack<S, CAST_VEC> in = *(const ElemPack<S, CAST_VEC> *)(src + i);
        ElemPack<D, CAST_VEC> out;
#pragma unroll
        for (int j = 0; j < CAST_VEC; j++) from_f32(&out.e[j], to_f32(in.e[j]));
        *(ElemPack<D, CAST_VEC> *)(dst + i) = out;
    }
    for (size_t r = tid; r < sp.rest; r += stride) {
        const size_t i = scalar_index(r, sp, CAST_VEC);
        from_f32(&dst[i], to_f32(src[i]));
    }
}

void cuda_cast(Backend *be, void *dst, DType dst_dt, const void *src, DType src_dt, size_t n) {
    if (n == 0) return;
    cudaStream_t stream = cuda_state(be)->stream;
    if (dst_dt == src_dt) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(dst_dt), cudaMemcpyDeviceToDevice, stream));
        return;
    }
    const VecOperand ops[2] = {{src, dtype_size(src_dt)}, {dst, dtype_size(dst_dt)}};
    const VecSplit sp = vec_split(n, CAST_VEC, ops, 2);
    const unsigned blocks = optim_blocks(sp.nvec > sp.rest ? sp.nvec : sp.rest);
    with_elem(src_dt, [&](auto src_pk) {
        with_elem(dst_dt, [&](auto dst_pk) {
            typedef typename decltype(src_pk)::type S;
            typedef typename decltype(dst_pk)::type D;
            cast_kernel<S, D><<<blocks, OPTIM_THREADS, 0, stream>>>(sp, (const S *)src, (D *)dst);
        });
    });
    CUDA_CHECK_LAUNCH();
}
