// cudnn_conv.cu - NHWC convolutions (forward, backward data, backward filter) on cuDNN's legacy API.
//
// Layouts: activations (n, h, w, c) are CUDNN_TENSOR_NHWC tensors; weights (c_out, kh, kw, c_in/g) are
// CUDNN_TENSOR_NHWC filters, which is exactly our OHWI. Math accumulates in fp32 (the convolution
// descriptor's compute type). fp16 and bf16 (CUDNN_DATA_BFLOAT16, Ampere and later) may use tensor cores;
// fp32 uses TF32 tensor cores only when the backend allows TF32 (CUDNN_DEFAULT_MATH), else CUDNN_FMA_MATH
// keeps it in true fp32.
//
// Per-shape cache: the descriptors and the algorithm of each direction are made once per (shape, dtype)
// and reused. With cudnn_benchmark the algorithm comes from a timed search (cudnnFind*Ex), run once per
// shape and direction: of the algorithms within CONV_NEAR_FASTEST of the fastest, the one needing the
// least workspace. The search gets the largest workspace (up to the cap) that any algorithm asks for, so
// none is skipped for want of memory; that workspace and any scratch are the search's own, handed back
// afterwards. Without cudnn_benchmark, cuDNN's heuristic list (cudnnGet*_v7), preferring the first
// deterministic algorithm that succeeds and fits the workspace cap, so runs repeat bitwise.
//
// Math types: each result of the search and of the heuristic names the math type it is for, and cuDNN's
// documentation says the search tries CUDNN_DEFAULT_MATH beside the descriptor's type (cuDNN 9.14 on an
// H200 returned only the descriptor's type for exact fp32). A direction keeps the math type of its pick and
// sets it on the (shared) descriptor before it runs: an algorithm timed with TF32 but run under
// CUDNN_FMA_MATH would be another, slower kernel. Exact fp32 (TF32 not allowed) takes only results for
// CUDNN_FMA_MATH.
//
// A 1x1 stride-1 ungrouped convolution may run as one cuBLAS GEMM instead (cuda_conv_gemm.cu): the timed
// search times that route too and takes it when it beats cuDNN's pick; without the search it runs for
// exact fp32, where cuDNN's legacy API offers only its two slow NHWC algorithms (bench/RESULTS.md).
// cuda_conv_prepare runs the three searches for a shape before the step's memory exists (the model calls
// it for every layer before its activations are allocated), on buffers of its own: the search's scratch
// then never sits on top of the activations, and the shared workspace grows only to what the chosen
// algorithms need. A shape met later (another batch size) is searched on the real buffers, lazily.
//
// Timed choices are kept as records (cb->choices, cudnn.cache): before searching a direction, its record,
// when one holds here, chooses instead; every search's outcome is recorded.
//
// Channel padding: an ungrouped fp16 or bf16 convolution with fewer than 8 input channels (the stem's 3)
// may run its forward and weight gradient on its input and weights padded with zero channels to 4 or 8
// (cuda_conv_pad.cu), on the plan of that padded shape: cuDNN's dedicated 3-channel first-layer kernels
// are fp16 only, and in bf16 its kernels for 4 or 8 channels are the fast ones. The timed search times the
// unpadded pick against both paddings (the padding kernels included) and takes the fastest; without the
// search the convolution runs unpadded. The padded input, weights and weight gradient live in the shared
// workspace after the padded algorithm's own. Its data gradient always runs unpadded (the stem needs none).
//
// amptrain's own kernels (cuda_conv_stem.cu) are a third route for such a convolution's forward and weight
// gradient (fp16 or bf16, stride 2, 64 output channels, at most 4 input channels): the timed search times
// them beside the others and takes them when fastest.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_choice.h"
#include "kernels/cuda/cuda_diag.h"
#include "kernels/cuda/cuda_internal.h"

// How many candidates to ask cuDNN for in one heuristic query or timed search.
#define CONV_ALGO_CANDIDATES 16
// A timed search takes, of the algorithms at most this much slower than the fastest, the one with the
// least workspace: the timings differ by about this much between runs anyway.
#define CONV_NEAR_FASTEST 1.02f
// The channel counts a convolution with fewer input channels may be padded to (cuda_conv_pad.cu).
static const int conv_pad_widths[] = {4, 8};
#define CONV_PAD_WIDTHS (int)(sizeof conv_pad_widths / sizeof conv_pad_widths[0])
// Timed runs of each route (the GEMM route, the unpadded and padded ones) in a search, after one untimed run.
#define CONV_ROUTE_TIMED_RUNS 3

typedef enum { CONV_FWD = 0, CONV_BWD_DATA = 1, CONV_BWD_FILTER = 2 } ConvDirection;

typedef struct ConvPlan {
    ConvShape shape;
    DType dt;
    cudnnTensorDescriptor_t x_desc;  // (n, h, w, c_in) NHWC
    cudnnTensorDescriptor_t y_desc;  // (n, out_h, out_w, c_out) NHWC
    cudnnFilterDescriptor_t w_desc;  // (c_out, kh, kw, c_in/g) OHWI
    cudnnConvolutionDescriptor_t conv_desc;
    int chosen[3];  // per ConvDirection: 1 once its algorithm is picked
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
    cudnnMathType_t math[3];  // per ConvDirection: the math type the algorithm was chosen under
    int gemm[3];              // per ConvDirection: 1 runs as a cuBLAS GEMM (cuda_conv_gemm.cu)
    size_t workspace[3];      // per ConvDirection: bytes the chosen algorithm needs
    int padded[3];            // per ConvDirection: 0, or the input channels it runs padded to (forward
                              // and backward filter only; the padded shape's plan runs it)
    int pad_target;           // 1: the plan of a padded shape, which never pads again
    int own[3];               // per ConvDirection: 1 runs on amptrain's stem kernels (cuda_conv_stem.cu)
    // a padded shape's plan: its timed choice per ConvDirection, recorded only once its padding is taken
    int record_pending[3];
    double record_seconds[3];
} ConvPlan;

struct CudaConvCache {
    ConvPlan **plans;  // linear table of plans that never move: a model has a few dozen distinct shapes
    int count, capacity;
};

// ---- the per-shape cache --------------------------------------------------------------------------

static int conv_shape_equal(const ConvShape *a, const ConvShape *b) {
    return a->n == b->n && a->h == b->h && a->w == b->w && a->c_in == b->c_in && a->c_out == b->c_out &&
           a->kh == b->kh && a->kw == b->kw && a->stride == b->stride && a->pad == b->pad &&
           a->groups == b->groups && a->out_h == b->out_h && a->out_w == b->out_w;
}

static cudnnMathType_t conv_math_type(const CudaBackend *cb, DType dt) {
    if (dtype_is_16bit(dt)) return CUDNN_TENSOR_OP_MATH;
    return cb->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

// The descriptor's math type: the base one (conv_math_type) for a search or heuristic query, a
// direction's chosen one before that direction runs (one descriptor serves the three directions).
static void conv_set_math(ConvPlan *p, cudnnMathType_t m) {
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv_desc, m));
}

