// bench_grouped_conv.cu - ResNeXt-50 32x4d's grouped 3x3 convolutions (every block's conv2, 32 groups) on
// every engine cuDNN's backend (graph) API offers (cudnn_conv_graph.cu), against the route the trainer runs
// (cuDNN's legacy API, conv_prepare's timed pick under cudnn.benchmark).
//
//   build/bench_grouped_conv [n [plans [dtype]]]   n: the batch (default 256); plans: engine configs tried
//                                                  per direction, at most 16 (default 16); dtype: float16
//                                                  (default), bfloat16 or float32 (TF32 allowed)
//
// Per grouped shape of the model and direction (forward x, w -> y; data gradient dy, w -> dx; weight
// gradient x, dy -> dw; NHWC, fp32 accumulation): the legacy route, then each execution plan of the
// engine configs heuristics mode A offers for the one-operation graph (conv_graph_make; here at most one
// compiled at run time). A plan's output must match the route's (relative L2 error under 1e-2), else it is
// not timed and the line says FAIL (exit 1). Printed per direction: the route's time, the heuristics' first
// plan and the fastest, with their engines. Times: bench_time's median of TIMED_RUNS timings after
// WARMUP_RUNS, each of CALLS_PER_TIMING calls queued back to back, divided by their number (one call between
// two marks would count the host's work before its kernel starts: the legacy API's calls spend more there).
// The last lines weight each shape by its count in the model: one step's grouped convolutions on the route
// and on the fastest plans.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_error.h"
#include "bench/bench_timing.h"
#include "bench/resnext50_convs.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_diag.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_graph.h"

#define WARMUP_RUNS 3
#define TIMED_RUNS 20
// Calls queued back to back between one timing's marks: the GPU's time, not the host's.
#define CALLS_PER_TIMING 8
#define TOLERANCE 1e-2
#define PLAN_WORKSPACE_MAX ((size_t)1 << 30)  // a plan asking more is skipped

static const char *DIRECTION[3] = {"forward", "data gradient", "weight gradient"};

// One shape's buffers (fp16): x (n,h,w,c_in), w (c_out,k,k,c_in/g), dy (n,out_h,out_w,c_out); per direction
// the route's output and a plan's.
typedef struct Buffers {
    DType dt;
    void *x, *w, *dy, *route[3], *plan[3];
    size_t elems[3];  // per direction: its output's elements (y, dx, dw)
} Buffers;

typedef struct Call {
    Backend *be;
    const ConvShape *s;
    const Buffers *b;
    const ConvGraph *graph;  // plan_call: the graph and its plan
    int plan;
} Call;

// The trainer's route for direction d.
static void route_once(const Call *c, int d) {
    const Buffers *b = c->b;
    if (d == CUDNN_GRAPH_CONV_FORWARD)
        c->be->conv_forward(c->be, c->s, b->dt, b->x, b->w, b->route[d]);
    else if (d == CUDNN_GRAPH_CONV_DGRAD)
        c->be->conv_backward_data(c->be, c->s, b->dt, b->dy, b->w, b->route[d], 0);
    else
        c->be->conv_backward_filter(c->be, c->s, b->dt, b->x, b->dy, b->route[d], 0);
}

static void route_call(void *ctx, int d) {
    for (int i = 0; i < CALLS_PER_TIMING; i++) route_once((const Call *)ctx, d);
}

// Plan c->plan of the graph, operands as conv_graph_run takes them.
static void plan_call(void *ctx, int d) {
    const Call *c = (const Call *)ctx;
    const Buffers *b = c->b;
    const void *a = d == CUDNN_GRAPH_CONV_DGRAD ? b->dy : b->x;
    const void *second = d == CUDNN_GRAPH_CONV_WGRAD ? b->dy : b->w;
    for (int i = 0; i < CALLS_PER_TIMING; i++)
        conv_graph_run(cuda_state(c->be), c->graph, c->plan, a, second, b->plan[d]);
}

// Direction d of one shape: the route, then every plan. Adds the route's and the fastest plan's ms (times
// the shape's count) to step[0], step[1]. Returns 0 on a FAIL.
static int run_direction(Backend *be, const ConvShape *s, Buffers *b, int d, int max_plans, int count,
                         double step[2]) {
    CudaBackend *cb = cuda_state(be);
    Call route = {be, s, b, NULL, 0};
    route_once(&route, d);
    const float route_ms = bench_time(be, WARMUP_RUNS, TIMED_RUNS, NULL, route_call, &route, d).median /
                           CALLS_PER_TIMING;
    char why[256] = "";
    ConvGraph *graph = conv_graph_make(cb, s, b->dt, d, max_plans, 1, why, sizeof why);
    printf("  %-15s route %8.4f ms | ", DIRECTION[d], (double)route_ms);
    if (!graph) {
        printf("no plan: %s\n", why);
        step[0] += (double)route_ms * count, step[1] += (double)route_ms * count;
        return 1;
    }
    float first = -1.0f, fastest = -1.0f;
    int fastest_at = -1, failed = 0, skipped = 0;
    double worst = 0.0;
    for (int i = 0; i < conv_graph_plan_count(graph); i++) {
        if (conv_graph_workspace(graph, i) > PLAN_WORKSPACE_MAX) {
            skipped++;
            continue;
        }
        Call call = {be, s, b, graph, i};
        plan_call(&call, d);
        be->sync(be);
        const double err = bench_rel_error(be, b->dt, b->plan[d], b->route[d], b->elems[d]);
        if (!(err < TOLERANCE)) {
            printf("FAIL: plan %d (%s) differs from the route by %.2e\n  %-15s                      | ", i,
                   conv_graph_engine(graph, i), err, "");
            failed = 1;
            continue;
        }
        if (err > worst) worst = err;
        const float ms = bench_time(be, WARMUP_RUNS, TIMED_RUNS, NULL, plan_call, &call, d).median /
                         CALLS_PER_TIMING;
        if (first < 0.0f) first = ms;
        if (fastest < 0.0f || ms < fastest) fastest = ms, fastest_at = i;
    }
    if (fastest_at < 0) {
        printf("no plan ran (%d skipped)\n", skipped);
        fastest = route_ms;
    } else {
        printf(
            "first %8.4f | fastest %8.4f (%.2fx the route) plan %d: %s; %d plans, %d skipped, error <= %.1e\n",
            (double)first, (double)fastest, (double)(route_ms / fastest), fastest_at,
            conv_graph_engine(graph, fastest_at), conv_graph_plan_count(graph), skipped, worst);
    }
    step[0] += (double)route_ms * count;
    step[1] += (double)(fastest < route_ms ? fastest : route_ms) * count;
    conv_graph_free(graph);
    return !failed;
}

