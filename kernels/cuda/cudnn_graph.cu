// cudnn_graph.cu - cuDNN's backend (graph) API in small steps (cudnn_graph.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cudnn_graph.h"
#include "kernels/cuda/cuda_internal.h"

void cudnn_made_free(CudnnMade *m) {
    for (int i = m->count - 1; i >= 0; i--) CUDNN_CHECK(cudnnBackendDestroyDescriptor(m->items[i]));
    free(m->items);
    memset(m, 0, sizeof *m);
}

void cudnn_last_message(char *message, size_t len) {
    message[0] = '\0';
    cudnnGetLastErrorString(message, len);
    for (char *c = message; *c; c++)
        if (*c == '\n') *c = '|';
}

void cudnn_trail_fail(CudnnTrail *t, cudnnStatus_t st, const char *call, const char *what, const char *attr) {
    char message[256] = "";
    cudnn_last_message(message, sizeof message);
    t->status = st;
    snprintf(t->text, sizeof t->text, "%s(%s%s%s): %s%s%s", call, what, attr ? ", " : "", attr ? attr : "",
             cudnnGetErrorString(st), message[0] ? ": " : "", message);
}

cudnnBackendDescriptor_t bk_make(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptorType_t type,
                                 const char *what) {
    cudnnBackendDescriptor_t d = NULL;
    if (t->status != CUDNN_STATUS_SUCCESS) return NULL;
    const cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        cudnn_trail_fail(t, st, "cudnnBackendCreateDescriptor", what, NULL);
        return NULL;
    }
    if (m->count == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->items = (cudnnBackendDescriptor_t *)realloc(m->items, m->cap * sizeof *m->items);
        AMP_ASSERT(m->items != NULL, "cudnn_graph: out of host memory");
    }
    m->items[m->count++] = d;
    return d;
}

void bk_set(CudnnTrail *t, cudnnBackendDescriptor_t d, const char *what, cudnnBackendAttributeName_t name,
            const char *name_text, cudnnBackendAttributeType_t type, int64_t count, const void *v) {
    if (t->status != CUDNN_STATUS_SUCCESS) return;
    const cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, count, v);
    if (st != CUDNN_STATUS_SUCCESS) cudnn_trail_fail(t, st, "cudnnBackendSetAttribute", what, name_text);
}

void bk_get(CudnnTrail *t, cudnnBackendDescriptor_t d, const char *what, cudnnBackendAttributeName_t name,
            const char *name_text, cudnnBackendAttributeType_t type, int64_t capacity, int64_t *count,
            void *v) {
    if (t->status != CUDNN_STATUS_SUCCESS) return;
    const cudnnStatus_t st = cudnnBackendGetAttribute(d, name, type, capacity, count, v);
    if (st != CUDNN_STATUS_SUCCESS) cudnn_trail_fail(t, st, "cudnnBackendGetAttribute", what, name_text);
}

void bk_finalize(CudnnTrail *t, cudnnBackendDescriptor_t d, const char *what) {
    if (t->status != CUDNN_STATUS_SUCCESS) return;
    const cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) cudnn_trail_fail(t, st, "cudnnBackendFinalize", what, NULL);
}

