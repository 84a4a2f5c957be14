// cudnn_batchnorm.cu - batch norm over NHWC rows (rows = n*h*w, c channels) fused with the residual add
// and ReLU that end a ResNeXt block: y = act(gamma * (x - mean) * invstd + beta + residual).
//
// Two paths, same semantics (core/backend_ops.def); which one trains is the backend's choice (cudnn.batch_norm), made
// per call for the forward and per layer for the backward (CudaBnMode, cuda_backend.h):
// - cuDNN's fused NHWC kernels (cudnnBatchNormalization{ForwardTraining,Backward}Ex, SPATIAL_PERSISTENT,
//   ops BN / BN_ACTIVATION / BN_ADD_ACTIVATION) for training whenever cuDNN takes the combination:
//   fp16 or bf16 with C % 4 == 0 for the fused ops, plain BN for every dtype.
// - Our own kernels (cuda_batchnorm_own.cu) for everything else (fp32 with ReLU, residual without ReLU,
//   dx accumulation, a backward whose forward did not run on cuDNN, a call cuDNN declines), for inference and
//   recomputation, and for all training when chosen: 16-byte packs, one read of x for the statistics, one
//   fused pass.
//
// cuDNN semantics checked against backend_ops.def: exponentialAverageFactor is torch's momentum; the running
// variance is updated with the unbiased batch variance (as torch, which calls these same functions);
// resultSaveInvVariance is 1/sqrt(var + eps) = save_invstd; dBnScale/dBnBias are fp32, so they land in
// fp32 scratch and a small kernel stores them in dt, honouring accumulate_params.
//
// Reserve space: the Ex forward leaves state for the Ex backward of the
// same layer, and bn_backward has no argument for it. On cuDNN 9.19 / H200 (NHWC) plain BN and
// BN_ACTIVATION ask for 0 bytes, BN_ADD_ACTIVATION for its ReLU bit mask (rows * c / 8 bytes, rounded up). A per-backend table keyed by the layer's save_mean pointer (unique per layer in the model) keeps
// each layer's reserve space, the ops its forward ran and its beta (cuDNN's BN_ACTIVATION backward
// recomputes the ReLU mask from x, mean, invstd, gamma and beta). A backward finds its forward there;
// if it finds none, or the forward took our own path, or dx accumulates, it runs our own backward.
// Our own forward keeps in the same table where its backward finds the ReLU mask without reading y:
// recomputed from x with the forward's beta (no residual), or its bit mask in the reserve (add+ReLU).
//
// Mixed pairs: our own backward takes any forward (the mask from y after cuDNN's). cuDNN's backward takes
// our own forward's saved mean and invstd where its ops need no reserve space (plain BN and BN_ACTIVATION,
// which recompute the mask from x); its add+ReLU backward needs the ReLU bit mask its own forward left in
// the reserve space, so an add+ReLU layer never runs our forward with cuDNN's backward (on cuDNN 9.14 /
// H200 our bit mask and that reserve differed, in size or bytes, on every shape tested). With
// cudnn.batch_norm auto, cuda_bn_prepare times the pairs a shape allows before the step's memory exists and
// keeps the fastest per shape in the same cache; a shape's record (cudnn.cache) stands in for the timing.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_diag.h"
#include "kernels/cuda/cuda_batchnorm_own.h"
#include "kernels/cuda/cuda_elem.cuh"
#include "kernels/cuda/cuda_internal.h"

#define BN_PARAM_THREADS 256
// Timed calls per op and pair in cuda_bn_prepare (after one untimed call).
#define BN_PREPARE_TIMED_RUNS 5
// The pairs cudnn.batch_norm auto times: own+own, cudnn+cudnn, cudnn+own, own+cudnn.
#define BN_PAIRS 4

// ---- the per-layer reserve-space table ------------------------------------------------------------

typedef struct BnLayer {
    const float *save_mean;  // the key: this layer's save_mean buffer
    int cudnn;               // 1: the last training forward of this layer ran on cuDNN
    int backward_cudnn;  // 1: its backward may run on cuDNN (the pair asks for it, cuDNN has what it needs)
    int add_bn;          // 1: the last forward was bn_add_bn's fused one, this layer its first (a)
    BnMaskSource own_mask;    // the last forward ran our own path: where its backward finds the mask
    cudnnBatchNormOps_t ops;  // the ops it ran, or cuDNN's name for them after our own forward
    int rows, c;
    DType dt;
    float eps;          // the forward's eps: cuDNN's backward must see the same
    const float *beta;  // (c) fp32, the forward's beta
    void *reserve;      // cuDNN's reserve space or our own ReLU bits, from be->alloc
    size_t reserve_bytes, reserve_capacity;
} BnLayer;

// A pair of paths: which kernels run the forward, which the backward (1 cuDNN, 0 our own).
typedef struct BnPair {
    int forward_cudnn, backward_cudnn;
} BnPair;

// cudnn.batch_norm auto: the pair cuda_bn_prepare timed fastest for one shape.
typedef struct BnShapeChoice {
    int rows, c, residual, relu;
    DType dt;
    BnPair pair;
} BnShapeChoice;

