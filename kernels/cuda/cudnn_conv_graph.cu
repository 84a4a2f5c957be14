// cudnn_conv_graph.cu - one direction of a convolution as a one-operation graph of cuDNN's backend API, run
// on an execution plan of an engine config heuristics mode A offers (cudnn_graph.h builds it).
//
// build/bench_grouped_conv times these plans against the legacy API's route (cudnn_conv.cu) on ResNeXt's
// grouped 3x3 convolutions. With calls queued back to back (as in a CUDA-graph step) the legacy pick ran the
// same engines as fast as the heuristics' first plan on the large shapes (bench/RESULTS.md), so the trainer
// stays on the legacy API.
//
// A plan overwrites its output (alpha 1, beta 0). Operands: forward a = x, b = w, out = y; backward data a =
// dy, b = w, out = dx; backward filter a = x, b = dy, out = dw. x (n,h,w,c_in), y (n,out_h,out_w,c_out) NHWC
// and w (c_out,kh,kw,c_in/g) OHWI in dt, fp32 accumulation.
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_graph.h"

// The graph's tensors (variant pack keys): a, b, out of the direction.
enum { UID_A = 1, UID_B, UID_OUT };

struct ConvGraph {
    CudnnMade made;
    CudnnPlans plans;
    size_t workspace[CUDNN_PLAN_MAX];  // bytes each plan needs
};

// The graph of direction d: x, w and y as the direction names them (a, b, out).
static cudnnBackendDescriptor_t conv_graph_describe(CudnnMade *m, CudnnTrail *t, cudnnHandle_t handle,
                                                    const ConvShape *s, DType dt, CudnnGraphConv d) {
    const cudnnDataType_t io = cudnn_dtype(dt);
    const int64_t x_uid = d == CUDNN_GRAPH_CONV_DGRAD ? UID_OUT : UID_A;
    const int64_t w_uid = d == CUDNN_GRAPH_CONV_WGRAD ? UID_OUT : UID_B;
    const int64_t y_uid = d == CUDNN_GRAPH_CONV_FORWARD ? UID_OUT
                          : d == CUDNN_GRAPH_CONV_DGRAD ? UID_A
                                                        : UID_B;
    cudnnBackendDescriptor_t x = bk_tensor(m, t, "tensor x", x_uid, io, s->n, s->c_in, s->h, s->w, false);
    cudnnBackendDescriptor_t w =
        bk_tensor(m, t, "tensor w", w_uid, io, s->c_out, s->c_in / s->groups, s->kh, s->kw, false);
    cudnnBackendDescriptor_t y =
        bk_tensor(m, t, "tensor y", y_uid, io, s->n, s->c_out, s->out_h, s->out_w, false);
    cudnnBackendDescriptor_t op;
    if (d == CUDNN_GRAPH_CONV_FORWARD)
        op = bk_conv_spatial(m, t, d, x, w, y, s->stride, s->pad);
    else if (d == CUDNN_GRAPH_CONV_DGRAD)
        op = bk_conv_spatial(m, t, d, y, w, x, s->stride, s->pad);
    else
        op = bk_conv_spatial(m, t, d, x, y, w, s->stride, s->pad);
    return bk_graph(m, t, handle, &op, 1);
}

ConvGraph *conv_graph_make(CudaBackend *cb, const ConvShape *s, DType dt, int direction, int max_plans,
                           int runtime_tries, char *why, size_t why_len) {
    AMP_ASSERT(s->kh == s->kw && direction >= CUDNN_GRAPH_CONV_FORWARD && direction <= CUDNN_GRAPH_CONV_WGRAD,
               "conv graph: direction %d, kernel %dx%d", direction, s->kh, s->kw);
    ConvGraph *g = (ConvGraph *)calloc(1, sizeof *g);
    AMP_ASSERT(g != NULL, "conv graph: out of host memory");
    CudnnTrail t = {};
    cudnnBackendDescriptor_t graph =
        conv_graph_describe(&g->made, &t, cb->cudnn, s, dt, (CudnnGraphConv)direction);
    if (t.status == CUDNN_STATUS_SUCCESS)
        cudnn_graph_plans(&g->made, cb->cudnn, graph, max_plans, runtime_tries, &g->plans);
    for (int i = 0; t.status == CUDNN_STATUS_SUCCESS && i < g->plans.count; i++) {
        CudnnTrail pt = {};
        g->workspace[i] = (size_t)cudnn_plan_workspace(&pt, g->plans.plans[i]);
        if (pt.status != CUDNN_STATUS_SUCCESS) g->plans.count = i;  // the plans before it stay
    }
    if (t.status != CUDNN_STATUS_SUCCESS || g->plans.count == 0) {
        if (why)
            snprintf(why, why_len, "%s", t.status != CUDNN_STATUS_SUCCESS ? t.text : g->plans.searched.text);
        conv_graph_free(g);
        return NULL;
    }
    return g;
}

int conv_graph_plan_count(const ConvGraph *g) { return g->plans.count; }

const char *conv_graph_engine(const ConvGraph *g, int plan) { return g->plans.engines[plan]; }

size_t conv_graph_workspace(const ConvGraph *g, int plan) { return g->workspace[plan]; }

void conv_graph_run(CudaBackend *cb, const ConvGraph *g, int plan, const void *a, const void *b, void *out) {
    AMP_ASSERT(plan >= 0 && plan < g->plans.count, "conv graph: plan %d of %d", plan, g->plans.count);
    const int64_t uids[3] = {UID_A, UID_B, UID_OUT};
    void *const ptrs[3] = {(void *)a, (void *)b, out};
    void *ws = g->workspace[plan] ? cuda_workspace(cb, g->workspace[plan]) : NULL;
    cudnn_plan_execute(cb->cudnn, g->plans.plans[plan], 3, uids, ptrs, ws);
}

void conv_graph_free(ConvGraph *g) {
    if (!g) return;
    cudnn_made_free(&g->made);
    free(g);
}
