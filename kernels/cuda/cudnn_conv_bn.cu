// cudnn_conv_bn.cu - conv_bn_forward_train, bn_conv_bn_forward_train and bn_conv_backward_data
// (core/backend_ops.def): a 1x1 convolution and the batch norm after it in training (with, for the second, a
// batch norm + ReLU in front of the convolution), with the batch norm's statistics from the convolution's
// epilogue where that is faster; and the data gradient through a 1x1 convolution and the batch norm + ReLU in
// front of it, with the ReLU's mask and the batch norm's sums in the data gradient's epilogue where that is
// faster.
//
// The fused way: cuDNN's operation graph conv_genstats, y_conv = conv(x, w) with the per-channel sum and sum
// of squares of y_conv (fp32, before rounding to dt) from the same kernel (the ConvBNfprop engine of NVIDIA's
// MLPerf ResNet-50; cudnn_graph.h builds the graph), then our own finalize and apply from those sums
// (cuda_bn_forward_train_sums: mean, invstd, the running statistics, y = act(bn + residual) in one pass).
// Against conv_forward + bn_forward_train it saves the statistics' read of y_conv, and cuDNN's kernel is
// often faster than the GEMM alone (bench/RESULTS.md). The variance comes from sum and sum of squares (q/n -
// mean^2, in fp64 from fp32 sums): exact enough while a channel's mean is not hundreds of its standard
// deviations, which a convolution's output in training never approaches.
//
// With a batch norm in front (bn_conv_bn_forward_train: a block's bn2 + ReLU before conv3), the graph's
// prologue applies it: relu(x * scale + bias) per input channel, scale and bias in dt from that batch norm's
// statistics (our own pass: cuda_bn_forward_train_stats), so its output is never written. The convolution's
// input then differs from that output, as written and as a backward recomputes it, by the rounding of scale
// and bias to dt.
//
// Backward (bn_conv_backward_data: a block's conv3 back into bn2 + ReLU): cuDNN's dgrad_drelu_dbn graph
// (NVIDIA's DgradDreluBNBwdWeight), da = dgrad(dy, w), g = da where bn(x) > 0 with bn(x) recomputed in fp32
// from x and the saved statistics, g written, and the per-channel sum g and sum g * xhat from the same
// kernel; then our own pass dx = k_g * g - (k_x * x + k_0) from those sums (bn_own_backward_from_sums).
// Against conv_backward_data + bn_backward it saves the backward's first read of x and the data gradient (and
// of y, for the mask).
//
// Eligible shapes: 1x1, stride 1, no padding, ungrouped, fp16 or bf16, channel counts multiples of 8 (16-byte
// rows). Which way a shape runs is chosen by conv_bn_prepare (ConvBnFusion: which op) under cudnn.batch_norm
// auto with cudnn.benchmark: the calls the op stands for (on the routes conv_prepare and bn_prepare chose)
// and the first CONV_BN_PLANS plans of cuDNN's heuristics for the graph are timed on buffers of their own,
// the fastest kept; the choice is recorded in cudnn.cache ("unfused", or "fused <plan index>: <engine and
// knobs>", the plan re-made and its engine checked before a record is taken). Under any other setting, for a
// shape not prepared (another batch size) and for buffers not 16-byte aligned, the op makes the calls.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_batchnorm_own.h"
#include "kernels/cuda/cuda_diag.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_graph.h"

// Plans of the heuristics' list timed per shape (the first is usually the fastest; none compiles at run
// time).
#define CONV_BN_PLANS 4
// Timed runs of each way in the prepare, after one untimed run.
#define CONV_BN_TIMED_RUNS 5

#define PACK_MAX 13  // tensors in memory of one graph, at most
// The five per-channel outputs of dgrad_drelu_dbn: dscale = sum g * xhat, dbias = sum g, and the coefficients
// of cuDNN's own dx (unused: our pass forms its own from the first two).
#define BWD_VECTORS 5
static const int64_t BWD_VECTOR_UID[BWD_VECTORS] = {UID_DSCALE, UID_DBIAS, UID_EQ_DY, UID_EQ_X, UID_EQ_BIAS};
static const char *BWD_VECTOR_NAME[BWD_VECTORS] = {"tensor dscale", "tensor dbias", "tensor eq_dy",
                                                   "tensor eq_x", "tensor eq_bias"};
// The op of each ConvBnFusion, as its records and logs name it.
static const char *FUSION_NAME[3] = {"conv_bn", "bn_conv_bn", "bn_conv_bwd"};

