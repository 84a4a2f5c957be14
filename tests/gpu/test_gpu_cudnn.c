// test_gpu_cudnn.c - the CUDA backend's convolutions and batch norms (kernels/cuda/cudnn_conv.cu,
// kernels/cuda/cudnn_batchnorm.cu) against the CPU reference backend, through the Backend interface.
//
// Every case draws fresh random inputs (the seed comes from the clock and is printed, so a failure can be
// replayed with AMPTRAIN_TEST_SEED=<seed>), rounds them to the case's dtype once on the host, and gives
// the same bits to both backends. GPU outputs are poisoned with NaN before each call, so an output the
// GPU never writes fails; NaN or inf anywhere fails (tu_rel_error returns inf). Tolerance on the
// norm-wise relative error ||gpu - cpu|| / ||cpu||: 1e-4 in fp32 (the CUDA backends here are made with
// TF32 off), 1e-2 in fp16 (one rounding of the output to fp16 is ~5e-4 relative), 2e-2 in bf16 (one
// rounding is ~4e-3, and the backends round intermediate results at different points); a wrong formula, a
// missing accumulation or a wrong layout is off by O(1).
//
// With no usable GPU the whole suite is skipped: it prints "test_gpu_cudnn: skipped: <why>" and runs no
// checks at all.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backend.h"
#include "kernels/cpu/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_diag.h"
#include "tests/test_util.h"

static Backend *cpu;
static Backend *gpu_heuristic;  // cudnn.benchmark off: cuDNN's heuristics pick the algorithms
static Backend *gpu_benchmark;  // cudnn.benchmark on: a timed search per shape
static uint64_t base_seed;

#define TOL_F32 1e-4
#define TOL_F16 1e-2
#define TOL_BF16 2e-2

static double tol_for(DType dt) { return dt == DTYPE_F16 ? TOL_F16 : dt == DTYPE_BF16 ? TOL_BF16 : TOL_F32; }

// ---- buffers on a backend --------------------------------------------------------------------------
// Host staging in the buffer's dtype (kernels/cpu/half.h: the CUDA conversions' rounding).

// n uniform floats in [lo, hi), rounded to dt so both backends and the host agree on every bit.
static float *random_values(size_t n, DType dt, uint64_t seed, float lo, float hi) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    tu_fill_uniform(x, n, seed, lo, hi);
    for (size_t i = 0; i < n; i++) {
        float stored;  // room for an element of any dtype
        dtype_store(&stored, dt, 0, x[i]);
        x[i] = dtype_load(&stored, dt, 0);
    }
    return x;
}

static void *upload(Backend *be, DType dt, const float *src, size_t n) {
    const size_t bytes = n * dtype_size(dt);
    void *host = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < n; i++) dtype_store(host, dt, i, src[i]);
    void *p = be->alloc(be, bytes ? bytes : 1);
    be->to_device(be, p, host, bytes);
    free(host);
    return p;
}

static float *download(Backend *be, DType dt, const void *p, size_t n) {
    const size_t bytes = n * dtype_size(dt);
    void *host = malloc(bytes ? bytes : 1);
    be->to_host(be, host, p, bytes);
    float *out = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) out[i] = dtype_load(host, dt, i);
    free(host);
    return out;
}

// Overwrites a backend buffer with NaN.
static void poison(Backend *be, DType dt, void *p, size_t n) {
    const size_t bytes = n * dtype_size(dt);
    void *host = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < n; i++) dtype_store(host, dt, i, NAN);
    be->to_device(be, p, host, bytes);
    free(host);
}

// Reads both buffers (of dtype dt) back and asserts their relative error is below tol.
static void expect_close(const char *what, const char *label, DType dt, double tol, const void *gpu_buf,
                         const void *cpu_buf, size_t n, Backend *gpu) {
    float *g = download(gpu, dt, gpu_buf, n);
    float *c = download(cpu, dt, cpu_buf, n);
    const double err = tu_rel_error(g, c, n);
    free(g);
    free(c);
    ck_assert_msg(err < tol, "%s %s (%s, seed %llu): relative error %.3g, tolerance %.0e", label, what,
                  dtype_name(dt), (unsigned long long)base_seed, err, tol);
}

