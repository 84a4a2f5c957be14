// cudnn_conv_bn.cu - conv_bn_forward_train (core/backend_ops.def): a convolution and the batch norm after it in
// training, with the batch norm's statistics from the convolution's epilogue where that is faster.
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
// Eligible shapes: 1x1, stride 1, no padding, ungrouped, fp16 or bf16, channel counts multiples of 8 (16-byte
// rows). Which way a shape runs is chosen by conv_bn_prepare under cudnn.batch_norm auto with cudnn.benchmark:
// the two calls (on the routes conv_prepare and bn_prepare chose) and the first CONV_BN_PLANS plans of cuDNN's
// heuristics for the graph are timed on buffers of their own, the fastest kept; the choice is recorded in
// cudnn.cache ("unfused", or "fused <plan index>: <engine and knobs>", the plan re-made and its engine checked
// before a record is taken). Under any other setting, for a shape not prepared (another batch size) and for
// buffers not 16-byte aligned, the op makes the two calls.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_diag.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_graph.h"

// Plans of the heuristics' list timed per shape (the first is usually the fastest; none compiles at run time).
#define CONV_BN_PLANS 4
// Timed runs of each way in conv_bn_prepare, after one untimed run.
#define CONV_BN_TIMED_RUNS 5

// The graph's tensors in memory (CUDNN_ATTR_TENSOR_UNIQUE_ID: the variant pack's keys).
enum { UID_X = 1, UID_W, UID_Y, UID_SUM, UID_SQSUM, UID_COUNT = UID_SQSUM };