// One call: the convolution s in dt of x by w into y_conv, and the batch norm bn after it into y; with bn_in,
// the batch norm + ReLU in front (its x is the convolution's x before it; scratch takes its output where it
// is written).
typedef struct ConvBnCall {
    const ConvShape *s;
    DType dt;
    const BnArgs *bn_in;
    void *scratch;
    const void *x, *w;
    const BnArgs *bn;
    const void *residual;
    int relu;
    float momentum, eps;
    void *y_conv, *y;
} ConvBnCall;

// One call of bn_conv_backward_data.
typedef struct BnConvBackwardCall {
    const ConvShape *s;
    DType dt;
    const void *dy, *w;
    const BnArgs *bn;
    const void *y;
    void *scratch, *dx;
    int accumulate_params;
} BnConvBackwardCall;

typedef struct ConvBnChoice {
    ConvShape shape;
    DType dt;
    int residual, relu;
    ConvBnFusion fusion;
    int fused;                      // 1: the plan below (and our own pass after it); 0: the calls
    CudnnMade made;                 // the graph, its plans and everything made for them
    cudnnBackendDescriptor_t plan;  // the chosen execution plan (fused)
    size_t workspace;               // the bytes it needs
    char engine[CUDNN_ENGINE_TEXT];
} ConvBnChoice;

struct CudaConvBnCache {
    ConvBnChoice **items;  // entries never move: a model has a few dozen shapes
    int count, capacity;
};

static int conv_bn_eligible(const ConvShape *s, DType dt) {
    return s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0 && s->groups == 1 &&
           dtype_is_16bit(dt) && s->c_in % 8 == 0 && s->c_out % 8 == 0;
}

static int conv_shape_same(const ConvShape *a, const ConvShape *b) { return memcmp(a, b, sizeof *a) == 0; }

static ConvBnChoice *choice_find(CudaBackend *cb, const ConvShape *s, DType dt, int residual, int relu,
                                 ConvBnFusion fusion) {
    CudaConvBnCache *cache = cb->conv_bn_cache;
    for (int i = 0; cache && i < cache->count; i++) {
        ConvBnChoice *ch = cache->items[i];
        if (conv_shape_same(&ch->shape, s) && ch->dt == dt && ch->residual == residual && ch->relu == relu &&
            ch->fusion == fusion)
            return ch;
    }
    return NULL;
}

static ConvBnChoice *choice_add(CudaBackend *cb, const ConvShape *s, DType dt, int residual, int relu,
                                ConvBnFusion fusion) {
    if (!cb->conv_bn_cache) cb->conv_bn_cache = (CudaConvBnCache *)xcalloc(1, sizeof(CudaConvBnCache));
    CudaConvBnCache *cache = cb->conv_bn_cache;
    if (cache->count == cache->capacity) {
        cache->capacity = cache->capacity ? 2 * cache->capacity : 32;
        cache->items = (ConvBnChoice **)realloc(cache->items, (size_t)cache->capacity * sizeof *cache->items);
        AMP_ASSERT(cache->items != NULL, "conv_bn: out of host memory");
    }
    ConvBnChoice *ch = (ConvBnChoice *)xcalloc(1, sizeof *ch);
    ch->shape = *s, ch->dt = dt, ch->residual = residual, ch->relu = relu, ch->fusion = fusion;
    cache->items[cache->count++] = ch;
    return ch;
}

void cuda_conv_bn_cache_destroy(CudaBackend *cb) {
    CudaConvBnCache *cache = cb->conv_bn_cache;
    if (!cache) return;
    for (int i = 0; i < cache->count; i++) {
        cudnn_made_free(&cache->items[i]->made);
        free(cache->items[i]);
    }
    free(cache->items);
    free(cache);
    cb->conv_bn_cache = NULL;
}

// ---- the graph and one fused call -----------------------------------------------------------------------

