// test_gpu_ops.c - every op of the Backend interface on the CUDA backend against the CPU reference
// backend, on the same inputs, called only through backend.h.
//
// Each run draws fresh random inputs (the seed comes from the clock and is printed; AMPTRAIN_TEST_SEED
// replays one), rounds them to the case's dtype on the host and gives the same bits to both backends.
// Outputs are poisoned with NaN on both backends before each call, so an element an implementation never
// writes fails; NaN or inf anywhere fails (tu_rel_error returns inf). Tolerances on the norm-wise
// relative error ||gpu - cpu|| / ||cpu||: 1e-4 in fp32 (the backend is made with TF32 off), 1e-2 in
// fp16 (one fp16 rounding is ~5e-4), 2e-2 in bf16 (one bf16 rounding is ~4e-3, and the two backends round
// intermediate results at different points, so their outputs may be a few roundings apart); a wrong
// formula, layout or missing accumulation is off by O(1).
// Accumulating outputs start from random values of the same magnitude as the increment, so ignoring
// the flag, or overwriting, is off by O(1) too. Exact facts (casts, the overflow check, the scaler,
// skipped optimizer steps, the allocator's accounting) are compared exactly.
//
// With no usable GPU the suite is skipped: it prints "test_gpu_ops: skipped: <why>", runs no checks and
// exits 0.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/backend.h"
#include "kernels/cpu/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_diag.h"
#include "tests/test_util.h"

static Backend *cpu, *gpu;
static uint64_t base_seed;

#define TOL_F32 1e-4
#define TOL_F16 1e-2
#define TOL_BF16 2e-2

static double tol_for(DType dt) { return dt == DTYPE_F16 ? TOL_F16 : dt == DTYPE_BF16 ? TOL_BF16 : TOL_F32; }