cudnnBackendDescriptor_t bk_tensor(CudnnMade *m, CudnnTrail *t, const char *what, int64_t uid,
                                   cudnnDataType_t dt, int64_t n, int64_t c, int64_t h, int64_t w,
                                   bool is_virtual) {
    const int64_t dim[4] = {n, c, h, w}, stride[4] = {c * h * w, 1, w * c, c}, alignment = 16;
    cudnnBackendDescriptor_t d = bk_make(m, t, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    bk_finalize(t, d, what);
    return d;
}

cudnnBackendDescriptor_t bk_pointwise(CudnnMade *m, CudnnTrail *t, const char *what,
                                      cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t pw = bk_make(m, t, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    BK_SET(t, pw, what, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    BK_SET(t, pw, what, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    bk_finalize(t, pw, what);
    cudnnBackendDescriptor_t op = bk_make(m, t, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (mode == CUDNN_POINTWISE_RELU_BWD) {
        BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, b);
        BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, y);
    } else {
        if (b) BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
        BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    }
    bk_finalize(t, op, what);
    return op;
}

// A 2-d convolution (cross-correlation) with the same stride and padding in both dimensions, fp32 accumulation.
static cudnnBackendDescriptor_t bk_convolution(CudnnMade *m, CudnnTrail *t, int64_t stride, int64_t pad) {
    const char *what = "convolution";
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, ones[2] = {1, 1}, strides[2] = {stride, stride}, pads[2] = {pad, pad};
    cudnnBackendDescriptor_t conv = bk_make(m, t, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, what);
    BK_SET(t, conv, what, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    BK_SET(t, conv, what, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    BK_SET(t, conv, what, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    BK_SET(t, conv, what, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones);
    BK_SET(t, conv, what, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides);
    BK_SET(t, conv, what, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads);
    BK_SET(t, conv, what, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads);
    bk_finalize(t, conv, what);
    return conv;
}

static const struct {
    const char *what;
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t alpha, beta, conv, a, b, out;
} CONV_OPS[3] = {
    {"convolution forward", CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
    {"convolution backward data", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX},
    {"convolution backward filter", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW},
};

cudnnBackendDescriptor_t bk_conv_spatial(CudnnMade *m, CudnnTrail *t, CudnnGraphConv dir,
                                         cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                                         cudnnBackendDescriptor_t out, int64_t stride, int64_t pad) {
    const char *what = CONV_OPS[dir].what;
    const float alpha = 1.0f, beta = 0.0f;
    cudnnBackendDescriptor_t conv = bk_convolution(m, t, stride, pad);
    cudnnBackendDescriptor_t op = bk_make(m, t, CONV_OPS[dir].type, what);
    BK_SET(t, op, what, CONV_OPS[dir].alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
    BK_SET(t, op, what, CONV_OPS[dir].beta, CUDNN_TYPE_FLOAT, 1, &beta);
    BK_LINK(t, op, what, CONV_OPS[dir].conv, conv);
    BK_LINK(t, op, what, CONV_OPS[dir].a, a);
    BK_LINK(t, op, what, CONV_OPS[dir].b, b);
    BK_LINK(t, op, what, CONV_OPS[dir].out, out);
    bk_finalize(t, op, what);
    return op;
}

cudnnBackendDescriptor_t bk_conv(CudnnMade *m, CudnnTrail *t, CudnnGraphConv dir, cudnnBackendDescriptor_t a,
                                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out) {
    return bk_conv_spatial(m, t, dir, a, b, out, 1, 0);
}

cudnnBackendDescriptor_t bk_bn_backward_weights(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t x,
                                                cudnnBackendDescriptor_t g, cudnnBackendDescriptor_t mean,
                                                cudnnBackendDescriptor_t invstd,
                                                cudnnBackendDescriptor_t gamma,
                                                const cudnnBackendDescriptor_t out[5]) {
    const char *what = "batch-norm backward weights";
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t op = bk_make(m, t, CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR, what);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, x);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, g);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, mean);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, invstd);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, gamma);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, out[0]);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, out[1]);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, out[2]);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, out[3]);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, out[4]);
    bk_finalize(t, op, what);
    return op;
}

cudnnBackendDescriptor_t bk_genstats(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t y,
                                     cudnnBackendDescriptor_t sum, cudnnBackendDescriptor_t sqsum) {
    const char *what = "genstats";
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t op = bk_make(m, t, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, what);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, y);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum);
    BK_LINK(t, op, what, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sqsum);
    bk_finalize(t, op, what);
    return op;
}