// dgrad_drelu_dbn for shape s (bk_dgrad_drelu_dbn): dy (n,h,w,c_out), w (c_out,1,1,c_in), x and g
// (n,h,w,c_in) dt, the batch norm's mean, invstd, gamma, beta and the five vectors (c_in) fp32; intermediates
// in mid.
static cudnnBackendDescriptor_t backward_graph(CudnnMade *m, CudnnTrail *t, cudnnHandle_t handle,
                                               const ConvShape *s, DType dt, cudnnDataType_t mid) {
    const cudnnDataType_t io = cudnn_dtype(dt);
    const int64_t n = s->n, c = s->c_in, h = s->h, w = s->w;
    const int64_t uids[11] = {UID_DY,    UID_W,       UID_MEAN,   UID_INVSTD,  UID_GAMMA, UID_BETA,
                              UID_DGRAD, UID_CENTRED, UID_NORMED, UID_GAMMAED, UID_BN};
    cudnnBackendDescriptor_t x = bk_tensor(m, t, "tensor x", UID_X, io, n, c, h, w, false);
    cudnnBackendDescriptor_t g = bk_tensor(m, t, "tensor g", UID_G, io, n, c, h, w, false);
    cudnnBackendDescriptor_t vectors[BWD_VECTORS], ops[7];
    for (int i = 0; i < BWD_VECTORS; i++)
        vectors[i] =
            bk_tensor(m, t, BWD_VECTOR_NAME[i], BWD_VECTOR_UID[i], CUDNN_DATA_FLOAT, 1, c, 1, 1, false);
    bk_dgrad_drelu_dbn(m, t, x, g, io, mid, n, c, h, w, s->c_out, uids, vectors, ops);
    return bk_graph(m, t, handle, ops, 7);
}

// conv_genstats for shape s: y = conv(x', w) (x (n,h,w,c_in), w (c_out,1,1,c_in), y (n,h,w,c_out) dt) with x'
// = x, or relu(x * scale + bias) (scale, bias (c_in) dt) with the prologue; sum and sqsum (c_out) fp32 of y.
// Not finalized (cudnn_graph_plans does it).
static cudnnBackendDescriptor_t conv_bn_graph(CudnnMade *m, CudnnTrail *t, cudnnHandle_t handle,
                                              const ConvShape *s, DType dt, int prologue) {
    const cudnnDataType_t io = cudnn_dtype(dt);
    const int64_t n = s->n, c = s->c_in, h = s->h, w = s->w;
    const int64_t conv_uids[4] = {UID_W, UID_Y, UID_SUM, UID_SQSUM},
                  prologue_uids[3] = {UID_SCALED, UID_BIASED, UID_RELU};
    cudnnBackendDescriptor_t ops[5], in = bk_tensor(m, t, "tensor x", UID_X, io, n, c, h, w, false);
    int count = 0;
    if (prologue) {
        cudnnBackendDescriptor_t scale = bk_tensor(m, t, "tensor scale", UID_SCALE, io, 1, c, 1, 1, false);
        cudnnBackendDescriptor_t bias = bk_tensor(m, t, "tensor bias", UID_BIAS, io, 1, c, 1, 1, false);
        in = bk_scale_bias_relu(m, t, in, scale, bias, CUDNN_DATA_FLOAT, n, c, h, w, prologue_uids, ops);
        count = 3;
    }
    bk_conv_genstats(m, t, in, io, n, c, h, w, s->c_out, conv_uids, ops + count);
    return bk_graph(m, t, handle, ops, count + 2);
}

static size_t align256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