// The dtypes an op computes in; a test whose loop index picks one takes it as DTS[_i % N_DTS] and its
// other choices from _i / N_DTS.
static const DType DTS[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
#define N_DTS 3

// A fresh seed for each buffer of a case: cases differ from each other and from run to run.
static uint64_t case_seed(int test, int loop, int buffer) {
    return base_seed + 1000003ull * (uint64_t)test + 1009ull * (uint64_t)loop + (uint64_t)buffer;
}

// ---- buffers on both backends ------------------------------------------------------------------------

// The same n values of dtype dt on the CPU backend and on the GPU.
typedef struct Twin {
    void *cpu, *gpu;
    size_t n;
    DType dt;
} Twin;

static void *host_pack(DType dt, const float *src, size_t n) {
    void *host = malloc(n * dtype_size(dt) + 16);
    for (size_t i = 0; i < n; i++) dtype_store(host, dt, i, src[i]);
    return host;
}

static void fill(Backend *be, void *p, DType dt, const float *src, size_t n) {
    void *host = host_pack(dt, src, n);
    be->to_device(be, p, host, n * dtype_size(dt));
    free(host);
}

static float *download(Backend *be, DType dt, const void *p, size_t n) {
    void *host = malloc(n * dtype_size(dt) + 16);
    be->to_host(be, host, p, n * dtype_size(dt));
    float *out = malloc(n * sizeof(float) + 16);
    for (size_t i = 0; i < n; i++) out[i] = dtype_load(host, dt, i);
    free(host);
    return out;
}

static void *download_raw(Backend *be, const void *p, size_t bytes) {
    void *host = malloc(bytes + 16);
    be->to_host(be, host, p, bytes);
    return host;
}

static Twin twin_alloc(DType dt, size_t n) {
    Twin t = {cpu->alloc(cpu, n * dtype_size(dt) + 16), gpu->alloc(gpu, n * dtype_size(dt) + 16), n, dt};
    return t;
}

static Twin twin_values(DType dt, const float *v, size_t n) {
    Twin t = twin_alloc(dt, n);
    fill(cpu, t.cpu, dt, v, n);
    fill(gpu, t.gpu, dt, v, n);
    return t;
}

static Twin twin_random(DType dt, size_t n, uint64_t seed, float lo, float hi) {
    float *v = malloc(n * sizeof(float) + 16);
    tu_fill_uniform(v, n, seed, lo, hi);
    Twin t = twin_values(dt, v, n);
    free(v);
    return t;
}

// Both copies set to NaN, so whatever an op does not write stays NaN.
static void twin_poison(Twin t) {
    float *v = malloc(t.n * sizeof(float) + 16);
    for (size_t i = 0; i < t.n; i++) v[i] = NAN;
    fill(cpu, t.cpu, t.dt, v, t.n);
    fill(gpu, t.gpu, t.dt, v, t.n);
    free(v);
}

static Twin twin_output(DType dt, size_t n) {
    Twin t = twin_alloc(dt, n);
    twin_poison(t);
    return t;
}

// Gives the GPU copy the CPU copy's values (an op's output reused as the next op's input).
static void twin_take_cpu(Twin t) {
    const size_t bytes = t.n * dtype_size(t.dt);
    void *host = download_raw(cpu, t.cpu, bytes);
    gpu->to_device(gpu, t.gpu, host, bytes);
    free(host);
}

// Gives the CPU copy the GPU copy's values: a backward fed the GPU's forward output and statistics, so the
// ReLU mask the GPU kept from its forward (cuDNN's reserve, our own bits, or recomputed from x) and the y > 0
// the CPU reads are the same elements.
static void twin_take_gpu(Twin t) {
    const size_t bytes = t.n * dtype_size(t.dt);
    void *host = download_raw(gpu, t.gpu, bytes);
    cpu->to_device(cpu, t.cpu, host, bytes);
    free(host);
}

// Refills both copies with random values as large (root mean square) as the CPU copy's current ones:
// the starting point of an accumulating call.
static void twin_refill_like(Twin t, uint64_t seed) {
    float *c = download(cpu, t.dt, t.cpu, t.n);
    double sq = 0;
    for (size_t i = 0; i < t.n; i++) sq += (double)c[i] * c[i];
    const float a = (float)sqrt(3.0 * sq / (double)t.n);
    tu_fill_uniform(c, t.n, seed, -a, a);
    fill(cpu, t.cpu, t.dt, c, t.n);
    fill(gpu, t.gpu, t.dt, c, t.n);
    free(c);
}

static void twin_free(Twin t) {
    cpu->free(cpu, t.cpu);
    gpu->free(gpu, t.gpu);
}

static void expect_close_tol(const char *what, Twin t, double tol) {
    float *g = download(gpu, t.dt, t.gpu, t.n);
    float *c = download(cpu, t.dt, t.cpu, t.n);
    const double err = tu_rel_error(g, c, t.n);
    free(g);
    free(c);
    printf("  %-58s %s  rel error %.2e\n", what, dtype_name(t.dt), err);
    ck_assert_msg(err < tol, "%s (%s, seed %llu): relative error %.3g, tolerance %.0e", what,
                  dtype_name(t.dt), (unsigned long long)base_seed, err, tol);
}

// Held to the tolerance of the twin's own dtype.
static void expect_close(const char *what, Twin t) { expect_close_tol(what, t, tol_for(t.dt)); }

// A batch norm's backward outputs, each named "<prefix> <gradient>": dx, dgamma, dbeta, and d_residual when
// dres is given.
static void expect_bn_gradients(const char *prefix, Twin dx, Twin dgamma, Twin dbeta, const Twin *dres) {
    const struct {
        const char *name;
        const Twin *t;
    } grads[] = {{"dx", &dx}, {"dgamma", &dgamma}, {"dbeta", &dbeta}, {"d_residual", dres}};
    char what[192];
    for (size_t i = 0; i < 4 && grads[i].t; i++) {
        snprintf(what, sizeof what, "%s %s", prefix, grads[i].name);
        expect_close(what, *grads[i].t);
    }
}

// ---- memory -------------------------------------------------------------------------------------------

START_TEST(test_memory_ops) {
    const size_t sizes[] = {1, 1000, 3u << 20 | 12345};  // a small class, a 512 B class, a large class
    for (int k = 0; k < 3; k++) {
        const size_t bytes = sizes[k];
        const size_t before = gpu->current_bytes(gpu);
        unsigned char *src = malloc(bytes), *back = malloc(bytes);
        for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(i * 131 + base_seed);
        void *a = gpu->alloc(gpu, bytes), *b = gpu->alloc(gpu, bytes);
        ck_assert_ptr_nonnull(a);
        ck_assert_msg(gpu->current_bytes(gpu) >= before + 2 * bytes, "current_bytes did not count %zu bytes",
                      bytes);
        ck_assert_uint_ge(gpu->peak_bytes(gpu), gpu->current_bytes(gpu));

        gpu->to_device(gpu, a, src, bytes);
        gpu->copy(gpu, b, a, bytes);
        gpu->to_host(gpu, back, b, bytes);
        ck_assert_msg(memcmp(src, back, bytes) == 0, "to_device/copy/to_host changed %zu bytes", bytes);

        unsigned char *pinned = gpu->host_alloc(gpu, bytes);
        gpu->readback_begin(gpu, pinned, a, bytes);
        gpu->readback_wait(gpu);
        ck_assert_msg(memcmp(src, pinned, bytes) == 0, "readback of %zu bytes differs", bytes);
        gpu->host_free(gpu, pinned);

        gpu->zero(gpu, b, bytes);
        gpu->sync(gpu);
        gpu->to_host(gpu, back, b, bytes);
        for (size_t i = 0; i < bytes; i++) ck_assert_msg(back[i] == 0, "zero left byte %zu of %zu", i, bytes);

        const size_t peak = gpu->peak_bytes(gpu);
        gpu->free(gpu, a);
        gpu->free(gpu, b);
        ck_assert_uint_eq(gpu->current_bytes(gpu), before);
        ck_assert_uint_eq(gpu->peak_bytes(gpu), peak);
        free(src);
        free(back);
    }
}
END_TEST

// ---- cast ---------------------------------------------------------------------------------------------

// fp32 values over a 16-bit dtype's whole range and beyond: subnormals, normals, overflow to inf, both signs
// (exponents in [lo_exp, hi_exp): fp16's reach 2^-24 and 65504, bf16's fp32's own).
static float *cast_inputs(size_t n, uint64_t seed, float lo_exp, float hi_exp) {
    float *u = malloc(n * sizeof(float)), *e = malloc(n * sizeof(float));
    tu_fill_uniform(u, n, seed, -1.0f, 1.0f);
    tu_fill_uniform(e, n, seed + 1, lo_exp, hi_exp);
    for (size_t i = 0; i < n; i++) u[i] = ldexpf(u[i], (int)e[i]);
    free(e);
    return u;
}

// src (n, src_dt) cast to dst_dt on both backends, m elements from the offsets: the same bits.
static void expect_cast_same(Twin src, Twin dst, size_t m, int src_off, int dst_off) {
    Backend *bes[2] = {cpu, gpu};
    const size_t ss = dtype_size(src.dt), ds = dtype_size(dst.dt), bytes = dst.n * ds;
    for (int k = 0; k < 2; k++) {
        char *from = k ? src.gpu : src.cpu, *to = k ? dst.gpu : dst.cpu;
        bes[k]->cast(bes[k], to + ds * dst_off, dst.dt, from + ss * src_off, src.dt, m);
    }
    gpu->sync(gpu);
    void *c = download_raw(cpu, dst.cpu, bytes), *g = download_raw(gpu, dst.gpu, bytes);
    printf("  cast %s -> %s, offsets %d %d: %s\n", dtype_name(src.dt), dtype_name(dst.dt), src_off, dst_off,
           memcmp(c, g, bytes) == 0 ? "bitwise equal to the CPU" : "DIFFERS");
    ck_assert_msg(memcmp(c, g, bytes) == 0, "%s -> %s cast differs from the CPU (offsets %d, %d)",
                  dtype_name(src.dt), dtype_name(dst.dt), src_off, dst_off);
    free(c), free(g);
}

// Casts are exact rules (round to nearest even, overflow to inf): the bits must match. Loop index: _i % 3
// the offsets (aligned pointers, both shifted by one element, only one shifted: no common vector
// alignment); _i / 3 the 16-bit dtype, fp32 -> it -> fp32, then it -> the other 16-bit dtype.
START_TEST(test_cast) {
    const size_t n = 10007;
    const int offsets = _i % 3, src_off = offsets == 0 ? 0 : 1, dst_off = offsets == 2 ? 0 : src_off;
    const DType dt = _i / 3 ? DTYPE_BF16 : DTYPE_F16, other = _i / 3 ? DTYPE_F16 : DTYPE_BF16;
    float *v = dt == DTYPE_F16 ? cast_inputs(n, case_seed(1, _i, 0), -28.0f, 18.0f)
                               : cast_inputs(n, case_seed(1, _i, 0), -150.0f, 130.0f);
    Twin f32 = twin_values(DTYPE_F32, v, n);
    Twin narrow = twin_output(dt, n), back = twin_output(DTYPE_F32, n), across = twin_output(other, n);
    const size_t m = n - 1;  // leaves the first or last element unwritten: it must stay NaN on both
    expect_cast_same(f32, narrow, m, src_off, dst_off);
    expect_cast_same(narrow, back, m, dst_off, src_off);
    expect_cast_same(narrow, across, m, dst_off, src_off);
    free(v);

    // Same dtype is a copy.
    Twin same = twin_output(DTYPE_F32, n);
    gpu->cast(gpu, same.gpu, DTYPE_F32, f32.gpu, DTYPE_F32, n);
    void *orig = download_raw(gpu, f32.gpu, n * 4), *copied = download_raw(gpu, same.gpu, n * 4);
    ck_assert_msg(memcmp(orig, copied, n * 4) == 0, "fp32 -> fp32 cast is not a copy");
    free(orig), free(copied);
    twin_free(same), twin_free(f32), twin_free(narrow), twin_free(back), twin_free(across);
}
END_TEST

// ---- input: normalisation and the copy stream's slots --------------------------------------------------

// Loop index: DTS[_i % N_DTS] the destination; _i / N_DTS 1: fp32 source (else u8 bytes). One multiply and
// one add per value, each rounded once on both sides: bitwise equal. Both outputs start as NaN; every value
// must be written.
START_TEST(test_input_normalize) {
    const DType dst_dt = DTS[_i % N_DTS], src_dt = _i / N_DTS ? DTYPE_F32 : DTYPE_U8;
    const size_t pixels = 3 * 1009 + 1, n = pixels * 3;  // odd counts: no whole-vector assumption
    uint64_t state = case_seed(11, _i, 0);
    uint8_t *bytes = malloc(n);
    float *values = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        bytes[i] = (uint8_t)(state >> 56);
        values[i] = (float)(state >> 40) / 16777216.0f * 6.0f - 3.0f;
    }
    const PixelNorm norm = {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
    const PixelAffine affine = src_dt == DTYPE_U8 ? pixel_affine_of(&norm)
                                                  : (PixelAffine){{1.5f, -0.5f, 2.0f}, {0.25f, 1.0f, -3.0f}};
    const size_t src_bytes = n * dtype_size(src_dt);
    const void *host_src = src_dt == DTYPE_U8 ? (const void *)bytes : (const void *)values;
    void *src_c = cpu->alloc(cpu, src_bytes), *src_g = gpu->alloc(gpu, src_bytes);
    cpu->to_device(cpu, src_c, host_src, src_bytes);
    gpu->to_device(gpu, src_g, host_src, src_bytes);
    Twin out = twin_output(dst_dt, n);
    cpu->input_normalize(cpu, pixels, src_dt, src_c, &affine, dst_dt, out.cpu);
    gpu->input_normalize(gpu, pixels, src_dt, src_g, &affine, dst_dt, out.gpu);
    const size_t out_bytes = n * dtype_size(dst_dt);
    void *c = download_raw(cpu, out.cpu, out_bytes), *g = download_raw(gpu, out.gpu, out_bytes);
    float *gv = download(gpu, dst_dt, out.gpu, n);
    size_t unwritten = 0;
    for (size_t i = 0; i < n; i++) unwritten += isnan(gv[i]);
    printf("  input_normalize %s -> %s, %zu pixels                       %s\n", dtype_name(src_dt),
           dtype_name(dst_dt), pixels, memcmp(c, g, out_bytes) == 0 ? "bitwise equal to the CPU" : "DIFFERS");
    ck_assert_msg(unwritten == 0, "input_normalize left %zu values unwritten", unwritten);
    ck_assert_msg(memcmp(c, g, out_bytes) == 0, "input_normalize %s -> %s differs from the CPU",
                  dtype_name(src_dt), dtype_name(dst_dt));
    free(c), free(g), free(gv), free(bytes), free(values);
    cpu->free(cpu, src_c), gpu->free(gpu, src_g);
    twin_free(out);
}
END_TEST

// Two slots used round-robin for 8 uploads from pinned memory: each batch lands whole, the compute
// stream's copy of it (after input_acquire) sees exactly that batch, and a refilled host buffer never
// reaches a slot the compute stream has not released.
START_TEST(test_input_slots_hand_over) {
    const size_t bytes = (size_t)1 << 22;
    uint8_t *host[BACKEND_INPUT_SLOTS], *slot[BACKEND_INPUT_SLOTS];
    for (int s = 0; s < BACKEND_INPUT_SLOTS; s++)
        host[s] = gpu->host_alloc(gpu, bytes), slot[s] = gpu->alloc(gpu, bytes);
    uint8_t *taken = gpu->alloc(gpu, 8 * bytes), *back = malloc(8 * bytes);
    for (int k = 0; k < 8; k++) {
        int s = k % BACKEND_INPUT_SLOTS;
        if (k >= BACKEND_INPUT_SLOTS) gpu->input_upload_wait(gpu, s);  // the host buffer may be refilled
        memset(host[s], 17 * k + 3, bytes);
        gpu->input_upload(gpu, s, slot[s], host[s], bytes);
        gpu->input_acquire(gpu, s);
        gpu->copy(gpu, taken + (size_t)k * bytes, slot[s], bytes);
        gpu->input_release(gpu, s);
    }
    gpu->sync(gpu);
    gpu->to_host(gpu, back, taken, 8 * bytes);
    size_t wrong = 0;
    for (int k = 0; k < 8; k++)
        for (size_t i = 0; i < bytes; i++) wrong += back[(size_t)k * bytes + i] != (uint8_t)(17 * k + 3);
    printf("  input slots, 8 uploads through %d slots                      %zu bytes wrong\n",
           BACKEND_INPUT_SLOTS, wrong);
    ck_assert_msg(wrong == 0, "%zu bytes of the uploaded batches arrived wrong", wrong);
    for (int s = 0; s < BACKEND_INPUT_SLOTS; s++) gpu->host_free(gpu, host[s]), gpu->free(gpu, slot[s]);
    gpu->free(gpu, taken);
    free(back);
}
END_TEST

// ---- convolution -----------------------------------------------------------------------------------

typedef struct ConvCase {
    const char *label;
    int n, h, w, c_in, c_out, k, stride, pad, groups;
} ConvCase;

// ResNeXt-50 32x4d's kinds of convolution at a small spatial size.
static const ConvCase conv_cases[] = {
    {"conv 3x3/2 pad 1 groups 32", 4, 14, 14, 128, 128, 3, 2, 1, 32},
    {"conv 3x3 pad 1 groups 32", 4, 14, 14, 128, 128, 3, 1, 1, 32},
    {"conv 1x1 64 -> 256", 4, 14, 14, 64, 256, 1, 1, 0, 1},
    {"conv 1x1/2 256 -> 128 (shortcut)", 4, 14, 14, 256, 128, 1, 2, 0, 1},
    {"conv 7x7/2 pad 3 3 -> 64 (stem)", 2, 32, 32, 3, 64, 7, 2, 3, 1},
};
#define CONV_CASES (int)(sizeof conv_cases / sizeof conv_cases[0])

// A case's shape, its output size worked out.
static ConvShape conv_case_shape(const ConvCase *cc) {
    ConvShape s = {cc->n, cc->h,      cc->w,   cc->c_in,   cc->c_out, cc->k,
                   cc->k, cc->stride, cc->pad, cc->groups, 0,         0};
    conv_shape_finish(&s);
    return s;
}

// Forward, data gradient and weight gradient (= then +=) of shape s in dt on both backends from the same
// random inputs (seeds from case_seed(test, loop, ...)), each compared with the CPU's; label names the case.
static void expect_every_direction(const char *label, const ConvShape *s, DType dt, int test, int loop) {
    const size_t nx = (size_t)s->n * s->h * s->w * s->c_in,
                 ny = (size_t)s->n * s->out_h * s->out_w * s->c_out;
    const size_t nw = (size_t)s->c_out * s->kh * s->kw * (s->c_in / s->groups);
    char what[192];

    Twin x = twin_random(dt, nx, case_seed(test, loop, 0), -1, 1);
    Twin w = twin_random(dt, nw, case_seed(test, loop, 1), -1, 1);
    Twin dy = twin_random(dt, ny, case_seed(test, loop, 2), -1, 1);
    Twin y = twin_output(dt, ny), dx = twin_output(dt, nx), dw = twin_output(dt, nw);

    cpu->conv_forward(cpu, s, dt, x.cpu, w.cpu, y.cpu);
    gpu->conv_forward(gpu, s, dt, x.gpu, w.gpu, y.gpu);
    snprintf(what, sizeof what, "%s %s forward", label, dtype_name(dt));
    expect_close(what, y);

    for (int acc = 0; acc <= 1; acc++) {
        if (acc) {
            twin_refill_like(dx, case_seed(test, loop, 3));
            twin_refill_like(dw, case_seed(test, loop, 4));
        }
        cpu->conv_backward_data(cpu, s, dt, dy.cpu, w.cpu, dx.cpu, acc);
        gpu->conv_backward_data(gpu, s, dt, dy.gpu, w.gpu, dx.gpu, acc);
        snprintf(what, sizeof what, "%s %s backward data%s", label, dtype_name(dt), acc ? " accumulate" : "");
        expect_close(what, dx);
        cpu->conv_backward_filter(cpu, s, dt, x.cpu, dy.cpu, dw.cpu, acc);
        gpu->conv_backward_filter(gpu, s, dt, x.gpu, dy.gpu, dw.gpu, acc);
        snprintf(what, sizeof what, "%s %s backward filter%s", label, dtype_name(dt),
                 acc ? " accumulate" : "");
        expect_close(what, dw);
    }
    twin_free(x), twin_free(w), twin_free(dy), twin_free(y), twin_free(dx), twin_free(dw);
}

START_TEST(test_conv) {
    const ConvCase *cc = &conv_cases[_i / N_DTS];
    const DType dt = DTS[_i % N_DTS];
    ConvShape s = conv_case_shape(cc);
    expect_every_direction(cc->label, &s, dt, 2, _i);
}
END_TEST

// The stem's 7x7 convolution of 3 channels on its input and weights padded with zero channels to 4 or 8
// (cudnn_conv.cu), the route asserted. Loop index: bit 0 fp16 / bf16, bit 1 4 / 8 channels; each case its
// own batch size, so its plan is chosen afresh.
START_TEST(test_conv_padded) {
    const DType dt = (_i & 1) ? DTYPE_BF16 : DTYPE_F16;
    const int pc = (_i & 2) ? 8 : 4;
    ConvShape s = {3 + _i, 32, 32, 3, 64, 7, 7, 2, 3, 1, 0, 0};
    conv_shape_finish(&s);
    char what[64];
    snprintf(what, sizeof what, "stem conv padded to %d", pc);
    cuda_backend_set_conv_padding(gpu, pc);
    expect_every_direction(what, &s, dt, 15, _i);
    cuda_backend_set_conv_padding(gpu, 0);
    ck_assert_int_eq(cuda_backend_conv_padded_channels(gpu, &s, dt, 0), pc);
    ck_assert_int_eq(cuda_backend_conv_padded_channels(gpu, &s, dt, 2), pc);
}
END_TEST

// amptrain's own kernels for a convolution of few input channels into 64 (cuda_conv_stem.cu), forced, the
// route asserted. Loop index: fp16 / bf16 by _i % 2, the shape by _i / 2: the stem's, one whose output rows
// take two work items (150 pixels: a full one and a part), 4 channels 5x5 on an odd-sized input, and
// 1 channel 3x3.
static const ConvCase conv_own_cases[] = {
    {"stem 7x7/2 3 -> 64", 2, 32, 32, 3, 64, 7, 2, 3, 1},
    {"7x7/2 3 -> 64, 150-pixel rows", 1, 9, 300, 3, 64, 7, 2, 3, 1},
    {"5x5/2 4 -> 64", 2, 13, 11, 4, 64, 5, 2, 2, 1},
    {"3x3/2 1 -> 64", 2, 20, 20, 1, 64, 3, 2, 1, 1},
};
#define CONV_OWN_CASES (int)(sizeof conv_own_cases / sizeof conv_own_cases[0])

START_TEST(test_conv_own) {
    const ConvCase *cc = &conv_own_cases[_i / 2];
    const DType dt = (_i % 2) ? DTYPE_BF16 : DTYPE_F16;
    ConvShape s = conv_case_shape(cc);
    char what[96];
    snprintf(what, sizeof what, "own %s", cc->label);
    cuda_backend_set_conv_own(gpu, 1);
    expect_every_direction(what, &s, dt, 16, _i);
    cuda_backend_set_conv_own(gpu, 0);
    ck_assert_int_eq(cuda_backend_conv_route_is_own(gpu, &s, dt, 0), 1);
    ck_assert_int_eq(cuda_backend_conv_route_is_own(gpu, &s, dt, 2), 1);
}
END_TEST

// ---- batch norm ------------------------------------------------------------------------------------------

// Loop index: DTS[_i % N_DTS] the dtype; of k = _i / N_DTS, bits 0 residual, 1 relu; (k >> 2) % BN_MODES
// whose kernels train (cudnn.batch_norm, and the two mixed pairs auto may pick); (k >> 2) / BN_MODES the
// shape: two of ResNeXt's, one whose channels split into no 16-byte packs (one element at a time, cuDNN's
// fused forms decline it), one of 2048 channels (the reduction cut into several channel slices), one of 320
// channels, whose last slice of 32 packs holds only 8 (fp16; fp32 16 of 32) so its other threads only help
// stage the slice's per-channel coefficients, and last one large enough that every elementwise thread strides
// over several packs and every reduction thread sums many rows. That last shape takes most of the time (in
// the CPU reference, on the host), so its loops are cases of their own, one per mode (batchnorm_large_*),
// which dev/device_suite.sh's gpuall runs side by side; "batchnorm" holds the other shapes.
#define BN_SHAPES 6
#define BN_MODES 5
#define BN_LOOPS_PER_MODE (N_DTS * 4)
#define BN_LOOPS_PER_SHAPE (BN_LOOPS_PER_MODE * BN_MODES)
// The loops of the large shape in mode m: [BN_LARGE_LOOP(m), BN_LARGE_LOOP(m + 1)).
#define BN_LARGE_LOOP(m) (BN_LOOPS_PER_SHAPE * (BN_SHAPES - 1) + BN_LOOPS_PER_MODE * (m))
static const CudaBnMode BN_MODE[BN_MODES] = {CUDA_BN_CUDNN, CUDA_BN_OWN, CUDA_BN_OWN_CUDNN, CUDA_BN_CUDNN_OWN,
                                             CUDA_BN_AUTO};
static const char *BN_MODE_NAME[BN_MODES] = {"cuDNN", "own", "own+cuDNN", "cuDNN+own", "auto"};

// The paths the forward just took for the layer of save_mean, as the mode says: a mixed pair must really run
// mixed where cuDNN takes the shape (else its test would run one path twice), auto the pair it prepared.
static void expect_bn_paths(CudaBnMode mode, const char *label, const float *save_mean, int rows, int c,
                            DType dt, int residual, int relu) {
    int fwd = -1, bwd = -1;
    ck_assert_msg(cuda_backend_bn_layer_paths(gpu, save_mean, &fwd, &bwd), "%s: no layer entry", label);
    // the combinations cudnn_batchnorm.cu offers cuDNN (bf16 as fp16), which cuDNN must take
    const int cudnn_fused = !(residual && !relu) && (!relu || (dtype_is_16bit(dt) && c % 4 == 0));
    if (mode == CUDA_BN_CUDNN && cudnn_fused && dtype_is_16bit(dt))
        ck_assert_msg(fwd == 1, "%s: forward on our own, want cuDNN's", label);
    // add+ReLU: cuDNN's backward needs its own forward's reserve, so that layer runs our own backward
    if (mode == CUDA_BN_OWN_CUDNN && cudnn_fused && !residual)
        ck_assert_msg(fwd == 0 && bwd == 1, "%s: forward %d backward %d, want our own then cuDNN's", label,
                      fwd, bwd);
    if (mode == CUDA_BN_CUDNN_OWN && cudnn_fused && dtype_is_16bit(dt))
        ck_assert_msg(fwd == 1 && bwd == 0, "%s: forward %d backward %d, want cuDNN's then our own", label,
                      fwd, bwd);
    if (mode == CUDA_BN_AUTO) {
        int want_fwd = -1, want_bwd = -1;
        ck_assert_msg(cuda_backend_bn_prepared_pair(gpu, rows, c, dt, residual, relu, &want_fwd, &want_bwd),
                      "%s: bn_prepare left no pair", label);
        ck_assert_msg(fwd == want_fwd && bwd == want_bwd, "%s: ran %d+%d, prepared %d+%d", label, fwd, bwd,
                      want_fwd, want_bwd);
    }
}

START_TEST(test_batchnorm) {
    const DType dt = DTS[_i % N_DTS];
    const int k = _i / N_DTS, residual = k & 1, relu = (k >> 1) & 1, mode = (k >> 2) % BN_MODES,
              shape = (k >> 2) / BN_MODES;
    static const int shape_rows[BN_SHAPES] = {4 * 14 * 14, 4 * 7 * 7, 3 * 9 * 9,
                                              3 * 7 * 7,   3 * 7 * 7, 64 * 28 * 28};
    static const int shape_c[BN_SHAPES] = {128, 256, 6, 2048, 320, 256};
    const int rows = shape_rows[shape], c = shape_c[shape];
    const size_t nx = (size_t)rows * c;
    const float momentum = 0.1f, eps = 1e-5f;
    char what[128], label[64];
    snprintf(label, sizeof label, "bn %s rows %d c %d%s%s", BN_MODE_NAME[mode], rows, c,
             residual ? " +residual" : "", relu ? " +relu" : "");
    cuda_backend_set_batch_norm(gpu, BN_MODE[mode]);
    gpu->bn_prepare(gpu, rows, c, dt, residual,
                    relu);  // times the pairs under auto; nothing in the other modes

    Twin x = twin_random(dt, nx, case_seed(3, _i, 0), -2, 3);  // a non-zero mean, as after a convolution
    Twin res = twin_random(dt, nx, case_seed(3, _i, 1), -1, 1);
    Twin gamma = twin_random(DTYPE_F32, c, case_seed(3, _i, 2), 0.5f, 1.5f);
    Twin beta = twin_random(DTYPE_F32, c, case_seed(3, _i, 3), -0.5f, 0.5f);
    Twin rmean = twin_random(DTYPE_F32, c, case_seed(3, _i, 4), -0.1f, 0.1f);
    Twin rvar = twin_random(DTYPE_F32, c, case_seed(3, _i, 5), 0.5f, 1.5f);
    Twin smean = twin_output(DTYPE_F32, c), sinv = twin_output(DTYPE_F32, c), y = twin_output(dt, nx);
    const void *res_c = residual ? res.cpu : NULL, *res_g = residual ? res.gpu : NULL;

    cpu->bn_forward_train(cpu, rows, c, dt, x.cpu, res_c, relu, gamma.cpu, beta.cpu, rmean.cpu, rvar.cpu,
                          momentum, eps, smean.cpu, sinv.cpu, y.cpu);
    gpu->bn_forward_train(gpu, rows, c, dt, x.gpu, res_g, relu, gamma.gpu, beta.gpu, rmean.gpu, rvar.gpu,
                          momentum, eps, smean.gpu, sinv.gpu, y.gpu);
    expect_bn_paths(BN_MODE[mode], label, smean.gpu, rows, c, dt, residual, relu);
    snprintf(what, sizeof what, "%s train y", label);
    expect_close(what, y);
    snprintf(what, sizeof what, "%s train save_mean", label);
    expect_close_tol(what, smean, TOL_F32);
    snprintf(what, sizeof what, "%s train save_invstd", label);
    expect_close_tol(what, sinv, TOL_F32);
    snprintf(what, sizeof what, "%s train running_mean", label);
    expect_close_tol(what, rmean, TOL_F32);
    snprintf(what, sizeof what, "%s train running_var", label);
    expect_close_tol(what, rvar, TOL_F32);

    Twin y_eval = twin_output(dt, nx);
    twin_take_cpu(rmean), twin_take_cpu(rvar);
    cpu->bn_forward_eval(cpu, rows, c, dt, x.cpu, res_c, relu, gamma.cpu, beta.cpu, rmean.cpu, rvar.cpu, eps,
                         y_eval.cpu);
    gpu->bn_forward_eval(gpu, rows, c, dt, x.gpu, res_g, relu, gamma.gpu, beta.gpu, rmean.gpu, rvar.gpu, eps,
                         y_eval.gpu);
    snprintf(what, sizeof what, "%s eval y", label);
    expect_close(what, y_eval);

    // Backward from the GPU's forward results, so it is tested on identical inputs with the mask the GPU
    // kept.
    twin_take_gpu(y), twin_take_gpu(smean), twin_take_gpu(sinv);
    // The output again from the saved statistics (a backward that recomputes it; no residual there)
    Twin y_saved = twin_output(dt, nx);
    cpu->bn_forward_saved(cpu, rows, c, dt, x.cpu, relu, gamma.cpu, beta.cpu, smean.cpu, sinv.cpu,
                          y_saved.cpu);
    gpu->bn_forward_saved(gpu, rows, c, dt, x.gpu, relu, gamma.gpu, beta.gpu, smean.gpu, sinv.gpu,
                          y_saved.gpu);
    snprintf(what, sizeof what, "%s recomputed y", label);
    expect_close(what, y_saved);
    twin_free(y_saved);
    Twin dy = twin_random(dt, nx, case_seed(3, _i, 6), -1, 1);
    Twin dx = twin_output(dt, nx), dgamma = twin_output(dt, c), dbeta = twin_output(dt, c);
    Twin dres = twin_output(dt, nx);
    for (int acc = 0; acc <= 1; acc++) {
        if (acc) {
            twin_refill_like(dx, case_seed(3, _i, 7));
            twin_refill_like(dgamma, case_seed(3, _i, 8));
            twin_refill_like(dbeta, case_seed(3, _i, 9));
            twin_poison(dres);  // always overwritten
        }
        cpu->bn_backward(cpu, rows, c, dt, x.cpu, y.cpu, dy.cpu, relu, gamma.cpu, smean.cpu, sinv.cpu, dx.cpu,
                         acc, dgamma.cpu, dbeta.cpu, acc, residual ? dres.cpu : NULL);
        gpu->bn_backward(gpu, rows, c, dt, x.gpu, y.gpu, dy.gpu, relu, gamma.gpu, smean.gpu, sinv.gpu, dx.gpu,
                         acc, dgamma.gpu, dbeta.gpu, acc, residual ? dres.gpu : NULL);
        snprintf(what, sizeof what, "%s backward%s", label, acc ? " accumulate" : "");
        expect_bn_gradients(what, dx, dgamma, dbeta, residual ? &dres : NULL);
    }
    twin_free(x), twin_free(res), twin_free(gamma), twin_free(beta), twin_free(rmean), twin_free(rvar);
    twin_free(smean), twin_free(sinv), twin_free(y), twin_free(y_eval), twin_free(dy), twin_free(dx);
    twin_free(dgamma), twin_free(dbeta), twin_free(dres);
}
END_TEST

// bn_add_bn (a downsampling block's end: y = relu(bn_a(x_a) + bn_b(x_b)) and its backward) against the CPU's
// two bn_forward_train and two bn_backward calls. Loop index: DTS[_i % N_DTS] the dtype; of k = _i / N_DTS,
// bit 0 dx_b written over dy; (k >> 1) % 3 the mode: cuDNN (the two calls on the GPU, bn_b's output in
// scratch), own and auto (the fused kernels, which must leave scratch untouched); (k >> 1) / 3 the shape:
// ResNeXt's, channels in no 16-byte packs, 2048 channels, 320 channels (a last channel slice partly idle),
// and last (the slowest, as in test_batchnorm) many rows per thread.
#define BN_ADD_BN_SHAPES 5

// Every element of the GPU copy still NaN (as twin_poison left it): the op did not write it.
static void expect_untouched(const char *label, const char *phase, Twin t) {
    float *g = download(gpu, t.dt, t.gpu, t.n);
    size_t written = 0;
    for (size_t i = 0; i < t.n; i++) written += !isnan(g[i]);
    free(g);
    ck_assert_msg(written == 0, "%s %s: %zu elements of scratch written", label, phase, written);
}

START_TEST(test_bn_add_bn) {
    const DType dt = DTS[_i % N_DTS];
    const int k = _i / N_DTS, alias = k & 1, mode = (k >> 1) % 3, shape = (k >> 1) / 3;
    static const CudaBnMode modes[3] = {CUDA_BN_CUDNN, CUDA_BN_OWN, CUDA_BN_AUTO};
    static const char *mode_names[3] = {"cuDNN", "own", "auto"};
    static const int shape_rows[BN_ADD_BN_SHAPES] = {4 * 14 * 14, 3 * 9 * 9, 3 * 7 * 7, 3 * 7 * 7,
                                                     64 * 28 * 28};
    static const int shape_c[BN_ADD_BN_SHAPES] = {256, 6, 2048, 320, 256};
    const int rows = shape_rows[shape], c = shape_c[shape], fused = modes[mode] != CUDA_BN_CUDNN;
    const size_t nx = (size_t)rows * c;
    const float momentum = 0.1f, eps = 1e-5f;
    char what[160], label[96];
    snprintf(label, sizeof label, "bn_add_bn %s rows %d c %d%s", mode_names[mode], rows, c,
             alias ? " dx_b=dy" : "");
    cuda_backend_set_batch_norm(gpu, modes[mode]);

    enum { X, GAMMA, BETA, RMEAN, RVAR, SMEAN, SINV, DGAMMA, DBETA, PARTS };
    static const char *part_names[PARTS] = {
        "x", "gamma", "beta", "running_mean", "running_var", "save_mean", "save_invstd", "dgamma", "dbeta"};
    Twin t[2][PARTS];
    for (int l = 0; l < 2; l++) {
        t[l][X] = twin_random(dt, nx, case_seed(4, _i, 10 * l), -2, 3);
        t[l][GAMMA] = twin_random(DTYPE_F32, c, case_seed(4, _i, 10 * l + 1), 0.5f, 1.5f);
        t[l][BETA] = twin_random(DTYPE_F32, c, case_seed(4, _i, 10 * l + 2), -0.5f, 0.5f);
        t[l][RMEAN] = twin_random(DTYPE_F32, c, case_seed(4, _i, 10 * l + 3), -0.1f, 0.1f);
        t[l][RVAR] = twin_random(DTYPE_F32, c, case_seed(4, _i, 10 * l + 4), 0.5f, 1.5f);
        t[l][SMEAN] = twin_output(DTYPE_F32, c), t[l][SINV] = twin_output(DTYPE_F32, c);
        t[l][DGAMMA] = twin_output(dt, c), t[l][DBETA] = twin_output(dt, c);
    }
    BnArgs args[2][2];  // [layer][0 CPU, 1 GPU]
    for (int l = 0; l < 2; l++)
        for (int side = 0; side < 2; side++) {
            void *p[PARTS];
            for (int k = 0; k < PARTS; k++) p[k] = side ? t[l][k].gpu : t[l][k].cpu;
            args[l][side] =
                (BnArgs){p[X], p[GAMMA], p[BETA], p[RMEAN], p[RVAR], p[SMEAN], p[SINV], p[DGAMMA], p[DBETA]};
        }
    Twin scratch = twin_output(dt, nx), y = twin_output(dt, nx);
    const BnArgs *a_c = &args[0][0], *b_c = &args[1][0], *a_g = &args[0][1], *b_g = &args[1][1];

    cpu->bn_forward_train(cpu, rows, c, dt, b_c->x, NULL, 0, b_c->gamma, b_c->beta, b_c->running_mean,
                          b_c->running_var, momentum, eps, b_c->save_mean, b_c->save_invstd, scratch.cpu);
    cpu->bn_forward_train(cpu, rows, c, dt, a_c->x, scratch.cpu, 1, a_c->gamma, a_c->beta, a_c->running_mean,
                          a_c->running_var, momentum, eps, a_c->save_mean, a_c->save_invstd, y.cpu);
    gpu->bn_add_bn_forward_train(gpu, rows, c, dt, a_g, b_g, 1, momentum, eps, scratch.gpu, y.gpu);
    snprintf(what, sizeof what, "%s forward y", label);
    expect_close(what, y);
    for (int l = 0; l < 2; l++)
        for (int k = RMEAN; k <= SINV; k++) {
            snprintf(what, sizeof what, "%s forward %s %s", label, l ? "b" : "a", part_names[k]);
            expect_close_tol(what, t[l][k], TOL_F32);
        }
    if (fused) {  // the fused kernels never write bn_b's output
        expect_untouched(label, "forward", scratch);
    } else {
        snprintf(what, sizeof what, "%s forward bn_b's output", label);
        expect_close(what, scratch);
    }

    // Backward from the GPU's forward results: the ReLU bits the fused forward kept describe its own y.
    twin_take_gpu(y);
    for (int l = 0; l < 2; l++) twin_take_gpu(t[l][SMEAN]), twin_take_gpu(t[l][SINV]);
    Twin dy = twin_random(dt, nx, case_seed(4, _i, 30), -1, 1);
    Twin dx_a = twin_output(dt, nx), dx_b = twin_output(dt, nx);
    for (int acc = 0; acc <= 1; acc++) {
        for (int l = 0; acc && l < 2; l++) {
            twin_refill_like(t[l][DGAMMA], case_seed(4, _i, 31 + 2 * l));
            twin_refill_like(t[l][DBETA], case_seed(4, _i, 32 + 2 * l));
        }
        twin_poison(scratch);
        cpu->bn_backward(cpu, rows, c, dt, a_c->x, y.cpu, dy.cpu, 1, a_c->gamma, a_c->save_mean,
                         a_c->save_invstd, dx_a.cpu, 0, a_c->dgamma, a_c->dbeta, acc, scratch.cpu);
        cpu->bn_backward(cpu, rows, c, dt, b_c->x, NULL, scratch.cpu, 0, b_c->gamma, b_c->save_mean,
                         b_c->save_invstd, dx_b.cpu, 0, b_c->dgamma, b_c->dbeta, acc, NULL);
        if (alias) {  // dx_b's GPU copy starts as dy and is the op's dy
            void *host = download_raw(cpu, dy.cpu, nx * dtype_size(dt));
            gpu->to_device(gpu, dx_b.gpu, host, nx * dtype_size(dt));
            free(host);
        }
        gpu->bn_add_bn_backward(gpu, rows, c, dt, a_g, b_g, y.gpu, alias ? dx_b.gpu : dy.gpu, 1, dx_a.gpu,
                                dx_b.gpu, acc, scratch.gpu);
        if (fused) expect_untouched(label, "backward", scratch);  // the residual's gradient is never written
        const char *acc_name = acc ? " accumulate" : "";
        snprintf(what, sizeof what, "%s backward dx_a%s", label, acc_name);
        expect_close(what, dx_a);
        snprintf(what, sizeof what, "%s backward dx_b%s", label, acc_name);
        expect_close(what, dx_b);
        for (int l = 0; l < 2; l++)
            for (int k = DGAMMA; k <= DBETA; k++) {
                snprintf(what, sizeof what, "%s backward %s %s%s", label, l ? "b" : "a", part_names[k],
                         acc_name);
                expect_close(what, t[l][k]);
            }
    }
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < PARTS; k++) twin_free(t[l][k]);
    twin_free(scratch), twin_free(y), twin_free(dy), twin_free(dx_a), twin_free(dx_b);
}
END_TEST