// A buffer of dtype dt, held to that dtype's tolerance.
static void expect_match(const char *what, const char *label, DType dt, const void *gpu_buf,
                         const void *cpu_buf, size_t n, Backend *gpu) {
    expect_close(what, label, dt, tol_for(dt), gpu_buf, cpu_buf, n, gpu);
}

// The same host values on both backends.
typedef struct Twin {
    void *cpu, *gpu;
} Twin;

static Twin twin_upload(Backend *gpu, DType dt, const float *src, size_t n) {
    Twin t = {upload(cpu, dt, src, n), upload(gpu, dt, src, n)};
    return t;
}

static Twin twin_random(Backend *gpu, DType dt, size_t n, uint64_t seed, float lo, float hi) {
    float *v = random_values(n, dt, seed, lo, hi);
    Twin t = twin_upload(gpu, dt, v, n);
    free(v);
    return t;
}

// The GPU copy's bytes into the CPU copy.
static void gpu_to_cpu(Backend *gpu, Twin t, size_t bytes) {
    void *host = malloc(bytes ? bytes : 1);
    gpu->to_host(gpu, host, t.gpu, bytes);
    cpu->to_device(cpu, t.cpu, host, bytes);
    free(host);
}

static void twin_free(Backend *gpu, Twin t) {
    cpu->free(cpu, t.cpu);
    gpu->free(gpu, t.gpu);
}

// ---- convolution ------------------------------------------------------------------------------------

typedef struct ConvCase {
    const char *label;
    int n, h, w, c_in, c_out, k, stride, pad, groups;
} ConvCase;

// Shapes of ResNeXt-50 32x4d at small spatial size: the stem, the 1x1 reductions and expansions, the
// grouped 3x3 (stride 1 and 2), the strided 1x1 shortcut, plus a plain strided 3x3.
static const ConvCase conv_cases[] = {
    {"stem 7x7/2 pad 3", 2, 16, 16, 3, 64, 7, 2, 3, 1}, {"1x1 reduce", 2, 8, 8, 64, 32, 1, 1, 0, 1},
    {"1x1 expand", 2, 8, 8, 32, 64, 1, 1, 0, 1},        {"1x1/2 shortcut", 2, 9, 9, 32, 64, 1, 2, 0, 1},
    {"3x3 groups 32", 2, 8, 8, 64, 64, 3, 1, 1, 32},    {"3x3/2 groups 32", 2, 9, 9, 64, 128, 3, 2, 1, 32},
    {"3x3/2 groups 1", 2, 9, 9, 16, 32, 3, 2, 1, 1},
};
#define CONV_CASES (int)(sizeof conv_cases / sizeof conv_cases[0])

static ConvShape conv_case_shape(const ConvCase *cc) {
    ConvShape s = {cc->n, cc->h,      cc->w,   cc->c_in,   cc->c_out, cc->k,
                   cc->k, cc->stride, cc->pad, cc->groups, 0,         0};
    conv_shape_finish(&s);
    return s;
}

