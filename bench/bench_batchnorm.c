// bench_batchnorm.c - times training batch norm on every layer shape of ResNeXt-50 32x4d (fp16, NHWC),
// cuDNN's fused kernels against amptrain's own and against the per-shape pair that cudnn.batch_norm auto
// picks (bn_prepare), through backend.h only.
//
//   build/bench_batchnorm [n] [ends]   n: the batch (default 256); ends: the downsampling block ends only
//
// Per distinct layer shape (rows = n*h*w, c, residual add, ReLU) and path: the median of 20 timed calls
// (after 3 warm-up calls) of bn_forward_train and of bn_backward (each backward queued behind its forward,
// which the backward's mask needs), in ms and in GB/s of the bytes a call must move at least (forward:
// read x and residual, write y; backward: read x and dy, write dx and d_residual). The last lines weight
// each shape by how often the network has it: the batch-norm time of one training step on each path.
// Before timing, the three modes run the same inputs and must agree with cuDNN's (relative error under 1e-2
// on y, dx and d_residual); exit 1 if not. Then the four downsampling block ends of ResNeXt-50 (bn3 with the
// shortcut's bn): the two layers' calls on auto's pairs against bn_add_bn's fused kernels, which must agree
// the same way. Correctness against the CPU reference is test_gpu_ops' job.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_timing.h"
#include "core/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_diag.h"

#define WARMUP_RUNS 3
#define TIMED_RUNS 20

// The modes compared, in table order.
#define MODES 3
static const CudaBnMode MODE[MODES] = {CUDA_BN_CUDNN, CUDA_BN_OWN, CUDA_BN_AUTO};
static const char *MODE_NAME[MODES] = {"cuDNN", "own", "auto"};

typedef struct BnShape {
    const char *name;
    int hw;  // spatial size (h * w) per image
    int c;
    int residual;  // add the shortcut before the ReLU (bn3)
    int relu;
    int count;  // layers of this shape in ResNeXt-50 32x4d
} BnShape;

static const BnShape SHAPES[] = {
    {"stem bn1", 112 * 112, 64, 0, 1, 1},     {"layer1 bn1/bn2", 56 * 56, 128, 0, 1, 6},
    {"layer1 bn3", 56 * 56, 256, 1, 1, 3},    {"layer1 downsample", 56 * 56, 256, 0, 0, 1},
    {"layer2.0 bn1", 56 * 56, 256, 0, 1, 1},  {"layer2 bn1/bn2", 28 * 28, 256, 0, 1, 7},
    {"layer2 bn3", 28 * 28, 512, 1, 1, 4},    {"layer2 downsample", 28 * 28, 512, 0, 0, 1},
    {"layer3.0 bn1", 28 * 28, 512, 0, 1, 1},  {"layer3 bn1/bn2", 14 * 14, 512, 0, 1, 11},
    {"layer3 bn3", 14 * 14, 1024, 1, 1, 6},   {"layer3 downsample", 14 * 14, 1024, 0, 0, 1},
    {"layer4.0 bn1", 14 * 14, 1024, 0, 1, 1}, {"layer4 bn1/bn2", 7 * 7, 1024, 0, 1, 5},
    {"layer4 bn3", 7 * 7, 2048, 1, 1, 3},     {"layer4 downsample", 7 * 7, 2048, 0, 0, 1},
};
#define SHAPE_COUNT ((int)(sizeof SHAPES / sizeof SHAPES[0]))

typedef struct Buffers {
    void *x, *res, *y, *dy, *dx, *dres;
    float *gamma, *beta, *rmean, *rvar, *smean, *sinv;
    void *dgamma, *dbeta;
} Buffers;

static void fill_random(Backend *be, void *dst, size_t n, int half, uint64_t seed, float lo, float hi) {
    void *host = malloc(n * (half ? 2 : 4));
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const float v = lo + (hi - lo) * (float)((seed >> 40) & 0xffffff) / 16777216.0f;
        if (half)
            ((_Float16 *)host)[i] = (_Float16)v;
        else
            ((float *)host)[i] = v;
    }
    be->to_device(be, dst, host, n * (half ? 2 : 4));
    free(host);
}