static void conv_plan_init(CudaBackend *cb, ConvPlan *p, const ConvShape *s, DType dt) {
    memset(p, 0, sizeof *p);
    p->shape = *s;
    p->dt = dt;
    cudnnDataType_t t = cudnn_dtype(dt);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x_desc));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x_desc, CUDNN_TENSOR_NHWC, t, s->n, s->c_in, s->h, s->w));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y_desc));
    CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(p->y_desc, CUDNN_TENSOR_NHWC, t, s->n, s->c_out, s->out_h, s->out_w));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w_desc));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w_desc, t, CUDNN_TENSOR_NHWC, s->c_out, s->c_in / s->groups,
                                           s->kh, s->kw));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv_desc));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv_desc, s->pad, s->pad, s->stride, s->stride, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv_desc, s->groups));
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv_desc, conv_math_type(cb, dt)));

    int n_out, c_out, h_out, w_out;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv_desc, p->x_desc, p->w_desc, &n_out, &c_out,
                                                      &h_out, &w_out));
    AMP_ASSERT(n_out == s->n && c_out == s->c_out && h_out == s->out_h && w_out == s->out_w,
               "conv: cuDNN output (%d,%d,%d,%d) differs from ConvShape (%d,%d,%d,%d)", n_out, h_out, w_out,
               c_out, s->n, s->out_h, s->out_w, s->c_out);
}

static void conv_plan_destroy(ConvPlan *p) {
    CUDNN_CHECK(cudnnDestroyTensorDescriptor(p->x_desc));
    CUDNN_CHECK(cudnnDestroyTensorDescriptor(p->y_desc));
    CUDNN_CHECK(cudnnDestroyFilterDescriptor(p->w_desc));
    CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(p->conv_desc));
}

// The cached plan of (s, dt), or NULL.
static ConvPlan *conv_plan_find(CudaBackend *cb, const ConvShape *s, DType dt) {
    CudaConvCache *cache = cb->conv_cache;
    for (int i = 0; cache && i < cache->count; i++)
        if (cache->plans[i]->dt == dt && conv_shape_equal(&cache->plans[i]->shape, s)) return cache->plans[i];
    return NULL;
}

// The cached plan of (s, dt), made (descriptors, nothing chosen) when missing.
static ConvPlan *conv_plan_lookup(CudaBackend *cb, const ConvShape *s, DType dt) {
    AMP_ASSERT(s->groups >= 1 && s->c_in % s->groups == 0 && s->c_out % s->groups == 0,
               "conv: channels (%d in, %d out) not divisible by groups %d", s->c_in, s->c_out, s->groups);
    ConvPlan *found = conv_plan_find(cb, s, dt);
    if (found) return found;
    if (!cb->conv_cache) cb->conv_cache = (CudaConvCache *)xcalloc(1, sizeof(CudaConvCache));
    CudaConvCache *cache = cb->conv_cache;
    if (cache->count == cache->capacity) {
        int capacity = cache->capacity ? 2 * cache->capacity : 32;
        ConvPlan **plans = (ConvPlan **)xcalloc((size_t)capacity, sizeof(ConvPlan *));
        if (cache->count) memcpy(plans, cache->plans, (size_t)cache->count * sizeof(ConvPlan *));
        free(cache->plans);
        cache->plans = plans;
        cache->capacity = capacity;
    }
    ConvPlan *p = (ConvPlan *)xcalloc(1, sizeof(ConvPlan));
    cache->plans[cache->count++] = p;
    conv_plan_init(cb, p, s, dt);
    return p;
}

void cuda_conv_cache_destroy(CudaBackend *cb) {
    CudaConvCache *cache = cb->conv_cache;
    if (!cache) return;
    for (int i = 0; i < cache->count; i++) conv_plan_destroy(cache->plans[i]), free(cache->plans[i]);
    free(cache->plans);
    free(cache);
    cb->conv_cache = NULL;
}

// ---- algorithm choice ----------------------------------------------------------------------------
// The three perf structs share their leading fields (algo, status, time, memory, determinism); these
// helpers see one candidate list through (status, memory, determinism) arrays filled per direction.

typedef struct ConvCandidates {
    size_t cap;  // largest workspace an algorithm may use (cudnn.workspace_mb)
    int count;
    int algo[CONV_ALGO_CANDIDATES];
    cudnnStatus_t status[CONV_ALGO_CANDIDATES];
    size_t memory[CONV_ALGO_CANDIDATES];
    int deterministic[CONV_ALGO_CANDIDATES];
    cudnnMathType_t math[CONV_ALGO_CANDIDATES];
    float time_ms[CONV_ALGO_CANDIDATES];  // measured by a timed search; -1 from the heuristic
    int timed;                            // 1: the list is a timed search's, fastest first
} ConvCandidates;

#define CONV_CANDIDATES_FROM(cands, perf, n, was_timed)                                                      \
    do {                                                                                                     \
        (cands)->count = (n);                                                                                \
        (cands)->timed = (was_timed);                                                                        \
        for (int i_ = 0; i_ < (n); i_++) {                                                                   \
            (cands)->algo[i_] = (int)(perf)[i_].algo;                                                        \
            (cands)->status[i_] = (perf)[i_].status;                                                         \
            (cands)->memory[i_] = (perf)[i_].memory;                                                         \
            (cands)->deterministic[i_] = (perf)[i_].determinism == CUDNN_DETERMINISTIC;                      \
            (cands)->math[i_] = (perf)[i_].mathType;                                                         \
            (cands)->time_ms[i_] = (was_timed) ? (perf)[i_].time : -1.0f;                                    \
        }                                                                                                    \
    } while (0)

// Whether a candidate's math type keeps the precision asked for: fp16 and bf16 any; fp32 CUDNN_FMA_MATH, and
// CUDNN_DEFAULT_MATH (TF32 on Ampere and later) only when TF32 is allowed.
static int conv_math_allowed(const CudaBackend *cb, DType dt, cudnnMathType_t m) {
    if (dtype_is_16bit(dt)) return 1;
    return m == CUDNN_FMA_MATH || (cb->allow_tf32 && m == CUDNN_DEFAULT_MATH);
}