struct CudaBnCache {
    Backend *be;      // whose allocator holds the reserve spaces
    BnLayer *layers;  // linear table: one entry per batch-norm layer of the model
    int count, capacity;
    BnShapeChoice *choices;  // linear table: one entry per prepared shape
    int choice_count, choice_capacity;
};

// A linear table with room for one more item (zeroed), moved to a larger block when full.
static void *bn_table_room(void *items, int count, int *capacity, size_t item_size) {
    if (count < *capacity) return items;
    *capacity = *capacity ? 2 * *capacity : 64;
    void *grown = xcalloc((size_t)*capacity, item_size);
    if (count) memcpy(grown, items, (size_t)count * item_size);
    free(items);
    return grown;
}

static CudaBnCache *bn_cache_of(Backend *be) {
    CudaBackend *cb = cuda_state(be);
    if (!cb->bn_cache) {
        cb->bn_cache = (CudaBnCache *)xcalloc(1, sizeof(CudaBnCache));
        cb->bn_cache->be = be;
    }
    return cb->bn_cache;
}

static BnLayer *bn_layer_lookup(Backend *be, const float *save_mean) {
    CudaBnCache *cache = bn_cache_of(be);
    for (int i = 0; i < cache->count; i++)
        if (cache->layers[i].save_mean == save_mean) return &cache->layers[i];
    return NULL;
}

static BnLayer *bn_layer_get(Backend *be, const float *save_mean) {
    BnLayer *layer = bn_layer_lookup(be, save_mean);
    if (layer) return layer;
    CudaBnCache *cache = cuda_state(be)->bn_cache;
    cache->layers = (BnLayer *)bn_table_room(cache->layers, cache->count, &cache->capacity, sizeof(BnLayer));
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

// Drops a layer's entry (cuda_bn_prepare's, whose save_mean buffer goes back to the allocator).
void cuda_bn_layer_forget(Backend *be, const float *save_mean) {
    CudaBnCache *cache = bn_cache_of(be);
    BnLayer *layer = bn_layer_lookup(be, save_mean);
    if (!layer) return;
    be->free(be, layer->reserve);
    *layer = cache->layers[--cache->count];
    memset(&cache->layers[cache->count], 0, sizeof(BnLayer));  // bn_layer_get hands the slot out again
}

void cuda_bn_cache_destroy(CudaBackend *cb) {
    CudaBnCache *cache = cb->bn_cache;
    if (!cache) return;
    for (int i = 0; i < cache->count; i++) cache->be->free(cache->be, cache->layers[i].reserve);
    free(cache->layers);
    free(cache->choices);
    free(cache);
    cb->bn_cache = NULL;
}

static BnShapeChoice *bn_choice_find(Backend *be, int rows, int c, DType dt, int residual, int relu) {
    CudaBnCache *cache = bn_cache_of(be);
    for (int i = 0; i < cache->choice_count; i++) {
        BnShapeChoice *ch = &cache->choices[i];
        if (ch->rows == rows && ch->c == c && ch->dt == dt && ch->residual == residual && ch->relu == relu)
            return ch;
    }
    return NULL;
}

static BnShapeChoice *bn_choice_add(Backend *be, const BnShapeChoice *choice) {
    CudaBnCache *cache = bn_cache_of(be);
    cache->choices = (BnShapeChoice *)bn_table_room(cache->choices, cache->choice_count,
                                                    &cache->choice_capacity, sizeof(BnShapeChoice));
    cache->choices[cache->choice_count] = *choice;
    return &cache->choices[cache->choice_count++];
}

// The pair a training batch norm of this shape runs under the backend's mode.
static BnPair bn_pair_for(Backend *be, int rows, int c, DType dt, int residual, int relu) {
    switch (cuda_state(be)->bn_mode) {
    case CUDA_BN_OWN: return BnPair{0, 0};
    case CUDA_BN_OWN_CUDNN: return BnPair{0, 1};
    case CUDA_BN_CUDNN_OWN: return BnPair{1, 0};
    case CUDA_BN_AUTO: {
        const BnShapeChoice *ch = bn_choice_find(be, rows, c, dt, residual, relu);
        return ch ? ch->pair : BnPair{1, 1};  // cuDNN's pair for a shape not prepared
    }
    default: return BnPair{1, 1};
    }
}

// ---- kernels around cuDNN's path --------------------------------------------------------------------

// Element i of an fp16, bf16 or fp32 buffer, as fp32 (the branch is uniform across a launch), and back.
static __device__ __forceinline__ float bn_load(const void *p, size_t i, DType dt) {
    return dt == DTYPE_F16    ? to_f32(((const __half *)p)[i])
           : dt == DTYPE_BF16 ? to_f32(((const __nv_bfloat16 *)p)[i])
                              : ((const float *)p)[i];
}

static __device__ __forceinline__ void bn_store(void *p, size_t i, DType dt, float v) {
    if (dt == DTYPE_F16)
        from_f32((__half *)p + i, v);
    else if (dt == DTYPE_BF16)
        from_f32((__nv_bfloat16 *)p + i, v);
    else
        ((float *)p)[i] = v;
}

// cuDNN's fp32 parameter gradients into dt. src (2, c) fp32 -> dgamma, dbeta (c) dt (= or +=)
__global__ void bn_param_grads_store_kernel(const float *src, int c, DType dt, void *dgamma, void *dbeta,
                                            int accumulate_params) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    bn_store(dgamma, ch, dt, src[ch] + (accumulate_params ? bn_load(dgamma, ch, dt) : 0.0f));
    bn_store(dbeta, ch, dt, src[c + ch] + (accumulate_params ? bn_load(dbeta, ch, dt) : 0.0f));
}

