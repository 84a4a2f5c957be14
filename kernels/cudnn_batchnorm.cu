// cudnn_batchnorm.cu - batch norm over NHWC rows (rows = n*h*w, c channels) fused with the residual add
// and ReLU that end a ResNeXt block: y = act(gamma * (x - mean) * invstd + beta + residual).
//
// Two paths, same semantics (backend.h):
// - cuDNN's fused NHWC kernels (cudnnBatchNormalization{ForwardTraining,Backward}Ex, SPATIAL_PERSISTENT,
//   ops BN / BN_ACTIVATION / BN_ADD_ACTIVATION) for training whenever cuDNN takes the combination:
//   fp16 with C % 4 == 0 for the fused ops, plain BN for fp16 and fp32. That is one read of x (and
//   residual) per statistic pass and one write of y, with no separate ReLU/add kernels.
// - Our own kernels for everything else (fp32 with ReLU, residual without ReLU, dx accumulation, a
//   backward whose forward did not run on cuDNN) and for inference: per-channel reductions in fp32
//   inside a block, partials merged per channel in a fixed order in fp64 - deterministic, no atomics.
//
// cuDNN semantics checked against backend.h: exponentialAverageFactor is torch's momentum; the running
// variance is updated with the unbiased batch variance (as torch, which calls these same functions);
// resultSaveInvVariance is 1/sqrt(var + eps) = save_invstd; dBnScale/dBnBias are fp32, so they land in
// fp32 scratch and a small kernel stores them in dt, honouring accumulate_params.
//
// Reserve space (decision (b) of the design): the Ex forward leaves state for the Ex backward of the
// same layer, and bn_backward has no argument for it. On cuDNN 9.19 / H200 (NHWC) plain BN and
// BN_ACTIVATION ask for 0 bytes, BN_ADD_ACTIVATION for its ReLU bit mask (rows * c / 8 bytes, rounded up). A per-backend table keyed by the layer's save_mean pointer (unique per layer in the model) keeps
// each layer's reserve space, the ops its forward ran and its beta (cuDNN's BN_ACTIVATION backward
// recomputes the ReLU mask from x, mean, invstd, gamma and beta). A backward finds its forward there;
// if it finds none, or the forward took our own path, or dx accumulates, it runs our own backward,
// which needs only x, y, dy and the saved statistics.
#include <stdlib.h>
#include <string.h>

#include "cuda_elem.cuh"
#include "cuda_internal.h"

#define BN_TILE_C 32          // channels per reduction block (threadIdx.x): 64-128 B per row read
#define BN_TILE_ROWS 8        // row lanes per reduction block (threadIdx.y)
#define BN_CHUNK_ROWS 512     // rows per reduction block: 64 per thread, exact enough in fp32
#define BN_ELEMENTWISE_THREADS 256

// ---- the per-layer reserve-space table ------------------------------------------------------------

typedef struct BnLayer {
    const float *save_mean;     // the key: this layer's save_mean buffer
    int cudnn;                  // 1: the last training forward of this layer ran on cuDNN
    cudnnBatchNormOps_t ops;    // the ops it ran
    int rows, c;
    DType dt;
    float eps;                  // the forward's eps: cuDNN's backward must see the same
    const float *beta;          // (c) fp32, the forward's beta
    void *reserve;              // cuDNN reserve space, from be->alloc
    size_t reserve_bytes, reserve_capacity;
} BnLayer;

struct CudaBnCache {
    Backend *be;      // whose allocator holds the reserve spaces
    BnLayer *layers;  // linear table: one entry per batch-norm layer of the model
    int count, capacity;
};

static BnLayer *bn_layer_lookup(Backend *be, const float *save_mean) {
    CudaBackend *cb = cuda_state(be);
    if (!cb->bn_cache) {
        cb->bn_cache = (CudaBnCache *)xcalloc(1, sizeof(CudaBnCache));
        cb->bn_cache->be = be;
    }
    CudaBnCache *cache = cb->bn_cache;
    for (int i = 0; i < cache->count; i++)
        if (cache->layers[i].save_mean == save_mean) return &cache->layers[i];
    return NULL;
}

static BnLayer *bn_layer_get(Backend *be, const float *save_mean) {
    BnLayer *layer = bn_layer_lookup(be, save_mean);
    if (layer) return layer;
    CudaBnCache *cache = cuda_state(be)->bn_cache;
    if (cache->count == cache->capacity) {
        int capacity = cache->capacity ? 2 * cache->capacity : 64;
        BnLayer *layers = (BnLayer *)xcalloc((size_t)capacity, sizeof(BnLayer));
        if (cache->count) memcpy(layers, cache->layers, (size_t)cache->count * sizeof(BnLayer));
        free(cache->layers);
        cache->layers = layers;
        cache->capacity = capacity;
    }
    layer = &cache->layers[cache->count++];
    layer->save_mean = save_mean;
    return layer;
}