// conv_bn_forward_train (a 1x1 convolution and the batch norm after it) against the CPU's conv_forward and
// bn_forward_train, then bn_backward from the GPU's forward: the statistics from the convolution's epilogue
// (fused, cudnn_conv_bn.cu) and the two calls (unfused). Loop index: DTS[_i % N_DTS] the dtype; of
// k = _i / N_DTS, bit 0 with the residual (+ ReLU; else ReLU alone), bit 1 fused, k >> 2 the shape: a small
// one, one with more channels out than in, and one of many rows (every reduction sums many). fp32 is not
// eligible: it always runs the two calls. The fused fp16 case must really run fused.
#define CONV_BN_SHAPES 3

// One loop index's case of test_conv_bn and test_bn_conv_bn.
typedef struct ConvBnCase {
    DType dt;
    int residual, fused;
    ConvShape s;
} ConvBnCase;

static ConvBnCase conv_bn_case(int i) {
    static const int shape_nhw[CONV_BN_SHAPES][3] = {{4, 14, 14}, {2, 7, 7}, {16, 28, 28}};
    static const int shape_c[CONV_BN_SHAPES][2] = {{64, 128}, {256, 1024}, {128, 256}};
    const int k = i / N_DTS, shape = k >> 2;
    ConvBnCase cc = {.dt = DTS[i % N_DTS], .residual = k & 1, .fused = (k >> 1) & 1};
    cc.s = (ConvShape){.n = shape_nhw[shape][0],
                       .h = shape_nhw[shape][1],
                       .w = shape_nhw[shape][2],
                       .c_in = shape_c[shape][0],
                       .c_out = shape_c[shape][1],
                       .kh = 1,
                       .kw = 1,
                       .stride = 1,
                       .groups = 1};
    conv_shape_finish(&cc.s);
    return cc;
}

