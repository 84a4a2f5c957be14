// bench_batchnorm.c - times training batch norm on every layer shape of ResNeXt-50 32x4d (fp16, NHWC),
// cuDNN's fused kernels against amptrain's own and against the per-shape pair that cudnn.batch_norm auto
// picks (bn_prepare), through backend.h only.
//
//   build/bench_batchnorm [n]      n: the batch (default 256)
//
// Per distinct layer shape (rows = n*h*w, c, residual add, ReLU) and path: the median of 20 timed calls
// (after 3 warm-up calls) of bn_forward_train and of bn_backward (each backward queued behind its forward,
// which the backward's mask needs), in ms and in GB/s of the bytes a call must move at least (forward:
// read x and residual, write y; backward: read x and dy, write dx and d_residual). The last lines weight
// each shape by how often the network has it: the batch-norm time of one training step on each path.
// Before timing, the three modes run the same inputs and must agree with cuDNN's (relative error under 1e-2
// on y, dx and d_residual); exit 1 if not. Correctness against the CPU reference is test_gpu_ops' job.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "kernels/cuda_backend.h"

#define WARMUP_RUNS 3
#define TIMED_RUNS 20

// The modes compared, in table order.
#define MODES 3
static const CudaBnMode MODE[MODES] = {CUDA_BN_CUDNN, CUDA_BN_OWN, CUDA_BN_AUTO};
static const char *MODE_NAME[MODES] = {"cuDNN", "own", "auto"};

typedef struct BnShape {
    const char *name;
    int hw;         // spatial size (h * w) per image
    int c;
    int residual;   // add the shortcut before the ReLU (bn3)
    int relu;
    int count;      // layers of this shape in ResNeXt-50 32x4d
} BnShape;

static const BnShape SHAPES[] = {
    {"stem bn1", 112 * 112, 64, 0, 1, 1},
    {"layer1 bn1/bn2", 56 * 56, 128, 0, 1, 6},
    {"layer1 bn3", 56 * 56, 256, 1, 1, 3},
    {"layer1 downsample", 56 * 56, 256, 0, 0, 1},
    {"layer2.0 bn1", 56 * 56, 256, 0, 1, 1},
    {"layer2 bn1/bn2", 28 * 28, 256, 0, 1, 7},
    {"layer2 bn3", 28 * 28, 512, 1, 1, 4},
    {"layer2 downsample", 28 * 28, 512, 0, 0, 1},
    {"layer3.0 bn1", 28 * 28, 512, 0, 1, 1},
    {"layer3 bn1/bn2", 14 * 14, 512, 0, 1, 11},
    {"layer3 bn3", 14 * 14, 1024, 1, 1, 6},
    {"layer3 downsample", 14 * 14, 1024, 0, 0, 1},
    {"layer4.0 bn1", 14 * 14, 1024, 0, 1, 1},
    {"layer4 bn1/bn2", 7 * 7, 1024, 0, 1, 5},
    {"layer4 bn3", 7 * 7, 2048, 1, 1, 3},
    {"layer4 downsample", 7 * 7, 2048, 0, 0, 1},
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
    void *all[] = {b->x, b->res, b->y, b->dy, b->dx, b->dres, b->gamma, b->beta, b->rmean, b->rvar, b->smean,
                   b->sinv, b->dgamma, b->dbeta};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
}

static void forward(Backend *be, const BnShape *s, int rows, Buffers *b) {
    be->bn_forward_train(be, rows, s->c, DTYPE_F16, b->x, s->residual ? b->res : NULL, s->relu, b->gamma, b->beta,
                         b->rmean, b->rvar, 0.1f, 1e-5f, b->smean, b->sinv, b->y);
}

static void backward(Backend *be, const BnShape *s, int rows, Buffers *b) {
    be->bn_backward(be, rows, s->c, DTYPE_F16, b->x, s->relu ? b->y : NULL, b->dy, s->relu, b->gamma, b->smean,
                    b->sinv, b->dx, 0, b->dgamma, b->dbeta, 0, s->residual ? b->dres : NULL);
}

static int compare_floats(const void *a, const void *b) {
    const float fa = *(const float *)a, fb = *(const float *)b;
    return (fa > fb) - (fa < fb);
}

// Median ms of forward (phase 0) or backward (phase 1) on the path chosen.
static float time_phase(Backend *be, const BnShape *s, int rows, Buffers *b, int phase) {
    float ms[TIMED_RUNS];
    for (int r = 0; r < WARMUP_RUNS + TIMED_RUNS; r++) {
        if (phase == 1) forward(be, s, rows, b);
        be->mark_record(be, 0);
        if (phase == 0)
            forward(be, s, rows, b);
        else
            backward(be, s, rows, b);
        be->mark_record(be, 1);
        const float t = be->mark_elapsed_ms(be, 0, 1);
        if (r >= WARMUP_RUNS) ms[r - WARMUP_RUNS] = t;
    }
    qsort(ms, TIMED_RUNS, sizeof ms[0], compare_floats);
    return ms[TIMED_RUNS / 2];
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

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 256;
    char why[256] = "";
    Backend *gpu = cuda_backend_create(0, 0, 0, 0, why, sizeof why);
    if (!gpu) {
        fprintf(stderr, "bench_batchnorm: no CUDA backend: %s\n", why);
        return 1;
    }
    printf("batch norm, fp16 NHWC, batch %d: median of %d calls, ms (GB/s of the least bytes a call moves)\n", n,
           TIMED_RUNS);
    printf("%-20s %9s %5s %4s %5s | %-17s %-17s %-17s | %-17s %-17s %-17s | %s\n", "layer", "rows", "c", "add",
           "count", "cuDNN forward", "own forward", "auto forward", "cuDNN backward", "own backward", "auto backward",
           "own, auto vs cuDNN");
    double step[MODES][2] = {{0}};  // [mode][phase] ms per training step
    int failed = 0;
    for (int i = 0; i < SHAPE_COUNT; i++) {
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
                ms[m][phase] = time_phase(gpu, s, rows, &b, phase);
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
        printf("%s %s forward %.2f + backward %.2f = %.2f ms", m ? ";" : "", MODE_NAME[m], step[m][0], step[m][1],
               step[m][0] + step[m][1]);
    printf("\n");
    gpu->destroy(gpu);
    if (failed) fprintf(stderr, "bench_batchnorm: the modes disagree (FAIL above)\n");
    return failed;
}