static void bn_layer_reserve(Backend *be, BnLayer *layer, size_t bytes) {
    if (bytes > layer->reserve_capacity) {
        be->free(be, layer->reserve);
        layer->reserve = be->alloc(be, bytes);
        layer->reserve_capacity = bytes;
    }
    layer->reserve_bytes = bytes;
}

void cuda_bn_cache_destroy(CudaBackend *cb) {
    CudaBnCache *cache = cb->bn_cache;
    if (!cache) return;
    for (int i = 0; i < cache->count; i++) cache->be->free(cache->be, cache->layers[i].reserve);
    free(cache->layers);
    free(cache);
    cb->bn_cache = NULL;
}

// ---- device helpers ---------------------------------------------------------------------------------

// Element i of an fp16 or fp32 buffer, as fp32 (the branch is uniform across a launch).
static __device__ __forceinline__ float bn_load(const void *p, size_t i, int half) {
    return half ? __half2float(((const __half *)p)[i]) : ((const float *)p)[i];
}

static __device__ __forceinline__ void bn_store(void *p, size_t i, int half, float v) {
    if (half)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((float *)p)[i] = v;
}

// Sums v over the BN_TILE_ROWS lanes of a (BN_TILE_C, BN_TILE_ROWS) block in a fixed tree; lane 0 of
// threadIdx.y gets the total. buf: BN_TILE_ROWS * BN_TILE_C floats of shared memory.
static __device__ float bn_block_sum_rows(float v, float *buf) {
    buf[threadIdx.y * BN_TILE_C + threadIdx.x] = v;
    __syncthreads();
    for (int half_lanes = BN_TILE_ROWS / 2; half_lanes > 0; half_lanes /= 2) {
        if (threadIdx.y < half_lanes)
            buf[threadIdx.y * BN_TILE_C + threadIdx.x] += buf[(threadIdx.y + half_lanes) * BN_TILE_C + threadIdx.x];
        __syncthreads();
    }
    float total = buf[threadIdx.x];
    __syncthreads();
    return total;
}

// ---- our own kernels: forward statistics ----------------------------------------------------------

// grid (ceil(c / BN_TILE_C), chunks), block (BN_TILE_C, BN_TILE_ROWS). Block (bx, by) reduces channels
// [bx*32, bx*32+32) over rows [by*BN_CHUNK_ROWS, ...). Sums are shifted by the chunk's first value of
// the channel so the sum of squares does not cancel; each chunk leaves (mean, m2) of its rows.
// x (rows, c) dt -> part_mean, part_m2 (chunks, c) fp32
__global__ void bn_stats_partial_kernel(const void *x, int half, int rows, int c, float *part_mean,
                                        float *part_m2) {
    __shared__ float buf[BN_TILE_ROWS * BN_TILE_C];
    const int ch = blockIdx.x * BN_TILE_C + threadIdx.x;
    const int r0 = blockIdx.y * BN_CHUNK_ROWS;
    const int r1 = min(rows, r0 + BN_CHUNK_ROWS);
    const int active = ch < c;
    const float shift = active ? bn_load(x, (size_t)r0 * c + ch, half) : 0.0f;
    float s = 0.0f, q = 0.0f;
    if (active)
        for (int r = r0 + threadIdx.y; r < r1; r += BN_TILE_ROWS) {
            const float d = bn_load(x, (size_t)r * c + ch, half) - shift;
            s += d;
            q += d * d;
        }
    s = bn_block_sum_rows(s, buf);
    q = bn_block_sum_rows(q, buf);
    if (threadIdx.y == 0 && active) {
        const float n = (float)(r1 - r0);
        part_mean[(size_t)blockIdx.y * c + ch] = shift + s / n;
        part_m2[(size_t)blockIdx.y * c + ch] = fmaxf(q - s * s / n, 0.0f);
    }
}