static void conv_case_check(Backend *gpu, const ConvCase *cc, DType dt, uint64_t seed) {
    ConvShape s = conv_case_shape(cc);
    const size_t nx = (size_t)s.n * s.h * s.w * s.c_in;
    const size_t ny = (size_t)s.n * s.out_h * s.out_w * s.c_out;
    const size_t nw = (size_t)s.c_out * s.kh * s.kw * (s.c_in / s.groups);

    Twin x = twin_random(gpu, dt, nx, seed + 1, -1.0f, 1.0f);
    Twin w = twin_random(gpu, dt, nw, seed + 2, -1.0f, 1.0f);
    Twin dy = twin_random(gpu, dt, ny, seed + 3, -1.0f, 1.0f);
    Twin y = twin_random(gpu, dt, ny, seed + 4, 0.0f, 1.0f);

    cpu->conv_forward(cpu, &s, dt, x.cpu, w.cpu, y.cpu);
    poison(gpu, dt, y.gpu, ny);
    gpu->conv_forward(gpu, &s, dt, x.gpu, w.gpu, y.gpu);
    expect_match("forward", cc->label, dt, y.gpu, y.cpu, ny, gpu);

    for (int accumulate = 0; accumulate <= 1; accumulate++) {
        const char *what_dx = accumulate ? "backward data, accumulate" : "backward data";
        const char *what_dw = accumulate ? "backward filter, accumulate" : "backward filter";
        Twin dx = twin_random(gpu, dt, nx, seed + 5 + accumulate, -1.0f, 1.0f);
        Twin dw = twin_random(gpu, dt, nw, seed + 7 + accumulate, -1.0f, 1.0f);
        if (!accumulate) {
            poison(gpu, dt, dx.gpu, nx);
            poison(gpu, dt, dw.gpu, nw);
        }
        cpu->conv_backward_data(cpu, &s, dt, dy.cpu, w.cpu, dx.cpu, accumulate);
        gpu->conv_backward_data(gpu, &s, dt, dy.gpu, w.gpu, dx.gpu, accumulate);
        expect_match(what_dx, cc->label, dt, dx.gpu, dx.cpu, nx, gpu);
        cpu->conv_backward_filter(cpu, &s, dt, x.cpu, dy.cpu, dw.cpu, accumulate);
        gpu->conv_backward_filter(gpu, &s, dt, x.gpu, dy.gpu, dw.gpu, accumulate);
        expect_match(what_dw, cc->label, dt, dw.gpu, dw.cpu, nw, gpu);
        twin_free(gpu, dx);
        twin_free(gpu, dw);
    }
    twin_free(gpu, x);
    twin_free(gpu, w);
    twin_free(gpu, dy);
    twin_free(gpu, y);
}

static void conv_all_cases_check(Backend *gpu, uint64_t salt) {
    for (int i = 0; i < CONV_CASES; i++) {
        conv_case_check(gpu, &conv_cases[i], DTYPE_F32, base_seed + salt + 100 * (uint64_t)i);
        conv_case_check(gpu, &conv_cases[i], DTYPE_F16, base_seed + salt + 100 * (uint64_t)i + 50);
        conv_case_check(gpu, &conv_cases[i], DTYPE_BF16, base_seed + salt + 100 * (uint64_t)i + 75);
    }
}

// Without the timed search, exact fp32 runs the 1x1 stride-1 ungrouped convolutions as cuBLAS GEMMs in all
// three directions (so the matches covered that route, accumulation included) and everything else, fp16 and
// bf16 included, on cuDNN.
START_TEST(test_conv_matches_cpu_with_heuristic_algorithms) {
    conv_all_cases_check(gpu_heuristic, 0);
    for (int i = 0; i < CONV_CASES; i++) {
        const ConvCase *cc = &conv_cases[i];
        const ConvShape s = conv_case_shape(cc);
        const int one_by_one = cc->k == 1 && cc->stride == 1 && cc->pad == 0 && cc->groups == 1;
        for (int d = 0; d < 3; d++) {
            ck_assert_msg(cuda_backend_conv_route_is_gemm(gpu_heuristic, &s, DTYPE_F32, d) == one_by_one,
                          "%s fp32 direction %d: GEMM route %d, expected %d", cc->label, d,
                          cuda_backend_conv_route_is_gemm(gpu_heuristic, &s, DTYPE_F32, d), one_by_one);
            const DType halves[2] = {DTYPE_F16, DTYPE_BF16};
            for (int h = 0; h < 2; h++)
                ck_assert_msg(cuda_backend_conv_route_is_gemm(gpu_heuristic, &s, halves[h], d) == 0,
                              "%s %s direction %d: GEMM route %d, expected cuDNN", cc->label,
                              dtype_name(halves[h]), d,
                              cuda_backend_conv_route_is_gemm(gpu_heuristic, &s, halves[h], d));
        }
    }
}
END_TEST

// cudnn.benchmark picks other algorithms by timing; the numbers must not change beyond tolerance, and
// the timed search must not disturb an accumulating dx/dw (the second round of each case accumulates).
START_TEST(test_conv_matches_cpu_with_benchmark_algorithms) { conv_all_cases_check(gpu_benchmark, 10000); }
END_TEST