// Index of the first usable candidate (succeeded, fits the cap, math allowed); with prefer_deterministic,
// the first deterministic one of those if any. Candidates arrive best first (heuristic rank or measured
// time). A timed list gives, of the usable candidates within CONV_NEAR_FASTEST of the first usable one,
// the one needing the least workspace.
static int conv_candidates_pick(const CudaBackend *cb, DType dt, const ConvCandidates *c,
                                int prefer_deterministic) {
    int usable[CONV_ALGO_CANDIDATES];
    for (int i = 0; i < c->count; i++)
        usable[i] = c->status[i] == CUDNN_STATUS_SUCCESS && c->memory[i] <= c->cap &&
                    conv_math_allowed(cb, dt, c->math[i]);
    if (prefer_deterministic)
        for (int i = 0; i < c->count; i++)
            if (usable[i] && c->deterministic[i]) return i;
    int fastest = -1, best = -1;
    for (int i = 0; i < c->count; i++) {
        if (!usable[i]) continue;
        if (fastest < 0)
            fastest = best = i;
        else if (c->timed && c->time_ms[i] <= c->time_ms[fastest] * CONV_NEAR_FASTEST &&
                 c->memory[i] < c->memory[best])
            best = i;
        if (!c->timed) break;
    }
    return best;
}

static const char *conv_direction_name(ConvDirection d) {
    return d == CONV_FWD ? "forward" : d == CONV_BWD_DATA ? "backward data" : "backward filter";
}