// One thread per channel: merges the chunks in order (Chan et al., fp64), updates the running
// statistics (unbiased variance, as torch), saves mean and invstd, and leaves the affine map
// y = scale * x + shift for the apply kernel.
// part_* (chunks, c) fp32 -> save_mean, save_invstd, scale, shift (c) fp32; running_* (c) fp32 (nullable)
__global__ void bn_stats_finalize_kernel(const float *part_mean, const float *part_m2, int chunks, int rows,
                                         int c, const float *gamma, const float *beta, float *running_mean,
                                         float *running_var, float momentum, float eps, float *save_mean,
                                         float *save_invstd, float *scale, float *shift) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double n = 0.0, mean = 0.0, m2 = 0.0;
    for (int k = 0; k < chunks; k++) {
        const double nb = (double)min(BN_CHUNK_ROWS, rows - k * BN_CHUNK_ROWS);
        const double mb = part_mean[(size_t)k * c + ch];
        const double delta = mb - mean;
        const double total = n + nb;
        mean += delta * nb / total;
        m2 += part_m2[(size_t)k * c + ch] + delta * delta * n * nb / total;
        n = total;
    }
    const double var = m2 / n;
    const float invstd = (float)(1.0 / sqrt(var + (double)eps));
    save_mean[ch] = (float)mean;
    save_invstd[ch] = invstd;
    if (running_mean) running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * (float)mean;
    if (running_var) running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * (float)(m2 / (n - 1.0));
    scale[ch] = gamma[ch] * invstd;
    shift[ch] = beta[ch] - (float)mean * scale[ch];
}

// Inference: the affine map from the running statistics. (c) fp32 -> scale, shift (c) fp32
__global__ void bn_eval_affine_kernel(int c, const float *gamma, const float *beta, const float *running_mean,
                                      const float *running_var, float eps, float *scale, float *shift) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    const float s = gamma[ch] * rsqrtf(running_var[ch] + eps);
    scale[ch] = s;
    shift[ch] = beta[ch] - running_mean[ch] * s;
}

// Recomputing a training forward: the affine map from the saved batch statistics, as
// bn_stats_finalize_kernel forms it. (c) fp32 -> scale, shift (c) fp32
__global__ void bn_saved_affine_kernel(int c, const float *gamma, const float *beta, const float *save_mean,
                                       const float *save_invstd, float *scale, float *shift) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    scale[ch] = gamma[ch] * save_invstd[ch];
    shift[ch] = beta[ch] - save_mean[ch] * scale[ch];
}

// The elementwise passes below move VEC consecutive elements of one row at a time (one 16-byte load
// when c % VEC == 0 and the buffers are aligned, else VEC = 1). A thread's first pack gives its channel
// by one division; each grid stride then moves the channel by a fixed amount, so the loop divides nothing.
template <int VEC>
struct ChannelWalk {
    int pack, packs_per_row, step;  // the current pack's index within its row; step = stride mod row
    __device__ ChannelWalk(size_t first, size_t stride, int c)
        : pack((int)(first % (size_t)(c / VEC))), packs_per_row(c / VEC), step((int)(stride % (size_t)(c / VEC))) {}
    __device__ int channel() const { return pack * VEC; }
    __device__ void advance() {
        pack += step;
        if (pack >= packs_per_row) pack -= packs_per_row;
    }
};

// y = act(scale[ch] * x + shift[ch] + residual); the ReLU keeps NaN (as torch's).
// x, residual (nullable), y (rows, c) T; scale, shift (c) fp32; packs = rows * c / VEC
template <typename T, int VEC>
__global__ void bn_apply_kernel(const T *x, const T *residual, int relu, size_t packs, int c, const float *scale,
                                const float *shift, T *y) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    ChannelWalk<VEC> walk(j, stride, c);
    for (; j < packs; j += stride, walk.advance()) {
        float v[VEC], r[VEC];
        pack_load<T, VEC>(x + j * VEC, v);
        if (residual) pack_load<T, VEC>(residual + j * VEC, r);
        const int ch = walk.channel();
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            v[k] = scale[ch + k] * v[k] + shift[ch + k];
            if (residual) v[k] += r[k];
            if (relu && v[k] < 0.0f) v[k] = 0.0f;
        }
        pack_store<T, VEC>(y + j * VEC, v);
    }
}

// ---- our own kernels: backward ----------------------------------------------------------------------

