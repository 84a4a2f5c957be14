// cudnn_conv_bn.cu - conv_bn_forward_train and bn_conv_bn_forward_train (core/backend_ops.def): a 1x1 convolution
// and the batch norm after it in training (with, for the second, a batch norm + ReLU in front of the
// convolution), with the batch norm's statistics from the convolution's epilogue where that is faster.
//
// The fused way: cuDNN's operation graph conv_genstats, y_conv = conv(x, w) with the per-channel sum and sum of
// squares of y_conv (fp32, before rounding to dt) from the same kernel (the ConvBNfprop engine of NVIDIA's
// MLPerf ResNet-50; cudnn_graph.h builds the graph), then our own finalize and apply from those sums
// (cuda_bn_forward_train_sums: mean, invstd, the running statistics, y = act(bn + residual) in one pass). Against
// conv_forward + bn_forward_train it saves the statistics' read of y_conv, and cuDNN's kernel is often faster
// than the GEMM alone (bench/RESULTS.md). The variance comes from sum and sum of squares (q/n - mean^2, in fp64
// from fp32 sums): exact enough while a channel's mean is not hundreds of its standard deviations, which a
// convolution's output in training never approaches.
//
// With a batch norm in front (bn_conv_bn_forward_train: a block's bn2 + ReLU before conv3), the graph's
// prologue applies it: relu(x * scale + bias) per input channel, scale and bias in dt from that batch norm's
// statistics (our own pass: cuda_bn_forward_train_stats), so its output is never written. The convolution's
// input then differs from that output, as written and as a backward recomputes it, by the rounding of scale and
// bias to dt.
//
// Eligible shapes: 1x1, stride 1, no padding, ungrouped, fp16 or bf16, channel counts multiples of 8 (16-byte
// rows). Which way a shape runs is chosen by conv_bn_prepare (with prologue 1: bn_conv_bn's) under
// cudnn.batch_norm auto with cudnn.benchmark: the calls the op stands for (on the routes conv_prepare and bn_prepare chose) and the
// first CONV_BN_PLANS plans of cuDNN's heuristics for the graph are timed on buffers of their own, the fastest
// kept; the choice is recorded in cudnn.cache ("unfused", or "fused <plan index>: <engine and knobs>", the plan
// re-made and its engine checked before a record is taken). Under any other setting, for a shape not prepared
// (another batch size) and for buffers not 16-byte aligned, the op makes the calls.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_batchnorm_own.h"
#include "kernels/cuda/cuda_diag.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_graph.h"

// Plans of the heuristics' list timed per shape (the first is usually the fastest; none compiles at run time).
#define CONV_BN_PLANS 4
// Timed runs of each way in the prepare, after one untimed run.
#define CONV_BN_TIMED_RUNS 5

// The graph's tensors (CUDNN_ATTR_TENSOR_UNIQUE_ID: the variant pack's keys): in memory, then the prologue's
// virtual ones.
enum { UID_X = 1, UID_W, UID_Y, UID_SUM, UID_SQSUM, UID_SCALE, UID_BIAS, UID_SCALED, UID_BIASED, UID_RELU };
#define PACK_MAX 7

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

typedef struct ConvBnChoice {
    ConvShape shape;
    DType dt;
    int residual, relu, prologue;   // prologue: bn_conv_bn_forward_train's
    int fused;                      // 1: the plan below, then cuda_bn_forward_train_sums; 0: the calls
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
                                 int prologue) {
    CudaConvBnCache *cache = cb->conv_bn_cache;
    for (int i = 0; cache && i < cache->count; i++) {
        ConvBnChoice *ch = cache->items[i];
        if (conv_shape_same(&ch->shape, s) && ch->dt == dt && ch->residual == residual && ch->relu == relu &&
            ch->prologue == prologue)
            return ch;
    }
    return NULL;
}