static int conv_algo_count(ConvDirection d) {
    return d == CONV_FWD        ? (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT
           : d == CONV_BWD_DATA ? (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                : (int)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
}

// The exact workspace of algorithm `algo` for direction d under the descriptor's math type now; an
// algorithm that does not support the shape returns an error status here.
static cudnnStatus_t conv_algo_workspace(const CudaBackend *cb, const ConvPlan *p, ConvDirection d, int algo,
                                         size_t *bytes) {
    if (d == CONV_FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(cb->cudnn, p->x_desc, p->w_desc, p->conv_desc,
                                                       p->y_desc, (cudnnConvolutionFwdAlgo_t)algo, bytes);
    if (d == CONV_BWD_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(cb->cudnn, p->w_desc, p->y_desc, p->conv_desc,
                                                            p->x_desc, (cudnnConvolutionBwdDataAlgo_t)algo,
                                                            bytes);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(cb->cudnn, p->x_desc, p->y_desc, p->conv_desc,
                                                          p->w_desc, (cudnnConvolutionBwdFilterAlgo_t)algo,
                                                          bytes);
}

// The largest exact workspace, at most the cap, that any of the direction's algorithms asks for: what a
// timed search needs so that no algorithm is skipped for want of memory.
static size_t conv_search_workspace(const CudaBackend *cb, const ConvPlan *p, ConvDirection d) {
    size_t most = 0;
    for (int a = 0; a < conv_algo_count(d); a++) {
        size_t bytes = 0;  // an algorithm that does not support the shape fails here and is left out
        if (conv_algo_workspace(cb, p, d, a, &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes <= cb->conv_workspace_cap && bytes > most)
            most = bytes;
    }
    return most;
}

// A search's own workspace, from the allocator (NULL for 0 bytes); conv_search_scratch_put hands it back.
static void *conv_search_scratch_get(CudaBackend *cb, size_t bytes) {
    return bytes ? cuda_scratch_get(cb, bytes) : NULL;
}
static void conv_search_scratch_put(CudaBackend *cb, void *ptr) {
    if (ptr) cuda_scratch_put(cb, ptr);
}

static const char *conv_math_name(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_FMA_MATH: return "fma";
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op";
    default: return "tensor-op-conversion";
    }
}

// AMPTRAIN_CONV_LOG=1 in the environment: the picks below go to stderr.
// With AMPTRAIN_CONV_LOG=1 in the environment, each pick goes to stderr: the shape, the direction and the
// candidates cuDNN returned (algorithm, math type, ms or -1 from the heuristic, workspace MiB; "failed"
// for one that did not run), the one taken marked with *.
static void conv_log_pick(const ConvPlan *p, ConvDirection d, const ConvCandidates *c, int pick) {
    if (!cuda_pick_log_enabled()) return;
    const ConvShape *s = &p->shape;
    fprintf(stderr, "conv: n=%d %dx%d c %d->%d k%d s%d g%d %s %s:", s->n, s->h, s->w, s->c_in, s->c_out,
            s->kh, s->stride, s->groups, dtype_name(p->dt), conv_direction_name(d));
    for (int i = 0; i < c->count; i++) {
        if (c->status[i] != CUDNN_STATUS_SUCCESS) {
            fprintf(stderr, " [a%d %s failed]", c->algo[i], conv_math_name(c->math[i]));
            continue;
        }
        fprintf(stderr, " %s[a%d %s %.3f %.0fM]", i == pick ? "*" : "", c->algo[i],
                conv_math_name(c->math[i]), (double)c->time_ms[i], (double)c->memory[i] / (1 << 20));
    }
    fprintf(stderr, "\n");
}

// The chosen candidate's algorithm; marks the direction chosen. The caller then asks cuDNN for the exact
// workspace of that algorithm (the perf struct's figure is an estimate for heuristic results).
// picked_ms: the search's time of the pick (-1 from the heuristic), for conv_gemm_decide.
static int conv_pick_or_die(const CudaBackend *cb, ConvPlan *p, ConvDirection d, const ConvCandidates *c,
                            int prefer_deterministic, float *picked_ms) {
    int i = conv_candidates_pick(cb, p->dt, c, prefer_deterministic);
    conv_log_pick(p, d, c, i);
    const ConvShape *s = &p->shape;
    AMP_ASSERT(i >= 0,
               "conv %s: no cuDNN algorithm for n=%d h=%d w=%d c_in=%d c_out=%d k=%dx%d stride=%d "
               "pad=%d groups=%d %s",
               conv_direction_name(d), s->n, s->h, s->w, s->c_in, s->c_out, s->kh, s->kw, s->stride, s->pad,
               s->groups, dtype_name(p->dt));
    p->workspace[d] = c->memory[i];
    p->math[d] = c->math[i];
    *picked_ms = c->time_ms[i];
    p->chosen[d] = 1;
    conv_set_math(p, p->math[d]);  // the caller asks for the exact workspace under it
    return c->algo[i];
}

// ---- the GEMM route ------------------------------------------------------------------------------

// One call of direction d on the GEMM route. fwd: a = x, b = w, out = y; backward data: a = dy, b = w,
// out = dx; backward filter: a = x, b = dy, out = dw; out is overwritten or (backward, accumulate) added to.
static void conv_gemm_run(CudaBackend *cb, const ConvPlan *p, ConvDirection d, const void *a, const void *b,
                          void *out, int accumulate) {
    if (d == CONV_FWD)
        conv_gemm_forward(cb, &p->shape, p->dt, a, b, out);
    else if (d == CONV_BWD_DATA)
        conv_gemm_backward_data(cb, &p->shape, p->dt, a, b, out, accumulate);
    else
        conv_gemm_backward_filter(cb, &p->shape, p->dt, a, b, out, accumulate);
}

// ---- timing a route ------------------------------------------------------------------------------

// The routes a search times for one direction: the GEMM route, the pick made so far (unpadded: cuDNN's
// algorithm or the GEMM route), the input padded to q's channels, amptrain's stem kernels.
typedef enum { TIMED_GEMM, TIMED_PICK, TIMED_PADDED, TIMED_OWN } ConvTimedRoute;

// One overwriting call of direction d on a route, for cuda_time_ms; buffers as conv_gemm_run's.
typedef struct ConvRouteRun {
    CudaBackend *cb;
    ConvPlan *p;
    ConvPlan *q;  // TIMED_PADDED: the padded shape's plan
    ConvTimedRoute route;
    ConvDirection d;
    const void *a, *b;
    void *out;
} ConvRouteRun;

static void conv_route_run_once(void *ctx);  // after the routes it runs

// The mean time in ms of run's route over CONV_ROUTE_TIMED_RUNS calls, after one untimed call.
static float conv_route_time(ConvRouteRun *run) {
    return cuda_time_ms(run->cb, CONV_ROUTE_TIMED_RUNS, conv_route_run_once, run);
}

// The GEMM route's time for direction d in ms (mean of CONV_ROUTE_TIMED_RUNS after one untimed run), or
// -1 when the shape is not a 1x1 stride-1 ungrouped convolution. Buffers as conv_gemm_run.
static float conv_gemm_time(CudaBackend *cb, ConvPlan *p, ConvDirection d, const void *a, const void *b,
                            void *out) {
    if (!conv_gemm_eligible(&p->shape)) return -1.0f;
    ConvRouteRun run = {cb, p, NULL, TIMED_GEMM, d, a, b, out};
    return conv_route_time(&run);
}

// Whether direction d runs on the GEMM route: timed (gemm_ms >= 0), when it beat cuDNN's pick (picked_ms);
// untimed, for exact fp32 on an eligible shape. Logged with AMPTRAIN_CONV_LOG=1.
static void conv_gemm_decide(const CudaBackend *cb, ConvPlan *p, ConvDirection d, float gemm_ms,
                             float picked_ms) {
    if (!conv_gemm_eligible(&p->shape))
        p->gemm[d] = 0;
    else if (gemm_ms >= 0.0f)
        p->gemm[d] = gemm_ms < picked_ms;
    else
        p->gemm[d] = p->dt == DTYPE_F32 && !cb->allow_tf32;
    if (p->gemm[d]) p->workspace[d] = 0;
    if (cuda_pick_log_enabled() && conv_gemm_eligible(&p->shape))
        fprintf(stderr, "conv:   %s as a GEMM: %.3f ms -> %s\n", conv_direction_name(d), (double)gemm_ms,
                p->gemm[d] ? "GEMM" : "cuDNN");
}

// ---- running a direction, unpadded or padded --------------------------------------------------------

// Direction d of plan p on its chosen route (the GEMM route or its cuDNN algorithm), unpadded. fwd: a = x,
// b = w, out = y; backward data: a = dy, b = w, out = dx; backward filter: a = x, b = dy, out = dw; out is
// overwritten or (backward, accumulate) added to. ws: at least p->workspace[d] bytes, or NULL for the shared
// workspace.
static void conv_run_unpadded(CudaBackend *cb, ConvPlan *p, ConvDirection d, const void *a, const void *b,
                              void *out, int accumulate, void *ws) {
    if (p->gemm[d]) return conv_gemm_run(cb, p, d, a, b, out, accumulate);
    if (!ws) ws = cuda_workspace(cb, p->workspace[d]);
    conv_set_math(p, p->math[d]);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (d == CONV_FWD)
        CUDNN_CHECK(cudnnConvolutionForward(cb->cudnn, &alpha, p->x_desc, a, p->w_desc, b, p->conv_desc,
                                            p->fwd_algo, ws, p->workspace[d], &beta, p->y_desc, out));
    else if (d == CONV_BWD_DATA)
        CUDNN_CHECK(cudnnConvolutionBackwardData(cb->cudnn, &alpha, p->w_desc, b, p->y_desc, a, p->conv_desc,
                                                 p->bwd_data_algo, ws, p->workspace[d], &beta, p->x_desc,
                                                 out));
    else
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(cb->cudnn, &alpha, p->x_desc, a, p->y_desc, b,
                                                   p->conv_desc, p->bwd_filter_algo, ws, p->workspace[d],
                                                   &beta, p->w_desc, out));
}

// Whether direction d of p may run on padded input channels: forward or backward filter of an ungrouped
// fp16 or bf16 convolution with fewer than 8 of them, not itself a padded shape's plan.
static int conv_pad_eligible(const ConvPlan *p, ConvDirection d) {
    return d != CONV_BWD_DATA && !p->pad_target && dtype_is_16bit(p->dt) && p->shape.groups == 1 &&
           p->shape.c_in < 8;
}

// Whether direction d of p may run on amptrain's stem kernels: forward or backward filter of a shape they take.
static int conv_own_eligible(const CudaBackend *cb, const ConvPlan *p, ConvDirection d) {
    return d != CONV_BWD_DATA && !p->pad_target && conv_stem_eligible(cb, &p->shape, p->dt);
}

static int conv_pad_width_allowed(const ConvPlan *p, int channels) {
    for (int i = 0; i < CONV_PAD_WIDTHS; i++)
        if (conv_pad_widths[i] == channels) return channels > p->shape.c_in;
    return 0;
}

// The plan of p's shape with its input channels padded to `channels`, made when missing.
static ConvPlan *conv_pad_plan(CudaBackend *cb, const ConvPlan *p, int channels) {
    ConvShape s = p->shape;
    s.c_in = channels;
    ConvPlan *q = conv_plan_lookup(cb, &s, p->dt);
    q->pad_target = 1;
    return q;
}

// Bytes rounded up to 256, so that what follows them in the workspace stays aligned.
static size_t conv_round_up(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

// Direction d (forward or backward filter) of p on its input padded to q's channels, q = conv_pad_plan's
// with d chosen. fwd: a = x (n,h,w,c_in), b = w (c_out,kh,kw,c_in), out = y; backward filter: a = x, b = dy,
// out = dw (= or +=). The shared workspace holds q's algorithm's workspace, then the padded x, then the padded
// w or dw.
static void conv_run_padded(CudaBackend *cb, const ConvPlan *p, ConvPlan *q, ConvDirection d, const void *a,
                            const void *b, void *out, int accumulate) {
    const ConvShape *s = &p->shape;
    const int pc = q->shape.c_in;
    const size_t esz = dtype_size(p->dt);
    const size_t x_rows = (size_t)s->n * s->h * s->w, w_rows = (size_t)s->c_out * s->kh * s->kw;
    const size_t ws_bytes = conv_round_up(q->workspace[d]), xp_bytes = conv_round_up(x_rows * pc * esz);
    char *ws = (char *)cuda_workspace(cb, ws_bytes + xp_bytes + w_rows * pc * esz);
    void *xp = ws + ws_bytes, *wp = ws + ws_bytes + xp_bytes;
    conv_pad_channels(cb, p->dt, a, xp, x_rows, s->c_in, pc);
    if (d == CONV_FWD) {
        conv_pad_channels(cb, p->dt, b, wp, w_rows, s->c_in, pc);
        conv_run_unpadded(cb, q, d, xp, wp, out, 0, ws);
    } else {
        conv_run_unpadded(cb, q, d, xp, b, wp, 0, ws);
        conv_unpad_channels(cb, p->dt, wp, out, w_rows, s->c_in, pc, accumulate);
    }
}

// Direction d (forward or backward filter) of p on amptrain's stem kernels; buffers as conv_run_padded's.
static void conv_run_own(CudaBackend *cb, const ConvPlan *p, ConvDirection d, const void *a, const void *b,
                         void *out, int accumulate) {
    if (d == CONV_FWD)
        conv_stem_forward(cb, &p->shape, p->dt, a, b, out);
    else
        conv_stem_backward_filter(cb, &p->shape, p->dt, a, b, out, accumulate);
}

static void conv_route_run_once(void *ctx) {
    const ConvRouteRun *r = (const ConvRouteRun *)ctx;
    switch (r->route) {
    case TIMED_GEMM: return conv_gemm_run(r->cb, r->p, r->d, r->a, r->b, r->out, 0);
    case TIMED_PICK: return conv_run_unpadded(r->cb, r->p, r->d, r->a, r->b, r->out, 0, NULL);
    case TIMED_PADDED: return conv_run_padded(r->cb, r->p, r->q, r->d, r->a, r->b, r->out, 0);
    case TIMED_OWN: return conv_run_own(r->cb, r->p, r->d, r->a, r->b, r->out, 0);
    }
}

static void conv_choose_forward(CudaBackend *cb, ConvPlan *p, const void *x, const void *w, void *y);
static void conv_choice_store(CudaBackend *cb, ConvPlan *p, ConvDirection d, double seconds);
static void conv_choose_backward_filter(CudaBackend *cb, ConvPlan *p, const void *x, const void *dy, void *dw,
                                        int accumulate);

// Direction d of the padded plan q chosen (searched or from its record) on padded copies of p's a and b
// (as conv_run_padded's), in scratch of their own; a forward search writes out.
static void conv_pad_choose(CudaBackend *cb, const ConvPlan *p, ConvPlan *q, ConvDirection d, const void *a,
                            const void *b, void *out) {
    const ConvShape *s = &p->shape;
    const int pc = q->shape.c_in;
    const size_t esz = dtype_size(p->dt);
    const size_t x_rows = (size_t)s->n * s->h * s->w, w_rows = (size_t)s->c_out * s->kh * s->kw;
    void *xp = cuda_scratch_get(cb, x_rows * pc * esz), *wp = cuda_scratch_get(cb, w_rows * pc * esz);
    conv_pad_channels(cb, p->dt, a, xp, x_rows, s->c_in, pc);
    if (d == CONV_FWD) {
        conv_pad_channels(cb, p->dt, b, wp, w_rows, s->c_in, pc);
        conv_choose_forward(cb, q, xp, wp, out);
    } else {
        conv_choose_backward_filter(cb, q, xp, b, wp, 0);
    }
    cuda_scratch_put(cb, xp), cuda_scratch_put(cb, wp);
}

// Whether direction d of p, its unpadded route chosen, runs padded and to how many channels (p->padded[d]),
// or on amptrain's stem kernels (p->own[d]). With the timed search, the unpadded route, each padding (its
// plan's direction chosen first) and the own kernels are timed on a, b and out (the search's buffers: out
// is the real output, or a scratch where the call accumulates), and the fastest is taken; without it,
// unpadded. cb->conv_own > 0 forces the own kernels, else cb->conv_pad > 0 that padding (tests).
static void conv_alternatives_decide(CudaBackend *cb, ConvPlan *p, ConvDirection d, const void *a,
                                     const void *b, void *out) {
    p->padded[d] = 0;
    p->own[d] = 0;
    const int pad_ok = conv_pad_eligible(p, d) && cb->conv_pad >= 0;
    const int own_ok = conv_own_eligible(cb, p, d) && cb->conv_own >= 0;
    if (own_ok && cb->conv_own > 0) {
        p->own[d] = 1;
        return;
    }
    const int forced = pad_ok && cb->conv_pad > 0;
    if ((!pad_ok && !own_ok) || (!forced && !cb->cudnn_benchmark)) return;
    ConvRouteRun run = {cb, p, NULL, TIMED_PICK, d, a, b, out};
    float best_ms = forced ? INFINITY : conv_route_time(&run);
    const float unpadded_ms = best_ms;
    for (int i = 0; pad_ok && i < CONV_PAD_WIDTHS; i++) {
        const int pc = conv_pad_widths[i];
        if (!conv_pad_width_allowed(p, pc) || (forced && pc != cb->conv_pad)) continue;
        run.route = TIMED_PADDED, run.q = conv_pad_plan(cb, p, pc);
        if (!run.q->chosen[d]) conv_pad_choose(cb, p, run.q, d, a, b, out);
        const float ms = forced ? 0.0f : conv_route_time(&run);
        if (cuda_pick_log_enabled())
            fprintf(stderr, "conv:   %s padded to %d channels: %.3f ms (unpadded %.3f ms)\n",
                    conv_direction_name(d), pc, (double)ms, (double)unpadded_ms);
        if (ms < best_ms) best_ms = ms, p->padded[d] = pc;
    }
    if (!forced && own_ok) {
        run.route = TIMED_OWN, run.q = NULL;
        const float ms = conv_route_time(&run);
        if (cuda_pick_log_enabled())
            fprintf(stderr, "conv:   %s on amptrain's stem kernels: %.3f ms (unpadded %.3f ms)\n",
                    conv_direction_name(d), (double)ms, (double)unpadded_ms);
        if (ms < best_ms) p->own[d] = 1, p->padded[d] = 0;
    }
    if (p->padded[d]) {  // the padding taken: its plan's choice is recorded now
        ConvPlan *q = conv_pad_plan(cb, p, p->padded[d]);
        if (q->record_pending[d]) conv_choice_store(cb, q, d, q->record_seconds[d]);
    }
}

// ---- the choices' records (cudnn.cache, core/kernel_cache.h) ---------------------------------------
// One record per shape, dtype and direction of a timed choice. Its key holds what the choice depends on
// beyond cb->choice_env: the shape, dtype, TF32 rule and workspace cap; its choice is core/conv_choice.h's
// text (the math type's name as conv_math_name writes it). A padded direction's record names the padding;
// the padded shape's own record holds that plan's route.

static const cudnnMathType_t conv_math_types[] = {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH,
                                                  CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, CUDNN_FMA_MATH};
#define CONV_MATH_TYPES (int)(sizeof conv_math_types / sizeof conv_math_types[0])

static int conv_algo_of(const ConvPlan *p, ConvDirection d) {
    return d == CONV_FWD        ? (int)p->fwd_algo
           : d == CONV_BWD_DATA ? (int)p->bwd_data_algo
                                : (int)p->bwd_filter_algo;
}

static void conv_algo_set(ConvPlan *p, ConvDirection d, int algo) {
    if (d == CONV_FWD)
        p->fwd_algo = (cudnnConvolutionFwdAlgo_t)algo;
    else if (d == CONV_BWD_DATA)
        p->bwd_data_algo = (cudnnConvolutionBwdDataAlgo_t)algo;
    else
        p->bwd_filter_algo = (cudnnConvolutionBwdFilterAlgo_t)algo;
}

static void conv_choice_key(const CudaBackend *cb, const ConvPlan *p, ConvDirection d, char *key,
                            size_t cap) {
    const ConvShape *s = &p->shape;
    cuda_choice_key(cb, key, cap,
                    "conv %s n=%d h=%d w=%d c_in=%d c_out=%d k=%dx%d stride=%d pad=%d groups=%d %s tf32=%d "
                    "workspace_cap=%zu",
                    conv_direction_name(d), s->n, s->h, s->w, s->c_in, s->c_out, s->kh, s->kw, s->stride,
                    s->pad, s->groups, dtype_name(p->dt), cb->allow_tf32, cb->conv_workspace_cap);
}

// Direction d chosen from its record, when there is one and it still holds here: the GEMM route on a shape
// that may take it, the own kernels on a shape they take, or a cuDNN algorithm that exists, supports the
// shape under the recorded math type, keeps the precision asked for (conv_math_allowed) and fits the
// workspace cap; a padding only where the shape may be padded that much and the padded shape's record holds
// too. 1 when chosen; 0: the direction is searched (its record is then replaced).
static int conv_choice_take(CudaBackend *cb, ConvPlan *p, ConvDirection d) {
    if ((cb->conv_pad != 0 && conv_pad_eligible(p, d)) || (cb->conv_own != 0 && conv_own_eligible(cb, p, d)))
        return 0;  // a forced or refused alternative route is chosen afresh
    char key[CUDA_CHOICE_KEY_MAX];
    conv_choice_key(cb, p, d, key, sizeof key);
    const char *recorded_choice = kernel_cache_find(cb->choices, key);
    ConvChoice c;
    if (!recorded_choice || conv_choice_parse(recorded_choice, &c) != 0) return 0;
    if (c.padded) {
        if (!conv_pad_eligible(p, d) || !conv_pad_width_allowed(p, c.padded)) return 0;
        ConvPlan *q = conv_pad_plan(cb, p, c.padded);  // its own record chooses its route
        if (!q->chosen[d] && !conv_choice_take(cb, q, d)) return 0;
    }
    p->padded[d] = c.padded;
    p->own[d] = 0;
    if (c.route == CONV_ROUTE_OWN) {
        if (!conv_own_eligible(cb, p, d)) return 0;
        p->own[d] = 1;
        p->gemm[d] = 0;
        p->workspace[d] = 0;
        p->math[d] = conv_math_type(cb, p->dt);
    } else if (c.route == CONV_ROUTE_GEMM) {
        if (!conv_gemm_eligible(&p->shape)) return 0;
        p->gemm[d] = 1;
        p->workspace[d] = 0;
        p->math[d] = conv_math_type(cb, p->dt);
    } else {
        int m = 0;
        size_t exact = 0;
        while (m < CONV_MATH_TYPES && strcmp(conv_math_name(conv_math_types[m]), c.math) != 0) m++;
        if (c.algo >= conv_algo_count(d) || m == CONV_MATH_TYPES ||
            !conv_math_allowed(cb, p->dt, conv_math_types[m]))
            return 0;
        conv_set_math(p, conv_math_types[m]);
        if (conv_algo_workspace(cb, p, d, c.algo, &exact) != CUDNN_STATUS_SUCCESS) return 0;
        const size_t bytes = exact > c.workspace ? exact : c.workspace;
        if (bytes > cb->conv_workspace_cap) return 0;
        conv_algo_set(p, d, c.algo);
        p->math[d] = conv_math_types[m];
        p->workspace[d] = bytes;
        p->gemm[d] = 0;
    }
    p->chosen[d] = 1;
    kernel_cache_use(cb->choices, key);
    if (cuda_pick_log_enabled()) {
        const ConvShape *s = &p->shape;
        fprintf(stderr, "conv: n=%d %dx%d c %d->%d k%d s%d g%d %s %s: from the cache: %s\n", s->n, s->h, s->w,
                s->c_in, s->c_out, s->kh, s->stride, s->groups, dtype_name(p->dt), conv_direction_name(d),
                recorded_choice);
    }
    return 1;
}

// After a direction's pick: the exact workspace of its algorithm and the GEMM route's verdict.
static void conv_choice_done(CudaBackend *cb, ConvPlan *p, ConvDirection d, float gemm_ms, float picked_ms) {
    size_t exact = 0;
    CUDNN_CHECK(conv_algo_workspace(cb, p, d, conv_algo_of(p, d), &exact));
    if (exact > p->workspace[d]) p->workspace[d] = exact;
    conv_gemm_decide(cb, p, d, gemm_ms, picked_ms);
}

// A timed choice's record, timed in `seconds`: its route, and its padding when padded.
static void conv_choice_store(CudaBackend *cb, ConvPlan *p, ConvDirection d, double seconds) {
    p->record_pending[d] = 0;
    char key[CUDA_CHOICE_KEY_MAX], text[CONV_CHOICE_TEXT_MAX];
    conv_choice_key(cb, p, d, key, sizeof key);
    ConvChoice c;
    memset(&c, 0, sizeof c);
    c.route = p->own[d] ? CONV_ROUTE_OWN : p->gemm[d] ? CONV_ROUTE_GEMM : CONV_ROUTE_CUDNN;
    c.algo = conv_algo_of(p, d);
    snprintf(c.math, sizeof c.math, "%s", conv_math_name(p->math[d]));
    c.workspace = p->workspace[d];
    c.padded = p->padded[d];
    kernel_cache_store(cb->choices, key, conv_choice_format(&c, text), seconds);
}

// After a timed choice (started at `start`, clock_seconds): its record, or for a padded shape's plan the
// record kept pending until conv_alternatives_decide takes that padding (a padding not taken leaves none).
static void conv_choice_record(CudaBackend *cb, ConvPlan *p, ConvDirection d, double start) {
    if (!cb->cudnn_benchmark) return;
    if (!p->pad_target) return conv_choice_store(cb, p, d, clock_seconds() - start);
    p->record_pending[d] = 1;
    p->record_seconds[d] = clock_seconds() - start;
}

// ---- the three searches ---------------------------------------------------------------------------

// x (n,h,w,c_in), w (c_out,kh,kw,c_in/g) are read; y is the real output (forward never accumulates).
static void conv_choose_forward(CudaBackend *cb, ConvPlan *p, const void *x, const void *w, void *y) {
    if (cb->cudnn_benchmark && conv_choice_take(cb, p, CONV_FWD)) return;
    const double start = clock_seconds();
    conv_set_math(p, conv_math_type(cb, p->dt));
    cudnnConvolutionFwdAlgoPerf_t perf[CONV_ALGO_CANDIDATES];
    ConvCandidates cands = {.cap = cb->conv_workspace_cap};
    float gemm_ms = -1.0f, picked_ms = -1.0f;  // the GEMM route's and cuDNN's pick's times, when timed
    int n = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cb->cudnn, p->x_desc, p->w_desc, p->conv_desc,
                                                       p->y_desc, CONV_ALGO_CANDIDATES, &n, perf));
    CONV_CANDIDATES_FROM(&cands, perf, n, 0);
    if (cb->cudnn_benchmark) {
        size_t ws_bytes = conv_search_workspace(cb, p, CONV_FWD);
        void *ws = conv_search_scratch_get(cb, ws_bytes);
        CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(cb->cudnn, p->x_desc, x, p->w_desc, w,
                                                           p->conv_desc, p->y_desc, y, CONV_ALGO_CANDIDATES,
                                                           &n, perf, ws, ws_bytes));
        conv_search_scratch_put(cb, ws);
        gemm_ms = conv_gemm_time(cb, p, CONV_FWD, x, w, y);
        CONV_CANDIDATES_FROM(&cands, perf, n, 1);
    }
    p->fwd_algo = (cudnnConvolutionFwdAlgo_t)conv_pick_or_die(cb, p, CONV_FWD, &cands, !cb->cudnn_benchmark,
                                                              &picked_ms);
    conv_choice_done(cb, p, CONV_FWD, gemm_ms, picked_ms);
    conv_alternatives_decide(cb, p, CONV_FWD, x, w, y);
    conv_choice_record(cb, p, CONV_FWD, start);
}

// dy, w are read; the search writes dx, or a scratch in its place when dx accumulates (its contents count).
static void conv_choose_backward_data(CudaBackend *cb, ConvPlan *p, const void *dy, const void *w, void *dx,
                                      int accumulate) {
    if (cb->cudnn_benchmark && conv_choice_take(cb, p, CONV_BWD_DATA)) return;
    const double start = clock_seconds();
    conv_set_math(p, conv_math_type(cb, p->dt));
    cudnnConvolutionBwdDataAlgoPerf_t perf[CONV_ALGO_CANDIDATES];
    ConvCandidates cands = {.cap = cb->conv_workspace_cap};
    float gemm_ms = -1.0f, picked_ms = -1.0f;  // the GEMM route's and cuDNN's pick's times, when timed
    int n = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(cb->cudnn, p->w_desc, p->y_desc, p->conv_desc,
                                                            p->x_desc, CONV_ALGO_CANDIDATES, &n, perf));
    CONV_CANDIDATES_FROM(&cands, perf, n, 0);
    if (cb->cudnn_benchmark) {
        const ConvShape *s = &p->shape;
        size_t ws_bytes = conv_search_workspace(cb, p, CONV_BWD_DATA);
        void *ws = conv_search_scratch_get(cb, ws_bytes);
        void *out =
            accumulate ? cuda_scratch_get(cb, (size_t)s->n * s->h * s->w * s->c_in * dtype_size(p->dt)) : dx;
        CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            cb->cudnn, p->w_desc, w, p->y_desc, dy, p->conv_desc, p->x_desc, out, CONV_ALGO_CANDIDATES, &n,
            perf, ws, ws_bytes));
        gemm_ms = conv_gemm_time(cb, p, CONV_BWD_DATA, dy, w, out);
        if (accumulate) cuda_scratch_put(cb, out);
        conv_search_scratch_put(cb, ws);
        CONV_CANDIDATES_FROM(&cands, perf, n, 1);
    }
    p->bwd_data_algo = (cudnnConvolutionBwdDataAlgo_t)conv_pick_or_die(cb, p, CONV_BWD_DATA, &cands,
                                                                       !cb->cudnn_benchmark, &picked_ms);
    conv_choice_done(cb, p, CONV_BWD_DATA, gemm_ms, picked_ms);
    conv_choice_record(cb, p, CONV_BWD_DATA, start);
}