// d_residual = dy masked by the ReLU (y > 0), for a BN_ACTIVATION layer whose caller wants it.
// y, dy, d_residual (count) dt
__global__ void bn_relu_mask_kernel(const void *y, const void *dy, DType dt, size_t count, void *d_residual) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        bn_store(d_residual, i, dt, bn_load(y, i, dt) > 0.0f ? bn_load(dy, i, dt) : 0.0f);
}

// ---- launch helpers -----------------------------------------------------------------------------------

static int bn_channel_blocks(int c) { return (c + BN_PARAM_THREADS - 1) / BN_PARAM_THREADS; }
static int bn_elementwise_blocks(size_t count) {
    const size_t blocks = (count + BN_PARAM_THREADS - 1) / BN_PARAM_THREADS;
    return (int)(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}
static size_t bn_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

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

static cudnnBatchNormOps_t bn_ops_for(int residual, int relu) {
    if (residual) return CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    return relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN;
}

// The combinations offered to cuDNN's fused NHWC kernels: plain BN in any dtype; BN+ReLU and BN+add+ReLU
// in fp16 or bf16 with C % 4 == 0. Residual without ReLU has no cuDNN op. A combination cuDNN declines at
// run time (CUDNN_STATUS_NOT_SUPPORTED) runs our own kernels.
static int bn_cudnn_may_take(int c, DType dt, int residual, int relu) {
    if (residual && !relu) return 0;
    if (!relu) return 1;
    return dtype_is_16bit(dt) && c % 4 == 0;
}

// ---- training forward ------------------------------------------------------------------------------

// The cuDNN path; 0 (nothing written) when cuDNN declines the combination.
static int bn_forward_train_cudnn(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                                  int relu, const float *gamma, const float *beta, float *running_mean,
                                  float *running_var, float momentum, float eps, float *save_mean,
                                  float *save_invstd, void *y) {
    CudaBackend *cb = cuda_state(be);
    const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
    const cudnnBatchNormOps_t ops = bn_ops_for(residual != NULL, relu);
    BnDescs d;
    bn_descs_create(&d, rows, c, dt);
    cudnnActivationDescriptor_t act = ops == CUDNN_BATCHNORM_OPS_BN ? NULL : d.relu;
    cudnnTensorDescriptor_t z_desc = residual ? d.act : NULL;
    size_t ws_bytes = 0, reserve_bytes = 0;
    int ok = BN_CUDNN_TRY(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                 cb->cudnn, mode, ops, d.act, z_desc, d.act, d.param, act, &ws_bytes)) &&
             BN_CUDNN_TRY(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cb->cudnn, mode, ops, act,
                                                                               d.act, &reserve_bytes));
    if (ok) {
        BnLayer *layer = bn_layer_get(be, save_mean);
        bn_layer_reserve(be, layer, reserve_bytes);
        void *ws = cuda_workspace(cb, ws_bytes);
        const float one = 1.0f, zero = 0.0f;
        ok = BN_CUDNN_TRY(cudnnBatchNormalizationForwardTrainingEx(
            cb->cudnn, mode, ops, &one, &zero, d.act, x, z_desc, residual, d.act, y, d.param, gamma, beta,
            (double)momentum, running_mean, running_var, (double)eps, save_mean, save_invstd, act, ws,
            ws_bytes, layer->reserve, reserve_bytes));
        layer->cudnn = ok;
        layer->add_bn = 0;
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

// Whether cuDNN's backward can follow our own forward for this shape: its ops need no reserve space (plain
// BN, BN_ACTIVATION; cuDNN then recomputes the ReLU mask from x and the saved statistics).
static int bn_cudnn_backward_follows_own(Backend *be, int rows, int c, DType dt, int residual, int relu) {
    if (residual || !bn_cudnn_may_take(c, dt, residual, relu)) return 0;
    const cudnnBatchNormOps_t ops = bn_ops_for(residual, relu);
    BnDescs d;
    bn_descs_create(&d, rows, c, dt);
    size_t reserve_bytes = 1;
    const int ok = BN_CUDNN_TRY(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
        cuda_state(be)->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops,
        ops == CUDNN_BATCHNORM_OPS_BN ? NULL : d.relu, d.act, &reserve_bytes));
    bn_descs_destroy(&d);
    return ok && reserve_bytes == 0;
}