// Prepares the case of the op `fusion` names with the fused path forced on or off as the case says, names it
// in label, and returns whether the GPU runs it fused: fp16 must follow the case, fp32 never fuses. The
// case's residual bit is the backward's accumulate_params (its batch norm has no residual).
static int conv_bn_case_prepare(const ConvBnCase *cc, ConvBnFusion fusion, char *label, size_t cap) {
    static const char *op[3] = {"conv_bn", "bn_conv_bn", "bn_conv_backward_data"};
    const ConvShape *s = &cc->s;
    const int backward = fusion == FUSE_BN_CONV_BACKWARD, residual = backward ? 0 : cc->residual;
    snprintf(label, cap, "%s %s %dx%dx%d %d->%d%s", op[fusion], cc->fused ? "fused" : "unfused", s->n, s->h,
             s->w, s->c_in, s->c_out, cc->residual ? (backward ? " +accumulate" : " +residual") : "");
    cuda_backend_set_conv_bn(gpu, cc->fused ? 1 : -1);
    gpu->conv_prepare(gpu, s, cc->dt);
    if (!backward) gpu->conv_bn_prepare(gpu, s, cc->dt, residual, 1, FUSE_CONV_BN);
    if (fusion != FUSE_CONV_BN) gpu->conv_bn_prepare(gpu, s, cc->dt, residual, 1, fusion);
    const int ran_fused = cuda_backend_conv_bn_fused(gpu, s, cc->dt, residual, 1, fusion);
    printf("  %s %s: %s\n", label, dtype_name(cc->dt), ran_fused == 1 ? "fused" : "the calls");
    if (cc->dt == DTYPE_F16)
        ck_assert_msg((ran_fused == 1) == cc->fused, "%s: fused %d, want %d", label, ran_fused, cc->fused);
    if (cc->dt == DTYPE_F32) ck_assert_msg(ran_fused != 1, "%s: fp32 ran fused", label);
    return ran_fused == 1;
}