// x, dy are read; the search writes dw, or a scratch in its place when dw accumulates.
static void conv_choose_backward_filter(CudaBackend *cb, ConvPlan *p, const void *x, const void *dy, void *dw,
                                        int accumulate) {
    if (cb->cudnn_benchmark && conv_choice_take(cb, p, CONV_BWD_FILTER)) return;
    const double start = clock_seconds();
    conv_set_math(p, conv_math_type(cb, p->dt));
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CONV_ALGO_CANDIDATES];
    ConvCandidates cands = {.cap = cb->conv_workspace_cap};
    float gemm_ms = -1.0f, picked_ms = -1.0f;  // the GEMM route's and cuDNN's pick's times, when timed
    int n = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(cb->cudnn, p->x_desc, p->y_desc, p->conv_desc,
                                                              p->w_desc, CONV_ALGO_CANDIDATES, &n, perf));
    CONV_CANDIDATES_FROM(&cands, perf, n, 0);
    void *out = dw;  // what the search and the route timings write
    if (cb->cudnn_benchmark) {
        const ConvShape *s = &p->shape;
        size_t ws_bytes = conv_search_workspace(cb, p, CONV_BWD_FILTER);
        void *ws = conv_search_scratch_get(cb, ws_bytes);
        size_t dw_bytes = (size_t)s->c_out * s->kh * s->kw * (s->c_in / s->groups) * dtype_size(p->dt);
        if (accumulate) out = cuda_scratch_get(cb, dw_bytes);
        CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            cb->cudnn, p->x_desc, x, p->y_desc, dy, p->conv_desc, p->w_desc, out, CONV_ALGO_CANDIDATES, &n,
            perf, ws, ws_bytes));
        gemm_ms = conv_gemm_time(cb, p, CONV_BWD_FILTER, x, dy, out);
        conv_search_scratch_put(cb, ws);
        CONV_CANDIDATES_FROM(&cands, perf, n, 1);
    }
    p->bwd_filter_algo = (cudnnConvolutionBwdFilterAlgo_t)conv_pick_or_die(cb, p, CONV_BWD_FILTER, &cands,
                                                                           !cb->cudnn_benchmark, &picked_ms);
    conv_choice_done(cb, p, CONV_BWD_FILTER, gemm_ms, picked_ms);
    conv_alternatives_decide(cb, p, CONV_BWD_FILTER, x, dy, out);
    if (out != dw) cuda_scratch_put(cb, out);
    conv_choice_record(cb, p, CONV_BWD_FILTER, start);
}