// A layer's entry before our own forward runs: no reserve, and room for the ReLU bits where that forward may
// write them (residual + ReLU in fp16 or bf16 packs of 8); returns where they go, or NULL.
static uint8_t *bn_layer_own_start(Backend *be, BnLayer *layer, int rows, int c, DType dt, int residual,
                                   int relu) {
    layer->reserve_bytes = 0;
    if (!(relu && residual && dtype_is_16bit(dt) && c % BN_MASK_PACK == 0)) return NULL;
    bn_layer_reserve(be, layer, bn_own_mask_bytes(rows, c));
    return (uint8_t *)layer->reserve;
}

// A layer's entry after our own forward: where its backward finds the ReLU mask (wrote_mask: the bits).
static void bn_layer_own_done(BnLayer *layer, int rows, int c, DType dt, int residual, int relu, float eps,
                              const float *beta, int wrote_mask, int backward_cudnn, int add_bn) {
    layer->cudnn = 0;
    layer->backward_cudnn = backward_cudnn;
    layer->add_bn = add_bn;
    layer->ops = bn_ops_for(residual, relu);
    layer->own_mask = !relu        ? BN_MASK_NONE
                      : wrote_mask ? BN_MASK_BITS
                      : residual   ? BN_MASK_FROM_Y
                                   : BN_MASK_FROM_X;
    layer->rows = rows;
    layer->c = c;
    layer->dt = dt;
    layer->eps = eps;
    layer->beta = beta;
}

// One layer's forward on our own kernels, its entry kept around it: run(mask) runs the forward with room for the
// ReLU bits (mask, NULL where none may be written) and returns whether it wrote them; the entry then says where
// the backward finds the mask, and that cuDNN's backward follows where backward_cudnn asks for it and cuDNN's
// can follow our own forward.
template <typename Run>
static void bn_own_forward_layer(Backend *be, int rows, int c, DType dt, int residual, int relu, float eps,
                                 const float *beta, const float *save_mean, int backward_cudnn, Run &&run) {
    backward_cudnn = backward_cudnn && bn_cudnn_backward_follows_own(be, rows, c, dt, residual, relu);
    BnLayer *layer = bn_layer_get(be, save_mean);
    uint8_t *mask = bn_layer_own_start(be, layer, rows, c, dt, residual, relu);
    const int wrote_mask = run(mask);
    bn_layer_own_done(layer, rows, c, dt, residual, relu, eps, beta, wrote_mask, backward_cudnn, 0);
}

// Our own path, recording in the layer's entry where its backward finds the ReLU mask, and what cuDNN's
// backward needs when it may follow (backward_cudnn).
static void bn_forward_train_own(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                                 int relu, const float *gamma, const float *beta, float *running_mean,
                                 float *running_var, float momentum, float eps, float *save_mean,
                                 float *save_invstd, void *y, int backward_cudnn) {
    bn_own_forward_layer(be, rows, c, dt, residual != NULL, relu, eps, beta, save_mean, backward_cudnn,
                         [&](uint8_t *mask) {
                             return bn_own_forward_train(cuda_state(be), rows, c, dt, x, residual, relu,
                                                         gamma, beta, running_mean, running_var, momentum,
                                                         eps, save_mean, save_invstd, y, mask);
                         });
}

// The forward on the pair's forward path (our own where cuDNN declines), leaving in the layer's entry
// which path its backward takes.
static void bn_forward_train_pair(Backend *be, BnPair pair, int rows, int c, DType dt, const void *x,
                                  const void *residual, int relu, const float *gamma, const float *beta,
                                  float *running_mean, float *running_var, float momentum, float eps,
                                  float *save_mean, float *save_invstd, void *y) {
    if (pair.forward_cudnn && bn_cudnn_may_take(c, dt, residual != NULL, relu) &&
        bn_forward_train_cudnn(be, rows, c, dt, x, residual, relu, gamma, beta, running_mean, running_var,
                               momentum, eps, save_mean, save_invstd, y)) {
        bn_layer_lookup(be, save_mean)->backward_cudnn = pair.backward_cudnn;
        return;
    }
    bn_forward_train_own(be, rows, c, dt, x, residual, relu, gamma, beta, running_mean, running_var, momentum,
                         eps, save_mean, save_invstd, y, pair.backward_cudnn);
}

// x, residual (nullable), y (rows, c) dt; gamma, beta, running_*, save_* (c) fp32
void cuda_bn_forward_train(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                           int relu, const float *gamma, const float *beta, float *running_mean,
                           float *running_var, float momentum, float eps, float *save_mean,
                           float *save_invstd, void *y) {
    // torch refuses one value per channel too: the unbiased variance would divide by zero.
    AMP_ASSERT(rows > 1, "batch norm in training needs more than 1 value per channel (rows=%d)", rows);
    AMP_ASSERT(eps >= CUDNN_BN_MIN_EPSILON, "batch norm eps %g below cuDNN's minimum %g", (double)eps,
               CUDNN_BN_MIN_EPSILON);
    bn_forward_train_pair(be, bn_pair_for(be, rows, c, dt, residual != NULL, relu), rows, c, dt, x, residual,
                          relu, gamma, beta, running_mean, running_var, momentum, eps, save_mean, save_invstd,
                          y);
}