// One grouped shape: buffers, the route's choices (conv_prepare), then its three directions.
static int run_case(Backend *be, const Resnext50Conv *k, int n, DType dt, int max_plans, double step[3][2]) {
    ConvShape s = {n, k->side, k->side, k->c_in, k->c_out, k->k, k->k, k->stride, k->k / 2, k->groups, 0, 0};
    conv_shape_finish(&s);
    const size_t nx = (size_t)n * s.h * s.w * s.c_in, ny = (size_t)n * s.out_h * s.out_w * s.c_out,
                 nw = (size_t)s.c_out * s.kh * s.kw * (s.c_in / s.groups), es = dtype_size(dt);
    be->conv_prepare(be, &s, dt);
    Buffers b = {dt, be->alloc(be, nx * es), be->alloc(be, nw * es), be->alloc(be, ny * es)};
    b.elems[CUDNN_GRAPH_CONV_FORWARD] = ny, b.elems[CUDNN_GRAPH_CONV_DGRAD] = nx,
    b.elems[CUDNN_GRAPH_CONV_WGRAD] = nw;
    for (int d = 0; d < 3; d++)
        b.route[d] = be->alloc(be, b.elems[d] * es), b.plan[d] = be->alloc(be, b.elems[d] * es);
    CudaBackend *cb = cuda_state(be);
    cuda_fill_spread(cb, b.x, nx, dt, 0.0f, 2.0f);  // a ReLU's output
    cuda_fill_spread(cb, b.w, nw, dt, -0.2f, 0.2f);
    cuda_fill_spread(cb, b.dy, ny, dt, -0.01f, 0.01f);
    printf("%-15s n %d %3dx%-3d %4d->%-4d k%d s%d g%d, x%d\n", k->name, n, s.h, s.w, s.c_in, s.c_out, s.kh,
           s.stride, s.groups, k->count);
    int ok = 1;
    for (int d = 0; d < 3; d++) ok &= run_direction(be, &s, &b, d, max_plans, k->count, step[d]);
    void *all[] = {b.x, b.w, b.dy, b.route[0], b.route[1], b.route[2], b.plan[0], b.plan[1], b.plan[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
    return ok;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 256, max_plans = argc > 2 ? atoi(argv[2]) : CUDNN_PLAN_MAX;
    const char *dt_name = argc > 3 ? argv[3] : "float16";
    const DType dt = !strcmp(dt_name, "float16")    ? DTYPE_F16
                     : !strcmp(dt_name, "bfloat16") ? DTYPE_BF16
                     : !strcmp(dt_name, "float32")  ? DTYPE_F32
                                                    : DTYPE_U8;
    if (n < 1 || max_plans < 1 || max_plans > CUDNN_PLAN_MAX || dt == DTYPE_U8) {
        fprintf(
            stderr,
            "usage: bench_grouped_conv [n [plans [dtype]]]   (n: the batch, default 256; plans: 1..%d; dtype: "
            "float16 (default), bfloat16 or float32, TF32 allowed)\n",
            CUDNN_PLAN_MAX);
        return 2;
    }
    char why[256] = "";
    CudaOptions opts = cuda_options_default();
    opts.cudnn_benchmark = 1;
    opts.conv_tf32 = 1;  // fp32 as cudnn.tf32's default
    Backend *be = cuda_backend_create(0, &opts, why, sizeof why);
    if (!be) {
        fprintf(stderr, "bench_grouped_conv: %s\n", why);
        return 1;
    }
    printf(
        "grouped 3x3 convolutions, batch %d, %s NHWC: the trainer's route against cuDNN's backend engines; ms a "
        "call, median of %d timings of %d queued calls\n",
        n, dtype_name(dt), TIMED_RUNS, CALLS_PER_TIMING);
    double step[3][2] = {};
    int failed = 0;
    for (int i = 0; i < RESNEXT50_CONV_COUNT; i++)
        if (RESNEXT50_CONVS[i].groups > 1)
            failed += !run_case(be, &RESNEXT50_CONVS[i], n, dt, max_plans, step);
    for (int d = 0; d < 3; d++)
        printf("one step's %-15s route %7.3f ms, fastest plans %7.3f ms\n", DIRECTION[d], step[d][0],
               step[d][1]);
    be->destroy(be);
    return failed ? 1 : 0;
}