static Buffers buffers_make(Backend *be, size_t elems, int c) {
    Buffers b;
    b.x = be->alloc(be, elems * 2), b.res = be->alloc(be, elems * 2), b.y = be->alloc(be, elems * 2);
    b.dy = be->alloc(be, elems * 2), b.dx = be->alloc(be, elems * 2), b.dres = be->alloc(be, elems * 2);
    float **params[] = {&b.gamma, &b.beta, &b.rmean, &b.rvar, &b.smean, &b.sinv};
    for (int i = 0; i < 6; i++) *params[i] = be->alloc(be, (size_t)c * 4);
    b.dgamma = be->alloc(be, (size_t)c * 2), b.dbeta = be->alloc(be, (size_t)c * 2);
    fill_random(be, b.x, elems, 1, 1, -2, 3);
    fill_random(be, b.res, elems, 1, 2, -1, 1);
    fill_random(be, b.dy, elems, 1, 3, -1, 1);
    fill_random(be, b.gamma, c, 0, 4, 0.5f, 1.5f);
    fill_random(be, b.beta, c, 0, 5, -0.5f, 0.5f);
    fill_random(be, b.rmean, c, 0, 6, -0.1f, 0.1f);
    fill_random(be, b.rvar, c, 0, 7, 0.5f, 1.5f);
    return b;
}

static void buffers_free(Backend *be, Buffers *b) {
    void *all[] = {b->x,    b->res,   b->y,    b->dy,    b->dx,   b->dres,   b->gamma,
                   b->beta, b->rmean, b->rvar, b->smean, b->sinv, b->dgamma, b->dbeta};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
}

static void forward(Backend *be, const BnShape *s, int rows, Buffers *b) {
    be->bn_forward_train(be, rows, s->c, DTYPE_F16, b->x, s->residual ? b->res : NULL, s->relu, b->gamma,
                         b->beta, b->rmean, b->rvar, 0.1f, 1e-5f, b->smean, b->sinv, b->y);
}

static void backward(Backend *be, const BnShape *s, int rows, Buffers *b) {
    be->bn_backward(be, rows, s->c, DTYPE_F16, b->x, s->relu ? b->y : NULL, b->dy, s->relu, b->gamma,
                    b->smean, b->sinv, b->dx, 0, b->dgamma, b->dbeta, 0, s->residual ? b->dres : NULL);
}

// What time_phase times of one layer shape: phase 0 a forward, phase 1 a backward (after a forward).
typedef struct ShapeRun {
    Backend *be;
    const BnShape *s;
    int rows;
    Buffers *b;
} ShapeRun;

static void shape_run(void *ctx, int phase) {
    ShapeRun *r = ctx;
    if (phase == 0)
        forward(r->be, r->s, r->rows, r->b);
    else
        backward(r->be, r->s, r->rows, r->b);
}

static void shape_forward(void *ctx, int phase) {
    (void)phase;
    shape_run(ctx, 0);
}

// Median ms of forward (phase 0) or backward (phase 1) on the path chosen; a backward's forward runs before
// it, untimed (its mask and saved statistics come from there).
static float time_phase(Backend *be, BenchCall run, BenchCall forward, void *ctx, int phase) {
    return bench_time(be, WARMUP_RUNS, TIMED_RUNS, phase == 1 ? forward : NULL, run, ctx, phase).median;
}

static float *download_halves(Backend *be, const void *src, size_t n) {
    _Float16 *h = malloc(n * 2);
    be->to_host(be, h, src, n * 2);
    float *f = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = (float)h[i];
    free(h);
    return f;
}

// ||a - b|| / ||b||
static double rel_error(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// The three modes on the same inputs: y, dx and d_residual must agree with cuDNN's. Returns the worst
// relative error.
static double modes_agree(Backend *be, const BnShape *s, int rows, Buffers *b) {
    const size_t n = (size_t)rows * s->c;
    float *out[MODES][3];
    for (int m = 0; m < MODES; m++) {
        cuda_backend_set_batch_norm(be, MODE[m]);
        fill_random(be, b->rmean, s->c, 0, 6, -0.1f, 0.1f);
        fill_random(be, b->rvar, s->c, 0, 7, 0.5f, 1.5f);
        forward(be, s, rows, b);
        backward(be, s, rows, b);
        out[m][0] = download_halves(be, b->y, n);
        out[m][1] = download_halves(be, b->dx, n);
        out[m][2] = s->residual ? download_halves(be, b->dres, n) : NULL;
    }
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        for (int m = 1; m < MODES && out[0][k]; m++) {
            const double e = rel_error(out[m][k], out[0][k], n);
            if (!(e <= worst)) worst = e;  // NaN stays
            free(out[m][k]);
        }
        free(out[0][k]);
    }
    return worst;
}

// ---- a downsampling block's end: bn3 (+ the shortcut + ReLU) and the shortcut's bn ----------------------

typedef struct BlockEnd {
    const char *name;
    int hw, c;
} BlockEnd;