// Per chunk of rows (same grid as bn_stats_partial_kernel): sums of g and g * (x - mean), where g is dy
// masked by the ReLU (y > 0) when relu is set.
// x, y, dy (rows, c) dt; save_mean (c) -> part_g, part_gx (chunks, c) fp32
__global__ void bn_backward_partial_kernel(const void *x, const void *y, const void *dy, int relu, int half,
                                           int rows, int c, const float *save_mean, float *part_g,
                                           float *part_gx) {
    __shared__ float buf[BN_TILE_ROWS * BN_TILE_C];
    const int ch = blockIdx.x * BN_TILE_C + threadIdx.x;
    const int r0 = blockIdx.y * BN_CHUNK_ROWS;
    const int r1 = min(rows, r0 + BN_CHUNK_ROWS);
    const int active = ch < c;
    const float mean = active ? save_mean[ch] : 0.0f;
    float sg = 0.0f, sgx = 0.0f;
    if (active)
        for (int r = r0 + threadIdx.y; r < r1; r += BN_TILE_ROWS) {
            const size_t i = (size_t)r * c + ch;
            const float g = relu && !(bn_load(y, i, half) > 0.0f) ? 0.0f : bn_load(dy, i, half);
            sg += g;
            sgx += g * (bn_load(x, i, half) - mean);
        }
    sg = bn_block_sum_rows(sg, buf);
    sgx = bn_block_sum_rows(sgx, buf);
    if (threadIdx.y == 0 && active) {
        part_g[(size_t)blockIdx.y * c + ch] = sg;
        part_gx[(size_t)blockIdx.y * c + ch] = sgx;
    }
}

// One thread per channel: dbeta = sum g, dgamma = invstd * sum g (x - mean), stored in dt (+= with
// accumulate_params), and the coefficients of dx = k_scale * (g - k_mean - (x - mean) * k_xmu).
// part_* (chunks, c) fp32 -> dgamma, dbeta (c) dt; coef (3, c) fp32
__global__ void bn_backward_finalize_kernel(const float *part_g, const float *part_gx, int chunks, int rows,
                                            int c, int half, const float *gamma, const float *save_invstd,
                                            void *dgamma, void *dbeta, int accumulate_params, float *coef) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double sg = 0.0, sgx = 0.0;
    for (int k = 0; k < chunks; k++) {
        sg += part_g[(size_t)k * c + ch];
        sgx += part_gx[(size_t)k * c + ch];
    }
    const float invstd = save_invstd[ch];
    const float db = (float)sg, dg = (float)sgx * invstd;
    bn_store(dbeta, ch, half, db + (accumulate_params ? bn_load(dbeta, ch, half) : 0.0f));
    bn_store(dgamma, ch, half, dg + (accumulate_params ? bn_load(dgamma, ch, half) : 0.0f));
    coef[ch] = gamma[ch] * invstd;
    coef[c + ch] = (float)(sg / rows);
    coef[2 * c + ch] = (float)(sgx / rows) * invstd * invstd;
}

// dx (= or +=) k_scale * (g - k_mean - (x - mean) * k_xmu); d_residual (nullable) = g.
// x, y, dy, dx, d_residual (rows, c) T; save_mean (c); coef (3, c) fp32; packs = rows * c / VEC
template <typename T, int VEC>
__global__ void bn_backward_apply_kernel(const T *x, const T *y, const T *dy, int relu, size_t packs, int c,
                                         const float *save_mean, const float *coef, T *dx, int accumulate,
                                         T *d_residual) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    ChannelWalk<VEC> walk(j, stride, c);
    for (; j < packs; j += stride, walk.advance()) {
        float xv[VEC], g[VEC], yv[VEC], d[VEC];
        pack_load<T, VEC>(x + j * VEC, xv);
        pack_load<T, VEC>(dy + j * VEC, g);
        if (relu) pack_load<T, VEC>(y + j * VEC, yv);
        if (accumulate) pack_load<T, VEC>(dx + j * VEC, d);
        const int ch = walk.channel();
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            if (relu && !(yv[k] > 0.0f)) g[k] = 0.0f;
            const float v = coef[ch + k] * (g[k] - coef[c + ch + k] - (xv[k] - save_mean[ch + k]) * coef[2 * c + ch + k]);
            d[k] = accumulate ? d[k] + v : v;
        }
        pack_store<T, VEC>(dx + j * VEC, d);
        if (d_residual) pack_store<T, VEC>(d_residual + j * VEC, g);
    }
}

// ---- kernels around cuDNN's path --------------------------------------------------------------------

// cuDNN's fp32 parameter gradients into dt. src (2, c) fp32 -> dgamma, dbeta (c) dt (= or +=)
__global__ void bn_param_grads_store_kernel(const float *src, int c, int half, void *dgamma, void *dbeta,
                                            int accumulate_params) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    bn_store(dgamma, ch, half, src[ch] + (accumulate_params ? bn_load(dgamma, ch, half) : 0.0f));
    bn_store(dbeta, ch, half, src[c + ch] + (accumulate_params ? bn_load(dbeta, ch, half) : 0.0f));
}