// A training forward whose statistics a convolution's epilogue made (cudnn_conv_bn.cu): our own finalize and
// apply, the layer's entry as after our own forward, its backward on the path the shape's pair names where
// cuDNN's may follow our own forward. x, residual (nullable), y (rows, c) dt; sums, sqsums (c) fp32 (not
// shifted); scale, shift (c) fp32 scratch; the rest as cuda_bn_forward_train's.
void cuda_bn_forward_train_sums(Backend *be, int rows, int c, DType dt, const void *x, const float *sums,
                                const float *sqsums, const void *residual, int relu, const float *gamma,
                                const float *beta, float *running_mean, float *running_var, float momentum,
                                float eps, float *save_mean, float *save_invstd, float *scale, float *shift,
                                void *y) {
    AMP_ASSERT(rows > 1, "batch norm in training needs more than 1 value per channel (rows=%d)", rows);
    const int has_residual = residual != NULL;
    bn_own_forward_layer(be, rows, c, dt, has_residual, relu, eps, beta, save_mean,
                         bn_pair_for(be, rows, c, dt, has_residual, relu).backward_cudnn, [&](uint8_t *mask) {
                             return bn_own_forward_train_sums(cuda_state(be), rows, c, dt, x, sums, sqsums,
                                                              residual, relu, gamma, beta, running_mean,
                                                              running_var, momentum, eps, save_mean,
                                                              save_invstd, scale, shift, y, mask);
                         });
}

// A training forward with ReLU (no residual) whose output is never written: its statistics (our own pass) and
// affine map into scale, shift (c) fp32, for a convolution's prologue to apply (cudnn_conv_bn.cu); the layer's
// entry as after our own forward, so that its backward recomputes the ReLU mask from x. scratch:
// bn_own_stats_scratch_bytes.
void cuda_bn_forward_train_stats(Backend *be, int rows, int c, DType dt, const void *x, const float *gamma,
                                 const float *beta, float *running_mean, float *running_var, float momentum,
                                 float eps, float *save_mean, float *save_invstd, void *scratch, float *scale,
                                 float *shift) {
    AMP_ASSERT(rows > 1, "batch norm in training needs more than 1 value per channel (rows=%d)", rows);
    bn_own_forward_layer(
        be, rows, c, dt, 0, 1, eps, beta, save_mean, bn_pair_for(be, rows, c, dt, 0, 1).backward_cudnn,
        [&](uint8_t *) {  // no output, so no bits: the backward takes the mask from x
            bn_own_forward_train_stats(cuda_state(be), rows, c, dt, x, gamma, beta, running_mean, running_var,
                                       momentum, eps, save_mean, save_invstd, scratch, scale, shift);
            return 0;
        });
}

// ---- bn_add_bn: a downsampling block's end in one op --------------------------------------------------

// Under cudnn.batch_norm own and auto, bn_add_bn runs on our own fused kernels (two statistics passes, one
// output pass; bn_b's output never rounded nor written); the other modes make the two layers' calls with
// the paths those modes name, bn_b's output in scratch.
static int bn_add_bn_fused(Backend *be) {
    const int mode = cuda_state(be)->bn_mode;
    return mode == CUDA_BN_OWN || mode == CUDA_BN_AUTO;
}

// a, b: x (rows, c) dt, parameters and statistics (c) fp32; scratch, y (rows, c) dt
void cuda_bn_add_bn_forward_train(Backend *be, int rows, int c, DType dt, const BnArgs *a, const BnArgs *b,
                                  int relu, float momentum, float eps, void *scratch, void *y) {
    if (!bn_add_bn_fused(be)) {
        cuda_bn_forward_train(be, rows, c, dt, b->x, NULL, 0, b->gamma, b->beta, b->running_mean,
                              b->running_var, momentum, eps, b->save_mean, b->save_invstd, scratch);
        cuda_bn_forward_train(be, rows, c, dt, a->x, scratch, relu, a->gamma, a->beta, a->running_mean,
                              a->running_var, momentum, eps, a->save_mean, a->save_invstd, y);
        return;
    }
    AMP_ASSERT(rows > 1, "batch norm in training needs more than 1 value per channel (rows=%d)", rows);
    bn_layer_own_done(bn_layer_get(be, b->save_mean), rows, c, dt, 0, 0, eps, b->beta, 0, 0, 0);
    BnLayer *layer = bn_layer_get(be, a->save_mean);  // after b's: a new entry may move the table
    uint8_t *mask = bn_layer_own_start(be, layer, rows, c, dt, 1, relu);
    const int wrote_mask =
        bn_own_add_bn_forward_train(cuda_state(be), rows, c, dt, a, b, relu, momentum, eps, y, mask);
    bn_layer_own_done(layer, rows, c, dt, 1, relu, eps, a->beta, wrote_mask, 0, 1);
}