// ---- batch norm ---------------------------------------------------------------------------------------

typedef struct BnCase {
    const char *label;
    int rows, c;
    DType dt;
    int residual, relu;
} BnCase;

// rows > 512 spans several reduction chunks; c = 40 leaves a partial channel tile; c = 6 is not a
// multiple of 4 (cuDNN's fused ops decline it); fp32 with ReLU and residual without ReLU take our own
// kernels, the fp16 fused cases take cuDNN's; bf16 takes our own everywhere, 8-element packs (c = 64, the
// ReLU bits of add+ReLU) and one element at a time (c = 6).
static const BnCase bn_cases[] = {
    {"bn", 1200, 64, DTYPE_F16, 0, 0},
    {"bn+relu", 1200, 64, DTYPE_F16, 0, 1},
    {"bn+add+relu", 1200, 64, DTYPE_F16, 1, 1},
    {"bn+add", 1200, 64, DTYPE_F16, 1, 0},
    {"bn+add+relu c=40", 700, 40, DTYPE_F16, 1, 1},
    {"bn+relu c=6", 98, 6, DTYPE_F16, 0, 1},
    {"bn", 1200, 64, DTYPE_F32, 0, 0},
    {"bn+relu", 1200, 64, DTYPE_F32, 0, 1},
    {"bn+add+relu", 1200, 64, DTYPE_F32, 1, 1},
    {"bn+add", 700, 40, DTYPE_F32, 1, 0},
    {"bn", 1200, 64, DTYPE_BF16, 0, 0},
    {"bn+relu", 1200, 64, DTYPE_BF16, 0, 1},
    {"bn+add+relu", 1200, 64, DTYPE_BF16, 1, 1},
    {"bn+add+relu c=40", 700, 40, DTYPE_BF16, 1, 1},
    {"bn+relu c=6", 98, 6, DTYPE_BF16, 0, 1},
};
#define BN_CASES (int)(sizeof bn_cases / sizeof bn_cases[0])