// d_residual = dy masked by the ReLU (y > 0), for a BN_ACTIVATION layer whose caller wants it.
// y, dy, d_residual (count) dt
__global__ void bn_relu_mask_kernel(const void *y, const void *dy, int half, size_t count, void *d_residual) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        bn_store(d_residual, i, half, bn_load(y, i, half) > 0.0f ? bn_load(dy, i, half) : 0.0f);
}

// ---- launch helpers -----------------------------------------------------------------------------------

static int bn_chunks(int rows) { return (rows + BN_CHUNK_ROWS - 1) / BN_CHUNK_ROWS; }

static dim3 bn_reduce_grid(int rows, int c) { return dim3((c + BN_TILE_C - 1) / BN_TILE_C, bn_chunks(rows)); }

static int bn_channel_blocks(int c) { return (c + BN_ELEMENTWISE_THREADS - 1) / BN_ELEMENTWISE_THREADS; }

// Enough blocks to fill the GPU several times over (an H200 has 132 SMs); the kernels stride over the rest.
#define BN_ELEMENTWISE_MAX_BLOCKS 4096
static int bn_elementwise_blocks(size_t count) {
    size_t blocks = (count + BN_ELEMENTWISE_THREADS - 1) / BN_ELEMENTWISE_THREADS;
    return (int)(blocks < BN_ELEMENTWISE_MAX_BLOCKS ? (blocks ? blocks : 1) : BN_ELEMENTWISE_MAX_BLOCKS);
}

static size_t bn_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

// y = act(scale * x + shift + residual) over (rows, c) dt
static void bn_apply(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *residual, int relu,
                     const float *scale, const float *shift, void *y) {
    const int vec = pack_width(dt, c, {x, residual, y});
    const size_t packs = (size_t)rows * c / vec;
    with_pack(dt, vec, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        bn_apply_kernel<T, decltype(pk)::vec><<<bn_elementwise_blocks(packs), BN_ELEMENTWISE_THREADS, 0, cb->stream>>>(
            (const T *)x, (const T *)residual, relu, packs, c, scale, shift, (T *)y);
    });
    CUDA_CHECK_LAUNCH();
}

// dx (= or +=) from the coefficients; d_residual (nullable) = dy masked by the ReLU. (rows, c) dt
static void bn_backward_apply(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *y,
                              const void *dy, int relu, const float *save_mean, const float *coef, void *dx,
                              int accumulate, void *d_residual) {
    const int vec = pack_width(dt, c, {x, y, dy, dx, d_residual});
    const size_t packs = (size_t)rows * c / vec;
    with_pack(dt, vec, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        bn_backward_apply_kernel<T, decltype(pk)::vec>
            <<<bn_elementwise_blocks(packs), BN_ELEMENTWISE_THREADS, 0, cb->stream>>>(
                (const T *)x, (const T *)y, (const T *)dy, relu, packs, c, save_mean, coef, (T *)dx, accumulate,
                (T *)d_residual);
    });
    CUDA_CHECK_LAUNCH();
}

// 1 when cuDNN ran (or sized) the call, 0 when it does not support this combination; any other
// status ends the job like CUDNN_CHECK.
#define BN_CUDNN_TRY(expr) bn_cudnn_try((expr), #expr, __FILE__, __LINE__)
static int bn_cudnn_try(cudnnStatus_t st, const char *what, const char *file, int line) {
    if (st == CUDNN_STATUS_SUCCESS) return 1;
    if (st == CUDNN_STATUS_NOT_SUPPORTED) return 0;
    amp_fatal(file, line, "%s: %s", what, cudnnGetErrorString(st));
}

// Descriptors of one cuDNN batch-norm call: the (rows, c) activation as an NHWC tensor of shape
// N=1, C=c, H=rows, W=1 (strides make it unambiguously channels-last), the (1, c, 1, 1) fp32
// parameter tensor, and the ReLU.
typedef struct BnDescs {
    cudnnTensorDescriptor_t act;
    cudnnTensorDescriptor_t param;
    cudnnActivationDescriptor_t relu;
} BnDescs;