// a, b: x (rows, c) dt, gamma and saved statistics (c) fp32, dgamma, dbeta (c) dt; y, dy, dx_a, dx_b (dy or
// apart), scratch (rows, c) dt
void cuda_bn_add_bn_backward(Backend *be, int rows, int c, DType dt, const BnArgs *a, const BnArgs *b,
                             const void *y, const void *dy, int relu, void *dx_a, void *dx_b,
                             int accumulate_params, void *scratch) {
    const BnLayer *layer = bn_layer_lookup(be, a->save_mean);
    if (!(layer && layer->add_bn && layer->rows == rows && layer->c == c && layer->dt == dt &&
          (layer->own_mask != BN_MASK_NONE) == (relu != 0))) {
        // the forward made two calls: so does the backward, each on the path its forward's entry names
        cuda_bn_backward(be, rows, c, dt, a->x, y, dy, relu, a->gamma, a->save_mean, a->save_invstd, dx_a, 0,
                         a->dgamma, a->dbeta, accumulate_params, scratch);
        cuda_bn_backward(be, rows, c, dt, b->x, NULL, scratch, 0, b->gamma, b->save_mean, b->save_invstd,
                         dx_b, 0, b->dgamma, b->dbeta, accumulate_params, NULL);
        return;
    }
    bn_own_add_bn_backward(cuda_state(be), rows, c, dt, a, b, y, dy, relu ? layer->own_mask : BN_MASK_NONE,
                           (const uint8_t *)layer->reserve, dx_a, dx_b, accumulate_params);
}

// ---- inference ----------------------------------------------------------------------------------------

// One memory-bound pass: y = act(x * scale + shift + residual) with the running statistics.
// x, residual (nullable), y (rows, c) dt; gamma, beta, running_* (c) fp32
void cuda_bn_forward_eval(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                          int relu, const float *gamma, const float *beta, const float *running_mean,
                          const float *running_var, float eps, void *y) {
    bn_own_forward_eval(cuda_state(be), rows, c, dt, x, residual, relu, gamma, beta, running_mean,
                        running_var, eps, y);
}

// bn_forward_train's y again from its saved statistics: one memory-bound pass (backend_ops.def).
void cuda_bn_forward_saved(Backend *be, int rows, int c, DType dt, const void *x, int relu,
                           const float *gamma, const float *beta, const float *save_mean,
                           const float *save_invstd, void *y) {
    bn_own_forward_saved(cuda_state(be), rows, c, dt, x, relu, gamma, beta, save_mean, save_invstd, y);
}

// ---- backward -------------------------------------------------------------------------------------------

// The cuDNN path, for a layer whose forward ran on cuDNN with the same shape, dtype and ReLU, when dx is
// overwritten. 0 (nothing written) when cuDNN declines.
static int bn_backward_cudnn(Backend *be, const BnLayer *layer, int rows, int c, DType dt, const void *x,
                             const void *y, const void *dy, const float *gamma, const float *save_mean,
                             const float *save_invstd, void *dx, void *dgamma, void *dbeta,
                             int accumulate_params, void *d_residual) {
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
        const size_t params_off = bn_align(ws_bytes),
                     dz_off = params_off + bn_align(2 * (size_t)c * sizeof(float));
        const int dz_scratch = with_add && !d_residual;
        char *ws = (char *)cuda_workspace(cb, dz_off + (dz_scratch ? count * dtype_size(dt) : 0));
        float *dparams = (float *)(ws + params_off);
        void *dz = with_add ? (d_residual ? d_residual : (void *)(ws + dz_off)) : NULL;
        const float one = 1.0f, zero = 0.0f;
        ok = BN_CUDNN_TRY(cudnnBatchNormalizationBackwardEx(
            cb->cudnn, mode, ops, &one, &zero, &one, &zero, d.act, x, y_desc, y_desc ? y : NULL, d.act, dy,
            dz_desc, dz, d.act, dx, d.param, gamma, layer->beta, dparams, dparams + c, (double)layer->eps,
            save_mean, save_invstd, act, ws, ws_bytes, layer->reserve, layer->reserve_bytes));
        if (ok) {
            bn_param_grads_store_kernel<<<bn_channel_blocks(c), BN_PARAM_THREADS, 0, cb->stream>>>(
                dparams, c, dt, dgamma, dbeta, accumulate_params);
            CUDA_CHECK_LAUNCH();
            if (d_residual && ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION) {
                bn_relu_mask_kernel<<<bn_elementwise_blocks(count), BN_PARAM_THREADS, 0, cb->stream>>>(
                    y, dy, dt, count, d_residual);
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

// x, y, dy, dx, d_residual (nullable) (rows, c) dt; gamma, save_* (c) fp32; dgamma, dbeta (c) dt
void cuda_bn_backward(Backend *be, int rows, int c, DType dt, const void *x, const void *y, const void *dy,
                      int relu, const float *gamma, const float *save_mean, const float *save_invstd,
                      void *dx, int accumulate, void *dgamma, void *dbeta, int accumulate_params,
                      void *d_residual) {
    const BnLayer *layer = bn_layer_lookup(be, save_mean);
    // The layer's last forward ran this shape (its entry describes what this backward reads).
    const int same_shape = layer && layer->rows == rows && layer->c == c && layer->dt == dt &&
                           (layer->ops != CUDNN_BATCHNORM_OPS_BN) == (relu != 0);
    if (same_shape && layer->backward_cudnn && !accumulate &&
        bn_backward_cudnn(be, layer, rows, c, dt, x, y, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta,
                          accumulate_params, d_residual))
        return;
    // Our own backward: the mask as our own forward of this layer left it, else from y.
    const int forward_own = same_shape && !layer->cudnn;
    const BnMaskSource source = !relu ? BN_MASK_NONE : forward_own ? layer->own_mask : BN_MASK_FROM_Y;
    bn_own_backward(cuda_state(be), rows, c, dt, x, y, dy, source, forward_own ? layer->beta : NULL,
                    forward_own ? (const uint8_t *)layer->reserve : NULL, gamma, save_mean, save_invstd, dx,
                    accumulate, dgamma, dbeta, accumulate_params, d_residual);
}

// ---- cudnn.batch_norm auto: the fastest pair per shape -------------------------------------------------

// Fills n elements of dt with values spread over [lo, hi) from a hash of the index (timing data: no
// constant channel, about half the ReLU inputs positive).
__global__ void bn_fill_kernel(void *dst, size_t n, DType dt, float lo, float hi) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(i >> 13);
        bn_store(dst, i, dt, lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f));
    }
}