static const BlockEnd ENDS[] = {{"layer1.0", 56 * 56, 256},
                                {"layer2.0", 28 * 28, 512},
                                {"layer3.0", 14 * 14, 1024},
                                {"layer4.0", 7 * 7, 2048}};
#define END_COUNT ((int)(sizeof ENDS / sizeof ENDS[0]))

// fused: bn_add_bn under auto (our own fused kernels); else the two calls each way on auto's pairs, bn_b's
// output in a's res and the residual's gradient in a's dres (the model's calls before bn_add_bn).
typedef struct EndRun {
    Backend *be;
    int rows, c, fused;
    Buffers *a, *b;
} EndRun;

static BnArgs end_args(const Buffers *b) {
    return (BnArgs){b->x, b->gamma, b->beta, b->rmean, b->rvar, b->smean, b->sinv, b->dgamma, b->dbeta};
}

static void end_run(void *ctx, int phase) {
    EndRun *r = ctx;
    Backend *be = r->be;
    Buffers *a = r->a, *b = r->b;
    const BnArgs aa = end_args(a), ba = end_args(b);
    if (phase == 0 && r->fused) {
        be->bn_add_bn_forward_train(be, r->rows, r->c, DTYPE_F16, &aa, &ba, 1, 0.1f, 1e-5f, a->res, a->y);
    } else if (phase == 0) {
        be->bn_forward_train(be, r->rows, r->c, DTYPE_F16, b->x, NULL, 0, b->gamma, b->beta, b->rmean,
                             b->rvar, 0.1f, 1e-5f, b->smean, b->sinv, a->res);
        be->bn_forward_train(be, r->rows, r->c, DTYPE_F16, a->x, a->res, 1, a->gamma, a->beta, a->rmean,
                             a->rvar, 0.1f, 1e-5f, a->smean, a->sinv, a->y);
    } else if (r->fused) {
        be->bn_add_bn_backward(be, r->rows, r->c, DTYPE_F16, &aa, &ba, a->y, a->dy, 1, a->dx, b->dx, 0,
                               a->dres);
    } else {
        be->bn_backward(be, r->rows, r->c, DTYPE_F16, a->x, a->y, a->dy, 1, a->gamma, a->smean, a->sinv,
                        a->dx, 0, a->dgamma, a->dbeta, 0, a->dres);
        be->bn_backward(be, r->rows, r->c, DTYPE_F16, b->x, NULL, a->dres, 0, b->gamma, b->smean, b->sinv,
                        b->dx, 0, b->dgamma, b->dbeta, 0, NULL);
    }
}

static void end_forward(void *ctx, int phase) {
    (void)phase;
    end_run(ctx, 0);
}