// One training step of a layer: forward (y, saved and running statistics), then backward twice, first
// overwriting (dx, dgamma, dbeta, d_residual poisoned), then accumulating into random values. Both backwards
// read the GPU forward's y and saved statistics (the CPU's copies are replaced): the ReLU mask the GPU kept
// from its forward (cuDNN's reserve, our own bits, or recomputed from x) then covers the elements the CPU's
// y > 0 does, where each side's own y would differ wherever a pre-activation lies within a rounding of zero.
static void bn_step_check(const BnCase *bc, uint64_t seed, Twin gamma, Twin beta, Twin run_mean, Twin run_var,
                          Twin save_mean, Twin save_invstd) {
    Backend *gpu = gpu_heuristic;
    const DType dt = bc->dt, f32 = DTYPE_F32;
    const int rows = bc->rows, c = bc->c, relu = bc->relu;
    const size_t n = (size_t)rows * c, nc = (size_t)c;
    const float momentum = 0.1f, eps = 1e-5f;

    // x with an offset so the mean is far from 0 (the variance must not cancel).
    Twin x = twin_random(gpu, dt, n, seed + 1, 1.0f, 4.0f);
    Twin res = twin_random(gpu, dt, n, seed + 2, -1.0f, 1.0f);
    Twin y = twin_random(gpu, dt, n, seed + 3, 0.0f, 1.0f);
    const void *res_cpu = bc->residual ? res.cpu : NULL, *res_gpu = bc->residual ? res.gpu : NULL;

    cpu->bn_forward_train(cpu, rows, c, dt, x.cpu, res_cpu, relu, gamma.cpu, beta.cpu, run_mean.cpu,
                          run_var.cpu, momentum, eps, save_mean.cpu, save_invstd.cpu, y.cpu);
    poison(gpu, dt, y.gpu, n);
    poison(gpu, f32, save_mean.gpu, nc);
    poison(gpu, f32, save_invstd.gpu, nc);
    gpu->bn_forward_train(gpu, rows, c, dt, x.gpu, res_gpu, relu, gamma.gpu, beta.gpu, run_mean.gpu,
                          run_var.gpu, momentum, eps, save_mean.gpu, save_invstd.gpu, y.gpu);
    expect_match("train y", bc->label, dt, y.gpu, y.cpu, n, gpu);
    // Statistics are fp32 computed from the same inputs in either dtype: held to the fp32 tolerance.
    expect_close("save_mean", bc->label, f32, TOL_F32, save_mean.gpu, save_mean.cpu, nc, gpu);
    expect_close("save_invstd", bc->label, f32, TOL_F32, save_invstd.gpu, save_invstd.cpu, nc, gpu);
    expect_close("running_mean", bc->label, f32, TOL_F32, run_mean.gpu, run_mean.cpu, nc, gpu);
    expect_close("running_var (unbiased)", bc->label, f32, TOL_F32, run_var.gpu, run_var.cpu, nc, gpu);

    gpu_to_cpu(gpu, y, n * dtype_size(dt));
    gpu_to_cpu(gpu, save_mean, nc * sizeof(float));
    gpu_to_cpu(gpu, save_invstd, nc * sizeof(float));
    for (int accumulate = 0; accumulate <= 1; accumulate++) {
        Twin dy = twin_random(gpu, dt, n, seed + 10 + accumulate, -1.0f, 1.0f);
        Twin dx = twin_random(gpu, dt, n, seed + 12 + accumulate, -1.0f, 1.0f);
        Twin dgamma = twin_random(gpu, dt, nc, seed + 14 + accumulate, -1.0f, 1.0f);
        Twin dbeta = twin_random(gpu, dt, nc, seed + 16 + accumulate, -1.0f, 1.0f);
        Twin dres = twin_random(gpu, dt, n, seed + 18 + accumulate, -1.0f, 1.0f);
        if (!accumulate) {
            poison(gpu, dt, dx.gpu, n);
            poison(gpu, dt, dgamma.gpu, nc);
            poison(gpu, dt, dbeta.gpu, nc);
        }
        poison(gpu, dt, dres.gpu, n);  // always overwritten
        cpu->bn_backward(cpu, rows, c, dt, x.cpu, y.cpu, dy.cpu, relu, gamma.cpu, save_mean.cpu,
                         save_invstd.cpu, dx.cpu, accumulate, dgamma.cpu, dbeta.cpu, accumulate,
                         bc->residual ? dres.cpu : NULL);
        gpu->bn_backward(gpu, rows, c, dt, x.gpu, y.gpu, dy.gpu, relu, gamma.gpu, save_mean.gpu,
                         save_invstd.gpu, dx.gpu, accumulate, dgamma.gpu, dbeta.gpu, accumulate,
                         bc->residual ? dres.gpu : NULL);
        expect_match(accumulate ? "dx, accumulate" : "dx", bc->label, dt, dx.gpu, dx.cpu, n, gpu);
        expect_match(accumulate ? "dgamma, accumulate" : "dgamma", bc->label, dt, dgamma.gpu, dgamma.cpu, nc,
                     gpu);
        expect_match(accumulate ? "dbeta, accumulate" : "dbeta", bc->label, dt, dbeta.gpu, dbeta.cpu, nc,
                     gpu);
        if (bc->residual) expect_match("d_residual", bc->label, dt, dres.gpu, dres.cpu, n, gpu);
        twin_free(gpu, dy);
        twin_free(gpu, dx);
        twin_free(gpu, dgamma);
        twin_free(gpu, dbeta);
        twin_free(gpu, dres);
    }

    // Inference with the running statistics the CPU now holds, given to both.
    float *rm = download(cpu, f32, run_mean.cpu, nc), *rv = download(cpu, f32, run_var.cpu, nc);
    Twin eval_mean = twin_upload(gpu, f32, rm, nc), eval_var = twin_upload(gpu, f32, rv, nc);
    cpu->bn_forward_eval(cpu, rows, c, dt, x.cpu, res_cpu, relu, gamma.cpu, beta.cpu, eval_mean.cpu,
                         eval_var.cpu, eps, y.cpu);
    poison(gpu, dt, y.gpu, n);
    gpu->bn_forward_eval(gpu, rows, c, dt, x.gpu, res_gpu, relu, gamma.gpu, beta.gpu, eval_mean.gpu,
                         eval_var.gpu, eps, y.gpu);
    expect_match("eval y", bc->label, dt, y.gpu, y.cpu, n, gpu);
    free(rm);
    free(rv);
    twin_free(gpu, eval_mean);
    twin_free(gpu, eval_var);
    twin_free(gpu, x);
    twin_free(gpu, res);
    twin_free(gpu, y);
}