// One shape's buffers for timing: x, y, dy, dx (rows, c) dt (dy doubles as the forward's residual),
// d_residual when the shape has one; the parameters (c) fp32 and their gradients (c) dt.
typedef struct BnTiming {
    Backend *be;
    int rows, c, relu;
    DType dt;
    void *x, *y, *dy, *dx, *d_residual;
    float *params;  // gamma, beta, running mean, running var, save mean, save invstd: (6, c)
    void *dparams;  // dgamma, dbeta: (2, c) dt
    BnPair pair;    // what bn_time_forward runs
} BnTiming;

static void bn_time_forward(void *ctx) {
    BnTiming *t = (BnTiming *)ctx;
    float *p = t->params;
    const int c = t->c;
    bn_forward_train_pair(t->be, t->pair, t->rows, c, t->dt, t->x, t->d_residual ? t->dy : NULL, t->relu, p,
                          p + c, p + 2 * c, p + 3 * c, 0.1f, 1e-5f, p + 4 * c, p + 5 * c, t->y);
}

static void bn_time_backward(void *ctx) {
    BnTiming *t = (BnTiming *)ctx;
    const float *p = t->params;
    const int c = t->c;
    cuda_bn_backward(t->be, t->rows, c, t->dt, t->x, t->y, t->dy, t->relu, p, p + 4 * c, p + 5 * c, t->dx, 0,
                     t->dparams, (char *)t->dparams + (size_t)c * dtype_size(t->dt), 0, t->d_residual);
}

// The forward and backward times (ms) of a pair, the backward after one forward of that pair.
static void bn_time_pair(BnTiming *t, BnPair pair, float *forward_ms, float *backward_ms) {
    CudaBackend *cb = cuda_state(t->be);
    t->pair = pair;
    *forward_ms = cuda_time_ms(cb, BN_PREPARE_TIMED_RUNS, bn_time_forward, t);
    *backward_ms = cuda_time_ms(cb, BN_PREPARE_TIMED_RUNS, bn_time_backward, t);
}

void cuda_fill_spread(CudaBackend *cb, void *dst, size_t n, DType dt, float lo, float hi) {
    bn_fill_kernel<<<bn_elementwise_blocks(n), BN_PARAM_THREADS, 0, cb->stream>>>(dst, n, dt, lo, hi);
    CUDA_CHECK_LAUNCH();
}

// The pairs auto chooses from, and their names in the log and in the records (cudnn.cache).
static const BnPair bn_pairs[BN_PAIRS] = {{0, 0}, {1, 1}, {1, 0}, {0, 1}};
static const char *const bn_pair_names[BN_PAIRS] = {"own+own", "cudnn+cudnn", "cudnn+own", "own+cudnn"};

// AMPTRAIN_CONV_LOG=1: each pair's forward + backward ms, the one kept marked *.
static void bn_log_pairs(int rows, int c, DType dt, int residual, int relu, const int *allowed,
                         const float *forward_ms, const float *backward_ms, int best) {
    fprintf(stderr, "bn: rows %d c %d %s%s%s:", rows, c, dtype_name(dt), residual ? " +residual" : "",
            relu ? " +relu" : "");
    for (int i = 0; i < BN_PAIRS; i++)
        if (allowed[i])
            fprintf(stderr, " [%s %.4f+%.4f ms]%s", bn_pair_names[i], (double)forward_ms[i],
                    (double)backward_ms[i], i == best ? "*" : "");
    fprintf(stderr, "\n");
}

// The pairs this shape allows: our own forward and backward; cuDNN's; cuDNN's forward with our own
// backward; our own forward with cuDNN's backward where it may follow.
static void bn_pairs_allowed(Backend *be, int rows, int c, DType dt, int residual, int relu,
                             int allowed[BN_PAIRS]) {
    const int cudnn_takes = bn_cudnn_may_take(c, dt, residual, relu);
    allowed[0] = 1;
    allowed[1] = allowed[2] = cudnn_takes;
    allowed[3] = bn_cudnn_backward_follows_own(be, rows, c, dt, residual, relu);
}