START_TEST(test_conv_bn) {
    const ConvBnCase cc = conv_bn_case(_i);
    const DType dt = cc.dt;
    const int residual = cc.residual;
    const ConvShape s = cc.s;
    const int rows = s.n * s.out_h * s.out_w, c = s.c_out;
    const size_t nx = (size_t)s.n * s.h * s.w * s.c_in, ny = (size_t)rows * c, nw = (size_t)c * s.c_in;
    const float momentum = 0.1f, eps = 1e-5f;
    char what[160], label[96];
    const int ran_fused = conv_bn_case_prepare(&cc, FUSE_CONV_BN, label, sizeof label);

    // x as a ReLU's output (with some negatives), w scaled to keep y near unit size: a mean away from 0
    Twin x = twin_random(dt, nx, case_seed(5, _i, 0), -0.5f, 2.0f);
    const float wb = sqrtf(3.0f / (float)s.c_in);
    Twin w = twin_random(dt, nw, case_seed(5, _i, 1), -0.5f * wb, 1.5f * wb);
    Twin res = twin_random(dt, ny, case_seed(5, _i, 2), -1, 1);
    Twin gamma = twin_random(DTYPE_F32, c, case_seed(5, _i, 3), 0.5f, 1.5f);
    Twin beta = twin_random(DTYPE_F32, c, case_seed(5, _i, 4), -0.5f, 0.5f);
    Twin rmean = twin_random(DTYPE_F32, c, case_seed(5, _i, 5), -0.1f, 0.1f);
    Twin rvar = twin_random(DTYPE_F32, c, case_seed(5, _i, 6), 0.5f, 1.5f);
    Twin smean = twin_output(DTYPE_F32, c), sinv = twin_output(DTYPE_F32, c);
    Twin y_conv = twin_output(dt, ny), y = twin_output(dt, ny);
    const BnArgs bn_c = {y_conv.cpu, gamma.cpu, beta.cpu, rmean.cpu, rvar.cpu,
                         smean.cpu,  sinv.cpu,  NULL,     NULL};
    const BnArgs bn_g = {y_conv.gpu, gamma.gpu, beta.gpu, rmean.gpu, rvar.gpu,
                         smean.gpu,  sinv.gpu,  NULL,     NULL};
    cpu->conv_bn_forward_train(cpu, &s, dt, x.cpu, w.cpu, &bn_c, residual ? res.cpu : NULL, 1, momentum, eps,
                               y_conv.cpu, y.cpu);
    gpu->conv_bn_forward_train(gpu, &s, dt, x.gpu, w.gpu, &bn_g, residual ? res.gpu : NULL, 1, momentum, eps,
                               y_conv.gpu, y.gpu);
    // The fused statistics sum the convolution's fp32 results, the CPU's the rounded y_conv: they differ by
    // about one rounding of dt over the square root of the rows (measured up to 2.5e-4 in fp16 over 98 rows,
    // 4e-5 over 784); a wrong formula is off by O(1).
    const double stat_tol = ran_fused ? 1e-3 : TOL_F32;
    const struct {
        const char *name;
        Twin t;
        double tol;
    } outs[] = {{"y_conv", y_conv, tol_for(dt)},   {"y", y, tol_for(dt)},
                {"save_mean", smean, stat_tol},    {"save_invstd", sinv, stat_tol},
                {"running_mean", rmean, stat_tol}, {"running_var", rvar, stat_tol}};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
        snprintf(what, sizeof what, "%s forward %s", label, outs[i].name);
        expect_close_tol(what, outs[i].t, outs[i].tol);
    }

    // The backward from the GPU's forward results, with the mask the GPU's forward left for it.
    twin_take_gpu(y_conv), twin_take_gpu(y), twin_take_gpu(smean), twin_take_gpu(sinv);
    Twin dy = twin_random(dt, ny, case_seed(5, _i, 7), -1, 1);
    Twin dx = twin_output(dt, ny), dgamma = twin_output(dt, c), dbeta = twin_output(dt, c);
    Twin dres = twin_output(dt, ny);
    cpu->bn_backward(cpu, rows, c, dt, y_conv.cpu, y.cpu, dy.cpu, 1, gamma.cpu, smean.cpu, sinv.cpu, dx.cpu,
                     0, dgamma.cpu, dbeta.cpu, 0, residual ? dres.cpu : NULL);
    gpu->bn_backward(gpu, rows, c, dt, y_conv.gpu, y.gpu, dy.gpu, 1, gamma.gpu, smean.gpu, sinv.gpu, dx.gpu,
                     0, dgamma.gpu, dbeta.gpu, 0, residual ? dres.gpu : NULL);
    snprintf(what, sizeof what, "%s backward", label);
    expect_bn_gradients(what, dx, dgamma, dbeta, residual ? &dres : NULL);
    cuda_backend_set_conv_bn(gpu, 0);
    twin_free(x), twin_free(w), twin_free(res), twin_free(gamma), twin_free(beta), twin_free(rmean);
    twin_free(rvar), twin_free(smean), twin_free(sinv), twin_free(y_conv), twin_free(y), twin_free(dy);
    twin_free(dx), twin_free(dgamma), twin_free(dbeta), twin_free(dres);
}
END_TEST

// bn_conv_bn_forward_train (a batch norm + ReLU, the 1x1 convolution it feeds, that convolution's batch norm)
// against the CPU's bn_forward_train, conv_forward and bn_forward_train, then the first batch norm's backward
// from the GPU's forward: with the first batch norm in the convolution's prologue (fused: its output,
// scratch, must stay unwritten, and its backward must take the ReLU mask from x) and as the calls (unfused).
// Loop index as test_conv_bn's.
START_TEST(test_bn_conv_bn) {
    const ConvBnCase cc = conv_bn_case(_i);
    const DType dt = cc.dt;
    const int residual = cc.residual;
    const ConvShape s = cc.s;
    const int rows = s.n * s.out_h * s.out_w, c = s.c_out, c_in = s.c_in;
    const size_t nx = (size_t)rows * c_in, ny = (size_t)rows * c, nw = (size_t)c * c_in;
    const float momentum = 0.1f, eps = 1e-5f;
    char what[160], label[96];
    const int ran_fused = conv_bn_case_prepare(&cc, FUSE_BN_CONV_BN, label, sizeof label);

    // x as a convolution's raw output (a mean away from 0)
    Twin x = twin_random(dt, nx, case_seed(6, _i, 0), -1.0f, 2.0f);
    const float wb = sqrtf(3.0f / (float)c_in);
    Twin w = twin_random(dt, nw, case_seed(6, _i, 1), -0.5f * wb, 1.5f * wb);
    Twin res = twin_random(dt, ny, case_seed(6, _i, 2), -1, 1);
    enum { GAMMA, BETA, RMEAN, RVAR, SMEAN, SINV, PARTS };
    static const char *part_names[PARTS] = {"gamma",       "beta",      "running_mean",
                                            "running_var", "save_mean", "save_invstd"};
    Twin t[2][PARTS];  // [0] the batch norm in front (c_in), [1] the one after (c)
    for (int l = 0; l < 2; l++) {
        const int ch = l ? c : c_in;
        t[l][GAMMA] = twin_random(DTYPE_F32, ch, case_seed(6, _i, 10 + 10 * l), 0.5f, 1.5f);
        t[l][BETA] = twin_random(DTYPE_F32, ch, case_seed(6, _i, 11 + 10 * l), -0.5f, 0.5f);
        t[l][RMEAN] = twin_random(DTYPE_F32, ch, case_seed(6, _i, 12 + 10 * l), -0.1f, 0.1f);
        t[l][RVAR] = twin_random(DTYPE_F32, ch, case_seed(6, _i, 13 + 10 * l), 0.5f, 1.5f);
        t[l][SMEAN] = twin_output(DTYPE_F32, ch), t[l][SINV] = twin_output(DTYPE_F32, ch);
    }
    Twin scratch = twin_output(dt, nx), y_conv = twin_output(dt, ny), y = twin_output(dt, ny);
    BnArgs args[2][2];  // [layer][0 CPU, 1 GPU]
    for (int l = 0; l < 2; l++)
        for (int side = 0; side < 2; side++) {
            void *p[PARTS];
            for (int q = 0; q < PARTS; q++) p[q] = side ? t[l][q].gpu : t[l][q].cpu;
            const void *bx = l ? (side ? y_conv.gpu : y_conv.cpu) : (side ? x.gpu : x.cpu);
            args[l][side] = (BnArgs){bx, p[GAMMA], p[BETA], p[RMEAN], p[RVAR], p[SMEAN], p[SINV], NULL, NULL};
        }
    cpu->bn_conv_bn_forward_train(cpu, &args[0][0], scratch.cpu, &s, dt, w.cpu, &args[1][0],
                                  residual ? res.cpu : NULL, 1, momentum, eps, y_conv.cpu, y.cpu);
    gpu->bn_conv_bn_forward_train(gpu, &args[0][1], scratch.gpu, &s, dt, w.gpu, &args[1][1],
                                  residual ? res.gpu : NULL, 1, momentum, eps, y_conv.gpu, y.gpu);
    snprintf(what, sizeof what, "%s forward y_conv", label);
    expect_close(what, y_conv);
    snprintf(what, sizeof what, "%s forward y", label);
    expect_close(what, y);
    // the batch norm after the convolution: its sums from the epilogue when fused (as test_conv_bn's), over
    // inputs the prologue formed with scale and bias rounded to dt
    const double stat_tol = ran_fused ? 2e-3 : TOL_F32;
    for (int l = 0; l < 2; l++)
        for (int q = RMEAN; q <= SINV; q++) {
            snprintf(what, sizeof what, "%s forward %s %s", label, l ? "bn" : "bn_in", part_names[q]);
            expect_close_tol(what, t[l][q], l ? stat_tol : TOL_F32);
        }
    if (ran_fused) {
        expect_untouched(label, "forward", scratch);
    } else {
        snprintf(what, sizeof what, "%s forward bn_in's output", label);
        expect_close(what, scratch);
    }

    // bn_in's backward from the GPU's statistics: the GPU's y is scratch as the op left it (NaN when fused:
    // the backward must not read it). The CPU's mask is the GPU's y where the GPU wrote it (one element on
    // the other side of 0 from a last-bit difference would move dx by ~1e-3 of its norm at this size, past
    // fp32's tolerance), else the CPU's own output.
    twin_take_gpu(t[0][SMEAN]), twin_take_gpu(t[0][SINV]);
    if (!ran_fused) twin_take_gpu(scratch);
    Twin dy = twin_random(dt, nx, case_seed(6, _i, 30), -1, 1);
    Twin dx = twin_output(dt, nx), dgamma = twin_output(dt, c_in), dbeta = twin_output(dt, c_in);
    cpu->bn_backward(cpu, rows, c_in, dt, x.cpu, scratch.cpu, dy.cpu, 1, t[0][GAMMA].cpu, t[0][SMEAN].cpu,
                     t[0][SINV].cpu, dx.cpu, 0, dgamma.cpu, dbeta.cpu, 0, NULL);
    gpu->bn_backward(gpu, rows, c_in, dt, x.gpu, scratch.gpu, dy.gpu, 1, t[0][GAMMA].gpu, t[0][SMEAN].gpu,
                     t[0][SINV].gpu, dx.gpu, 0, dgamma.gpu, dbeta.gpu, 0, NULL);
    snprintf(what, sizeof what, "%s bn_in backward", label);
    expect_bn_gradients(what, dx, dgamma, dbeta, NULL);
    cuda_backend_set_conv_bn(gpu, 0);
    for (int l = 0; l < 2; l++)
        for (int q = 0; q < PARTS; q++) twin_free(t[l][q]);
    twin_free(x), twin_free(w), twin_free(res), twin_free(scratch), twin_free(y_conv), twin_free(y);
    twin_free(dy), twin_free(dx), twin_free(dgamma), twin_free(dbeta);
}
END_TEST

// bn_conv_backward_data (the data gradient through a 1x1 convolution and the batch norm + ReLU in front of
// it) against the CPU's conv_backward_data and bn_backward, from the GPU's forward of that batch norm (its
// output and statistics given to the CPU, so that both sides mask the same elements): the ReLU's mask and the
// batch norm's sums from the data gradient's epilogue (fused, cudnn_conv_bn.cu) and the two calls (unfused).
// Loop index as test_conv_bn's, the residual bit standing for accumulate_params (dgamma and dbeta start from
// random values).
START_TEST(test_bn_conv_backward_data) {
    const ConvBnCase cc = conv_bn_case(_i);
    const DType dt = cc.dt;
    const int accumulate = cc.residual;
    const ConvShape s = cc.s;
    const int rows = s.n * s.h * s.w, c_in = s.c_in;
    const size_t nx = (size_t)rows * c_in, ny = (size_t)rows * s.c_out, nw = (size_t)s.c_out * c_in;
    char label[96];
    gpu->bn_prepare(gpu, rows, c_in, dt, 0, 1);
    conv_bn_case_prepare(&cc, FUSE_BN_CONV_BACKWARD, label, sizeof label);

    // the batch norm's forward on the GPU, over x as a convolution's raw output (a mean away from 0)
    Twin x = twin_random(dt, nx, case_seed(12, _i, 0), -1.0f, 2.0f);
    Twin gamma = twin_random(DTYPE_F32, c_in, case_seed(12, _i, 1), 0.5f, 1.5f);
    Twin beta = twin_random(DTYPE_F32, c_in, case_seed(12, _i, 2), -0.5f, 0.5f);
    Twin rmean = twin_random(DTYPE_F32, c_in, case_seed(12, _i, 3), -0.1f, 0.1f);
    Twin rvar = twin_random(DTYPE_F32, c_in, case_seed(12, _i, 4), 0.5f, 1.5f);
    Twin smean = twin_output(DTYPE_F32, c_in), sinv = twin_output(DTYPE_F32, c_in), y = twin_output(dt, nx);
    gpu->bn_forward_train(gpu, rows, c_in, dt, x.gpu, NULL, 1, gamma.gpu, beta.gpu, rmean.gpu, rvar.gpu, 0.1f,
                          1e-5f, smean.gpu, sinv.gpu, y.gpu);
    twin_take_gpu(y), twin_take_gpu(smean), twin_take_gpu(sinv);

    const float wb = sqrtf(3.0f / (float)s.c_out);
    Twin w = twin_random(dt, nw, case_seed(12, _i, 5), -wb, wb);
    Twin dy = twin_random(dt, ny, case_seed(12, _i, 6), -1, 1);
    Twin dgamma = accumulate ? twin_random(dt, c_in, case_seed(12, _i, 7), -1, 1) : twin_output(dt, c_in);
    Twin dbeta = accumulate ? twin_random(dt, c_in, case_seed(12, _i, 8), -1, 1) : twin_output(dt, c_in);
    Twin dx = twin_output(dt, nx), scratch = twin_output(dt, nx);
    const BnArgs bn_c = {x.cpu,     gamma.cpu, beta.cpu,   rmean.cpu, rvar.cpu,
                         smean.cpu, sinv.cpu,  dgamma.cpu, dbeta.cpu};
    const BnArgs bn_g = {x.gpu,     gamma.gpu, beta.gpu,   rmean.gpu, rvar.gpu,
                         smean.gpu, sinv.gpu,  dgamma.gpu, dbeta.gpu};
    cpu->bn_conv_backward_data(cpu, &s, dt, dy.cpu, w.cpu, &bn_c, y.cpu, scratch.cpu, dx.cpu, accumulate);
    gpu->bn_conv_backward_data(gpu, &s, dt, dy.gpu, w.gpu, &bn_g, y.gpu, scratch.gpu, dx.gpu, accumulate);
    expect_bn_gradients(label, dx, dgamma, dbeta, NULL);
    cuda_backend_set_conv_bn(gpu, 0);
    twin_free(x), twin_free(gamma), twin_free(beta), twin_free(rmean), twin_free(rvar), twin_free(smean);
    twin_free(sinv), twin_free(y), twin_free(w), twin_free(dy), twin_free(dgamma), twin_free(dbeta);
    twin_free(dx), twin_free(scratch);
}
END_TEST