static void bn_descs_create(BnDescs *d, int rows, int c, DType dt) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->act));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(d->act, CUDNN_TENSOR_NHWC, cudnn_dtype(dt), 1, c, rows, 1));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->param));
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(d->param, d->act, CUDNN_BATCHNORM_SPATIAL_PERSISTENT));
    CUDNN_CHECK(cudnnCreateActivationDescriptor(&d->relu));
    CUDNN_CHECK(cudnnSetActivationDescriptor(d->relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
}

static void bn_descs_destroy(BnDescs *d) {
    CUDNN_CHECK(cudnnDestroyTensorDescriptor(d->act));
    CUDNN_CHECK(cudnnDestroyTensorDescriptor(d->param));
    CUDNN_CHECK(cudnnDestroyActivationDescriptor(d->relu));
}

static cudnnBatchNormOps_t bn_ops_for(const void *residual, int relu) {
    if (residual) return CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    return relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN;
}

// The combinations cuDNN's fused NHWC kernels document: plain BN in fp16 or fp32; BN+ReLU and
// BN+add+ReLU only in fp16 with C % 4 == 0. Residual without ReLU has no cuDNN op.
static int bn_cudnn_may_take(int c, DType dt, const void *residual, int relu) {
    if (residual && !relu) return 0;
    if (!relu) return 1;
    return dt == DTYPE_F16 && c % 4 == 0;
}

// ---- training forward ------------------------------------------------------------------------------

// The cuDNN path; 0 (nothing written) when cuDNN declines the combination.
static int bn_forward_train_cudnn(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                                  int relu, const float *gamma, const float *beta, float *running_mean,
                                  float *running_var, float momentum, float eps, float *save_mean,
                                  float *save_invstd, void *y) {
    CudaBackend *cb = cuda_state(be);
    const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
    const cudnnBatchNormOps_t ops = bn_ops_for(residual, relu);
    BnDescs d;
    bn_descs_create(&d, rows, c, dt);
    cudnnActivationDescriptor_t act = ops == CUDNN_BATCHNORM_OPS_BN ? NULL : d.relu;
    cudnnTensorDescriptor_t z_desc = residual ? d.act : NULL;
    size_t ws_bytes = 0, reserve_bytes = 0;
    int ok = BN_CUDNN_TRY(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                 cb->cudnn, mode, ops, d.act, z_desc, d.act, d.param, act, &ws_bytes)) &&
             BN_CUDNN_TRY(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cb->cudnn, mode, ops, act, d.act,
                                                                               &reserve_bytes));
    if (ok) {
        BnLayer *layer = bn_layer_get(be, save_mean);
        bn_layer_reserve(be, layer, reserve_bytes);
        void *ws = cuda_workspace(cb, ws_bytes);
        const float one = 1.0f, zero = 0.0f;
        ok = BN_CUDNN_TRY(cudnnBatchNormalizationForwardTrainingEx(
            cb->cudnn, mode, ops, &one, &zero, d.act, x, z_desc, residual, d.act, y, d.param, gamma, beta,
            (double)momentum, running_mean, running_var, (double)eps, save_mean, save_invstd, act, ws, ws_bytes,
            layer->reserve, reserve_bytes));
        layer->cudnn = ok;
        layer->ops = ops;
        layer->rows = rows;
        layer->c = c;
        layer->dt = dt;
        layer->eps = eps;
        layer->beta = beta;
    }
    bn_descs_destroy(&d);
    return ok;
}

// Our own path: statistics (two kernels), then one fused apply pass.
static void bn_forward_train_own(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                                 int relu, const float *gamma, const float *beta, float *running_mean,
                                 float *running_var, float momentum, float eps, float *save_mean,
                                 float *save_invstd, void *y) {
    CudaBackend *cb = cuda_state(be);
    const int chunks = bn_chunks(rows), half = dt == DTYPE_F16;
    const size_t part = bn_align((size_t)chunks * c * sizeof(float)), vec = bn_align((size_t)c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, 2 * part + 2 * vec);
    float *part_mean = (float *)ws, *part_m2 = (float *)(ws + part);
    float *scale = (float *)(ws + 2 * part), *shift = (float *)(ws + 2 * part + vec);

    BnLayer *layer = bn_layer_lookup(be, save_mean);
    if (layer) layer->cudnn = 0;

    bn_stats_partial_kernel<<<bn_reduce_grid(rows, c), dim3(BN_TILE_C, BN_TILE_ROWS), 0, cb->stream>>>(
        x, half, rows, c, part_mean, part_m2);
    CUDA_CHECK_LAUNCH();
    bn_stats_finalize_kernel<<<bn_channel_blocks(c), BN_ELEMENTWISE_THREADS, 0, cb->stream>>>(
        part_mean, part_m2, chunks, rows, c, gamma, beta, running_mean, running_var, momentum, eps, save_mean,
        save_invstd, scale, shift);
    CUDA_CHECK_LAUNCH();
    bn_apply(cb, rows, c, dt, x, residual, relu, scale, shift, y);
}