// Times both ways per block end and checks that they agree on y, dx_a and dx_b; returns 1 on a disagreement.
static int time_block_ends(Backend *gpu, int n) {
    printf(
        "\ndownsampling block ends (bn3 + residual + ReLU with the shortcut's bn), ms: two calls each way on "
        "auto's pairs against bn_add_bn's fused kernels\n");
    printf("%-10s %9s %5s | %-9s %-9s | %-9s %-9s | %s\n", "block", "rows", "c", "fwd two", "fwd fused",
           "bwd two", "bwd fused", "fused vs two");
    double step[2] = {0, 0};
    int failed = 0;
    for (int i = 0; i < END_COUNT; i++) {
        const BlockEnd *e = &ENDS[i];
        const int rows = n * e->hw;
        const size_t elems = (size_t)rows * e->c;
        cuda_backend_set_batch_norm(gpu, CUDA_BN_AUTO);
        gpu->bn_prepare(gpu, rows, e->c, DTYPE_F16, 1, 1);
        gpu->bn_prepare(gpu, rows, e->c, DTYPE_F16, 0, 0);
        Buffers a = buffers_make(gpu, elems, e->c), b = buffers_make(gpu, elems, e->c);
        fill_random(gpu, b.x, elems, 1, 11, -1, 2);
        float ms[2][2], *out[2][3];
        for (int fused = 0; fused <= 1; fused++) {
            EndRun run = {gpu, rows, e->c, fused, &a, &b};
            fill_random(gpu, a.rmean, e->c, 0, 6, -0.1f, 0.1f);
            end_run(&run, 0), end_run(&run, 1);
            out[fused][0] = download_halves(gpu, a.y, elems);
            out[fused][1] = download_halves(gpu, a.dx, elems);
            out[fused][2] = download_halves(gpu, b.dx, elems);
            for (int phase = 0; phase <= 1; phase++)
                ms[fused][phase] = time_phase(gpu, end_run, end_forward, &run, phase);
            step[fused] += ms[fused][0] + ms[fused][1];
        }
        double worst = 0;
        for (int k = 0; k < 3; k++) {
            const double err = rel_error(out[1][k], out[0][k], elems);
            if (!(err <= worst)) worst = err;
            free(out[0][k]), free(out[1][k]);
        }
        if (!(worst < 1e-2)) failed = 1;
        printf("%-10s %9d %5d | %9.4f %9.4f | %9.4f %9.4f | %.2fx, differ by %.1e%s\n", e->name, rows, e->c,
               ms[0][0], ms[1][0], ms[0][1], ms[1][1], (ms[1][0] + ms[1][1]) / (ms[0][0] + ms[0][1]), worst,
               worst < 1e-2 ? "" : " FAIL");
        buffers_free(gpu, &a), buffers_free(gpu, &b);
    }
    printf("one step's block ends: two calls %.2f ms, fused %.2f ms\n", step[0], step[1]);
    return failed;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 256, ends_only = argc > 2 && !strcmp(argv[2], "ends");
    setvbuf(stdout, NULL, _IOLBF,
            0);  // a row as soon as it is timed: a run cut short by a timeout keeps its rows
    char why[256] = "";
    Backend *gpu = cuda_backend_create(0, NULL, why, sizeof why);
    if (!gpu) {
        fprintf(stderr, "bench_batchnorm: no CUDA backend: %s\n", why);
        return 1;
    }
    printf("batch norm, fp16 NHWC, batch %d: median of %d calls, ms (GB/s of the least bytes a call moves)\n",
           n, TIMED_RUNS);
    printf("%-20s %9s %5s %4s %5s | %-17s %-17s %-17s | %-17s %-17s %-17s | %s\n", "layer", "rows", "c",
           "add", "count", "cuDNN forward", "own forward", "auto forward", "cuDNN backward", "own backward",
           "auto backward", "own, auto vs cuDNN");
    double step[MODES][2] = {{0}};  // [mode][phase] ms per training step
    int failed = 0;
    for (int i = 0; i < (ends_only ? 0 : SHAPE_COUNT); i++) {
        const BnShape *s = &SHAPES[i];
        const int rows = n * s->hw;
        const size_t elems = (size_t)rows * s->c;
        cuda_backend_set_batch_norm(gpu, CUDA_BN_AUTO);
        gpu->bn_prepare(gpu, rows, s->c, DTYPE_F16, s->residual, s->relu);  // auto's pair for this shape
        Buffers b = buffers_make(gpu, elems, s->c);
        const double agree = modes_agree(gpu, s, rows, &b);
        if (!(agree < 1e-2)) failed = 1;
        const double bytes[2] = {2.0 * elems * (2 + s->residual), 2.0 * elems * (3 + s->residual)};
        float ms[MODES][2];
        for (int m = 0; m < MODES; m++) {
            cuda_backend_set_batch_norm(gpu, MODE[m]);
            for (int phase = 0; phase <= 1; phase++) {
                ShapeRun run = {gpu, s, rows, &b};
                ms[m][phase] = time_phase(gpu, shape_run, shape_forward, &run, phase);
                step[m][phase] += s->count * ms[m][phase];
            }
        }
        printf("%-20s %9d %5d %4s %5d |", s->name, rows, s->c, s->residual ? "yes" : "no", s->count);
        for (int phase = 0; phase <= 1; phase++) {
            for (int m = 0; m < MODES; m++)
                printf(" %7.4f (%5.0f)  ", ms[m][phase], bytes[phase] / (ms[m][phase] * 1e-3) / 1e9);
            printf("|");
        }
        printf(" %.2fx, %.2fx, modes differ by %.1e%s\n", (ms[1][0] + ms[1][1]) / (ms[0][0] + ms[0][1]),
               (ms[2][0] + ms[2][1]) / (ms[0][0] + ms[0][1]), agree, agree < 1e-2 ? "" : " FAIL");
        buffers_free(gpu, &b);
    }
    printf("one step's batch norm (every layer, weighted by count):");
    for (int m = 0; m < MODES; m++)
        printf("%s %s forward %.2f + backward %.2f = %.2f ms", m ? ";" : "", MODE_NAME[m], step[m][0],
               step[m][1], step[m][0] + step[m][1]);
    printf("\n");
    failed |= time_block_ends(gpu, n);
    gpu->destroy(gpu);
    if (failed) fprintf(stderr, "bench_batchnorm: the modes disagree (FAIL above)\n");
    return failed;
}