// ---- pooling ---------------------------------------------------------------------------------------------

// The same bits on both backends, element by element; any two NaNs count as equal (the GPU's fp16
// conversions give the canonical NaN, the host's keep the payload).
static void expect_same_bits(const char *what, Twin t) {
    float *g = download(gpu, t.dt, t.gpu, t.n);
    float *c = download(cpu, t.dt, t.cpu, t.n);
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < t.n; i++)
        if (!(isnan(g[i]) && isnan(c[i])) && memcmp(&g[i], &c[i], sizeof(float)) != 0 && differ++ == 0)
            first = i;
    const double g_first = g[first], c_first = c[first];
    free(g);
    free(c);
    printf("  %-58s %s  %zu of %zu elements differ\n", what, dtype_name(t.dt), differ, t.n);
    ck_assert_msg(differ == 0, "%s (%s, seed %llu): %zu elements differ, the first at %zu: GPU %g, CPU %g",
                  what, dtype_name(t.dt), (unsigned long long)base_seed, differ, first, g_first, c_first);
}

// Max pooling must match the CPU bit for bit: the same max, the same tie rule, the same fp32 sums in the
// same order. The first cases take the fused 3x3/2 pad 1 path (16-byte packs): the stem's 112x112 (two
// column tiles, four row bands), odd sizes, fp32, c = 256; the rest the two-pass path: c = 2048 (too many
// packs for the fused block), few or odd channels (no packs), 2x2/2, 3x3/1; the last ones bf16 on both paths.
static const struct {
    PoolShape shape;  // out_h, out_w: filled in by the test
    DType dt;
} maxpool_cases[] = {
    {{2, 112, 112, 64, 3, 2, 1, 0, 0}, DTYPE_F16},  {{2, 111, 113, 64, 3, 2, 1, 0, 0}, DTYPE_F16},
    {{2, 57, 56, 64, 3, 2, 1, 0, 0}, DTYPE_F32},    {{3, 15, 17, 256, 3, 2, 1, 0, 0}, DTYPE_F16},
    {{1, 9, 10, 2048, 3, 2, 1, 0, 0}, DTYPE_F16},   {{4, 15, 17, 6, 3, 2, 1, 0, 0}, DTYPE_F16},
    {{4, 15, 17, 7, 3, 2, 1, 0, 0}, DTYPE_F32},     {{4, 15, 17, 64, 2, 2, 0, 0, 0}, DTYPE_F32},
    {{2, 16, 17, 64, 2, 2, 0, 0, 0}, DTYPE_F16},    {{2, 14, 13, 64, 3, 1, 1, 0, 0}, DTYPE_F16},
    {{2, 112, 112, 64, 3, 2, 1, 0, 0}, DTYPE_BF16}, {{3, 15, 17, 256, 3, 2, 1, 0, 0}, DTYPE_BF16},
    {{1, 9, 10, 2048, 3, 2, 1, 0, 0}, DTYPE_BF16},  {{4, 15, 17, 6, 3, 2, 1, 0, 0}, DTYPE_BF16},
};
#define MAXPOOL_CASES (int)(sizeof maxpool_cases / sizeof maxpool_cases[0])

// Loop index: case _i / 2; odd _i puts a NaN in every 1009th input (its windows' max is NaN and routes
// nowhere). Inputs are multiples of 1/4 in [-2, 2] (-0 among them), so windows hold ties.
START_TEST(test_maxpool) {
    const int with_nan = _i & 1;
    const DType dt = maxpool_cases[_i / 2].dt;
    PoolShape s = maxpool_cases[_i / 2].shape;
    s.out_h = (s.h + 2 * s.pad - s.k) / s.stride + 1;
    s.out_w = (s.w + 2 * s.pad - s.k) / s.stride + 1;
    const size_t nx = (size_t)s.n * s.h * s.w * s.c, ny = (size_t)s.n * s.out_h * s.out_w * s.c;
    char what[128];
    snprintf(what, sizeof what, "maxpool %dx%dx%dx%d k%d s%d p%d%s", s.n, s.h, s.w, s.c, s.k, s.stride, s.pad,
             with_nan ? " NaN" : "");

    float *v = malloc(nx * sizeof(float));
    tu_fill_uniform(v, nx, case_seed(4, _i, 0), -2.0f, 2.0f);
    for (size_t i = 0; i < nx; i++) v[i] = roundf(v[i] * 4.0f) / 4.0f;
    if (with_nan)
        for (size_t i = 500; i < nx; i += 1009) v[i] = NAN;
    Twin x = twin_values(dt, v, nx);
    free(v);
    Twin y = twin_output(dt, ny), dx = twin_output(dt, nx);
    Twin dy = twin_random(dt, ny, case_seed(4, _i, 1), -1, 1);

    cpu->maxpool_forward(cpu, &s, dt, x.cpu, y.cpu);
    gpu->maxpool_forward(gpu, &s, dt, x.gpu, y.gpu);
    expect_same_bits(what, y);
    twin_take_cpu(y);
    cpu->maxpool_backward(cpu, &s, dt, x.cpu, y.cpu, dy.cpu, dx.cpu);
    gpu->maxpool_backward(gpu, &s, dt, x.gpu, y.gpu, dy.gpu, dx.gpu);
    strcat(what, " backward");
    expect_same_bits(what, dx);
    twin_free(x), twin_free(y), twin_free(dx), twin_free(dy);
}
END_TEST

// Loop index: DTS[_i % N_DTS]; _i / N_DTS 1: few channels (no vector path).
START_TEST(test_avgpool) {
    const DType dt = DTS[_i % N_DTS];
    const int n = 4, hw = 49, c = _i / N_DTS ? 10 : 256;
    Twin x = twin_random(dt, (size_t)n * hw * c, case_seed(5, _i, 0), -1, 1);
    Twin dy = twin_random(dt, (size_t)n * c, case_seed(5, _i, 1), -1, 1);
    Twin y = twin_output(dt, (size_t)n * c), dx = twin_output(dt, (size_t)n * hw * c);
    char what[128];
    cpu->avgpool_forward(cpu, n, hw, c, dt, x.cpu, y.cpu);
    gpu->avgpool_forward(gpu, n, hw, c, dt, x.gpu, y.gpu);
    snprintf(what, sizeof what, "avgpool hw %d c %d forward", hw, c);
    expect_close(what, y);
    cpu->avgpool_backward(cpu, n, hw, c, dt, dy.cpu, dx.cpu);
    gpu->avgpool_backward(gpu, n, hw, c, dt, dy.gpu, dx.gpu);
    snprintf(what, sizeof what, "avgpool hw %d c %d backward", hw, c);
    expect_close(what, dx);
    twin_free(x), twin_free(dy), twin_free(y), twin_free(dx);
}
END_TEST

// ---- linear --------------------------------------------------------------------------------------------

// Loop index: DTS[_i % N_DTS]; _i / N_DTS 1: odd sizes (no tensor-core-friendly multiples of 8).
START_TEST(test_linear) {
    const DType dt = DTS[_i % N_DTS];
    const int odd = _i / N_DTS, n = odd ? 3 : 4, in = odd ? 130 : 256, out = odd ? 10 : 100;
    char what[128];
    Twin x = twin_random(dt, (size_t)n * in, case_seed(6, _i, 0), -1, 1);
    Twin w = twin_random(dt, (size_t)out * in, case_seed(6, _i, 1), -0.1f, 0.1f);
    Twin b = twin_random(dt, (size_t)out, case_seed(6, _i, 2), -1, 1);
    Twin dy = twin_random(dt, (size_t)n * out, case_seed(6, _i, 3), -1, 1);
    Twin y = twin_output(dt, (size_t)n * out), dx = twin_output(dt, (size_t)n * in);
    Twin dw = twin_output(dt, (size_t)out * in), db = twin_output(dt, (size_t)out);

    cpu->linear_forward(cpu, n, in, out, dt, x.cpu, w.cpu, b.cpu, y.cpu);
    gpu->linear_forward(gpu, n, in, out, dt, x.gpu, w.gpu, b.gpu, y.gpu);
    snprintf(what, sizeof what, "linear %d x %d -> %d forward", n, in, out);
    expect_close(what, y);
    for (int acc = 0; acc <= 1; acc++) {
        if (acc) {
            twin_poison(dx);  // dx is always overwritten
            twin_refill_like(dw, case_seed(6, _i, 4));
            twin_refill_like(db, case_seed(6, _i, 5));
        }
        cpu->linear_backward(cpu, n, in, out, dt, x.cpu, w.cpu, dy.cpu, dx.cpu, dw.cpu, db.cpu, acc);
        gpu->linear_backward(gpu, n, in, out, dt, x.gpu, w.gpu, dy.gpu, dx.gpu, dw.gpu, db.gpu, acc);
        snprintf(what, sizeof what, "linear %d x %d -> %d backward dx%s", n, in, out,
                 acc ? " (accumulate run)" : "");
        expect_close(what, dx);
        snprintf(what, sizeof what, "linear %d x %d -> %d backward dw%s", n, in, out,
                 acc ? " accumulate" : "");
        expect_close(what, dw);
        snprintf(what, sizeof what, "linear %d x %d -> %d backward db%s", n, in, out,
                 acc ? " accumulate" : "");
        expect_close(what, db);
    }
    twin_free(x), twin_free(w), twin_free(b), twin_free(dy), twin_free(y), twin_free(dx), twin_free(dw),
        twin_free(db);
}
END_TEST

// ---- loss -----------------------------------------------------------------------------------------------

// A BatchMix in both backends' memory.
static Twin twin_mix(const BatchMix *m) {
    Twin t = {cpu->alloc(cpu, sizeof *m), gpu->alloc(gpu, sizeof *m), 0, DTYPE_U8};
    cpu->to_device(cpu, t.cpu, m, sizeof *m);
    gpu->to_device(gpu, t.gpu, m, sizeof *m);
    return t;
}

// Loop index: DTS[_i % N_DTS] the logits' dtype; of k = _i / N_DTS, bits 0 ten classes instead of a
// thousand, 1 a device loss scale, 2 label smoothing 0.1, 3 mixed targets (lam 0.3, one row's rolled label
// equal to its own).
START_TEST(test_softmax_xent) {
    const DType dt = DTS[_i % N_DTS];
    const int k = _i / N_DTS, n = k & 1 ? 5 : 8, classes = k & 1 ? 10 : 1000, scaled = (k >> 1) & 1;
    const float smoothing = (k >> 2) & 1 ? 0.1f : 0.0f;
    const int mixed = (k >> 3) & 1;
    const float seed_factor = 1.0f / (2.0f * n);  // as if 2 ranks
    char what[128], tag[64];
    snprintf(tag, sizeof tag, "%d x %d%s%s%s", n, classes, scaled ? " scaled" : "",
             smoothing != 0 ? " smoothed" : "", mixed ? " mixed" : "");
    Twin logits = twin_random(dt, (size_t)n * classes, case_seed(7, _i, 0), -5, 5);
    float lf[8];
    tu_fill_uniform(lf, (size_t)n, case_seed(7, _i, 1), 0.0f, (float)classes);
    int32_t labels_host[8];
    for (int r = 0; r < n; r++) labels_host[r] = (int32_t)lf[r] < classes ? (int32_t)lf[r] : classes - 1;
    labels_host[2] = labels_host[1];
    int32_t *lab_c = cpu->alloc(cpu, sizeof labels_host), *lab_g = gpu->alloc(gpu, sizeof labels_host);
    cpu->to_device(cpu, lab_c, labels_host, sizeof labels_host);
    gpu->to_device(gpu, lab_g, labels_host, sizeof labels_host);
    const BatchMix mix_value = {.lam = 0.3f, .rest = 0.7f, .blend = 1};
    Twin mix = twin_mix(&mix_value);
    const float scale_value = 1024.0f;
    Twin scale = twin_values(DTYPE_F32, &scale_value, 1);
    Twin loss = twin_output(DTYPE_F32, 1), dlogits = twin_output(dt, (size_t)n * classes);

    cpu->softmax_xent(cpu, n, classes, dt, logits.cpu, lab_c, mixed ? mix.cpu : NULL, smoothing, loss.cpu,
                      dlogits.cpu, scaled ? scale.cpu : NULL, seed_factor);
    gpu->softmax_xent(gpu, n, classes, dt, logits.gpu, lab_g, mixed ? mix.gpu : NULL, smoothing, loss.gpu,
                      dlogits.gpu, scaled ? scale.gpu : NULL, seed_factor);
    snprintf(what, sizeof what, "softmax_xent %s loss", tag);
    expect_close_tol(what, loss, TOL_F32);
    snprintf(what, sizeof what, "softmax_xent %s dlogits", tag);
    expect_close(what, dlogits);
    cpu->free(cpu, lab_c), gpu->free(gpu, lab_g);
    twin_free(logits), twin_free(mix), twin_free(scale), twin_free(loss), twin_free(dlogits);
}
END_TEST