typedef struct ConvBnChoice {
    ConvShape shape;
    DType dt;
    int residual, relu;
    int fused;                      // 1: the plan below, then cuda_bn_forward_train_sums; 0: the two calls
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

static ConvBnChoice *choice_find(CudaBackend *cb, const ConvShape *s, DType dt, int residual, int relu) {
    CudaConvBnCache *cache = cb->conv_bn_cache;
    for (int i = 0; cache && i < cache->count; i++) {
        ConvBnChoice *ch = cache->items[i];
        if (conv_shape_same(&ch->shape, s) && ch->dt == dt && ch->residual == residual && ch->relu == relu)
            return ch;
    }
    return NULL;
}

static ConvBnChoice *choice_add(CudaBackend *cb, const ConvShape *s, DType dt, int residual, int relu) {
    if (!cb->conv_bn_cache) cb->conv_bn_cache = (CudaConvBnCache *)xcalloc(1, sizeof(CudaConvBnCache));
    CudaConvBnCache *cache = cb->conv_bn_cache;
    if (cache->count == cache->capacity) {
        cache->capacity = cache->capacity ? 2 * cache->capacity : 32;
        cache->items = (ConvBnChoice **)realloc(cache->items, (size_t)cache->capacity * sizeof *cache->items);
        AMP_ASSERT(cache->items != NULL, "conv_bn: out of host memory");
    }
    ConvBnChoice *ch = (ConvBnChoice *)xcalloc(1, sizeof *ch);
    ch->shape = *s, ch->dt = dt, ch->residual = residual, ch->relu = relu;
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

// conv_genstats for shape s: y = conv(x, w) (x (n,h,w,c_in), w (c_out,1,1,c_in), y (n,h,w,c_out) dt), sum and
// sqsum (c_out) fp32 of y. Not finalized (cudnn_graph_plans does it).
static cudnnBackendDescriptor_t conv_bn_graph(CudnnMade *m, CudnnTrail *t, cudnnHandle_t handle,
                                              const ConvShape *s, DType dt) {
    const cudnnDataType_t io = cudnn_dtype(dt);
    const int64_t uids[4] = {UID_W, UID_Y, UID_SUM, UID_SQSUM};
    cudnnBackendDescriptor_t x = bk_tensor(m, t, "tensor x", UID_X, io, s->n, s->c_in, s->h, s->w, false);
    cudnnBackendDescriptor_t ops[2];
    bk_conv_genstats(m, t, x, io, s->n, s->c_in, s->h, s->w, s->c_out, uids, ops);
    return bk_graph(m, t, handle, ops, 2);
}

static size_t align256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

// One call of plan (needing `workspace` bytes): y_conv and its sums, then the batch norm from them. The shared
// workspace holds the plan's, then sum, sqsum, scale and shift (c_out) fp32.
static void conv_bn_run_fused(Backend *be, cudnnBackendDescriptor_t plan, size_t workspace,
                              const ConvShape *s, DType dt, const void *x, const void *w, const BnArgs *bn,
                              const void *residual, int relu, float momentum, float eps, void *y_conv,
                              void *y) {
    CudaBackend *cb = cuda_state(be);
    const int c = s->c_out, rows = s->n * s->out_h * s->out_w;
    const size_t plan_bytes = align256(workspace), cvec = align256((size_t)c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, plan_bytes + 4 * cvec);
    float *sum = (float *)(ws + plan_bytes), *sqsum = (float *)(ws + plan_bytes + cvec);
    float *scale = (float *)(ws + plan_bytes + 2 * cvec), *shift = (float *)(ws + plan_bytes + 3 * cvec);
    CUDA_CHECK(cudaMemsetAsync(sum, 0, 2 * cvec, cb->stream));  // genstats adds into them
    const int64_t uids[UID_COUNT] = {UID_X, UID_W, UID_Y, UID_SUM, UID_SQSUM};
    void *const ptrs[UID_COUNT] = {(void *)x, (void *)w, y_conv, sum, sqsum};
    CudnnMade made = {};
    CudnnTrail t = {};
    cudnnBackendDescriptor_t pack = cudnn_variant_pack(&made, &t, UID_COUNT, uids, ptrs, ws);
    if (t.status != CUDNN_STATUS_SUCCESS) amp_fatal(__FILE__, __LINE__, "conv_bn: %s", t.text);
    CUDNN_CHECK(cudnnBackendExecute(cb->cudnn, plan, pack));
    cudnn_made_free(&made);
    cuda_bn_forward_train_sums(be, rows, c, dt, y_conv, sum, sqsum, residual, relu, bn->gamma, bn->beta,
                               bn->running_mean, bn->running_var, momentum, eps, bn->save_mean,
                               bn->save_invstd, scale, shift, y);
}

static void conv_bn_run_unfused(Backend *be, const ConvShape *s, DType dt, const void *x, const void *w,
                                const BnArgs *bn, const void *residual, int relu, float momentum, float eps,
                                void *y_conv, void *y) {
    cuda_conv_forward(be, s, dt, x, w, y_conv);
    cuda_bn_forward_train(be, s->n * s->out_h * s->out_w, s->c_out, dt, y_conv, residual, relu, bn->gamma,
                          bn->beta, bn->running_mean, bn->running_var, momentum, eps, bn->save_mean,
                          bn->save_invstd, y);
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// x (n,h,w,c_in), w (c_out,1,1,c_in), y_conv, y, residual (nullable) (n,h,w,c_out) dt; bn's (c_out) fp32
void cuda_conv_bn_forward_train(Backend *be, const ConvShape *s, DType dt, const void *x, const void *w,
                                const BnArgs *bn, const void *residual, int relu, float momentum, float eps,
                                void *y_conv, void *y) {
    const ConvBnChoice *ch = choice_find(cuda_state(be), s, dt, residual != NULL, relu);
    if (ch && ch->fused && aligned16(x) && aligned16(w) && aligned16(y_conv))
        conv_bn_run_fused(be, ch->plan, ch->workspace, s, dt, x, w, bn, residual, relu, momentum, eps, y_conv,
                          y);
    else
        conv_bn_run_unfused(be, s, dt, x, w, bn, residual, relu, momentum, eps, y_conv, y);
}

// ---- the timed choice ---------------------------------------------------------------------------------

// One shape's buffers for timing: x (rows, c_in), w (c_out, c_in), y_conv, y and the residual (rows, c_out) dt;
// the batch norm's gamma, beta, running and saved statistics (6, c_out) fp32.
typedef struct ConvBnTiming {
    Backend *be;
    const ConvShape *s;
    DType dt;
    int relu;
    void *x, *w, *y_conv, *y, *residual;
    float *params;
    BnArgs bn;
    cudnnBackendDescriptor_t plan;  // NULL: time the two calls
    size_t workspace;
} ConvBnTiming;

static void conv_bn_time_one(void *ctx) {
    const ConvBnTiming *t = (const ConvBnTiming *)ctx;
    if (t->plan)
        conv_bn_run_fused(t->be, t->plan, t->workspace, t->s, t->dt, t->x, t->w, &t->bn, t->residual, t->relu,
                          0.1f, 1e-5f, t->y_conv, t->y);
    else
        conv_bn_run_unfused(t->be, t->s, t->dt, t->x, t->w, &t->bn, t->residual, t->relu, 0.1f, 1e-5f,
                            t->y_conv, t->y);
}

static void timing_buffers(CudaBackend *cb, ConvBnTiming *t, int residual) {
    const ConvShape *s = t->s;
    const size_t rows = (size_t)s->n * s->out_h * s->out_w, c = (size_t)s->c_out, es = dtype_size(t->dt);
    t->x = cuda_scratch_get(cb, rows * s->c_in * es), t->w = cuda_scratch_get(cb, c * s->c_in * es);
    t->y_conv = cuda_scratch_get(cb, rows * c * es), t->y = cuda_scratch_get(cb, rows * c * es);
    t->residual = residual ? cuda_scratch_get(cb, rows * c * es) : NULL;
    t->params = (float *)cuda_scratch_get(cb, 6 * c * sizeof(float));
    cuda_fill_spread(cb, t->x, rows * s->c_in, t->dt, 0.0f, 2.0f);  // a ReLU's output
    cuda_fill_spread(cb, t->w, c * s->c_in, t->dt, -0.1f, 0.1f);
    if (residual) cuda_fill_spread(cb, t->residual, rows * c, t->dt, -1.0f, 1.0f);
    cuda_fill_spread(cb, t->params, 4 * c, DTYPE_F32, 0.5f, 1.5f);  // gamma, beta, running statistics
    float *p = t->params;
    t->bn = (BnArgs){t->y_conv, p, p + c, p + 2 * c, p + 3 * c, p + 4 * c, p + 5 * c, NULL, NULL};
}

static void timing_buffers_free(Backend *be, ConvBnTiming *t) {
    CudaBackend *cb = cuda_state(be);
    cuda_bn_layer_forget(be, t->bn.save_mean);
    void *all[] = {t->x, t->w, t->y_conv, t->y, t->residual, t->params};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cuda_scratch_put(cb, all[i]);
}

// The record's choice for a plan: "fused <index>: <engine>".
static void fused_choice_text(char *out, size_t cap, int index, const char *engine) {
    snprintf(out, cap, "fused %d: %s", index, engine);
}

// The graph's first `count` plans into ch->made; 0 when no engine takes it (AMPTRAIN_CONV_LOG says why).
static int make_plans(CudaBackend *cb, ConvBnChoice *ch, int count, CudnnPlans *plans) {
    CudnnTrail t = {};
    cudnnBackendDescriptor_t graph = conv_bn_graph(&ch->made, &t, cb->cudnn, &ch->shape, ch->dt);
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
    ConvBnTiming t = {be, &ch->shape, ch->dt, ch->relu};
    timing_buffers(cb, &t, ch->residual);
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
    fprintf(stderr, "conv_bn: n %d %dx%d %d->%d %s%s%s: [unfused %.4f ms]%s", s->n, s->h, s->w, s->c_in,
            s->c_out, dtype_name(ch->dt), ch->residual ? " +residual" : "", ch->relu ? " +relu" : "",
            (double)unfused_ms, fused ? "" : "*");
    for (int i = 0; i < plans->count; i++)
        fprintf(stderr, " [plan %d %.4f ms: %s]%s", i, (double)plan_ms[i], plans->engines[i],
                fused && i == best ? "*" : "");
    fprintf(stderr, "\n");
}

void cuda_conv_bn_prepare(Backend *be, const ConvShape *s, DType dt, int residual, int relu) {
    CudaBackend *cb = cuda_state(be);
    const int chosen_by_time = cb->bn_mode == CUDA_BN_AUTO && cb->cudnn_benchmark;
    if (cb->conv_bn < 0 || (cb->conv_bn == 0 && !chosen_by_time) || !conv_bn_eligible(s, dt)) return;
    if (choice_find(cb, s, dt, residual, relu)) return;
    const double start = clock_seconds();
    ConvBnChoice *ch = choice_add(cb, s, dt, residual, relu);
    char key[CUDA_CHOICE_KEY_MAX], choice[CUDNN_ENGINE_TEXT + 32];
    cuda_choice_key(cb, key, sizeof key, "conv_bn n=%d h=%d w=%d c_in=%d c_out=%d %s residual=%d relu=%d",
                    s->n, s->h, s->w, s->c_in, s->c_out, dtype_name(dt), residual, relu);
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

extern "C" int cuda_backend_conv_bn_fused(Backend *be, const ConvShape *s, DType dt, int residual, int relu) {
    const ConvBnChoice *ch = choice_find(cuda_state(be), s, dt, residual, relu);
    return ch ? ch->fused : -1;
}

extern "C" void cuda_backend_set_conv_bn(Backend *be, int mode) { cuda_state(be)->conv_bn = mode; }