static ConvBnChoice *choice_add(CudaBackend *cb, const ConvShape *s, DType dt, int residual, int relu,
                                int prologue) {
    if (!cb->conv_bn_cache) cb->conv_bn_cache = (CudaConvBnCache *)xcalloc(1, sizeof(CudaConvBnCache));
    CudaConvBnCache *cache = cb->conv_bn_cache;
    if (cache->count == cache->capacity) {
        cache->capacity = cache->capacity ? 2 * cache->capacity : 32;
        cache->items = (ConvBnChoice **)realloc(cache->items, (size_t)cache->capacity * sizeof *cache->items);
        AMP_ASSERT(cache->items != NULL, "conv_bn: out of host memory");
    }
    ConvBnChoice *ch = (ConvBnChoice *)xcalloc(1, sizeof *ch);
    ch->shape = *s, ch->dt = dt, ch->residual = residual, ch->relu = relu, ch->prologue = prologue;
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

// conv_genstats for shape s: y = conv(x', w) (x (n,h,w,c_in), w (c_out,1,1,c_in), y (n,h,w,c_out) dt) with
// x' = x, or relu(x * scale + bias) (scale, bias (c_in) dt) with the prologue; sum and sqsum (c_out) fp32 of y.
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
    CudnnMade made = {};
    CudnnTrail t = {};
    cudnnBackendDescriptor_t pack = cudnn_variant_pack(&made, &t, tensors, uids, ptrs, ws);
    if (t.status != CUDNN_STATUS_SUCCESS) amp_fatal(__FILE__, __LINE__, "conv_bn: %s", t.text);
    CUDNN_CHECK(cudnnBackendExecute(cb->cudnn, plan, pack));
    cudnn_made_free(&made);
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
    const ConvBnChoice *ch =
        choice_find(cuda_state(be), k->s, k->dt, k->residual != NULL, k->relu, k->bn_in != NULL);
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

// ---- the timed choice ---------------------------------------------------------------------------------

// One shape's buffers for timing: x (rows, c_in), w (c_out, c_in), y_conv, y and the residual (rows, c_out) dt,
// the batch norm's gamma, beta, running and saved statistics (6, c_out) fp32; with the prologue, the scratch
// (rows, c_in) dt and the batch norm in front's statistics (6, c_in) fp32.
typedef struct ConvBnTiming {
    Backend *be;
    ConvBnCall call;
    BnArgs bn, bn_in;
    void *x, *w, *y_conv, *y, *residual, *scratch;  // scratch: bn_in's output (prologue only)
    float *params, *params_in;                      // the two batch norms' (6, c) fp32 (params_in: prologue)
    cudnnBackendDescriptor_t plan;                  // NULL: time the calls the op stands for
    size_t workspace;
} ConvBnTiming;

static void conv_bn_time_one(void *ctx) {
    const ConvBnTiming *t = (const ConvBnTiming *)ctx;
    if (t->plan)
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

static void timing_buffers(CudaBackend *cb, ConvBnTiming *t, const ConvBnChoice *ch) {
    const ConvShape *s = &ch->shape;
    const size_t rows = (size_t)s->n * s->out_h * s->out_w, c = (size_t)s->c_out, c_in = (size_t)s->c_in;
    const size_t es = dtype_size(ch->dt);
    t->x = cuda_scratch_get(cb, rows * c_in * es), t->w = cuda_scratch_get(cb, c * c_in * es);
    t->y_conv = cuda_scratch_get(cb, rows * c * es), t->y = cuda_scratch_get(cb, rows * c * es);
    t->residual = ch->residual ? cuda_scratch_get(cb, rows * c * es) : NULL;
    t->params = (float *)cuda_scratch_get(cb, 6 * c * sizeof(float));
    t->scratch = ch->prologue ? cuda_scratch_get(cb, rows * c_in * es) : NULL;
    t->params_in = ch->prologue ? (float *)cuda_scratch_get(cb, 6 * c_in * sizeof(float)) : NULL;
    // x: a ReLU's output, or the raw output of the convolution before a batch norm
    cuda_fill_spread(cb, t->x, rows * c_in, ch->dt, ch->prologue ? -2.0f : 0.0f, 2.0f);
    cuda_fill_spread(cb, t->w, c * c_in, ch->dt, -0.1f, 0.1f);
    if (t->residual) cuda_fill_spread(cb, t->residual, rows * c, ch->dt, -1.0f, 1.0f);
    t->bn = timing_bn(cb, t->y_conv, t->params, c);
    if (ch->prologue) t->bn_in = timing_bn(cb, t->x, t->params_in, c_in);
    const BnArgs *bn_in = ch->prologue ? &t->bn_in : NULL;
    t->call = (ConvBnCall){s,           ch->dt,   bn_in, t->scratch, t->x,      t->w, &t->bn,
                           t->residual, ch->relu, 0.1f,  1e-5f,      t->y_conv, t->y};
}

static void timing_buffers_free(Backend *be, ConvBnTiming *t) {
    CudaBackend *cb = cuda_state(be);
    cuda_bn_layer_forget(be, t->bn.save_mean);
    if (t->call.bn_in) cuda_bn_layer_forget(be, t->bn_in.save_mean);
    void *all[] = {t->x, t->w, t->y_conv, t->y, t->residual, t->scratch, t->params, t->params_in};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cuda_scratch_put(cb, all[i]);
}

// The record's choice for a plan: "fused <index>: <engine>".
static void fused_choice_text(char *out, size_t cap, int index, const char *engine) {
    snprintf(out, cap, "fused %d: %s", index, engine);
}

// The graph's first `count` plans into ch->made; 0 when no engine takes it (AMPTRAIN_CONV_LOG says why).
static int make_plans(CudaBackend *cb, ConvBnChoice *ch, int count, CudnnPlans *plans) {
    CudnnTrail t = {};
    cudnnBackendDescriptor_t graph =
        conv_bn_graph(&ch->made, &t, cb->cudnn, &ch->shape, ch->dt, ch->prologue);
    if (t.status != CUDNN_STATUS_SUCCESS) amp_fatal(__FILE__, __LINE__, "conv_bn: %s", t.text);
    cudnn_graph_plans(&ch->made, cb->cudnn, graph, count, 0, plans);
    if (plans->count == 0 && cuda_pick_log_enabled())
        fprintf(stderr, "conv_bn: no engine: %s\n", plans->searched.text);
    return plans->count > 0;
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
    timing_buffers(cb, &t, ch);
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
    timing_buffers_free(be, &t);
    const int fused = best >= 0 && (cb->conv_bn > 0 || plan_ms[best] < unfused_ms);
    if (fused) {
        take_plan(ch, plans, best);
        fused_choice_text(choice, cap, best, ch->engine);
    } else {
        snprintf(choice, cap, "unfused");
    }
    if (!cuda_pick_log_enabled()) return;
    const ConvShape *s = &ch->shape;
    fprintf(stderr, "%s: n %d %dx%d %d->%d %s%s%s: [unfused %.4f ms]%s",
            ch->prologue ? "bn_conv_bn" : "conv_bn", s->n, s->h, s->w, s->c_in, s->c_out, dtype_name(ch->dt),
            ch->residual ? " +residual" : "", ch->relu ? " +relu" : "", (double)unfused_ms, fused ? "" : "*");
    for (int i = 0; i < plans->count; i++)
        fprintf(stderr, " [plan %d %.4f ms: %s]%s", i, (double)plan_ms[i], plans->engines[i],
                fused && i == best ? "*" : "");
    fprintf(stderr, "\n");
}

// The choice for shape s of conv_bn_forward_train (prologue 0) or bn_conv_bn_forward_train (1), from its
// record or timed.
void cuda_conv_bn_prepare(Backend *be, const ConvShape *s, DType dt, int residual, int relu, int prologue) {
    CudaBackend *cb = cuda_state(be);
    const int chosen_by_time = cb->bn_mode == CUDA_BN_AUTO && cb->cudnn_benchmark;
    if (cb->conv_bn < 0 || (cb->conv_bn == 0 && !chosen_by_time) || !conv_bn_eligible(s, dt)) return;
    if (choice_find(cb, s, dt, residual, relu, prologue)) return;
    const double start = clock_seconds();
    ConvBnChoice *ch = choice_add(cb, s, dt, residual, relu, prologue);
    char key[CUDA_CHOICE_KEY_MAX], choice[CUDNN_ENGINE_TEXT + 32];
    cuda_choice_key(cb, key, sizeof key, "%s n=%d h=%d w=%d c_in=%d c_out=%d %s residual=%d relu=%d",
                    prologue ? "bn_conv_bn" : "conv_bn", s->n, s->h, s->w, s->c_in, s->c_out, dtype_name(dt),
                    residual, relu);
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
                                          int prologue) {
    const ConvBnChoice *ch = choice_find(cuda_state(be), s, dt, residual, relu, prologue);
    return ch ? ch->fused : -1;
}

extern "C" void cuda_backend_set_conv_bn(Backend *be, int mode) { cuda_state(be)->conv_bn = mode; }
