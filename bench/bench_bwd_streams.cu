// bench_bwd_streams.cu - a measured prototype, not wired into the trainer: does a convolution's weight
// gradient running beside its data gradient, on a second stream, shorten ResNeXt-50 32x4d's backward?
//
//   build/bench_bwd_streams [n]     n: the batch (default 70)
//
// In backward every convolution but the stem computes two gradients from the same dy: the data gradient
// (conv_backward_data: dy, w -> dx) and the weight gradient (conv_backward_filter: x, dy -> dw). Neither
// reads the other's output, and the trainer runs them one after the other on one stream. At small batches a
// layer's GEMM or cuDNN kernel leaves much of the GPU idle, so the two could overlap. Per distinct
// convolution shape of the model (fp16 NHWC, the algorithms conv_prepare times under cudnn.benchmark), this
// times
//   serial      both gradients on one backend's stream, data then weight, as the trainer runs them;
//   beside      the data gradient on backend A's stream, the weight gradient on backend B's (its own stream,
//               cuDNN and cuBLAS handles and workspace), B starting when A reaches the start event and A
//               waiting at the end for B's event: what a fork and join inside the captured step would do.
// Times: median of TIMED_RUNS after WARMUP_RUNS, between events on A's stream, ms. The last lines weight
// each shape by its count in the model: one step's convolution backward each way. Before timing, beside's
// dx and dw must equal serial's (relative L2 error under 1e-2: the two backends may time different
// algorithms), else FAIL and exit 1. On an H200 (bench/RESULTS.md) beside saved nothing at batch 70 or 256.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench_error.h"
#include "bench/bench_timing.h"
#include "bench/resnext50_convs.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_internal.h"

#define WARMUP_RUNS 3
#define TIMED_RUNS 20
#define TOLERANCE 1e-2

// One shape's buffers, all from backend A: x (n,h,w,c_in), w (c_out,k,k,c_in/g), dy (n,out_h,out_w,c_out)
// fp16; dx, dw each way.
typedef struct Buffers {
    void *x, *w, *dy, *dx[2], *dw[2];
} Buffers;

typedef struct Run {
    Backend *a, *b;
    const ConvShape *s;
    const Buffers *buf;
    cudaEvent_t fork, join;
} Run;

// side 0: serial, both on A; side 1: beside, the weight gradient on B between the fork and join events.
static void run_once(const Run *r, int side) {
    const Buffers *u = r->buf;
    Backend *filter_be = side ? r->b : r->a;
    if (side) {
        CUDA_CHECK(cudaEventRecord(r->fork, cuda_state(r->a)->stream));
        CUDA_CHECK(cudaStreamWaitEvent(cuda_state(r->b)->stream, r->fork, 0));
    }
    r->a->conv_backward_data(r->a, r->s, DTYPE_F16, u->dy, u->w, u->dx[side], 0);
    filter_be->conv_backward_filter(filter_be, r->s, DTYPE_F16, u->x, u->dy, u->dw[side], 0);
    if (side) {
        CUDA_CHECK(cudaEventRecord(r->join, cuda_state(r->b)->stream));
        CUDA_CHECK(cudaStreamWaitEvent(cuda_state(r->a)->stream, r->join, 0));
    }
}

static void run_call(void *ctx, int side) { run_once((const Run *)ctx, side); }

// Each call between events on A's stream.
static float median_ms(const Run *r, int side) {
    return bench_time(r->a, WARMUP_RUNS, TIMED_RUNS, NULL, run_call, (void *)r, side).median;
}