// ---- the entry points ----------------------------------------------------------------------------

// Chooses the three directions' algorithms for s now: from their records (cudnn.cache) where those hold,
// else on buffers of its own (x, w, y, filled with a finite non-zero byte pattern; each search's output
// lands in one of them) that go back afterwards.
void cuda_conv_prepare(Backend *be, const ConvShape *s, DType dt) {
    CudaBackend *cb = cuda_state(be);
    ConvPlan *p = conv_plan_lookup(cb, s, dt);
    for (int d = CONV_FWD; d <= CONV_BWD_FILTER; d++)  // records first: they need no buffers
        if (!p->chosen[d] && cb->cudnn_benchmark) conv_choice_take(cb, p, (ConvDirection)d);
    if (p->chosen[CONV_FWD] && p->chosen[CONV_BWD_DATA] && p->chosen[CONV_BWD_FILTER]) return;
    const size_t esz = dtype_size(dt);
    const size_t x_bytes = (size_t)s->n * s->h * s->w * s->c_in * esz;
    const size_t y_bytes = (size_t)s->n * s->out_h * s->out_w * s->c_out * esz;
    const size_t w_bytes = (size_t)s->c_out * s->kh * s->kw * (s->c_in / s->groups) * esz;
    void *x = cuda_scratch_get(cb, x_bytes), *y = cuda_scratch_get(cb, y_bytes),
         *w = cuda_scratch_get(cb, w_bytes);
    // 0x3c in every byte: 1.0586 in fp16, 0.0115 in bf16 and fp32; finite, so no algorithm is timed on NaN
    CUDA_CHECK(cudaMemsetAsync(x, 0x3c, x_bytes, cb->stream));
    CUDA_CHECK(cudaMemsetAsync(y, 0x3c, y_bytes, cb->stream));
    CUDA_CHECK(cudaMemsetAsync(w, 0x3c, w_bytes, cb->stream));
    if (!p->chosen[CONV_FWD]) conv_choose_forward(cb, p, x, w, y);                    // writes y
    if (!p->chosen[CONV_BWD_DATA]) conv_choose_backward_data(cb, p, y, w, x, 0);      // dy = y, writes dx = x
    if (!p->chosen[CONV_BWD_FILTER]) conv_choose_backward_filter(cb, p, x, y, w, 0);  // writes dw = w
    cuda_scratch_put(cb, x), cuda_scratch_put(cb, y), cuda_scratch_put(cb, w);
}