// `steps` training steps of one layer: the parameters, running statistics and saved-statistics buffers
// persist across steps as in a model (so from the second step on, the layer's per-layer cuDNN state is
// found again and reused), and the running statistics keep following the CPU's.
static void bn_case_check(const BnCase *bc, uint64_t seed, int steps) {
    Backend *gpu = gpu_heuristic;
    const DType f32 = DTYPE_F32;
    const size_t nc = (size_t)bc->c;
    Twin gamma = twin_random(gpu, f32, nc, seed + 90, 0.5f, 1.5f);
    Twin beta = twin_random(gpu, f32, nc, seed + 91, -0.5f, 0.5f);
    Twin run_mean = twin_random(gpu, f32, nc, seed + 92, -0.2f, 0.2f);
    Twin run_var = twin_random(gpu, f32, nc, seed + 93, 0.5f, 1.5f);
    Twin save_mean = twin_random(gpu, f32, nc, seed + 94, 0.0f, 1.0f);
    Twin save_invstd = twin_random(gpu, f32, nc, seed + 95, 0.0f, 1.0f);
    for (int step = 0; step < steps; step++)
        bn_step_check(bc, seed + 1000 * (uint64_t)step, gamma, beta, run_mean, run_var, save_mean,
                      save_invstd);
    twin_free(gpu, gamma);
    twin_free(gpu, beta);
    twin_free(gpu, run_mean);
    twin_free(gpu, run_var);
    twin_free(gpu, save_mean);
    twin_free(gpu, save_invstd);
}

START_TEST(test_bn_matches_cpu_over_three_steps) {
    for (int i = 0; i < BN_CASES; i++) bn_case_check(&bn_cases[i], base_seed + 100000 * (uint64_t)(i + 1), 3);
}
END_TEST

// ---- main ------------------------------------------------------------------------------------------

static uint64_t seed_from_env_or_clock(void) {
    const char *s = getenv("AMPTRAIN_TEST_SEED");
    if (s && *s) return strtoull(s, NULL, 10);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000007ull + (uint64_t)ts.tv_nsec;
}

int main(void) {
    char why[256] = "";
    gpu_heuristic = cuda_backend_create(0, NULL, why, sizeof why);
    if (!gpu_heuristic) {
        return tu_skip_gpu("test_gpu_cudnn", why);
    }
    CudaOptions benchmark = cuda_options_default();
    benchmark.cudnn_benchmark = 1;
    gpu_benchmark = cuda_backend_create(0, &benchmark, why, sizeof why);
    if (!gpu_benchmark) {
        fprintf(stderr, "test_gpu_cudnn: a second CUDA backend (cudnn.benchmark on) failed: %s\n", why);
        return EXIT_FAILURE;
    }
    cpu = cpu_backend_create();
    base_seed = seed_from_env_or_clock();
    printf("test_gpu_cudnn: seed %llu (replay with AMPTRAIN_TEST_SEED)\n", (unsigned long long)base_seed);

    Suite *s = suite_create("gpu_cudnn");
    TCase *tc = tcase_create("gpu_cudnn");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_conv_matches_cpu_with_heuristic_algorithms);
    tcase_add_test(tc, test_conv_matches_cpu_with_benchmark_algorithms);
    tcase_add_test(tc, test_bn_matches_cpu_over_three_steps);
    suite_add_tcase(s, tc);
    const int rc = tu_run_suite(s, 0);  // no fork: a CUDA context does not survive one

    cpu->destroy(cpu);
    gpu_benchmark->destroy(gpu_benchmark);
    gpu_heuristic->destroy(gpu_heuristic);
    return rc;
}