// One shape: checks beside against serial, then times both. Returns 0 on a FAIL.
static int run_case(Backend *a, Backend *b, const Resnext50Conv *k, int n, double step_ms[2]) {
    ConvShape s = {n, k->side, k->side, k->c_in, k->c_out, k->k, k->k, k->stride, k->k / 2, k->groups, 0, 0};
    conv_shape_finish(&s);
    const size_t nx = (size_t)n * s.h * s.w * s.c_in, ny = (size_t)n * s.out_h * s.out_w * s.c_out,
                 nw = (size_t)s.c_out * s.kh * s.kw * (s.c_in / s.groups), es = sizeof(__half);
    a->conv_prepare(a, &s, DTYPE_F16);
    b->conv_prepare(b, &s, DTYPE_F16);
    Buffers u = {a->alloc(a, nx * es), a->alloc(a, nw * es), a->alloc(a, ny * es)};
    for (int side = 0; side < 2; side++) u.dx[side] = a->alloc(a, nx * es), u.dw[side] = a->alloc(a, nw * es);
    CudaBackend *cb = cuda_state(a);
    cuda_fill_spread(cb, u.x, nx, DTYPE_F16, 0.0f, 2.0f);  // a ReLU's output
    cuda_fill_spread(cb, u.w, nw, DTYPE_F16, -0.05f, 0.05f);
    cuda_fill_spread(cb, u.dy, ny, DTYPE_F16, -0.01f, 0.01f);
    Run r = {a, b, &s, &u, NULL, NULL};
    CUDA_CHECK(cudaEventCreateWithFlags(&r.fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&r.join, cudaEventDisableTiming));
    run_once(&r, 0);
    run_once(&r, 1);
    a->sync(a);
    const double dx_err = bench_rel_error(a, DTYPE_F16, u.dx[1], u.dx[0], nx),
                 dw_err = bench_rel_error(a, DTYPE_F16, u.dw[1], u.dw[0], nw);
    const int ok = dx_err < TOLERANCE && dw_err < TOLERANCE;
    float ms[2] = {0.0f, 0.0f};
    if (ok)
        for (int side = 0; side < 2; side++) ms[side] = median_ms(&r, side);
    printf("%-20s n %d %3dx%-3d %4d->%-4d k%d s%d g%-2d  serial %7.4f  beside %7.4f  %.2fx  x%d%s\n", k->name,
           n, s.h, s.w, s.c_in, s.c_out, s.kh, s.stride, s.groups, (double)ms[0], (double)ms[1],
           ms[1] > 0.0f ? (double)(ms[0] / ms[1]) : 0.0, k->count, ok ? "" : "  FAIL");
    if (!ok) printf("  beside against serial: dx %.2e, dw %.2e relative\n", dx_err, dw_err);
    for (int side = 0; side < 2; side++) step_ms[side] += (double)ms[side] * k->count;
    CUDA_CHECK(cudaEventDestroy(r.fork));
    CUDA_CHECK(cudaEventDestroy(r.join));
    void *all[] = {u.x, u.w, u.dy, u.dx[0], u.dx[1], u.dw[0], u.dw[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) a->free(a, all[i]);
    return ok;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 70;
    if (n < 1) {
        fprintf(stderr, "usage: bench_bwd_streams [n]   (n: the batch, default 70)\n");
        return 2;
    }
    char why[256] = "";
    CudaOptions opts = cuda_options_default();
    opts.cudnn_benchmark = 1;
    Backend *a = cuda_backend_create(0, &opts, why, sizeof why);
    Backend *b = a ? cuda_backend_create(0, &opts, why, sizeof why) : NULL;
    if (!a || !b) {
        fprintf(stderr, "bench_bwd_streams: %s\n", why);
        return 1;
    }
    printf(
        "convolution backward, data and weight gradients serial (one stream) or beside (two), batch %d, fp16 "
        "NHWC; median of %d calls, ms\n",
        n, TIMED_RUNS);
    double step_ms[2] = {0.0, 0.0};
    int failed = 0;
    for (int i = 0; i < RESNEXT50_CONV_COUNT; i++) failed += !run_case(a, b, &RESNEXT50_CONVS[i], n, step_ms);
    printf("one step's convolution backward (each shape times its count): serial %.3f ms, beside %.3f ms, "
           "%.3f ms saved\n",
           step_ms[0], step_ms[1], step_ms[0] - step_ms[1]);
    b->destroy(b);
    a->destroy(a);
    return failed ? 1 : 0;
}