extern "C" int cuda_backend_conv_route_is_gemm(Backend *be, const ConvShape *s, DType dt, int direction) {
    AMP_ASSERT(direction >= CONV_FWD && direction <= CONV_BWD_FILTER, "conv route: direction %d", direction);
    const ConvPlan *p = conv_plan_find(cuda_state(be), s, dt);
    return p && p->chosen[direction] ? p->gemm[direction] : -1;
}

extern "C" int cuda_backend_conv_padded_channels(Backend *be, const ConvShape *s, DType dt, int direction) {
    AMP_ASSERT(direction >= CONV_FWD && direction <= CONV_BWD_FILTER, "conv padding: direction %d",
               direction);
    const ConvPlan *p = conv_plan_find(cuda_state(be), s, dt);
    return p && p->chosen[direction] ? p->padded[direction] : -1;
}

extern "C" int cuda_backend_conv_route_is_own(Backend *be, const ConvShape *s, DType dt, int direction) {
    AMP_ASSERT(direction >= CONV_FWD && direction <= CONV_BWD_FILTER, "conv route: direction %d", direction);
    const ConvPlan *p = conv_plan_find(cuda_state(be), s, dt);
    return p && p->chosen[direction] ? p->own[direction] : -1;
}

extern "C" void cuda_backend_set_conv_own(Backend *be, int mode) {
    AMP_ASSERT(mode >= -1 && mode <= 1, "conv own kernels: mode %d (-1, 0 or 1)", mode);
    cuda_state(be)->conv_own = mode;
}