// x, residual (nullable), y (rows, c) dt; gamma, beta, running_*, save_* (c) fp32
void cuda_bn_forward_train(Backend *be, int rows, int c, DType dt, const void *x, const void *residual, int relu,
                           const float *gamma, const float *beta, float *running_mean, float *running_var,
                           float momentum, float eps, float *save_mean, float *save_invstd, void *y) {
    // torch refuses one value per channel too: the unbiased variance would divide by zero.
    AMP_ASSERT(rows > 1, "batch norm in training needs more than 1 value per channel (rows=%d)", rows);
    AMP_ASSERT(eps >= CUDNN_BN_MIN_EPSILON, "batch norm eps %g below cuDNN's minimum %g", (double)eps,
               CUDNN_BN_MIN_EPSILON);
    if (bn_cudnn_may_take(c, dt, residual, relu) &&
        bn_forward_train_cudnn(be, rows, c, dt, x, residual, relu, gamma, beta, running_mean, running_var,
                               momentum, eps, save_mean, save_invstd, y))
        return;
    bn_forward_train_own(be, rows, c, dt, x, residual, relu, gamma, beta, running_mean, running_var, momentum, eps,
                         save_mean, save_invstd, y);
}

// ---- inference ----------------------------------------------------------------------------------------

// One memory-bound pass: y = act(x * scale + shift + residual) with the running statistics.
// x, residual (nullable), y (rows, c) dt; gamma, beta, running_* (c) fp32
void cuda_bn_forward_eval(Backend *be, int rows, int c, DType dt, const void *x, const void *residual, int relu,
                          const float *gamma, const float *beta, const float *running_mean,
                          const float *running_var, float eps, void *y) {
    CudaBackend *cb = cuda_state(be);
    const size_t vec = bn_align((size_t)c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, 2 * vec);
    float *scale = (float *)ws, *shift = (float *)(ws + vec);
    bn_eval_affine_kernel<<<bn_channel_blocks(c), BN_ELEMENTWISE_THREADS, 0, cb->stream>>>(
        c, gamma, beta, running_mean, running_var, eps, scale, shift);
    CUDA_CHECK_LAUNCH();
    bn_apply(cb, rows, c, dt, x, residual, relu, scale, shift, y);
}

// bn_forward_train's y again from its saved statistics: one memory-bound pass (backend.h).
void cuda_bn_forward_saved(Backend *be, int rows, int c, DType dt, const void *x, int relu, const float *gamma,
                           const float *beta, const float *save_mean, const float *save_invstd, void *y) {
    CudaBackend *cb = cuda_state(be);
    const size_t vec = bn_align((size_t)c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, 2 * vec);
    float *scale = (float *)ws, *shift = (float *)(ws + vec);
    bn_saved_affine_kernel<<<bn_channel_blocks(c), BN_ELEMENTWISE_THREADS, 0, cb->stream>>>(
        c, gamma, beta, save_mean, save_invstd, scale, shift);
    CUDA_CHECK_LAUNCH();
    bn_apply(cb, rows, c, dt, x, NULL, relu, scale, shift, y);
}

// ---- backward -------------------------------------------------------------------------------------------