cudnnBackendDescriptor_t bk_scale_bias_relu(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t x,
                                            cudnnBackendDescriptor_t scale, cudnnBackendDescriptor_t bias,
                                            cudnnDataType_t mid, int64_t n, int64_t c, int64_t h, int64_t w,
                                            const int64_t uids[3], cudnnBackendDescriptor_t ops[3]) {
    cudnnBackendDescriptor_t scaled = bk_tensor(m, t, "tensor x*scale", uids[0], mid, n, c, h, w, true);
    cudnnBackendDescriptor_t biased = bk_tensor(m, t, "tensor x*scale+bias", uids[1], mid, n, c, h, w, true);
    cudnnBackendDescriptor_t relu = bk_tensor(m, t, "tensor relu", uids[2], mid, n, c, h, w, true);
    ops[0] = bk_pointwise(m, t, "pointwise scale", CUDNN_POINTWISE_MUL, x, scale, scaled);
    ops[1] = bk_pointwise(m, t, "pointwise bias", CUDNN_POINTWISE_ADD, scaled, bias, biased);
    ops[2] = bk_pointwise(m, t, "pointwise relu", CUDNN_POINTWISE_RELU_FWD, biased, NULL, relu);
    return relu;
}

void bk_conv_genstats(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t in, cudnnDataType_t io, int64_t n,
                      int64_t c, int64_t h, int64_t w, int64_t k, const int64_t uids[4],
                      cudnnBackendDescriptor_t ops[2]) {
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t wt = bk_tensor(m, t, "tensor w", uids[0], io, k, c, 1, 1, false);
    cudnnBackendDescriptor_t y = bk_tensor(m, t, "tensor y", uids[1], io, n, k, h, w, false);
    cudnnBackendDescriptor_t sum = bk_tensor(m, t, "tensor sum", uids[2], fp32, 1, k, 1, 1, false);
    cudnnBackendDescriptor_t sqsum = bk_tensor(m, t, "tensor sqsum", uids[3], fp32, 1, k, 1, 1, false);
    ops[0] = bk_conv(m, t, CUDNN_GRAPH_CONV_FORWARD, in, wt, y);
    ops[1] = bk_genstats(m, t, y, sum, sqsum);
}

void bk_dgrad_drelu_dbn(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t g,
                        cudnnDataType_t io, cudnnDataType_t mid, int64_t n, int64_t c, int64_t h, int64_t w,
                        int64_t k, const int64_t uids[11], const cudnnBackendDescriptor_t coef[5],
                        cudnnBackendDescriptor_t ops[7]) {
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t dy = bk_tensor(m, t, "tensor dy", uids[0], io, n, k, h, w, false);
    cudnnBackendDescriptor_t wt = bk_tensor(m, t, "tensor w", uids[1], io, k, c, 1, 1, false);
    cudnnBackendDescriptor_t mean = bk_tensor(m, t, "tensor mean", uids[2], fp32, 1, c, 1, 1, false);
    cudnnBackendDescriptor_t invstd = bk_tensor(m, t, "tensor invstd", uids[3], fp32, 1, c, 1, 1, false);
    cudnnBackendDescriptor_t gamma = bk_tensor(m, t, "tensor gamma", uids[4], fp32, 1, c, 1, 1, false);
    cudnnBackendDescriptor_t beta = bk_tensor(m, t, "tensor beta", uids[5], fp32, 1, c, 1, 1, false);
    cudnnBackendDescriptor_t da = bk_tensor(m, t, "tensor da", uids[6], mid, n, c, h, w, true);
    cudnnBackendDescriptor_t centred = bk_tensor(m, t, "tensor x-mean", uids[7], mid, n, c, h, w, true);
    cudnnBackendDescriptor_t normed = bk_tensor(m, t, "tensor xhat", uids[8], mid, n, c, h, w, true);
    cudnnBackendDescriptor_t gammaed = bk_tensor(m, t, "tensor xhat*gamma", uids[9], mid, n, c, h, w, true);
    cudnnBackendDescriptor_t bn = bk_tensor(m, t, "tensor bn", uids[10], mid, n, c, h, w, true);
    ops[0] = bk_conv(m, t, CUDNN_GRAPH_CONV_DGRAD, dy, wt, da);
    ops[1] = bk_pointwise(m, t, "pointwise x-mean", CUDNN_POINTWISE_SUB, x, mean, centred);
    ops[2] = bk_pointwise(m, t, "pointwise *invstd", CUDNN_POINTWISE_MUL, centred, invstd, normed);
    ops[3] = bk_pointwise(m, t, "pointwise *gamma", CUDNN_POINTWISE_MUL, normed, gamma, gammaed);
    ops[4] = bk_pointwise(m, t, "pointwise +beta", CUDNN_POINTWISE_ADD, gammaed, beta, bn);
    ops[5] = bk_pointwise(m, t, "pointwise relu backward", CUDNN_POINTWISE_RELU_BWD, bn, da, g);
    ops[6] = bk_bn_backward_weights(m, t, x, g, mean, invstd, gamma, coef);
}