// Times every allowed pair on buffers of its own; the fastest forward + backward.
static int bn_time_pairs(Backend *be, int rows, int c, DType dt, int residual, int relu,
                         const int allowed[BN_PAIRS]) {
    CudaBackend *cb = cuda_state(be);
    const size_t count = (size_t)rows * c, bytes = count * dtype_size(dt);
    BnTiming t = {be, rows, c, relu, dt};
    t.x = cuda_scratch_get(cb, bytes), t.y = cuda_scratch_get(cb, bytes);
    t.dy = cuda_scratch_get(cb, bytes), t.dx = cuda_scratch_get(cb, bytes);
    t.d_residual = residual ? cuda_scratch_get(cb, bytes) : NULL;
    t.params = (float *)cuda_scratch_get(cb, 6 * (size_t)c * sizeof(float));
    t.dparams = cuda_scratch_get(cb, 2 * (size_t)c * dtype_size(dt));
    cuda_fill_spread(cb, t.x, count, dt, -2.0f, 3.0f);  // a non-zero mean, as after a convolution
    cuda_fill_spread(cb, t.dy, count, dt, -1.0f, 1.0f);
    cuda_fill_spread(cb, t.params, 2 * (size_t)c, DTYPE_F32, 0.5f, 1.5f);          // gamma, beta
    cuda_fill_spread(cb, t.params + 2 * c, 2 * (size_t)c, DTYPE_F32, 0.5f, 1.5f);  // running statistics
    float forward_ms[BN_PAIRS] = {0}, backward_ms[BN_PAIRS] = {0};
    int best = 0;
    for (int i = 0; i < BN_PAIRS; i++) {
        if (!allowed[i]) continue;
        bn_time_pair(&t, bn_pairs[i], &forward_ms[i], &backward_ms[i]);
        if (forward_ms[i] + backward_ms[i] < forward_ms[best] + backward_ms[best]) best = i;
    }
    if (cuda_pick_log_enabled())
        bn_log_pairs(rows, c, dt, residual, relu, allowed, forward_ms, backward_ms, best);
    cuda_bn_layer_forget(be, t.params + 4 * c);
    cuda_scratch_put(cb, t.x), cuda_scratch_put(cb, t.y), cuda_scratch_put(cb, t.dy),
        cuda_scratch_put(cb, t.dx);
    cuda_scratch_put(cb, t.d_residual), cuda_scratch_put(cb, t.params), cuda_scratch_put(cb, t.dparams);
    return best;
}

// Under cudnn.batch_norm auto: the fastest allowed pair for the shape, from its record (cudnn.cache) when
// that names a pair the shape still allows, else timed (and recorded). The key holds the shape, dtype,
// residual and ReLU beyond cb->choice_env; the choice is the pair's name.
void cuda_bn_prepare(Backend *be, int rows, int c, DType dt, int residual, int relu) {
    CudaBackend *cb = cuda_state(be);
    if (cb->bn_mode != CUDA_BN_AUTO || bn_choice_find(be, rows, c, dt, residual, relu)) return;
    if (rows <= 1) return;  // training refuses this shape (cuda_bn_forward_train says why); nothing to time
    const double start = clock_seconds();
    int allowed[BN_PAIRS];
    bn_pairs_allowed(be, rows, c, dt, residual, relu, allowed);
    char key[CUDA_CHOICE_KEY_MAX];
    cuda_choice_key(cb, key, sizeof key, "bn rows=%d c=%d %s residual=%d relu=%d", rows, c, dtype_name(dt),
                    residual, relu);
    const char *recorded = kernel_cache_find(cb->choices, key);
    int pick = 0;
    while (recorded && pick < BN_PAIRS && strcmp(bn_pair_names[pick], recorded) != 0) pick++;
    if (recorded && pick < BN_PAIRS && allowed[pick]) {
        kernel_cache_use(cb->choices, key);
        if (cuda_pick_log_enabled())
            fprintf(stderr, "bn: rows %d c %d %s%s%s: from the cache: %s\n", rows, c, dtype_name(dt),
                    residual ? " +residual" : "", relu ? " +relu" : "", recorded);
    } else {
        pick = bn_time_pairs(be, rows, c, dt, residual, relu, allowed);
        kernel_cache_store(cb->choices, key, bn_pair_names[pick], clock_seconds() - start);
    }
    const BnShapeChoice choice = {rows, c, residual, relu, dt, bn_pairs[pick]};
    bn_choice_add(be, &choice);
}

extern "C" int cuda_backend_bn_layer_paths(Backend *be, const float *save_mean, int *forward_cudnn,
                                           int *backward_cudnn) {
    const BnLayer *layer = bn_layer_lookup(be, save_mean);
    if (!layer) return 0;
    *forward_cudnn = layer->cudnn, *backward_cudnn = layer->backward_cudnn;
    return 1;
}

extern "C" int cuda_backend_bn_prepared_pair(Backend *be, int rows, int c, DType dt, int residual, int relu,
                                             int *forward_cudnn, int *backward_cudnn) {
    const BnShapeChoice *ch = bn_choice_find(be, rows, c, dt, residual, relu);
    if (!ch) return 0;
    *forward_cudnn = ch->pair.forward_cudnn, *backward_cudnn = ch->pair.backward_cudnn;
    return 1;
}