// The cuDNN path, for a layer whose forward ran on cuDNN with the same shape, dtype and ReLU, when dx is
// overwritten. 0 (nothing written) when cuDNN declines.
static int bn_backward_cudnn(Backend *be, const BnLayer *layer, int rows, int c, DType dt, const void *x,
                             const void *y, const void *dy, const float *gamma, const float *save_mean,
                             const float *save_invstd, void *dx, void *dgamma, void *dbeta, int accumulate_params,
                             void *d_residual) {
    CudaBackend *cb = cuda_state(be);
    const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
    const cudnnBatchNormOps_t ops = layer->ops;
    const int with_add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    const size_t count = (size_t)rows * c;
    BnDescs d;
    bn_descs_create(&d, rows, c, dt);
    cudnnActivationDescriptor_t act = ops == CUDNN_BATCHNORM_OPS_BN ? NULL : d.relu;
    cudnnTensorDescriptor_t y_desc = ops == CUDNN_BATCHNORM_OPS_BN ? NULL : d.act;
    cudnnTensorDescriptor_t dz_desc = with_add ? d.act : NULL;
    size_t ws_bytes = 0;
    int ok = BN_CUDNN_TRY(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        cb->cudnn, mode, ops, d.act, y_desc, d.act, dz_desc, d.act, d.param, act, &ws_bytes));
    if (ok) {
        // Workspace: cuDNN's, then dgamma/dbeta in fp32 (2, c), then dz when BN_ADD_ACTIVATION must
        // produce one the caller did not ask for.
        const size_t params_off = bn_align(ws_bytes), dz_off = params_off + bn_align(2 * (size_t)c * sizeof(float));
        const int dz_scratch = with_add && !d_residual;
        char *ws = (char *)cuda_workspace(cb, dz_off + (dz_scratch ? count * dtype_size(dt) : 0));
        float *dparams = (float *)(ws + params_off);
        void *dz = with_add ? (d_residual ? d_residual : (void *)(ws + dz_off)) : NULL;
        const float one = 1.0f, zero = 0.0f;
        ok = BN_CUDNN_TRY(cudnnBatchNormalizationBackwardEx(
            cb->cudnn, mode, ops, &one, &zero, &one, &zero, d.act, x, y_desc, y_desc ? y : NULL, d.act, dy, dz_desc,
            dz, d.act, dx, d.param, gamma, layer->beta, dparams, dparams + c, (double)layer->eps, save_mean,
            save_invstd, act, ws, ws_bytes, layer->reserve, layer->reserve_bytes));
        if (ok) {
            bn_param_grads_store_kernel<<<bn_channel_blocks(c), BN_ELEMENTWISE_THREADS, 0, cb->stream>>>(
                dparams, c, dt == DTYPE_F16, dgamma, dbeta, accumulate_params);
            CUDA_CHECK_LAUNCH();
            if (d_residual && ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION) {
                bn_relu_mask_kernel<<<bn_elementwise_blocks(count), BN_ELEMENTWISE_THREADS, 0, cb->stream>>>(
                    y, dy, dt == DTYPE_F16, count, d_residual);
                CUDA_CHECK_LAUNCH();
            }
            if (d_residual && ops == CUDNN_BATCHNORM_OPS_BN)
                CUDA_CHECK(cudaMemcpyAsync(d_residual, dy, count * dtype_size(dt), cudaMemcpyDeviceToDevice,
                                           cb->stream));
        }
    }
    bn_descs_destroy(&d);
    return ok;
}

// Our own path: per-channel sums (two kernels), then one pass writing dx and d_residual.
static void bn_backward_own(Backend *be, int rows, int c, DType dt, const void *x, const void *y, const void *dy,
                            int relu, const float *gamma, const float *save_mean, const float *save_invstd,
                            void *dx, int accumulate, void *dgamma, void *dbeta, int accumulate_params,
                            void *d_residual) {
    CudaBackend *cb = cuda_state(be);
    const int chunks = bn_chunks(rows), half = dt == DTYPE_F16;
    const size_t part = bn_align((size_t)chunks * c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, 2 * part + 3 * (size_t)c * sizeof(float));
    float *part_g = (float *)ws, *part_gx = (float *)(ws + part), *coef = (float *)(ws + 2 * part);

    bn_backward_partial_kernel<<<bn_reduce_grid(rows, c), dim3(BN_TILE_C, BN_TILE_ROWS), 0, cb->stream>>>(
        x, y, dy, relu, half, rows, c, save_mean, part_g, part_gx);
    CUDA_CHECK_LAUNCH();
    bn_backward_finalize_kernel<<<bn_channel_blocks(c), BN_ELEMENTWISE_THREADS, 0, cb->stream>>>(
        part_g, part_gx, chunks, rows, c, half, gamma, save_invstd, dgamma, dbeta, accumulate_params, coef);
    CUDA_CHECK_LAUNCH();
    bn_backward_apply(cb, rows, c, dt, x, y, dy, relu, save_mean, coef, dx, accumulate, d_residual);
}

// x, y, dy, dx, d_residual (nullable) (rows, c) dt; gamma, save_* (c) fp32; dgamma, dbeta (c) dt
void cuda_bn_backward(Backend *be, int rows, int c, DType dt, const void *x, const void *y, const void *dy,
                      int relu, const float *gamma, const float *save_mean, const float *save_invstd, void *dx,
                      int accumulate, void *dgamma, void *dbeta, int accumulate_params, void *d_residual) {
    const BnLayer *layer = bn_layer_lookup(be, save_mean);
    const int forward_on_cudnn = layer && layer->cudnn && layer->rows == rows && layer->c == c && layer->dt == dt &&
                                 (layer->ops != CUDNN_BATCHNORM_OPS_BN) == (relu != 0);
    if (forward_on_cudnn && !accumulate &&
        bn_backward_cudnn(be, layer, rows, c, dt, x, y, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta,
                          accumulate_params, d_residual))
        return;
    bn_backward_own(be, rows, c, dt, x, y, dy, relu, gamma, save_mean, save_invstd, dx, accumulate, dgamma, dbeta,
                    accumulate_params, d_residual);
}