cudnnBackendDescriptor_t bk_graph(CudnnMade *m, CudnnTrail *t, cudnnHandle_t handle,
                                  const cudnnBackendDescriptor_t *ops, int count) {
    const char *what = "operation graph";
    cudnnBackendDescriptor_t graph = bk_make(m, t, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what);
    BK_SET(t, graph, what, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, ops);
    BK_SET(t, graph, what, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    return graph;
}

// ---- the engine search ---------------------------------------------------------------------------------

// Whether the engine of cfg compiles its kernels at run time (CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION), and
// its global index; 0 and -1 after a failure, which t keeps.
static int engine_notes(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t cfg, int64_t *index) {
    int64_t count = 0, notes_count = 0;
    cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    cudnnBackendDescriptor_t engine = bk_make(m, t, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
    *index = -1;
    BK_GET(t, cfg, "engine config", CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
           &engine);
    BK_GET(t, engine, "engine", CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, index);
    BK_GET(t, engine, "engine", CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
           CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &notes_count, notes);
    int runtime_compiled = 0;
    for (int64_t i = 0; i < notes_count && t->status == CUDNN_STATUS_SUCCESS; i++)
        runtime_compiled |= notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    return runtime_compiled;
}

// text: the engine's global index, whether it compiles at run time, and its knob choices (type=value,
// cudnnBackendKnobType_t).
static void engine_describe(CudnnMade *m, cudnnBackendDescriptor_t cfg, char text[CUDNN_ENGINE_TEXT]) {
    CudnnTrail t = {};
    int64_t count = 0, index = -1, knob_count = 0;
    const int runtime_compiled = engine_notes(m, &t, cfg, &index);
    cudnnBackendDescriptor_t knobs[CUDNN_KNOB_TYPE_COUNTS];
    for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; i++)
        knobs[i] = bk_make(m, &t, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob choice");
    BK_GET(&t, cfg, "engine config", CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
           CUDNN_KNOB_TYPE_COUNTS, &knob_count, knobs);
    size_t len = (size_t)snprintf(text, CUDNN_ENGINE_TEXT, "engine %lld%s, knobs", (long long)index,
                                  runtime_compiled ? " (runtime compiled)" : "");
    for (int64_t i = 0; i < knob_count && t.status == CUDNN_STATUS_SUCCESS && len < CUDNN_ENGINE_TEXT; i++) {
        cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
        int64_t value = 0;
        BK_GET(&t, knobs[i], "knob choice", CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &count,
               &type);
        BK_GET(&t, knobs[i], "knob choice", CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &count,
               &value);
        len += (size_t)snprintf(text + len, CUDNN_ENGINE_TEXT - len, " %d=%lld", (int)type, (long long)value);
    }
    if (t.status != CUDNN_STATUS_SUCCESS && len < CUDNN_ENGINE_TEXT)
        snprintf(text + len, CUDNN_ENGINE_TEXT - len, " (%s)", t.text);
}

void cudnn_graph_plans(CudnnMade *m, cudnnHandle_t handle, cudnnBackendDescriptor_t graph, int max_plans,
                       int runtime_tries, CudnnPlans *out) {
    static const cudnnBackendHeurMode_t MODES[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    static const char *MODE_NAME[2] = {"A", "FALLBACK"};
    memset(out, 0, sizeof *out);
    if (max_plans > CUDNN_PLAN_MAX) max_plans = CUDNN_PLAN_MAX;
    bk_finalize(&out->searched, graph, "operation graph");
    if (out->searched.status != CUDNN_STATUS_SUCCESS) return;
    for (int mode = 0; mode < 2; mode++) {
        CudnnTrail h = {};
        int64_t count = 0, got = 0;
        cudnnBackendDescriptor_t heur = bk_make(m, &h, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
        BK_LINK(&h, heur, "heuristics", CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
        BK_SET(&h, heur, "heuristics", CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &MODES[mode]);
        bk_finalize(&h, heur, "heuristics");
        BK_GET(&h, heur, "heuristics", CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
               &count, NULL);
        cudnnBackendDescriptor_t *cfgs =
            (cudnnBackendDescriptor_t *)calloc(count > 0 ? (size_t)count : 1, sizeof *cfgs);
        AMP_ASSERT(cfgs != NULL, "cudnn_graph: out of host memory");
        for (int64_t i = 0; i < count; i++)
            cfgs[i] = bk_make(m, &h, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
        if (count > 0)
            BK_GET(&h, heur, "heuristics", CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                   count, &got, cfgs);
        if (h.status != CUDNN_STATUS_SUCCESS) {
            out->searched = h;
        } else if (got == 0) {  // cuDNN's last message says why (no config, or none it can load here)
            char message[256] = "";
            cudnn_last_message(message, sizeof message);
            out->searched.status = CUDNN_STATUS_NOT_SUPPORTED;
            snprintf(out->searched.text, sizeof out->searched.text,
                     "heuristics mode %s: %lld engine config(s), none usable%s%s", MODE_NAME[mode],
                     (long long)count, message[0] ? ": " : "", message);
        }
        int tries = 0;
        for (int64_t i = 0; i < got && h.status == CUDNN_STATUS_SUCCESS && out->count < max_plans; i++) {
            CudnnTrail e = {};
            int64_t index;
            const int runtime_compiled = engine_notes(m, &e, cfgs[i], &index);
            if (runtime_compiled && tries++ >= runtime_tries) continue;
            const char *what = "execution plan";
            cudnnBackendDescriptor_t plan = bk_make(m, &e, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, what);
            BK_SET(&e, plan, what, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
            BK_LINK(&e, plan, what, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i]);
            bk_finalize(&e, plan, what);
            if (e.status == CUDNN_STATUS_SUCCESS) {
                engine_describe(m, cfgs[i], out->engines[out->count]);
                out->plans[out->count++] = plan;
            } else {
                out->searched = e;
            }
        }
        free(cfgs);
        if (out->count > 0) {
            out->mode = MODE_NAME[mode];
            return;
        }
    }
}

int64_t cudnn_plan_workspace(CudnnTrail *t, cudnnBackendDescriptor_t plan) {
    int64_t bytes = 0, count = 0;
    BK_GET(t, plan, "execution plan", CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
           &bytes);
    return t->status == CUDNN_STATUS_SUCCESS ? bytes : 0;
}

cudnnBackendDescriptor_t cudnn_variant_pack(CudnnMade *m, CudnnTrail *t, int count, const int64_t *uids,
                                            void *const *ptrs, void *workspace) {
    const char *what = "variant pack";
    cudnnBackendDescriptor_t pack = bk_make(m, t, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what);
    BK_SET(t, pack, what, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids);
    BK_SET(t, pack, what, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, ptrs);
    BK_SET(t, pack, what, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    bk_finalize(t, pack, what);
    return pack;
}

void cudnn_plan_execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, int tensors, const int64_t *uids,
                        void *const *ptrs, void *workspace) {
    CudnnMade made = {};
    CudnnTrail t = {};
    cudnnBackendDescriptor_t pack = cudnn_variant_pack(&made, &t, tensors, uids, ptrs, workspace);
    if (t.status != CUDNN_STATUS_SUCCESS) amp_fatal(__FILE__, __LINE__, "cudnn_graph: %s", t.text);
    CUDNN_CHECK(cudnnBackendExecute(handle, plan, pack));
    cudnn_made_free(&made);
}