// ---- batch mixing -----------------------------------------------------------------------------------------

// Loop index: DTS[_i % N_DTS]; of k = _i / N_DTS, bits 0 CutMix instead of MixUp, 1 a ResNeXt input's shape
// (8 x 224 x 224 x 3) instead of an odd one (5 x 7 x 9 x 3). Both round each product and the sum alone:
// bitwise equal to the CPU.
START_TEST(test_batch_mix) {
    const DType dt = DTS[_i % N_DTS];
    const int cut = (_i / N_DTS) & 1, big = (_i / N_DTS >> 1) & 1;
    const int n = big ? 8 : 5, h = big ? 224 : 7, w = big ? 224 : 9, c = 3;
    const size_t count = (size_t)n * h * w * c, bytes = count * dtype_size(dt);
    const BatchMix m =
        cut ? (BatchMix){.lam = 0.59f, .rest = 0.41f, .blend = 0, .x1 = 1, .y1 = 2, .x2 = w, .y2 = h - 1}
            : (BatchMix){.lam = 0.137f, .rest = (float)(1.0 - (double)0.137f), .blend = 1};
    Twin mix = twin_mix(&m);
    Twin x = twin_random(dt, count, case_seed(13, _i, 0), -2.5f, 2.5f);
    void *before = download_raw(cpu, x.cpu, bytes);
    cpu->batch_mix(cpu, dt, x.cpu, n, h, w, c, mix.cpu);
    gpu->batch_mix(gpu, dt, x.gpu, n, h, w, c, mix.gpu);
    void *cc = download_raw(cpu, x.cpu, bytes), *gg = download_raw(gpu, x.gpu, bytes);
    const int same = memcmp(cc, gg, bytes) == 0, changed = memcmp(cc, before, bytes) != 0;
    printf("  batch_mix %s %d x %d x %d x %d %-27s %s  %s\n", cut ? "CutMix" : "MixUp ", n, h, w, c, "",
           dtype_name(dt), same ? "bitwise equal to the CPU" : "DIFFERS");
    ck_assert_msg(changed, "batch_mix changed nothing");
    ck_assert_msg(same, "batch_mix %s %s differs from the CPU (seed %llu)", cut ? "CutMix" : "MixUp",
                  dtype_name(dt), (unsigned long long)base_seed);
    free(before), free(cc), free(gg);
    twin_free(mix), twin_free(x);
}
END_TEST

// ---- AMP and optimizer -----------------------------------------------------------------------------------

typedef struct NonfiniteCase {
    const char *label;
    long bad;  // index given inf or NaN, -1 for none
    float bad_value;
    size_t offset;  // the checked range starts here (an unaligned start when 1)
    long trim;      // and ends this many elements before the buffer's end
    float flag_before, flag_after;
} NonfiniteCase;

// The buffer holds N_CHECK + 1 elements, including the 16-bit dtype's largest finite values (fp16 65504,
// bf16 0x7f7f), which must not trip it.
#define N_CHECK 100003
static const NonfiniteCase nonfinite_cases[] = {
    {"all finite", -1, 0, 0, 1, 0, 0},
    {"inf in the middle", 50001, INFINITY, 0, 1, 0, 1},
    {"NaN in the last element", N_CHECK - 1, NAN, 0, 1, 0, 1},
    {"-inf first of an unaligned range", 1, -INFINITY, 1, 1, 0, 1},
    {"NaN just before the range", 0, NAN, 1, 1, 0, 0},
    {"NaN just after the range", N_CHECK, NAN, 0, 1, 0, 0},
    {"all finite, flag already set", -1, 0, 0, 1, 1, 1},
};
#define NONFINITE_CASES (int)(sizeof nonfinite_cases / sizeof nonfinite_cases[0])

START_TEST(test_nonfinite_check) {
    const NonfiniteCase *nc = &nonfinite_cases[_i / N_DTS];
    const DType dt = DTS[_i % N_DTS];
    const float largest = dt == DTYPE_BF16 ? 0x1.fep127f : FP16_MAX;
    const size_t total = N_CHECK + 1;
    float *v = malloc(total * sizeof(float));
    tu_fill_uniform(v, total, case_seed(8, _i, 0), -1000, 1000);
    v[7] = largest, v[N_CHECK / 2 + 3] = -largest;
    if (nc->bad >= 0) v[nc->bad] = nc->bad_value;
    Twin g = twin_values(dt, v, total);
    free(v);
    Twin flag = twin_values(DTYPE_F32, &nc->flag_before, 1);
    const size_t n = total - nc->offset - (size_t)nc->trim;
    const size_t off_bytes = nc->offset * dtype_size(dt);
    cpu->nonfinite_check(cpu, dt, (char *)g.cpu + off_bytes, n, flag.cpu);
    gpu->nonfinite_check(gpu, dt, (char *)g.gpu + off_bytes, n, flag.gpu);
    float fc, fg;
    cpu->to_host(cpu, &fc, flag.cpu, sizeof fc);
    gpu->to_host(gpu, &fg, flag.gpu, sizeof fg);
    printf("  nonfinite_check %-40s %s  flag %g (expected %g)\n", nc->label, dtype_name(dt), fg,
           nc->flag_after);
    ck_assert_msg(fg == nc->flag_after, "nonfinite_check %s (%s): flag %g, expected %g", nc->label,
                  dtype_name(dt), fg, nc->flag_after);
    ck_assert_msg(fc == fg, "nonfinite_check %s (%s): CPU flag %g, GPU %g", nc->label, dtype_name(dt), fc,
                  fg);
    twin_free(g), twin_free(flag);
}
END_TEST

#define N_SGD 100003

static ScalerState scaler_state(float scale, int32_t count, float found_inf, int32_t skipped) {
    ScalerState st = {scale, count, found_inf, skipped, 0};
    return st;
}

static Twin twin_state(const ScalerState *st) {
    Twin t = {cpu->alloc(cpu, sizeof *st), gpu->alloc(gpu, sizeof *st), 1, DTYPE_F32};
    cpu->to_device(cpu, t.cpu, st, sizeof *st);
    gpu->to_device(gpu, t.gpu, st, sizeof *st);
    return t;
}

// Loop index: DTS[_i % N_DTS] the gradients' dtype (and a 16-bit one's compute copy); of k = _i / N_DTS,
// bits 0 nesterov, 1 no compute copy (fp32 gradients never have one), 2 range starting one element in (the
// unaligned head path), 3 two weight-decay groups (a group byte per 64 elements of the range) and a clip
// norm (factor about 1/3). The update is a fixed sequence of fp32 operations, so the tolerance on the
// masters and momenta is far tighter than 1e-4: only a contracted multiply-add could differ, by an ulp.
START_TEST(test_sgd_step) {
    const DType dt = DTS[_i % N_DTS];
    const int k = _i / N_DTS, nesterov = k & 1, with_copy = !((k >> 1) & 1) && dt != DTYPE_F32,
              grouped = (k >> 3) & 1;
    const size_t off = (k >> 2) & 1, n = N_SGD - off;
    const SgdParams p = {0.9f, {1e-4f, grouped ? 3e-2f : 1e-4f}, nesterov, 1.0f};
    const ScalerState st = scaler_state(1024.0f, 17, 0.0f, 3);
    const float lr_value = 0.1f, norm_value = 3.0f;
    Twin lr = twin_values(DTYPE_F32, &lr_value, 1), norm = twin_values(DTYPE_F32, &norm_value, 1);
    const size_t spans = (n + SGD_DECAY_SPAN - 1) / SGD_DECAY_SPAN;
    uint8_t *groups = malloc(spans);
    for (size_t k = 0; k < spans; k++) groups[k] = (uint8_t)((k * 7 + base_seed) % 3 == 0);
    uint8_t *groups_cpu = cpu->alloc(cpu, spans), *groups_gpu = gpu->alloc(gpu, spans);
    cpu->to_device(cpu, groups_cpu, groups, spans);
    gpu->to_device(gpu, groups_gpu, groups, spans);
    char what[128];
    Twin grad = twin_random(dt, N_SGD, case_seed(9, _i, 0), -1000, 1000);
    Twin master = twin_random(DTYPE_F32, N_SGD, case_seed(9, _i, 1), -1, 1);
    Twin mom = twin_random(DTYPE_F32, N_SGD, case_seed(9, _i, 2), -0.1f, 0.1f);
    Twin copy = twin_output(dt, N_SGD);
    Twin state = twin_state(&st);
    const size_t go = off * dtype_size(dt);
    cpu->sgd_step(cpu, n, dt, (char *)grad.cpu + go, (float *)master.cpu + off, (float *)mom.cpu + off,
                  with_copy ? (char *)copy.cpu + go : NULL, &p, grouped ? groups_cpu : NULL, lr.cpu,
                  grouped ? norm.cpu : NULL, state.cpu);
    gpu->sgd_step(gpu, n, dt, (char *)grad.gpu + go, (float *)master.gpu + off, (float *)mom.gpu + off,
                  with_copy ? (char *)copy.gpu + go : NULL, &p, grouped ? groups_gpu : NULL, lr.gpu,
                  grouped ? norm.gpu : NULL, state.gpu);
    const char *variant = grouped ? (nesterov ? "nesterov groups clip" : "momentum groups clip")
                                  : (nesterov ? "nesterov" : "momentum");
    snprintf(what, sizeof what, "sgd_step %s grad %s offset %zu master", variant, dtype_name(dt), off);
    expect_close_tol(what, master, 1e-6);
    snprintf(what, sizeof what, "sgd_step %s grad %s offset %zu momentum", variant, dtype_name(dt), off);
    expect_close_tol(what, mom, 1e-6);
    if (with_copy) {
        if (off) {  // the element before the range stays NaN on both: make it comparable
            const float zero = 0.0f;
            fill(cpu, copy.cpu, dt, &zero, 1);
            fill(gpu, copy.gpu, dt, &zero, 1);
        }
        snprintf(what, sizeof what, "sgd_step %s grad %s offset %zu compute copy", variant, dtype_name(dt),
                 off);
        expect_close(what, copy);
    }
    cpu->free(cpu, groups_cpu), gpu->free(gpu, groups_gpu), free(groups);
    twin_free(grad), twin_free(master), twin_free(mom), twin_free(copy), twin_free(state), twin_free(lr);
    twin_free(norm);
}
END_TEST