// One call of plan (needing `workspace` bytes). The shared workspace holds the plan's, then sum, sqsum, scale
// and shift (c_out) fp32 for the batch norm after the convolution; with bn_in, then that batch norm's
// statistics scratch, its scale and shift (c_in) fp32 and the same in dt for the graph.
static void run_fused(Backend *be, cudnnBackendDescriptor_t plan, size_t workspace, const ConvBnCall *k) {
    CudaBackend *cb = cuda_state(be);
    const ConvShape *s = k->s;
    const int c = s->c_out, c_in = s->c_in, rows = s->n * s->out_h * s->out_w;
    const size_t plan_bytes = align256(workspace), cvec = align256((size_t)c * sizeof(float));
    const size_t cvec_in = align256((size_t)c_in * sizeof(float)),
                 io_in = align256((size_t)c_in * dtype_size(k->dt));
    const size_t stats_bytes =
        k->bn_in ? align256(bn_own_stats_scratch_bytes(cb, s->n * s->h * s->w, c_in, k->dt, k->x)) : 0;
    const size_t tail = plan_bytes + 4 * cvec;
    char *ws = (char *)cuda_workspace(cb, tail + (k->bn_in ? stats_bytes + 2 * cvec_in + 2 * io_in : 0));
    float *sum = (float *)(ws + plan_bytes), *sqsum = (float *)(ws + plan_bytes + cvec);
    float *scale = (float *)(ws + plan_bytes + 2 * cvec), *shift = (float *)(ws + plan_bytes + 3 * cvec);
    int64_t uids[PACK_MAX] = {UID_X, UID_W, UID_Y, UID_SUM, UID_SQSUM};
    void *ptrs[PACK_MAX] = {(void *)k->x, (void *)k->w, k->y_conv, sum, sqsum};
    int tensors = 5;
    if (k->bn_in) {
        const BnArgs *b = k->bn_in;
        char *at = ws + tail;
        float *scale_in = (float *)(at + stats_bytes), *shift_in = (float *)(at + stats_bytes + cvec_in);
        void *scale_io = at + stats_bytes + 2 * cvec_in, *bias_io = at + stats_bytes + 2 * cvec_in + io_in;
        cuda_bn_forward_train_stats(be, s->n * s->h * s->w, c_in, k->dt, b->x, b->gamma, b->beta,
                                    b->running_mean, b->running_var, k->momentum, k->eps, b->save_mean,
                                    b->save_invstd, at, scale_in, shift_in);
        cuda_cast(be, scale_io, k->dt, scale_in, DTYPE_F32, (size_t)c_in);
        cuda_cast(be, bias_io, k->dt, shift_in, DTYPE_F32, (size_t)c_in);
        uids[tensors] = UID_SCALE, ptrs[tensors++] = scale_io;
        uids[tensors] = UID_BIAS, ptrs[tensors++] = bias_io;
    }
    CUDA_CHECK(cudaMemsetAsync(sum, 0, 2 * cvec, cb->stream));  // genstats adds into them
    cudnn_plan_execute(cb->cudnn, plan, tensors, uids, ptrs, ws);
    const BnArgs *bn = k->bn;
    cuda_bn_forward_train_sums(be, rows, c, k->dt, k->y_conv, sum, sqsum, k->residual, k->relu, bn->gamma,
                               bn->beta, bn->running_mean, bn->running_var, k->momentum, k->eps,
                               bn->save_mean, bn->save_invstd, scale, shift, k->y);
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static void run_chosen(Backend *be, const ConvBnCall *k);

// The calls the op stands for: with bn_in, its forward into scratch, then the convolution and its batch norm
// as chosen for them (conv_bn_forward_train's choice); without, the convolution and the batch norm.
static void run_unfused(Backend *be, const ConvBnCall *k) {
    const ConvShape *s = k->s;
    if (k->bn_in) {
        const BnArgs *b = k->bn_in;
        cuda_bn_forward_train(be, s->n * s->h * s->w, s->c_in, k->dt, b->x, NULL, 1, b->gamma, b->beta,
                              b->running_mean, b->running_var, k->momentum, k->eps, b->save_mean,
                              b->save_invstd, k->scratch);
        ConvBnCall rest = *k;
        rest.bn_in = NULL, rest.scratch = NULL, rest.x = k->scratch;
        run_chosen(be, &rest);
        return;
    }
    const BnArgs *bn = k->bn;
    cuda_conv_forward(be, s, k->dt, k->x, k->w, k->y_conv);
    cuda_bn_forward_train(be, s->n * s->out_h * s->out_w, s->c_out, k->dt, k->y_conv, k->residual, k->relu,
                          bn->gamma, bn->beta, bn->running_mean, bn->running_var, k->momentum, k->eps,
                          bn->save_mean, bn->save_invstd, k->y);
}

static void run_chosen(Backend *be, const ConvBnCall *k) {
    const ConvBnFusion fusion = k->bn_in ? FUSE_BN_CONV_BN : FUSE_CONV_BN;
    const ConvBnChoice *ch = choice_find(cuda_state(be), k->s, k->dt, k->residual != NULL, k->relu, fusion);
    if (ch && ch->fused && aligned16(k->x) && aligned16(k->w) && aligned16(k->y_conv))
        run_fused(be, ch->plan, ch->workspace, k);
    else
        run_unfused(be, k);
}

// x (n,h,w,c_in), w (c_out,1,1,c_in), y_conv, y, residual (nullable) (n,h,w,c_out) dt; bn's (c_out) fp32
void cuda_conv_bn_forward_train(Backend *be, const ConvShape *s, DType dt, const void *x, const void *w,
                                const BnArgs *bn, const void *residual, int relu, float momentum, float eps,
                                void *y_conv, void *y) {
    const ConvBnCall k = {s, dt, NULL, NULL, x, w, bn, residual, relu, momentum, eps, y_conv, y};
    run_chosen(be, &k);
}

// bn_in->x, scratch (n,h,w,c_in) dt, bn_in's (c_in) fp32; the rest as cuda_conv_bn_forward_train's
void cuda_bn_conv_bn_forward_train(Backend *be, const BnArgs *bn_in, void *scratch, const ConvShape *s,
                                   DType dt, const void *w, const BnArgs *bn, const void *residual, int relu,
                                   float momentum, float eps, void *y_conv, void *y) {
    const ConvBnCall k = {s, dt, bn_in, scratch, bn_in->x, w, bn, residual, relu, momentum, eps, y_conv, y};
    run_chosen(be, &k);
}

// ---- the backward ---------------------------------------------------------------------------------------

// One call of the backward's plan (needing `workspace` bytes). The shared workspace holds the plan's, then
// the graph's five vectors and our own pass's coefficients (3, c_in) fp32.
static void run_backward_fused(Backend *be, cudnnBackendDescriptor_t plan, size_t workspace,
                               const BnConvBackwardCall *k) {
    CudaBackend *cb = cuda_state(be);
    const ConvShape *s = k->s;
    const int c = s->c_in, rows = s->n * s->h * s->w;
    const size_t plan_bytes = align256(workspace), cvec = align256((size_t)c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, plan_bytes + (BWD_VECTORS + 3) * cvec);
    char *vectors = ws + plan_bytes;
    const BnArgs *bn = k->bn;
    int64_t uids[PACK_MAX] = {UID_DY, UID_W, UID_X, UID_MEAN, UID_INVSTD, UID_GAMMA, UID_BETA, UID_G};
    void *ptrs[PACK_MAX] = {(void *)k->dy,   (void *)k->w,      (void *)bn->x,    bn->save_mean,
                            bn->save_invstd, (void *)bn->gamma, (void *)bn->beta, k->scratch};
    int tensors = 8;
    for (int i = 0; i < BWD_VECTORS; i++)
        uids[tensors] = BWD_VECTOR_UID[i], ptrs[tensors++] = vectors + i * cvec;
    CUDA_CHECK(cudaMemsetAsync(vectors, 0, BWD_VECTORS * cvec, cb->stream));  // the sums add into them
    cudnn_plan_execute(cb->cudnn, plan, tensors, uids, ptrs, ws);
    const float *sum_gxhat = (const float *)vectors, *sum_g = (const float *)(vectors + cvec);
    bn_own_backward_from_sums(cb, rows, c, k->dt, bn->x, k->scratch, sum_g, sum_gxhat, bn->gamma,
                              bn->save_mean, bn->save_invstd, k->dx, bn->dgamma, bn->dbeta,
                              k->accumulate_params, (float *)(vectors + BWD_VECTORS * cvec));
}

// The calls the op stands for, on the routes conv_prepare and bn_prepare chose.
static void run_backward_unfused(Backend *be, const BnConvBackwardCall *k) {
    const ConvShape *s = k->s;
    const BnArgs *bn = k->bn;
    cuda_conv_backward_data(be, s, k->dt, k->dy, k->w, k->scratch, 0);
    cuda_bn_backward(be, s->n * s->h * s->w, s->c_in, k->dt, bn->x, k->y, k->scratch, 1, bn->gamma,
                     bn->save_mean, bn->save_invstd, k->dx, 0, bn->dgamma, bn->dbeta, k->accumulate_params,
                     NULL);
}

// dy (n,out_h,out_w,c_out), w (c_out,1,1,c_in), bn->x, y, scratch, dx (n,h,w,c_in) dt; bn's (c_in) fp32, its
// gradients (c_in) dt
void cuda_bn_conv_backward_data(Backend *be, const ConvShape *s, DType dt, const void *dy, const void *w,
                                const BnArgs *bn, const void *y, void *scratch, void *dx,
                                int accumulate_params) {
    const BnConvBackwardCall k = {s, dt, dy, w, bn, y, scratch, dx, accumulate_params};
    const ConvBnChoice *ch = choice_find(cuda_state(be), s, dt, 0, 1, FUSE_BN_CONV_BACKWARD);
    if (ch && ch->fused && aligned16(dy) && aligned16(w) && aligned16(bn->x) && aligned16(scratch))
        run_backward_fused(be, ch->plan, ch->workspace, &k);
    else
        run_backward_unfused(be, &k);
}

// ---- the timed choice ---------------------------------------------------------------------------------

// One shape's buffers for timing. Forward: x (rows, c_in), w (c_out, c_in), y_conv, y and the residual (rows,
// c_out) dt, the batch norm's gamma, beta, running and saved statistics (6, c_out) fp32; with the prologue,
// the scratch (rows, c_in) dt and the batch norm in front's statistics (6, c_in) fp32. Backward: x, w, dy
// (rows, c_out), the batch norm in front's output y_in, scratch and dx (rows, c_in) dt, that batch norm's
// statistics (6, c_in) fp32 and gradients (2, c_in) dt.
typedef struct ConvBnTiming {
    Backend *be;
    ConvBnFusion fusion;
    ConvBnCall call;
    BnConvBackwardCall backward;
    BnArgs bn, bn_in;
    void *x, *w, *y_conv, *y, *residual, *scratch;  // scratch: bn_in's output (prologue) or g (backward)
    void *dy, *y_in, *dx, *dparams;                 // the backward's
    float *params, *params_in;                      // the two batch norms' (6, c) fp32
    cudnnBackendDescriptor_t plan;                  // NULL: time the calls the op stands for
    size_t workspace;
} ConvBnTiming;

static void conv_bn_time_one(void *ctx) {
    const ConvBnTiming *t = (const ConvBnTiming *)ctx;
    if (t->fusion == FUSE_BN_CONV_BACKWARD && t->plan)
        run_backward_fused(t->be, t->plan, t->workspace, &t->backward);
    else if (t->fusion == FUSE_BN_CONV_BACKWARD)
        run_backward_unfused(t->be, &t->backward);
    else if (t->plan)
        run_fused(t->be, t->plan, t->workspace, &t->call);
    else
        run_unfused(t->be, &t->call);
}

// The batch norm of one timing over x (c channels) from params (6, c) fp32: gamma and beta, running mean and
// variance filled; saved mean and invstd written by the runs.
static BnArgs timing_bn(CudaBackend *cb, const void *x, float *params, size_t c) {
    cuda_fill_spread(cb, params, 4 * c, DTYPE_F32, 0.5f, 1.5f);
    float *p = params;
    return (BnArgs){x, p, p + c, p + 2 * c, p + 3 * c, p + 4 * c, p + 5 * c, NULL, NULL};
}

// The backward's: dy, dx and the gradients of the batch norm in front, whose forward runs once here as the
// model's does (its saved statistics, and the layer's entry that its backward reads).
static void timing_backward_buffers(ConvBnTiming *t, const ConvBnChoice *ch, size_t rows, size_t c_in) {
    CudaBackend *cb = cuda_state(t->be);
    const ConvShape *s = &ch->shape;
    const size_t es = dtype_size(ch->dt);
    t->dy = cuda_scratch_get(cb, rows * (size_t)s->c_out * es);
    t->y_in = cuda_scratch_get(cb, rows * c_in * es);
    t->dx = cuda_scratch_get(cb, rows * c_in * es);
    t->dparams = cuda_scratch_get(cb, 2 * c_in * es);
    cuda_fill_spread(cb, t->dy, rows * (size_t)s->c_out, ch->dt, -1.0f, 1.0f);
    t->bn_in.dgamma = t->dparams, t->bn_in.dbeta = (char *)t->dparams + c_in * es;
    const BnArgs *b = &t->bn_in;
    cuda_bn_forward_train(t->be, (int)rows, (int)c_in, ch->dt, b->x, NULL, 1, b->gamma, b->beta,
                          b->running_mean, b->running_var, 0.1f, 1e-5f, b->save_mean, b->save_invstd,
                          t->y_in);
    t->backward = (BnConvBackwardCall){s, ch->dt, t->dy, t->w, &t->bn_in, t->y_in, t->scratch, t->dx, 0};
}

static void timing_buffers(ConvBnTiming *t, const ConvBnChoice *ch) {
    CudaBackend *cb = cuda_state(t->be);
    const ConvShape *s = &ch->shape;
    const size_t rows = (size_t)s->n * s->out_h * s->out_w, c = (size_t)s->c_out, c_in = (size_t)s->c_in;
    const size_t es = dtype_size(ch->dt);
    const int backward = ch->fusion == FUSE_BN_CONV_BACKWARD, in_front = ch->fusion != FUSE_CONV_BN;
    t->fusion = ch->fusion;
    t->x = cuda_scratch_get(cb, rows * c_in * es), t->w = cuda_scratch_get(cb, c * c_in * es);
    t->scratch = in_front ? cuda_scratch_get(cb, rows * c_in * es) : NULL;
    t->params_in = in_front ? (float *)cuda_scratch_get(cb, 6 * c_in * sizeof(float)) : NULL;
    // x: a ReLU's output, or the raw output of the convolution before a batch norm
    cuda_fill_spread(cb, t->x, rows * c_in, ch->dt, in_front ? -2.0f : 0.0f, 2.0f);
    cuda_fill_spread(cb, t->w, c * c_in, ch->dt, -0.1f, 0.1f);
    if (in_front) t->bn_in = timing_bn(cb, t->x, t->params_in, c_in);
    if (backward) {
        timing_backward_buffers(t, ch, rows, c_in);
        return;
    }
    t->y_conv = cuda_scratch_get(cb, rows * c * es), t->y = cuda_scratch_get(cb, rows * c * es);
    t->residual = ch->residual ? cuda_scratch_get(cb, rows * c * es) : NULL;
    t->params = (float *)cuda_scratch_get(cb, 6 * c * sizeof(float));
    if (t->residual) cuda_fill_spread(cb, t->residual, rows * c, ch->dt, -1.0f, 1.0f);
    t->bn = timing_bn(cb, t->y_conv, t->params, c);
    const BnArgs *bn_in = in_front ? &t->bn_in : NULL;
    t->call = (ConvBnCall){s,           ch->dt,   bn_in, t->scratch, t->x,      t->w, &t->bn,
                           t->residual, ch->relu, 0.1f,  1e-5f,      t->y_conv, t->y};
}

static void timing_buffers_free(ConvBnTiming *t) {
    CudaBackend *cb = cuda_state(t->be);
    if (t->params) cuda_bn_layer_forget(t->be, t->bn.save_mean);
    if (t->params_in) cuda_bn_layer_forget(t->be, t->bn_in.save_mean);
    void *all[] = {t->x,      t->w,         t->y_conv, t->y,    t->residual, t->scratch,
                   t->params, t->params_in, t->dy,     t->y_in, t->dx,       t->dparams};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cuda_scratch_put(cb, all[i]);
}

// The record's choice for a plan: "fused <index>: <engine>".
static void fused_choice_text(char *out, size_t cap, int index, const char *engine) {
    snprintf(out, cap, "fused %d: %s", index, engine);
}

// The graph's first `count` plans into ch->made; 0 when no engine takes it (AMPTRAIN_CONV_LOG says why). The
// backward's graph is tried with fp32 intermediates, then with intermediates in dt.
static int make_plans(CudaBackend *cb, ConvBnChoice *ch, int count, CudnnPlans *plans) {
    const int backward = ch->fusion == FUSE_BN_CONV_BACKWARD;
    const cudnnDataType_t mids[2] = {CUDNN_DATA_FLOAT, cudnn_dtype(ch->dt)};
    for (int i = 0; i < (backward ? 2 : 1); i++) {
        CudnnTrail t = {};
        cudnnBackendDescriptor_t graph =
            backward
                ? backward_graph(&ch->made, &t, cb->cudnn, &ch->shape, ch->dt, mids[i])
                : conv_bn_graph(&ch->made, &t, cb->cudnn, &ch->shape, ch->dt, ch->fusion == FUSE_BN_CONV_BN);
        if (t.status != CUDNN_STATUS_SUCCESS)
            amp_fatal(__FILE__, __LINE__, "%s: %s", FUSION_NAME[ch->fusion], t.text);
        cudnn_graph_plans(&ch->made, cb->cudnn, graph, count, 0, plans);
        if (plans->count > 0) return 1;
        if (cuda_pick_log_enabled())
            fprintf(stderr, "%s: no engine: %s\n", FUSION_NAME[ch->fusion], plans->searched.text);
    }
    return 0;
}

static void take_plan(ConvBnChoice *ch, const CudnnPlans *plans, int i) {
    CudnnTrail t = {};
    ch->fused = 1;
    ch->plan = plans->plans[i];
    ch->workspace = (size_t)cudnn_plan_workspace(&t, ch->plan);
    snprintf(ch->engine, sizeof ch->engine, "%s", plans->engines[i]);
}

// A record names a plan that is still the heuristics' plan of that index with the same engine and knobs.
static int take_recorded(ConvBnChoice *ch, const CudnnPlans *plans, const char *recorded) {
    for (int i = 0; i < plans->count; i++) {
        char text[CUDNN_ENGINE_TEXT + 32];
        fused_choice_text(text, sizeof text, i, plans->engines[i]);
        if (strcmp(text, recorded) == 0) {
            take_plan(ch, plans, i);
            return 1;
        }
    }
    return 0;
}

// Times the two calls and each plan; takes the fastest (the fastest plan when cb->conv_bn forces fusion).
static void time_ways(Backend *be, ConvBnChoice *ch, const CudnnPlans *plans, char *choice, size_t cap) {
    CudaBackend *cb = cuda_state(be);
    ConvBnTiming t = {};
    t.be = be;
    // the backward's buffers run a batch-norm forward, which may grow the workspace
    const size_t held = cb->workspace_bytes;
    timing_buffers(&t, ch);
    const float unfused_ms = cuda_time_ms(cb, CONV_BN_TIMED_RUNS, conv_bn_time_one, &t);
    float plan_ms[CUDNN_PLAN_MAX];
    int best = -1;
    for (int i = 0; i < plans->count; i++) {
        CudnnTrail w = {};
        t.plan = plans->plans[i];
        t.workspace = (size_t)cudnn_plan_workspace(&w, t.plan);
        plan_ms[i] = cuda_time_ms(cb, CONV_BN_TIMED_RUNS, conv_bn_time_one, &t);
        if (best < 0 || plan_ms[i] < plan_ms[best]) best = i;
    }
    timing_buffers_free(&t);
    cuda_workspace_give_back(cb, held);
    const int fused = best >= 0 && (cb->conv_bn > 0 || plan_ms[best] < unfused_ms);
    if (fused) {
        take_plan(ch, plans, best);
        fused_choice_text(choice, cap, best, ch->engine);
    } else {
        snprintf(choice, cap, "unfused");
    }
    if (!cuda_pick_log_enabled()) return;
    const ConvShape *s = &ch->shape;
    fprintf(stderr, "%s: n %d %dx%d %d->%d %s%s%s: [unfused %.4f ms]%s", FUSION_NAME[ch->fusion], s->n, s->h,
            s->w, s->c_in, s->c_out, dtype_name(ch->dt), ch->residual ? " +residual" : "",
            ch->relu ? " +relu" : "", (double)unfused_ms, fused ? "" : "*");
    for (int i = 0; i < plans->count; i++)
        fprintf(stderr, " [plan %d %.4f ms: %s]%s", i, (double)plan_ms[i], plans->engines[i],
                fused && i == best ? "*" : "");
    fprintf(stderr, "\n");
}

// The choice for shape s of the op `fusion` names (ConvBnFusion), from its record or timed.
void cuda_conv_bn_prepare(Backend *be, const ConvShape *s, DType dt, int residual, int relu, int fusion) {
    CudaBackend *cb = cuda_state(be);
    const int chosen_by_time = cb->bn_mode == CUDA_BN_AUTO && cb->cudnn_benchmark;
    AMP_ASSERT(fusion >= FUSE_CONV_BN && fusion <= FUSE_BN_CONV_BACKWARD, "conv_bn_prepare: fusion %d",
               fusion);
    if (cb->conv_bn < 0 || (cb->conv_bn == 0 && !chosen_by_time) || !conv_bn_eligible(s, dt)) return;
    const ConvBnFusion way = (ConvBnFusion)fusion;
    if (choice_find(cb, s, dt, residual, relu, way)) return;
    const double start = clock_seconds();
    ConvBnChoice *ch = choice_add(cb, s, dt, residual, relu, way);
    char key[CUDA_CHOICE_KEY_MAX], choice[CUDNN_ENGINE_TEXT + 32];
    cuda_choice_key(cb, key, sizeof key, "%s n=%d h=%d w=%d c_in=%d c_out=%d %s residual=%d relu=%d",
                    FUSION_NAME[way], s->n, s->h, s->w, s->c_in, s->c_out, dtype_name(dt), residual, relu);
    // a forced choice (tests) is neither taken from nor written to the records
    const char *recorded = cb->conv_bn == 0 ? kernel_cache_find(cb->choices, key) : NULL;
    int recorded_plan = -1;
    if (recorded && strcmp(recorded, "unfused") != 0 && sscanf(recorded, "fused %d:", &recorded_plan) != 1)
        recorded_plan = -1;
    if (recorded &&
        (strcmp(recorded, "unfused") == 0 || (recorded_plan >= 0 && recorded_plan < CONV_BN_PLANS))) {
        // a record's plan is made alone (the heuristics' plans before it too), then checked against it
        CudnnPlans plans;
        if (recorded_plan < 0 ||
            (make_plans(cb, ch, recorded_plan + 1, &plans) && take_recorded(ch, &plans, recorded))) {
            kernel_cache_use(cb->choices, key);
            if (cuda_pick_log_enabled()) fprintf(stderr, "conv_bn: from the cache: %s\n", recorded);
            return;
        }
    }
    CudnnPlans plans;
    const int any = make_plans(cb, ch, CONV_BN_PLANS, &plans);
    if (any)
        time_ways(be, ch, &plans, choice, sizeof choice);
    else
        snprintf(choice, sizeof choice, "unfused");
    if (cb->conv_bn == 0) kernel_cache_store(cb->choices, key, choice, clock_seconds() - start);
}

extern "C" int cuda_backend_conv_bn_fused(Backend *be, const ConvShape *s, DType dt, int residual, int relu,
                                          int fusion) {
    const ConvBnChoice *ch = choice_find(cuda_state(be), s, dt, residual, relu, (ConvBnFusion)fusion);
    return ch ? ch->fused : -1;
}

extern "C" void cuda_backend_set_conv_bn(Backend *be, int mode) { cuda_state(be)->conv_bn = mode; }
