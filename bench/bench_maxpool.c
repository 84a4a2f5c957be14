// bench_maxpool.c - times the CUDA max-pool backward on the ResNeXt stem's shape and checks it against
// the CPU reference first, through backend.h only.
//
//   build/bench_maxpool [n]      n: the batch of the timed shape (default 256)
//
// 1. Check: x (2,112,112,64) and (2,111,113,64) fp16, 3x3/2 pad 1, inputs multiples of 1/4 with NaNs
//    among them (ties, NaN windows): forward and backward must give the CPU's bits. Exit 1 if not.
// 2. Time: x (n,112,112,64) fp16 -> y (n,56,56,64); each timed backward is queued behind a forward (so the
//    GPU is busy when the first timing mark is recorded) and bracketed by two marks on the compute
//    stream; median of 50 after 5 warm-up runs, in ms and in GB/s of the bytes it must move at least
//    (read x, y, dy; write dx).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_timing.h"
#include "core/backend.h"
#include "kernels/cuda/cuda_backend.h"

#define WARMUP_RUNS 5
#define TIMED_RUNS 50

// n fp16 values (host _Float16): multiples of 1/4 in [-2, 2], and a NaN every nan_every values (0: none).
static _Float16 *random_halves(size_t n, uint64_t seed, size_t nan_every) {
    _Float16 *v = malloc(n * sizeof(_Float16));
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (_Float16)((float)(int)((seed >> 33) % 17 - 8) / 4.0f);
        if (nan_every && i % nan_every == nan_every - 1) v[i] = (_Float16)NAN;
    }
    return v;
}

static void *device_copy_of(Backend *be, const void *host, size_t bytes) {
    void *d = be->alloc(be, bytes);
    be->to_device(be, d, host, bytes);
    return d;
}

// Elements of a and b (fp16) whose bits differ, any two NaNs counting as equal.
static size_t halves_differing(const _Float16 *a, const _Float16 *b, size_t n) {
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        if (!(isnan((float)a[i]) && isnan((float)b[i])) && memcmp(&a[i], &b[i], sizeof(_Float16)) != 0)
            differ++;
    return differ;
}

static PoolShape stem_pool(int n, int h, int w) {
    PoolShape s = {n, h, w, 64, 3, 2, 1, (h - 1) / 2 + 1, (w - 1) / 2 + 1};
    return s;
}

// Forward and backward on both backends from the same inputs; 0 when every bit agrees.
static int check_against_cpu(Backend *gpu, Backend *cpu, PoolShape s) {
    const size_t nx = (size_t)s.n * s.h * s.w * s.c, ny = (size_t)s.n * s.out_h * s.out_w * s.c;
    _Float16 *x = random_halves(nx, 1, 1009), *dy = random_halves(ny, 2, 0);
    _Float16 *y_cpu = malloc(ny * 2), *y_gpu = malloc(ny * 2), *dx_cpu = malloc(nx * 2),
             *dx_gpu = malloc(nx * 2);
    void *gx = device_copy_of(gpu, x, nx * 2), *gdy = device_copy_of(gpu, dy, ny * 2);
    void *gy = gpu->alloc(gpu, ny * 2), *gdx = gpu->alloc(gpu, nx * 2);

    cpu->maxpool_forward(cpu, &s, DTYPE_F16, x, y_cpu);
    gpu->maxpool_forward(gpu, &s, DTYPE_F16, gx, gy);
    gpu->to_host(gpu, y_gpu, gy, ny * 2);
    const size_t y_differ = halves_differing(y_gpu, y_cpu, ny);
    gpu->to_device(gpu, gy, y_cpu, ny * 2);  // backward from the same y on both
    cpu->maxpool_backward(cpu, &s, DTYPE_F16, x, y_cpu, dy, dx_cpu);
    gpu->maxpool_backward(gpu, &s, DTYPE_F16, gx, gy, gdy, gdx);
    gpu->to_host(gpu, dx_gpu, gdx, nx * 2);
    const size_t dx_differ = halves_differing(dx_gpu, dx_cpu, nx);
    printf("check %dx%dx%dx%d fp16: forward %zu, backward %zu of %zu elements differ from the CPU\n", s.n,
           s.h, s.w, s.c, y_differ, dx_differ, nx);

    gpu->free(gpu, gx), gpu->free(gpu, gdy), gpu->free(gpu, gy), gpu->free(gpu, gdx);
    free(x), free(dy), free(y_cpu), free(y_gpu), free(dx_cpu), free(dx_gpu);
    return y_differ != 0 || dx_differ != 0;
}

typedef struct PoolRun {
    Backend *gpu;
    const PoolShape *s;
    void *x, *y, *dy, *dx;
} PoolRun;

// pass 0: the forward (before each timed backward, untimed); pass 1: the backward.
static void pool_call(void *ctx, int pass) {
    const PoolRun *r = ctx;
    if (pass == 0)
        r->gpu->maxpool_forward(r->gpu, r->s, DTYPE_F16, r->x, r->y);
    else
        r->gpu->maxpool_backward(r->gpu, r->s, DTYPE_F16, r->x, r->y, r->dy, r->dx);
}

static void pool_forward(void *ctx, int pass) {
    (void)pass;
    pool_call(ctx, 0);
}

static void time_backward(Backend *gpu, PoolShape s) {
    const size_t nx = (size_t)s.n * s.h * s.w * s.c, ny = (size_t)s.n * s.out_h * s.out_w * s.c;
    _Float16 *host = random_halves(nx, 3, 0);
    void *x = device_copy_of(gpu, host, nx * 2);
    free(host);
    host = random_halves(ny, 4, 0);
    void *dy = device_copy_of(gpu, host, ny * 2);
    free(host);
    void *y = gpu->alloc(gpu, ny * 2), *dx = gpu->alloc(gpu, nx * 2);

    PoolRun run = {gpu, &s, x, y, dy, dx};
    const BenchMs ms = bench_time(gpu, WARMUP_RUNS, TIMED_RUNS, pool_forward, pool_call, &run, 1);
    const float median = ms.median;
    const double bytes = 2.0 * (2.0 * nx + 2.0 * ny);
    printf(
        "maxpool_backward %dx%dx%dx%d fp16 k3 s2 p1: median %.4f ms (min %.4f, max %.4f) over %d runs, %.0f GB/s\n",
        s.n, s.h, s.w, s.c, median, ms.min, ms.max, TIMED_RUNS, bytes / (median * 1e-3) / 1e9);
    gpu->free(gpu, x), gpu->free(gpu, dy), gpu->free(gpu, y), gpu->free(gpu, dx);
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 256;
    char why[256] = "";
    Backend *gpu = cuda_backend_create(0, NULL, why, sizeof why);
    if (!gpu) {
        fprintf(stderr, "bench_maxpool: no CUDA backend: %s\n", why);
        return 1;
    }
    Backend *cpu = cpu_backend_create();
    const int failed = check_against_cpu(gpu, cpu, stem_pool(2, 112, 112)) |
                       check_against_cpu(gpu, cpu, stem_pool(2, 111, 113));
    if (failed) {
        fprintf(stderr, "bench_maxpool: the GPU differs from the CPU reference\n");
        return 1;
    }
    time_backward(gpu, stem_pool(n, 112, 112));
    cpu->destroy(cpu);
    gpu->destroy(gpu);
    return 0;
}