// With the agreed verdict set, nothing is written: masters, momenta and copies keep every bit, and a NaN
// norm (what such a step's gradients give) is never used.
START_TEST(test_sgd_step_skipped) {
    const DType dt = DTS[_i];
    const DType copy_dt = dt == DTYPE_F32 ? DTYPE_F16 : dt;  // fp32: no copy is passed, this one stays out
    const SgdParams p = {0.9f, {1e-4f, 1e-4f}, 0, 1.0f};
    const ScalerState st = scaler_state(1024.0f, 17, 1.0f, 3);
    const float lr_value = 0.1f, norm_value = NAN;
    Twin lr = twin_values(DTYPE_F32, &lr_value, 1), norm = twin_values(DTYPE_F32, &norm_value, 1);
    Twin grad = twin_random(dt, N_SGD, case_seed(10, _i, 0), -1000, 1000);
    Twin master = twin_random(DTYPE_F32, N_SGD, case_seed(10, _i, 1), -1, 1);
    Twin mom = twin_random(DTYPE_F32, N_SGD, case_seed(10, _i, 2), -0.1f, 0.1f);
    Twin copy = twin_random(copy_dt, N_SGD, case_seed(10, _i, 3), -1, 1);
    Twin state = twin_state(&st);
    void *m0 = download_raw(gpu, master.gpu, N_SGD * 4), *v0 = download_raw(gpu, mom.gpu, N_SGD * 4);
    void *c0 = download_raw(gpu, copy.gpu, N_SGD * 2);
    gpu->sgd_step(gpu, N_SGD, dt, grad.gpu, master.gpu, mom.gpu, dt == DTYPE_F32 ? NULL : copy.gpu, &p, NULL,
                  lr.gpu, norm.gpu, state.gpu);
    void *m1 = download_raw(gpu, master.gpu, N_SGD * 4), *v1 = download_raw(gpu, mom.gpu, N_SGD * 4);
    void *c1 = download_raw(gpu, copy.gpu, N_SGD * 2);
    printf("  sgd_step skipped (found_inf 1)                             %s  %s\n", dtype_name(dt),
           memcmp(m0, m1, N_SGD * 4) || memcmp(v0, v1, N_SGD * 4) || memcmp(c0, c1, N_SGD * 2) ? "WROTE"
                                                                                               : "untouched");
    ck_assert_msg(memcmp(m0, m1, N_SGD * 4) == 0, "skipped sgd_step changed the masters");
    ck_assert_msg(memcmp(v0, v1, N_SGD * 4) == 0, "skipped sgd_step changed the momenta");
    ck_assert_msg(memcmp(c0, c1, N_SGD * 2) == 0, "skipped sgd_step changed the compute copies");
    free(m0), free(v0), free(c0), free(m1), free(v1), free(c1);
    twin_free(grad), twin_free(master), twin_free(mom), twin_free(copy), twin_free(state), twin_free(lr);
    twin_free(norm);
}
END_TEST

// Loop index: DTS[_i % N_DTS] the gradients; of k = _i / N_DTS, bits 0 range starting one element in, 1 an
// inf planted in the range. The
// GPU sums squares in fp32 (a tree), the CPU in double: 1e-5 apart at most on 10^5 terms. The GPU's norm
// of one buffer is the same bits every time (every rank computes it on the same reduced buffer).
START_TEST(test_grad_norm) {
    const DType dt = DTS[_i % N_DTS];
    const size_t off = (_i / N_DTS) & 1, n = N_SGD - off;
    const int planted = (_i / N_DTS >> 1) & 1;
    float *v = malloc(N_SGD * sizeof(float));
    tu_fill_uniform(v, N_SGD, case_seed(13, _i, 0), -1000, 1000);
    if (planted) v[N_SGD / 2] = INFINITY;
    Twin grad = twin_values(dt, v, N_SGD);
    free(v);
    const ScalerState st = scaler_state(512.0f, 0, 0.0f, 0);
    Twin state = twin_state(&st);
    Twin norm = twin_output(DTYPE_F32, 1);
    const size_t go = off * dtype_size(dt);
    cpu->grad_norm(cpu, dt, (char *)grad.cpu + go, n, state.cpu, norm.cpu);
    gpu->grad_norm(gpu, dt, (char *)grad.gpu + go, n, state.gpu, norm.gpu);
    float c, g, again;
    cpu->to_host(cpu, &c, norm.cpu, sizeof c);
    gpu->to_host(gpu, &g, norm.gpu, sizeof g);
    gpu->grad_norm(gpu, dt, (char *)grad.gpu + go, n, state.gpu, norm.gpu);
    gpu->to_host(gpu, &again, norm.gpu, sizeof again);
    printf("  grad_norm %s offset %zu%s: gpu %.9g cpu %.9g\n", dtype_name(dt), off,
           planted ? " inf planted" : "", g, c);
    ck_assert_msg(memcmp(&g, &again, sizeof g) == 0, "grad_norm differs between two runs: %a, %a", g, again);
    if (planted) {
        ck_assert_msg(isinf(g) && isinf(c), "an inf in the gradients: norm gpu %g cpu %g", g, c);
    } else {
        ck_assert_msg(fabsf(g - c) <= 1e-5f * c, "grad_norm (%s, seed %llu): gpu %.9g cpu %.9g",
                      dtype_name(dt), (unsigned long long)base_seed, g, c);
    }
    twin_free(grad), twin_free(state), twin_free(norm);
}
END_TEST

// ema_update's three modes, aligned and one element in: the rule is three fp32 operations each rounded on
// its own, so the GPU matches the CPU bitwise.
START_TEST(test_ema_update) {
    const EmaControl ctl = {_i % 3, 0.998908f, (float)(1.0 - 0.998908)};
    const size_t off = (size_t)(_i / 3), n = N_SGD - off;
    Twin avg = twin_random(DTYPE_F32, N_SGD, case_seed(14, _i, 0), -1, 1);
    Twin src = twin_random(DTYPE_F32, N_SGD, case_seed(14, _i, 1), -1, 1);
    Twin c = {cpu->alloc(cpu, sizeof ctl), gpu->alloc(gpu, sizeof ctl), 1, DTYPE_F32};
    cpu->to_device(cpu, c.cpu, &ctl, sizeof ctl);
    gpu->to_device(gpu, c.gpu, &ctl, sizeof ctl);
    void *before = download_raw(gpu, avg.gpu, N_SGD * 4);
    cpu->ema_update(cpu, n, (float *)avg.cpu + off, (const float *)src.cpu + off, c.cpu);
    gpu->ema_update(gpu, n, (float *)avg.gpu + off, (const float *)src.gpu + off, c.gpu);
    void *got = download_raw(gpu, avg.gpu, N_SGD * 4), *want = download_raw(cpu, avg.cpu, N_SGD * 4);
    printf("  ema_update mode %d offset %zu: %s\n", ctl.mode, off,
           memcmp(got, want, N_SGD * 4) ? "DIFFERS" : "bitwise");
    ck_assert_msg(memcmp(got, want, N_SGD * 4) == 0, "ema_update mode %d offset %zu: GPU and CPU differ",
                  ctl.mode, off);
    if (ctl.mode == EMA_SKIP) ck_assert_msg(memcmp(got, before, N_SGD * 4) == 0, "ema_update skip wrote");
    free(before), free(got), free(want);
    twin_free(avg), twin_free(src), twin_free(c);
}
END_TEST

typedef struct ScalerCase {
    const char *label;
    ScalerState before;
    float growth, backoff;
    int interval, dynamic;
    ScalerState after;
} ScalerCase;

static const ScalerCase scaler_cases[] = {
    {"clean step counts", {65536, 0, 0, 0, 0}, 2, 0.5f, 2000, 1, {65536, 1, 0, 0, 0}},
    {"interval reached grows", {65536, 1999, 0, 2, 0}, 2, 0.5f, 2000, 1, {131072, 0, 0, 2, 0}},
    {"inf backs off", {65536, 5, 1, 3, 2}, 2, 0.5f, 2000, 1, {32768, 0, 1, 4, 3}},
    {"clean step ends a run of skips", {65536, 5, 0, 3, 2}, 2, 0.5f, 2000, 1, {65536, 6, 0, 3, 0}},
    {"static scale counts the skip only", {65536, 5, 1, 3, 0}, 2, 0.5f, 2000, 0, {65536, 5, 1, 4, 1}},
    {"static scale, clean step", {65536, 5, 0, 3, 1}, 2, 0.5f, 2000, 0, {65536, 5, 0, 3, 0}},
    {"growth to inf keeps the scale", {3e38f, 1, 0, 0, 0}, 2, 0.5f, 2, 1, {3e38f, 0, 0, 0, 0}},
};
#define SCALER_CASES (int)(sizeof scaler_cases / sizeof scaler_cases[0])

START_TEST(test_scaler_update) {
    const ScalerCase *sc = &scaler_cases[_i];
    Twin state = twin_state(&sc->before);
    cpu->scaler_update(cpu, state.cpu, sc->growth, sc->backoff, sc->interval, sc->dynamic);
    gpu->scaler_update(gpu, state.gpu, sc->growth, sc->backoff, sc->interval, sc->dynamic);
    ScalerState c, g;
    cpu->to_host(cpu, &c, state.cpu, sizeof c);
    gpu->to_host(gpu, &g, state.gpu, sizeof g);
    printf("  scaler_update %-44s scale %g count %d skipped %d\n", sc->label, g.scale, (int)g.growth_count,
           (int)g.skipped_total);
    ck_assert_msg(
        g.scale == sc->after.scale && g.growth_count == sc->after.growth_count &&
            g.skipped_total == sc->after.skipped_total && g.found_inf == sc->after.found_inf &&
            g.skipped_run == sc->after.skipped_run,
        "scaler_update %s: GPU state scale %g count %d skipped %d in a row %d, expected %g %d %d %d",
        sc->label, g.scale, (int)g.growth_count, (int)g.skipped_total, (int)g.skipped_run, sc->after.scale,
        (int)sc->after.growth_count, (int)sc->after.skipped_total, (int)sc->after.skipped_run);
    ck_assert_msg(memcmp(&c, &g, sizeof c) == 0, "scaler_update %s: CPU and GPU states differ", sc->label);
    twin_free(state);
}
END_TEST

// ---- runner ---------------------------------------------------------------------------------------------

static Suite *gpu_ops_suite(void) {
    Suite *s = suite_create("gpu_ops");
    // Each case runs its test with _i in [first, end); a test's loops may be cut into several cases.
    struct {
        const char *name;
        const TTest *test;
        int first, end;
    } cases[] = {
        {"memory", test_memory_ops, 0, 1},
        {"cast", test_cast, 0, 6},
        {"input_normalize", test_input_normalize, 0, 2 * N_DTS},
        {"input_slots", test_input_slots_hand_over, 0, 1},
        {"conv", test_conv, 0, N_DTS * CONV_CASES},
        {"conv_padded", test_conv_padded, 0, 4},
        {"conv_own", test_conv_own, 0, 2 * CONV_OWN_CASES},
        {"batchnorm", test_batchnorm, 0, BN_LARGE_LOOP(0)},
        {"batchnorm_large_cudnn", test_batchnorm, BN_LARGE_LOOP(0), BN_LARGE_LOOP(1)},
        {"batchnorm_large_own", test_batchnorm, BN_LARGE_LOOP(1), BN_LARGE_LOOP(2)},
        {"batchnorm_large_own_cudnn", test_batchnorm, BN_LARGE_LOOP(2), BN_LARGE_LOOP(3)},
        {"batchnorm_large_cudnn_own", test_batchnorm, BN_LARGE_LOOP(3), BN_LARGE_LOOP(4)},
        {"batchnorm_large_auto", test_batchnorm, BN_LARGE_LOOP(4), BN_LARGE_LOOP(5)},
        {"bn_add_bn", test_bn_add_bn, 0, N_DTS * 2 * 3 * BN_ADD_BN_SHAPES},
        {"conv_bn", test_conv_bn, 0, N_DTS * 4 * CONV_BN_SHAPES},
        {"bn_conv_bn", test_bn_conv_bn, 0, N_DTS * 4 * CONV_BN_SHAPES},
        {"bn_conv_backward_data", test_bn_conv_backward_data, 0, N_DTS * 4 * CONV_BN_SHAPES},
        {"maxpool", test_maxpool, 0, 2 * MAXPOOL_CASES},
        {"avgpool", test_avgpool, 0, 2 * N_DTS},
        {"linear", test_linear, 0, 2 * N_DTS},
        {"softmax_xent", test_softmax_xent, 0, 16 * N_DTS},
        {"batch_mix", test_batch_mix, 0, 4 * N_DTS},
        {"nonfinite_check", test_nonfinite_check, 0, N_DTS * NONFINITE_CASES},
        {"sgd_step", test_sgd_step, 0, 16 * N_DTS},
        {"sgd_step_skipped", test_sgd_step_skipped, 0, N_DTS},
        {"grad_norm", test_grad_norm, 0, 4 * N_DTS},
        {"ema_update", test_ema_update, 0, 6},
        {"scaler_update", test_scaler_update, 0, SCALER_CASES},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 300);
        tcase_add_loop_test(tc, cases[i].test, cases[i].first, cases[i].end);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void) {
    char why[256] = "";
    CudaOptions opts = cuda_options_default();  // TF32 off
    opts.cudnn_benchmark = 1;
    gpu = cuda_backend_create(0, &opts, why, sizeof why);
    if (!gpu) {
        return tu_skip_gpu("test_gpu_ops", why);
    }
    cpu = cpu_backend_create();
    const char *env = getenv("AMPTRAIN_TEST_SEED");
    base_seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) * 1000003ull + (uint64_t)getpid();
    printf("test_gpu_ops: seed %llu (replay with AMPTRAIN_TEST_SEED=%llu)\n", (unsigned long long)base_seed,
           (unsigned long long)base_seed);

    const int rc = tu_run_suite(gpu_ops_suite(), 0);  // no fork: a CUDA context does not survive one
    gpu->destroy(gpu);
    cpu->destroy(cpu);
    return rc;
}