extern "C" void cuda_backend_set_conv_padding(Backend *be, int channels) {
    AMP_ASSERT(channels == -1 || channels == 0 || channels == 4 || channels == 8,
               "conv padding: %d channels (-1, 0, 4 or 8)", channels);
    cuda_state(be)->conv_pad = channels;
}

// x (n,h,w,c_in) dt, w (c_out,kh,kw,c_in/g) dt -> y (n,out_h,out_w,c_out) dt
void cuda_conv_forward(Backend *be, const ConvShape *s, DType dt, const void *x, const void *w, void *y) {
    CudaBackend *cb = cuda_state(be);
    ConvPlan *p = conv_plan_lookup(cb, s, dt);
    if (!p->chosen[CONV_FWD]) conv_choose_forward(cb, p, x, w, y);
    if (p->own[CONV_FWD]) return conv_run_own(cb, p, CONV_FWD, x, w, y, 0);
    if (p->padded[CONV_FWD])
        return conv_run_padded(cb, p, conv_pad_plan(cb, p, p->padded[CONV_FWD]), CONV_FWD, x, w, y, 0);
    conv_run_unpadded(cb, p, CONV_FWD, x, w, y, 0, NULL);
}

// dy (n,out_h,out_w,c_out) dt, w (c_out,kh,kw,c_in/g) dt -> dx (n,h,w,c_in) dt (= or +=)
void cuda_conv_backward_data(Backend *be, const ConvShape *s, DType dt, const void *dy, const void *w,
                             void *dx, int accumulate) {
    CudaBackend *cb = cuda_state(be);
    ConvPlan *p = conv_plan_lookup(cb, s, dt);
    if (!p->chosen[CONV_BWD_DATA]) conv_choose_backward_data(cb, p, dy, w, dx, accumulate);
    conv_run_unpadded(cb, p, CONV_BWD_DATA, dy, w, dx, accumulate, NULL);
}

// x (n,h,w,c_in) dt, dy (n,out_h,out_w,c_out) dt -> dw (c_out,kh,kw,c_in/g) dt (= or +=)
void cuda_conv_backward_filter(Backend *be, const ConvShape *s, DType dt, const void *x, const void *dy,
                               void *dw, int accumulate) {
    CudaBackend *cb = cuda_state(be);
    ConvPlan *p = conv_plan_lookup(cb, s, dt);
    if (!p->chosen[CONV_BWD_FILTER]) conv_choose_backward_filter(cb, p, x, dy, dw, accumulate);
    if (p->own[CONV_BWD_FILTER]) return conv_run_own(cb, p, CONV_BWD_FILTER, x, dy, dw, accumulate);
    if (p->padded[CONV_BWD_FILTER])
        return conv_run_padded(cb, p, conv_pad_plan(cb, p, p->padded[CONV_BWD_FILTER]), CONV_BWD_FILTER, x,
                               dy, dw, accumulate);
    conv_run_unpadded(cb, p, CONV_BWD_FILTER, x, dy, dw, accumulate, NULL);
}
