// test_cpu_ops.c - the CPU reference backend against independent references: finite differences for
// every backward, textbook formulas for the forwards, hand-computed PyTorch semantics for the optimizer
// and the loss scaler, fp16 and bf16 storage against fp32, and bf16 rounding against bit patterns worked out
// by hand.
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/bf16.h"
#include "kernels/cpu/half.h"
#include "tests/test_util.h"

static Backend *be;

static void setup(void) { be = cpu_backend_create(); }
static void teardown(void) { be->destroy(be); }

// ---- helpers ---------------------------------------------------------------------------------------

static float *floats(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static float *random_floats(size_t n, uint64_t seed, float lo, float hi) {
    float *x = floats(n);
    tu_fill_uniform(x, n, seed, lo, hi);
    return x;
}

static float *copy_floats(const float *src, size_t n) {
    float *x = floats(n);
    memcpy(x, src, n * sizeof(float));
    return x;
}

// sum_j y_j r_j in double: the scalar objective whose gradient with respect to y is r.
static double dot_r(const float *y, const float *r, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)y[i] * r[i];
    return s;
}

// ---- finite differences ---------------------------------------------------------------------------
// Every backward is checked as the gradient of L = sum(y * r), r random, by central differences of
// the fp32 forward: dL/dp_i ~ (L(p_i + h) - L(p_i - h)) / (2h), with the step that float arithmetic
// actually took. Tolerance: the norm-wise relative error ||analytic - fd|| / ||fd|| < FD_TOL = 2e-3.
// With FD_EPS = 1e-2 on inputs of order 1, the truncation error (O(h^2) relative, zero for the linear
// ops) is ~1e-4, and fp32 rounding of y perturbs L by ~1e-6 which divided by 2h is ~1e-4 of a gradient
// of order 1 (measured: at most 3e-4, softmax and ReLU batch norm); a wrong formula (a missing term, a
// transposed index) is off by O(1). Coordinates whose perturbation moved a ReLU across its kink are not
// differentiable there and are skipped (NaN); ops with a ReLU use the smaller step FD_EPS_RELU = 1e-3
// so that few are (rounding noise then ~5e-4 relative).
#define FD_EPS 1e-2f
#define FD_EPS_RELU 1e-3f
#define FD_TOL 2e-3

typedef double (*Objective)(void *ctx);

// Set by an objective when the point it was evaluated at lies across a kink from the base point.
static int fd_crossed_kink;

static void fd_gradient(Objective f, void *ctx, float *p, size_t n, float eps, double *grad) {
    for (size_t i = 0; i < n; i++) {
        const float saved = p[i];
        const float up = saved + eps, down = saved - eps;
        fd_crossed_kink = 0;
        p[i] = up;
        const double l_up = f(ctx);
        p[i] = down;
        const double l_down = f(ctx);
        p[i] = saved;
        grad[i] = fd_crossed_kink ? NAN : (l_up - l_down) / ((double)up - (double)down);
    }
}

// ||a - fd|| / ||fd|| over the coordinates where fd is defined; fails if more than a quarter are not.
static double fd_rel_error(const float *a, const double *fd, size_t n) {
    double diff = 0, ref = 0;
    size_t skipped = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(fd[i])) {
            skipped++;
            continue;
        }
        diff += (a[i] - fd[i]) * (a[i] - fd[i]);
        ref += fd[i] * fd[i];
    }
    ck_assert_msg(skipped * 4 <= n, "%zu of %zu coordinates crossed a ReLU kink", skipped, n);
    ck_assert_msg(ref > 0, "finite-difference gradient is identically zero");
    return sqrt(diff / ref);
}

static void assert_fd_close_eps(const char *what, Objective f, void *ctx, float *p, size_t n, float eps,
                                const float *analytic) {
    double *fd = calloc(n, sizeof(double));
    fd_gradient(f, ctx, p, n, eps, fd);
    const double err = fd_rel_error(analytic, fd, n);
    ck_assert_msg(err < FD_TOL, "%s: relative error %.3g vs finite differences", what, err);
    free(fd);
}

static void assert_fd_close(const char *what, Objective f, void *ctx, float *p, size_t n,
                            const float *analytic) {
    assert_fd_close_eps(what, f, ctx, p, n, FD_EPS, analytic);
}

// ---- convolution -------------------------------------------------------------------------------------

static const ConvShape conv_cases[] = {
    // n  h  w  c_in  c_out kh kw stride pad groups
    {2, 7, 7, 8, 8, 3, 3, 1, 1, 1, 0, 0},   // 3x3, same padding
    {2, 7, 6, 8, 12, 3, 3, 2, 1, 4, 0, 0},  // grouped 3x3, stride 2, non-square input
    {2, 5, 5, 6, 4, 1, 1, 1, 0, 1, 0, 0},   // 1x1
    {1, 6, 5, 8, 8, 1, 1, 2, 0, 2, 0, 0},   // 1x1 stride 2 (downsample shortcut), groups
    {2, 9, 9, 3, 4, 7, 7, 2, 3, 1, 0, 0},   // the 7x7/2 stem
    {1, 6, 6, 4, 4, 3, 3, 1, 1, 4, 0, 0},   // one channel per group
};
#define CONV_CASES (int)(sizeof conv_cases / sizeof conv_cases[0])

static size_t conv_x_count(const ConvShape *s) { return (size_t)s->n * s->h * s->w * s->c_in; }
static size_t conv_y_count(const ConvShape *s) { return (size_t)s->n * s->out_h * s->out_w * s->c_out; }
static size_t conv_w_count(const ConvShape *s) {
    return (size_t)s->c_out * s->kh * s->kw * (s->c_in / s->groups);
}

// The textbook convolution in NCHW / OIHW order, written without reference to the backend's layout:
// x, w are permuted from NHWC / OHWI in, y is permuted back to NHWC out.
static void conv_reference(const ConvShape *s, const float *x_nhwc, const float *w_ohwi, float *y_nhwc) {
    const int cig = s->c_in / s->groups, cog = s->c_out / s->groups;
    double *x = calloc(conv_x_count(s), sizeof(double));  // (n, c_in, h, w)
    double *w = calloc(conv_w_count(s), sizeof(double));  // (c_out, c_in/g, kh, kw)
    for (int n = 0; n < s->n; n++)
        for (int y = 0; y < s->h; y++)
            for (int xx = 0; xx < s->w; xx++)
                for (int c = 0; c < s->c_in; c++)
                    x[((n * s->c_in + c) * s->h + y) * s->w + xx] =
                        x_nhwc[((n * s->h + y) * s->w + xx) * s->c_in + c];
    for (int o = 0; o < s->c_out; o++)
        for (int ky = 0; ky < s->kh; ky++)
            for (int kx = 0; kx < s->kw; kx++)
                for (int i = 0; i < cig; i++)
                    w[((o * cig + i) * s->kh + ky) * s->kw + kx] =
                        w_ohwi[((o * s->kh + ky) * s->kw + kx) * cig + i];

    for (int n = 0; n < s->n; n++)
        for (int o = 0; o < s->c_out; o++)
            for (int oy = 0; oy < s->out_h; oy++)
                for (int ox = 0; ox < s->out_w; ox++) {
                    double acc = 0;
                    const int g = o / cog;
                    for (int i = 0; i < cig; i++)
                        for (int ky = 0; ky < s->kh; ky++)
                            for (int kx = 0; kx < s->kw; kx++) {
                                const int iy = oy * s->stride - s->pad + ky,
                                          ix = ox * s->stride - s->pad + kx;
                                if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
                                acc += x[((n * s->c_in + g * cig + i) * s->h + iy) * s->w + ix] *
                                       w[((o * cig + i) * s->kh + ky) * s->kw + kx];
                            }
                    y_nhwc[((n * s->out_h + oy) * s->out_w + ox) * s->c_out + o] = (float)acc;
                }
    free(x);
    free(w);
}

START_TEST(test_conv_forward_matches_textbook_nchw) {
    for (int k = 0; k < CONV_CASES; k++) {
        ConvShape s = conv_cases[k];
        conv_shape_finish(&s);
        float *x = random_floats(conv_x_count(&s), 100 + k, -1, 1);
        float *w = random_floats(conv_w_count(&s), 200 + k, -1, 1);
        float *y = floats(conv_y_count(&s)), *ref = floats(conv_y_count(&s));
        be->conv_forward(be, &s, DTYPE_F32, x, w, y);
        conv_reference(&s, x, w, ref);
        // fp32 sums of at most 147 products of order 1 against a double reference.
        const double err = tu_rel_error(y, ref, conv_y_count(&s));
        ck_assert_msg(err < 1e-6, "case %d: relative error %.3g", k, err);
        free(x), free(w), free(y), free(ref);
    }
}
END_TEST

typedef struct ConvCtx {
    ConvShape s;
    float *x, *w, *y, *r;
} ConvCtx;

static double conv_objective(void *ctx) {
    ConvCtx *c = ctx;
    be->conv_forward(be, &c->s, DTYPE_F32, c->x, c->w, c->y);
    return dot_r(c->y, c->r, conv_y_count(&c->s));
}

START_TEST(test_conv_backward_matches_finite_differences) {
    for (int k = 0; k < CONV_CASES; k++) {
        ConvCtx c = {.s = conv_cases[k]};
        conv_shape_finish(&c.s);
        const size_t nx = conv_x_count(&c.s), nw = conv_w_count(&c.s), ny = conv_y_count(&c.s);
        c.x = random_floats(nx, 300 + k, -1, 1);
        c.w = random_floats(nw, 400 + k, -1, 1);
        c.r = random_floats(ny, 500 + k, -1, 1);
        c.y = floats(ny);
        float *dx = floats(nx), *dw = floats(nw);
        be->conv_backward_data(be, &c.s, DTYPE_F32, c.r, c.w, dx, 0);
        be->conv_backward_filter(be, &c.s, DTYPE_F32, c.x, c.r, dw, 0);
        assert_fd_close("conv dx", conv_objective, &c, c.x, nx, dx);
        assert_fd_close("conv dw", conv_objective, &c, c.w, nw, dw);

        // accumulate=1 adds the same gradient to what the buffer held.
        float *dx_acc = random_floats(nx, 600 + k, -1, 1), *dw_acc = random_floats(nw, 700 + k, -1, 1);
        float *dx_before = copy_floats(dx_acc, nx), *dw_before = copy_floats(dw_acc, nw);
        be->conv_backward_data(be, &c.s, DTYPE_F32, c.r, c.w, dx_acc, 1);
        be->conv_backward_filter(be, &c.s, DTYPE_F32, c.x, c.r, dw_acc, 1);
        for (size_t i = 0; i < nx; i++) ck_assert_float_eq_tol(dx_acc[i], dx_before[i] + dx[i], 1e-6);
        for (size_t i = 0; i < nw; i++) ck_assert_float_eq_tol(dw_acc[i], dw_before[i] + dw[i], 1e-6);

        free(c.x), free(c.w), free(c.r), free(c.y), free(dx), free(dw);
        free(dx_acc), free(dw_acc), free(dx_before), free(dw_before);
    }
}
END_TEST

// ---- batch norm ---------------------------------------------------------------------------------------

#define BN_ROWS 24  // n=2, h=3, w=4
#define BN_C 5
#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f

typedef struct BnCtx {
    int relu;
    float *x, *residual, *gamma, *beta, *y, *r;
    float *base_y;  // the output at the unperturbed point, for kink detection
} BnCtx;

static double bn_objective(void *ctx) {
    BnCtx *b = ctx;
    float rm[BN_C] = {0}, rv[BN_C] = {0}, mean[BN_C], invstd[BN_C];
    be->bn_forward_train(be, BN_ROWS, BN_C, DTYPE_F32, b->x, b->residual, b->relu, b->gamma, b->beta, rm, rv,
                         BN_MOMENTUM, BN_EPS, mean, invstd, b->y);
    if (b->relu)
        for (int i = 0; i < BN_ROWS * BN_C; i++)
            if ((b->y[i] > 0) != (b->base_y[i] > 0)) fd_crossed_kink = 1;
    return dot_r(b->y, b->r, BN_ROWS * BN_C);
}

START_TEST(test_bn_backward_matches_finite_differences) {
    const size_t count = BN_ROWS * BN_C;
    for (int variant = 0; variant < 4; variant++) {
        const int with_residual = variant & 1;
        BnCtx b = {.relu = variant >> 1};
        b.x = random_floats(count, 800 + variant, -2, 3);
        b.residual = with_residual ? random_floats(count, 810 + variant, -1, 1) : NULL;
        b.gamma = random_floats(BN_C, 820 + variant, 0.5f, 1.5f);
        b.beta = random_floats(BN_C, 830 + variant, -0.5f, 0.5f);
        b.r = random_floats(count, 840 + variant, -1, 1);
        b.y = floats(count);
        b.base_y = floats(count);

        float rm[BN_C] = {0}, rv[BN_C] = {0}, mean[BN_C], invstd[BN_C];
        be->bn_forward_train(be, BN_ROWS, BN_C, DTYPE_F32, b.x, b.residual, b.relu, b.gamma, b.beta, rm, rv,
                             BN_MOMENTUM, BN_EPS, mean, invstd, b.base_y);
        float *dx = floats(count), *dres = floats(count), dgamma[BN_C], dbeta[BN_C];
        be->bn_backward(be, BN_ROWS, BN_C, DTYPE_F32, b.x, b.base_y, b.r, b.relu, b.gamma, mean, invstd, dx,
                        0, dgamma, dbeta, 0, with_residual ? dres : NULL);

        const float eps = b.relu ? FD_EPS_RELU : FD_EPS;
        assert_fd_close_eps("bn dx", bn_objective, &b, b.x, count, eps, dx);
        assert_fd_close_eps("bn dgamma", bn_objective, &b, b.gamma, BN_C, eps, dgamma);
        assert_fd_close_eps("bn dbeta", bn_objective, &b, b.beta, BN_C, eps, dbeta);
        if (with_residual)
            assert_fd_close_eps("bn d_residual", bn_objective, &b, b.residual, count, eps, dres);

        // accumulate and accumulate_params add onto what the buffers held.
        float *dx2 = random_floats(count, 850, -1, 1), *dx2_before = copy_floats(dx2, count);
        float dgamma2[BN_C], dbeta2[BN_C];
        for (int ch = 0; ch < BN_C; ch++) dgamma2[ch] = dbeta2[ch] = 0.25f * ch;
        be->bn_backward(be, BN_ROWS, BN_C, DTYPE_F32, b.x, b.base_y, b.r, b.relu, b.gamma, mean, invstd, dx2,
                        1, dgamma2, dbeta2, 1, NULL);
        for (size_t i = 0; i < count; i++) ck_assert_float_eq_tol(dx2[i], dx2_before[i] + dx[i], 1e-6);
        for (int ch = 0; ch < BN_C; ch++) {
            ck_assert_float_eq_tol(dgamma2[ch], 0.25f * ch + dgamma[ch], 1e-5);
            ck_assert_float_eq_tol(dbeta2[ch], 0.25f * ch + dbeta[ch], 1e-5);
        }

        free(b.x), free(b.residual), free(b.gamma), free(b.beta), free(b.r), free(b.y), free(b.base_y);
        free(dx), free(dres), free(dx2), free(dx2_before);
    }
}
END_TEST

// bn_conv_backward_data: the data gradient through conv(relu(bn(x)), w), a 1x1 convolution after a training
// batch norm + ReLU, against finite differences of <r, conv(relu(bn(x)))> in x, gamma and beta; dgamma and
// dbeta accumulate on request; dx may be dy itself (c_in == c_out), bitwise the same.
typedef struct BnConvCtx {
    ConvShape s;
    float *x, *gamma, *beta, *w, *bn_y, *conv_y, *r;
    float *base_bn_y;  // bn's output at the unperturbed point, for kink detection
} BnConvCtx;

static double bn_conv_objective(void *ctx) {
    BnConvCtx *b = ctx;
    const int rows = b->s.n * b->s.h * b->s.w, c = b->s.c_in;
    float rm[8] = {0}, rv[8] = {0}, mean[8], invstd[8];
    be->bn_forward_train(be, rows, c, DTYPE_F32, b->x, NULL, 1, b->gamma, b->beta, rm, rv, BN_MOMENTUM,
                         BN_EPS, mean, invstd, b->bn_y);
    for (int i = 0; i < rows * c; i++)
        if ((b->bn_y[i] > 0) != (b->base_bn_y[i] > 0)) fd_crossed_kink = 1;
    be->conv_forward(be, &b->s, DTYPE_F32, b->bn_y, b->w, b->conv_y);
    return dot_r(b->conv_y, b->r, conv_y_count(&b->s));
}

START_TEST(test_bn_conv_backward_data_matches_finite_differences) {
    static const int c_in_out[2][2] = {{5, 7}, {6, 6}};
    for (int k = 0; k < 2; k++) {
        BnConvCtx b = {.s = {.n = 2,
                             .h = 3,
                             .w = 4,
                             .c_in = c_in_out[k][0],
                             .c_out = c_in_out[k][1],
                             .kh = 1,
                             .kw = 1,
                             .stride = 1,
                             .groups = 1}};
        conv_shape_finish(&b.s);
        const int rows = b.s.n * b.s.h * b.s.w, c = b.s.c_in;
        const size_t nx = conv_x_count(&b.s), ny = conv_y_count(&b.s);
        b.x = random_floats(nx, 900 + k, -2, 3);
        b.gamma = random_floats(c, 910 + k, 0.5f, 1.5f);
        b.beta = random_floats(c, 920 + k, -0.5f, 0.5f);
        b.w = random_floats(conv_w_count(&b.s), 930 + k, -1, 1);
        b.r = random_floats(ny, 940 + k, -1, 1);
        b.bn_y = floats(nx), b.conv_y = floats(ny), b.base_bn_y = floats(nx);
        float rm[8] = {0}, rv[8] = {0}, mean[8], invstd[8], dgamma[8], dbeta[8];
        be->bn_forward_train(be, rows, c, DTYPE_F32, b.x, NULL, 1, b.gamma, b.beta, rm, rv, BN_MOMENTUM,
                             BN_EPS, mean, invstd, b.base_bn_y);
        const BnArgs bn = {b.x, b.gamma, b.beta, rm, rv, mean, invstd, dgamma, dbeta};
        float *dx = floats(nx), *scratch = floats(nx);
        be->bn_conv_backward_data(be, &b.s, DTYPE_F32, b.r, b.w, &bn, b.base_bn_y, scratch, dx, 0);
        assert_fd_close_eps("bn_conv dx", bn_conv_objective, &b, b.x, nx, FD_EPS_RELU, dx);
        assert_fd_close_eps("bn_conv dgamma", bn_conv_objective, &b, b.gamma, c, FD_EPS_RELU, dgamma);
        assert_fd_close_eps("bn_conv dbeta", bn_conv_objective, &b, b.beta, c, FD_EPS_RELU, dbeta);

        // accumulate_params adds onto what dgamma and dbeta held; dx is overwritten, and may be dy
        float acc_gamma[8], acc_beta[8];
        for (int ch = 0; ch < c; ch++) acc_gamma[ch] = acc_beta[ch] = 0.25f * ch;
        const BnArgs bn_acc = {b.x, b.gamma, b.beta, rm, rv, mean, invstd, acc_gamma, acc_beta};
        float *dx2 = random_floats(nx, 950 + k, -1, 1);
        be->bn_conv_backward_data(be, &b.s, DTYPE_F32, b.r, b.w, &bn_acc, b.base_bn_y, scratch, dx2, 1);
        ck_assert_mem_eq(dx2, dx, nx * sizeof(float));
        for (int ch = 0; ch < c; ch++) {
            ck_assert_float_eq_tol(acc_gamma[ch], 0.25f * ch + dgamma[ch], 1e-5);
            ck_assert_float_eq_tol(acc_beta[ch], 0.25f * ch + dbeta[ch], 1e-5);
        }
        if (nx == ny) {
            float *dy_then_dx = copy_floats(b.r, ny);
            be->bn_conv_backward_data(be, &b.s, DTYPE_F32, dy_then_dx, b.w, &bn, b.base_bn_y, scratch,
                                      dy_then_dx, 0);
            ck_assert_mem_eq(dy_then_dx, dx, nx * sizeof(float));
            free(dy_then_dx);
        }
        free(b.x), free(b.gamma), free(b.beta), free(b.w), free(b.r), free(b.bn_y), free(b.conv_y);
        free(b.base_bn_y), free(dx), free(scratch), free(dx2);
    }
}
END_TEST

START_TEST(test_bn_forward_matches_direct_formulas) {
    const int rows = 30, c = 4;
    const size_t count = (size_t)rows * c;
    float *x = random_floats(count, 900, -1, 1);
    for (int r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) x[r * c + ch] += 10.0f * ch;  // channel means far from 0
    float *res = random_floats(count, 901, -1, 1);
    float *gamma = random_floats(c, 902, 0.5f, 1.5f), *beta = random_floats(c, 903, -0.5f, 0.5f);
    float *rm0 = random_floats(c, 904, -1, 1), *rv0 = random_floats(c, 905, 0.5f, 2);
    float *y = floats(count);

    for (int variant = 0; variant < 4; variant++) {
        const int relu = variant >> 1;
        const float *residual = variant & 1 ? res : NULL;
        float rm[4], rv[4], mean[4], invstd[4];
        memcpy(rm, rm0, sizeof rm);
        memcpy(rv, rv0, sizeof rv);
        be->bn_forward_train(be, rows, c, DTYPE_F32, x, residual, relu, gamma, beta, rm, rv, BN_MOMENTUM,
                             BN_EPS, mean, invstd, y);
        if (!residual) {  // recomputed from the saved statistics: bitwise the forward's output
            float *again = floats(count);
            be->bn_forward_saved(be, rows, c, DTYPE_F32, x, relu, gamma, beta, mean, invstd, again);
            ck_assert_mem_eq(again, y, count * sizeof(float));
            free(again);
        }
        for (int ch = 0; ch < c; ch++) {
            double m = 0, v = 0;
            for (int r = 0; r < rows; r++) m += x[r * c + ch];
            m /= rows;
            for (int r = 0; r < rows; r++) v += (x[r * c + ch] - m) * (x[r * c + ch] - m);
            v /= rows;  // biased, for normalizing
            const double is = 1.0 / sqrt(v + BN_EPS);
            ck_assert_double_eq_tol(mean[ch], m, 1e-5 * fabs(m) + 1e-6);
            ck_assert_double_eq_tol(invstd[ch], is, 1e-5 * is);
            ck_assert_double_eq_tol(rm[ch], 0.9 * rm0[ch] + 0.1 * m, 1e-5);
            ck_assert_double_eq_tol(rv[ch], 0.9 * rv0[ch] + 0.1 * v * rows / (rows - 1), 1e-5);
            for (int r = 0; r < rows; r++) {
                double e = gamma[ch] * (x[r * c + ch] - m) * is + beta[ch] +
                           (residual ? residual[r * c + ch] : 0);
                if (relu && e < 0) e = 0;
                ck_assert_double_eq_tol(y[r * c + ch], e, 1e-4);
            }
        }

        // Eval mode normalizes with the running statistics instead.
        be->bn_forward_eval(be, rows, c, DTYPE_F32, x, residual, relu, gamma, beta, rm0, rv0, BN_EPS, y);
        for (int r = 0; r < rows; r++)
            for (int ch = 0; ch < c; ch++) {
                double e = gamma[ch] * (x[r * c + ch] - rm0[ch]) / sqrt(rv0[ch] + BN_EPS) + beta[ch] +
                           (residual ? residual[r * c + ch] : 0);
                if (relu && e < 0) e = 0;
                ck_assert_double_eq_tol(y[r * c + ch], e, 1e-4 * (1 + fabs(e)));
            }
    }
    free(x), free(res), free(gamma), free(beta), free(rm0), free(rv0), free(y);
}
END_TEST

// ---- pooling -------------------------------------------------------------------------------------------

typedef struct PoolCtx {
    PoolShape s;
    float *x, *y, *r;
} PoolCtx;

static size_t pool_x_count(const PoolShape *s) { return (size_t)s->n * s->h * s->w * s->c; }
static size_t pool_y_count(const PoolShape *s) { return (size_t)s->n * s->out_h * s->out_w * s->c; }

static double maxpool_objective(void *ctx) {
    PoolCtx *p = ctx;
    be->maxpool_forward(be, &p->s, DTYPE_F32, p->x, p->y);
    return dot_r(p->y, p->r, pool_y_count(&p->s));
}

static PoolShape maxpool_shape(int n, int h, int w, int c) {
    PoolShape s = {.n = n, .h = h, .w = w, .c = c, .k = 3, .stride = 2, .pad = 1};
    s.out_h = (h + 2 * s.pad - s.k) / s.stride + 1;
    s.out_w = (w + 2 * s.pad - s.k) / s.stride + 1;
    return s;
}

START_TEST(test_maxpool_backward_matches_finite_differences) {
    PoolCtx p = {.s = maxpool_shape(2, 7, 8, 3)};
    const size_t nx = pool_x_count(&p.s), ny = pool_y_count(&p.s);
    // Distinct values 0.05 apart in random order: a step of FD_EPS never changes which one is the max.
    p.x = floats(nx);
    float *keys = random_floats(nx, 1000, 0, 1);
    for (size_t i = 0; i < nx; i++) {
        size_t rank = 0;
        for (size_t j = 0; j < nx; j++) rank += keys[j] < keys[i] || (keys[j] == keys[i] && j < i);
        p.x[i] = 0.05f * (float)rank - 5.0f;
    }
    p.y = floats(ny);
    p.r = random_floats(ny, 1001, -1, 1);
    be->maxpool_forward(be, &p.s, DTYPE_F32, p.x, p.y);
    float *dx = random_floats(nx, 1002, -1, 1);  // garbage: backward overwrites
    be->maxpool_backward(be, &p.s, DTYPE_F32, p.x, p.y, p.r, dx);
    assert_fd_close("maxpool dx", maxpool_objective, &p, p.x, nx, dx);
    free(p.x), free(keys), free(p.y), free(p.r), free(dx);
}
END_TEST

START_TEST(test_maxpool_padding_and_tie_rule) {
    // One channel, 4x4 input of equal values except one: every window ties, so each dy goes to the
    // first in-bounds position of its window (row-major); padding (outside) never wins even against
    // negative inputs.
    PoolShape s = maxpool_shape(1, 4, 4, 1);
    ck_assert_int_eq(s.out_h, 2);
    float x[16], y[4], dy[4] = {1, 2, 4, 8}, dx[16];
    for (int i = 0; i < 16; i++) x[i] = -3.0f;
    x[15] = -1.0f;  // (3,3): the unique max of window (1,1)
    be->maxpool_forward(be, &s, DTYPE_F32, x, y);
    ck_assert_float_eq(y[0], -3.0f);
    ck_assert_float_eq(y[1], -3.0f);
    ck_assert_float_eq(y[2], -3.0f);
    ck_assert_float_eq(y[3], -1.0f);
    be->maxpool_backward(be, &s, DTYPE_F32, x, y, dy, dx);
    // Windows: (0,0) covers rows/cols 0..1 -> first (0,0); (0,1) covers rows 0..1, cols 1..3 -> (0,1);
    // (1,0) covers rows 1..3, cols 0..1 -> (1,0); (1,1) -> the max at (3,3).
    float expect[16] = {0};
    expect[0] = 1, expect[1] = 2, expect[4] = 4, expect[15] = 8;
    for (int i = 0; i < 16; i++) ck_assert_float_eq(dx[i], expect[i]);

    // Overlapping windows: a max shared by several windows receives the sum of their gradients.
    for (int i = 0; i < 16; i++) x[i] = 0.0f;
    x[5] = 1.0f;  // (1,1) lies in all four windows
    be->maxpool_forward(be, &s, DTYPE_F32, x, y);
    be->maxpool_backward(be, &s, DTYPE_F32, x, y, dy, dx);
    for (int i = 0; i < 16; i++) ck_assert_float_eq(dx[i], i == 5 ? 15.0f : 0.0f);

    // A NaN wins every window it is in, wherever it sits in the window (as torch and the CUDA backend).
    for (int i = 0; i < 16; i++) x[i] = 0.0f;
    x[5] = NAN;  // in all four windows, before some larger values of window (1,1)
    x[15] = 7.0f;
    be->maxpool_forward(be, &s, DTYPE_F32, x, y);
    for (int i = 0; i < 4; i++) ck_assert_msg(isnan(y[i]), "window %d: %g, expected NaN", i, y[i]);
    be->maxpool_backward(be, &s, DTYPE_F32, x, y, dy, dx);
    for (int i = 0; i < 16; i++) ck_assert_float_eq(dx[i], 0.0f);  // a NaN max routes its gradient nowhere
}
END_TEST

typedef struct AvgCtx {
    int n, hw, c;
    float *x, *y, *r;
} AvgCtx;

static double avgpool_objective(void *ctx) {
    AvgCtx *a = ctx;
    be->avgpool_forward(be, a->n, a->hw, a->c, DTYPE_F32, a->x, a->y);
    return dot_r(a->y, a->r, (size_t)a->n * a->c);
}

START_TEST(test_avgpool_matches_mean_and_finite_differences) {
    AvgCtx a = {.n = 3, .hw = 16, .c = 5};
    const size_t nx = (size_t)a.n * a.hw * a.c, ny = (size_t)a.n * a.c;
    a.x = random_floats(nx, 1100, -1, 1);
    a.y = floats(ny);
    a.r = random_floats(ny, 1101, -1, 1);
    be->avgpool_forward(be, a.n, a.hw, a.c, DTYPE_F32, a.x, a.y);
    for (int b = 0; b < a.n; b++)
        for (int ch = 0; ch < a.c; ch++) {
            double m = 0;
            for (int p = 0; p < a.hw; p++) m += a.x[((size_t)b * a.hw + p) * a.c + ch];
            ck_assert_double_eq_tol(a.y[b * a.c + ch], m / a.hw, 1e-6);
        }
    float *dx = floats(nx);
    be->avgpool_backward(be, a.n, a.hw, a.c, DTYPE_F32, a.r, dx);
    assert_fd_close("avgpool dx", avgpool_objective, &a, a.x, nx, dx);
    free(a.x), free(a.y), free(a.r), free(dx);
}
END_TEST

// ---- linear ------------------------------------------------------------------------------------------

typedef struct LinearCtx {
    int n, in, out;
    float *x, *w, *b, *y, *r;
} LinearCtx;

static double linear_objective(void *ctx) {
    LinearCtx *l = ctx;
    be->linear_forward(be, l->n, l->in, l->out, DTYPE_F32, l->x, l->w, l->b, l->y);
    return dot_r(l->y, l->r, (size_t)l->n * l->out);
}

START_TEST(test_linear_matches_formula_and_finite_differences) {
    LinearCtx l = {.n = 4, .in = 12, .out = 7};
    const size_t nx = (size_t)l.n * l.in, nw = (size_t)l.out * l.in, ny = (size_t)l.n * l.out;
    l.x = random_floats(nx, 1200, -1, 1);
    l.w = random_floats(nw, 1201, -1, 1);
    l.b = random_floats(l.out, 1202, -1, 1);
    l.y = floats(ny);
    l.r = random_floats(ny, 1203, -1, 1);
    be->linear_forward(be, l.n, l.in, l.out, DTYPE_F32, l.x, l.w, l.b, l.y);
    for (int r = 0; r < l.n; r++)
        for (int o = 0; o < l.out; o++) {
            double e = l.b[o];
            for (int i = 0; i < l.in; i++) e += (double)l.x[r * l.in + i] * l.w[o * l.in + i];
            ck_assert_double_eq_tol(l.y[r * l.out + o], e, 1e-5);
        }

    float *dx = floats(nx), *dw = floats(nw), *db = floats(l.out);
    be->linear_backward(be, l.n, l.in, l.out, DTYPE_F32, l.x, l.w, l.r, dx, dw, db, 0);
    assert_fd_close("linear dx", linear_objective, &l, l.x, nx, dx);
    assert_fd_close("linear dw", linear_objective, &l, l.w, nw, dw);
    assert_fd_close("linear db", linear_objective, &l, l.b, l.out, db);

    // accumulate=1 adds onto dw and db; dx is always overwritten.
    float *dx2 = random_floats(nx, 1204, -1, 1), *dw2 = copy_floats(dw, nw), *db2 = copy_floats(db, l.out);
    be->linear_backward(be, l.n, l.in, l.out, DTYPE_F32, l.x, l.w, l.r, dx2, dw2, db2, 1);
    for (size_t i = 0; i < nx; i++) ck_assert_float_eq_tol(dx2[i], dx[i], 1e-6);
    for (size_t i = 0; i < nw; i++) ck_assert_float_eq_tol(dw2[i], 2 * dw[i], 1e-6);
    for (int o = 0; o < l.out; o++) ck_assert_float_eq_tol(db2[o], 2 * db[o], 1e-6);
    free(l.x), free(l.w), free(l.b), free(l.y), free(l.r), free(dx), free(dw), free(db);
    free(dx2), free(dw2), free(db2);
}
END_TEST

// ---- softmax cross-entropy --------------------------------------------------------------------------

typedef struct XentCtx {
    int n, classes;
    float *logits, *dlogits;
    int32_t *labels;
    const BatchMix *mix;  // NULL: one-hot targets
    float smoothing;
} XentCtx;

static double xent_objective(void *ctx) {
    XentCtx *x = ctx;
    float loss;
    be->softmax_xent(be, x->n, x->classes, DTYPE_F32, x->logits, x->labels, x->mix, x->smoothing, &loss,
                     x->dlogits, NULL, 1.0f);
    return loss;
}

START_TEST(test_softmax_xent_matches_formula_and_finite_differences) {
    XentCtx x = {.n = 6, .classes = 10};
    const size_t count = (size_t)x.n * x.classes;
    x.logits = random_floats(count, 1300, -3, 3);
    x.logits[0] = 40.0f;  // a large logit: the max subtraction must keep exp() finite
    x.dlogits = floats(count);
    x.labels = calloc(x.n, sizeof(int32_t));
    for (int r = 0; r < x.n; r++) x.labels[r] = (r * 7 + 3) % x.classes;

    // Loss: mean over rows of logsumexp(z) - z[label], in double.
    double expect = 0;
    for (int r = 0; r < x.n; r++) {
        double s = 0;
        for (int k = 0; k < x.classes; k++) s += exp((double)x.logits[r * x.classes + k] - 40.0);
        expect += 40.0 + log(s) - x.logits[r * x.classes + x.labels[r]];
    }
    expect /= x.n;

    // dlogits carries the seed: scale S from the device times seed_factor = 1 / (ranks * n * accum),
    // here 2 ranks and no accumulation, so dlogits = dloss/dz * n * S / (2 n) = dloss/dz * S / 2.
    const float scale = 1024.0f, seed_factor = 1.0f / (2.0f * x.n);
    float loss;
    be->softmax_xent(be, x.n, x.classes, DTYPE_F32, x.logits, x.labels, NULL, 0.0f, &loss, x.dlogits, &scale,
                     seed_factor);
    ck_assert_double_eq_tol(loss, expect, 1e-5 * expect);
    float *grad = floats(count);
    for (size_t i = 0; i < count; i++) grad[i] = x.dlogits[i] / (scale * seed_factor * x.n);
    assert_fd_close("softmax_xent dlogits", xent_objective, &x, x.logits, count, grad);

    // Each row of (softmax - onehot) sums to zero.
    for (int r = 0; r < x.n; r++) {
        double s = 0;
        for (int k = 0; k < x.classes; k++) s += x.dlogits[r * x.classes + k];
        ck_assert_double_eq_tol(s, 0.0, 1e-4);
    }
    free(x.logits), free(x.dlogits), free(x.labels), free(grad);
}
END_TEST

// torch.nn.CrossEntropyLoss(label_smoothing=0.3) on three rows of three classes whose softmax is known in
// closed form: logits log(1, 2, 3) (softmax 1/6, 2/6, 3/6), equal logits (1/3 each), log(1, 1, 2) (1/4, 1/4,
// 2/4). Labels 2, 0, 1; targets (1 - 0.3) onehot + 0.1. Then the same with MixUp targets, lam 0.75: each row
// mixed with the label of the row before it (row 0 with row 2's: the batch rolled by one).
START_TEST(test_softmax_xent_smoothing_and_mixing_match_hand_computed_targets) {
    const float logits[9] = {0.0f, (float)log(2.0), (float)log(3.0), 0.5f, 0.5f, 0.5f, 0.0f,
                             0.0f, (float)log(2.0)};
    const int32_t labels[3] = {2, 0, 1};
    const double p[3][3] = {{1.0 / 6, 2.0 / 6, 3.0 / 6}, {1.0 / 3, 1.0 / 3, 1.0 / 3}, {0.25, 0.25, 0.5}};
    // Targets written out by hand: smoothed one-hot, and smoothed (0.75 own label + 0.25 the row before's).
    const double hi = 0.7 * 0.75 + 0.1, lo = 0.7 * 0.25 + 0.1;
    const double plain[3][3] = {{0.1, 0.1, 0.8}, {0.8, 0.1, 0.1}, {0.1, 0.8, 0.1}};
    const double mixed[3][3] = {{0.1, lo, hi}, {hi, 0.1, lo}, {lo, hi, 0.1}};
    const BatchMix mix = {.lam = 0.75f, .rest = 0.25f, .blend = 1};
    for (int with_mix = 0; with_mix < 2; with_mix++) {
        const double(*t)[3] = with_mix ? mixed : plain;
        double expect = 0;
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < 3; k++) expect -= t[r][k] * log(p[r][k]) / 3;
        float loss, dz[9];
        const float scale = 6.0f;  // seed 6 x 1/3: the mean's gradient times the loss scale
        be->softmax_xent(be, 3, 3, DTYPE_F32, logits, labels, with_mix ? &mix : NULL, 0.3f, &loss, dz, &scale,
                         1.0f / 3);
        ck_assert_msg(fabs(loss - expect) < 1e-6, "%s: loss %.8f, hand-computed %.8f",
                      with_mix ? "mixed" : "plain", loss, expect);
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < 3; k++) {
                const double g = (p[r][k] - t[r][k]) * 2.0;
                ck_assert_msg(fabs(dz[r * 3 + k] - g) < 1e-6, "%s: dlogits[%d][%d] %.8f, hand-computed %.8f",
                              with_mix ? "mixed" : "plain", r, k, dz[r * 3 + k], g);
            }
    }
}
END_TEST

// The loss with smoothing and mixed targets, as a function of the logits: its gradient by finite differences.
START_TEST(test_softmax_xent_smoothing_and_mixing_match_finite_differences) {
    const BatchMix mix = {.lam = 0.3f, .rest = 0.7f, .blend = 0};
    XentCtx x = {.n = 6, .classes = 10, .smoothing = 0.1f};
    const size_t count = (size_t)x.n * x.classes;
    x.logits = random_floats(count, 1310, -3, 3);
    x.dlogits = floats(count);
    x.labels = calloc(x.n, sizeof(int32_t));
    for (int r = 0; r < x.n; r++) x.labels[r] = (r * 3 + 1) % x.classes;
    x.labels[4] = x.labels[3];  // a row mixed with its own class: lam + rest on one target
    for (int with_mix = 0; with_mix < 2; with_mix++) {
        x.mix = with_mix ? &mix : NULL;
        float loss;
        be->softmax_xent(be, x.n, x.classes, DTYPE_F32, x.logits, x.labels, x.mix, x.smoothing, &loss,
                         x.dlogits, NULL, 1.0f / x.n);
        float *grad = copy_floats(x.dlogits, count);  // seed 1/n: the gradient of the mean loss itself
        assert_fd_close(with_mix ? "softmax_xent mixed and smoothed" : "softmax_xent smoothed",
                        xent_objective, &x, x.logits, count, grad);
        // softmax and the target are both distributions: each row of dlogits sums to zero.
        for (int r = 0; r < x.n; r++) {
            double s = 0;
            for (int k = 0; k < x.classes; k++) s += x.dlogits[r * x.classes + k];
            ck_assert_double_eq_tol(s, 0.0, 1e-6);
        }
        free(grad);
    }
    free(x.logits), free(x.dlogits), free(x.labels);
}
END_TEST

// Without smoothing or mixing the loss is the plain one-hot cross-entropy, bit for bit: the formula written
// here with the same double-precision steps (max, log-sum-exp, softmax - onehot, x seed, one rounding to
// fp32). A mix of lam 1 and rest 0 gives the same bits too (its extra terms are exact zeros).
START_TEST(test_softmax_xent_without_smoothing_or_mixing_is_bitwise_the_one_hot_formula) {
    enum { N = 5, C = 17 };
    float *logits = random_floats(N * C, 1320, -6, 6), dz[N * C], dz_mix[N * C], want[N * C];
    int32_t labels[N] = {3, 16, 0, 3, 9};
    const float scale = 4096.0f, seed_factor = 1.0f / (3.0f * N);
    const float seed = scale * seed_factor;
    double loss_sum = 0;
    for (int r = 0; r < N; r++) {
        const float *z = logits + r * C;
        float zmax = z[0];
        for (int k = 1; k < C; k++) zmax = z[k] > zmax ? z[k] : zmax;
        double sum = 0;
        for (int k = 0; k < C; k++) sum += exp((double)z[k] - zmax);
        const double log_sum = log(sum);
        loss_sum += log_sum - ((double)z[labels[r]] - zmax);
        for (int k = 0; k < C; k++)
            want[r * C + k] =
                (float)((exp((double)z[k] - zmax - log_sum) - (k == labels[r] ? 1.0 : 0.0)) * seed);
    }
    const float want_loss = (float)(loss_sum / N);
    float loss, loss_mix;
    be->softmax_xent(be, N, C, DTYPE_F32, logits, labels, NULL, 0.0f, &loss, dz, &scale, seed_factor);
    ck_assert_msg(memcmp(&loss, &want_loss, sizeof loss) == 0, "loss %.9g, the formula's %.9g", loss,
                  want_loss);
    ck_assert_msg(memcmp(dz, want, sizeof dz) == 0, "dlogits differ from the one-hot formula's bits");
    const BatchMix identity = {.lam = 1.0f, .rest = 0.0f, .blend = 1};
    be->softmax_xent(be, N, C, DTYPE_F32, logits, labels, &identity, 0.0f, &loss_mix, dz_mix, &scale,
                     seed_factor);
    ck_assert(memcmp(&loss_mix, &loss, sizeof loss) == 0 && memcmp(dz_mix, dz, sizeof dz) == 0);
    free(logits);
}
END_TEST

// ---- 16-bit storage ----------------------------------------------------------------------------------
// Each op runs on fp16 or bf16 buffers and on fp32 buffers holding the same (representable) values; the
// outputs differ only by the 16-bit rounding of the result (unit roundoff 2^-11 for fp16, 2^-8 for bf16)
// and of intermediate stores: norm-wise relative errors below the unit roundoff (measured: at most 3.2e-4
// in fp16, the average pool; 1.7e-3 in bf16, the grouped convolution's filter gradient). The tolerances
// leave room for unluckier draws; a wrong op is off by O(1).
#define F16_TOL 1e-2
#define BF16_TOL 2e-2

static const DType half_dtypes[] = {DTYPE_F16, DTYPE_BF16};
#define HALF_DTYPES (int)(sizeof half_dtypes / sizeof half_dtypes[0])

static double tol_of(DType dt) { return dt == DTYPE_BF16 ? BF16_TOL : F16_TOL; }

// n values of dtype dt (fp16 or bf16), each x[i] rounded once.
static void *to_dt(DType dt, const float *x, size_t n) {
    void *h = calloc(n ? n : 1, dtype_size(dt));
    for (size_t i = 0; i < n; i++) dtype_store(h, dt, i, x[i]);
    return h;
}

static float round_to(DType dt, float v) {
    float stored;  // room for an element of any dtype
    dtype_store(&stored, dt, 0, v);
    return dtype_load(&stored, dt, 0);
}

// Random floats already rounded to dt, so both paths start from identical inputs.
static float *random_in(DType dt, size_t n, uint64_t seed, float lo, float hi) {
    float *x = random_floats(n, seed, lo, hi);
    for (size_t i = 0; i < n; i++) x[i] = round_to(dt, x[i]);
    return x;
}

static void assert_dt_close(const char *what, DType dt, const void *h, const float *ref, size_t n) {
    float *f = floats(n);
    for (size_t i = 0; i < n; i++) f[i] = dtype_load(h, dt, i);
    const double err = tu_rel_error(f, ref, n);
    ck_assert_msg(err < tol_of(dt), "%s: %s vs fp32 relative error %.3g", what, dtype_name(dt), err);
    free(f);
}

START_TEST(test_16bit_storage_matches_fp32) {
    const DType dt = half_dtypes[_i];
    // Convolution: grouped, strided.
    ConvShape s = conv_cases[1];
    conv_shape_finish(&s);
    const size_t nx = conv_x_count(&s), nw = conv_w_count(&s), ny = conv_y_count(&s);
    float *x = random_in(dt, nx, 1400, -1, 1), *w = random_in(dt, nw, 1401, -1, 1),
          *dy = random_in(dt, ny, 1402, -1, 1);
    void *xh = to_dt(dt, x, nx), *wh = to_dt(dt, w, nw), *dyh = to_dt(dt, dy, ny);
    float *y = floats(ny), *dx = floats(nx), *dw = floats(nw);
    void *yh = to_dt(dt, y, ny), *dxh = to_dt(dt, dx, nx), *dwh = to_dt(dt, dw, nw);
    be->conv_forward(be, &s, DTYPE_F32, x, w, y);
    be->conv_forward(be, &s, dt, xh, wh, yh);
    assert_dt_close("conv_forward", dt, yh, y, ny);
    be->conv_backward_data(be, &s, DTYPE_F32, dy, w, dx, 0);
    be->conv_backward_data(be, &s, dt, dyh, wh, dxh, 0);
    assert_dt_close("conv_backward_data", dt, dxh, dx, nx);
    be->conv_backward_filter(be, &s, DTYPE_F32, x, dy, dw, 0);
    be->conv_backward_filter(be, &s, dt, xh, dyh, dwh, 0);
    assert_dt_close("conv_backward_filter", dt, dwh, dw, nw);
    free(x), free(w), free(dy), free(xh), free(wh), free(dyh), free(y), free(dx), free(dw);
    free(yh), free(dxh), free(dwh);

    // Batch norm with residual and ReLU, forward and backward; statistics are fp32 in both.
    const size_t nb = BN_ROWS * BN_C;
    float *bx = random_in(dt, nb, 1410, -2, 3), *bres = random_in(dt, nb, 1411, -1, 1),
          *bdy = random_in(dt, nb, 1412, -1, 1);
    float *gamma = random_floats(BN_C, 1413, 0.5f, 1.5f), *beta = random_floats(BN_C, 1414, -0.5f, 0.5f);
    void *bxh = to_dt(dt, bx, nb), *bresh = to_dt(dt, bres, nb), *bdyh = to_dt(dt, bdy, nb);
    float *by = floats(nb), *bdx = floats(nb), *bdres = floats(nb), dg[BN_C], db[BN_C];
    void *byh = to_dt(dt, by, nb), *bdxh = to_dt(dt, bdx, nb), *bdresh = to_dt(dt, bdres, nb);
    void *dgh = calloc(BN_C, dtype_size(dt)), *dbh = calloc(BN_C, dtype_size(dt));
    float rm[BN_C] = {0}, rv[BN_C] = {0}, mean[BN_C], invstd[BN_C], mean_h[BN_C], invstd_h[BN_C];
    be->bn_forward_train(be, BN_ROWS, BN_C, DTYPE_F32, bx, bres, 1, gamma, beta, rm, rv, BN_MOMENTUM, BN_EPS,
                         mean, invstd, by);
    be->bn_forward_train(be, BN_ROWS, BN_C, dt, bxh, bresh, 1, gamma, beta, rm, rv, BN_MOMENTUM, BN_EPS,
                         mean_h, invstd_h, byh);
    assert_dt_close("bn_forward_train", dt, byh, by, nb);
    ck_assert(tu_rel_error(mean_h, mean, BN_C) < 1e-6);  // same inputs, same fp32 statistics
    be->bn_backward(be, BN_ROWS, BN_C, DTYPE_F32, bx, by, bdy, 1, gamma, mean, invstd, bdx, 0, dg, db, 0,
                    bdres);
    be->bn_backward(be, BN_ROWS, BN_C, dt, bxh, byh, bdyh, 1, gamma, mean_h, invstd_h, bdxh, 0, dgh, dbh, 0,
                    bdresh);
    assert_dt_close("bn_backward dx", dt, bdxh, bdx, nb);
    assert_dt_close("bn_backward dgamma", dt, dgh, dg, BN_C);
    assert_dt_close("bn_backward dbeta", dt, dbh, db, BN_C);
    assert_dt_close("bn_backward d_residual", dt, bdresh, bdres, nb);
    be->bn_forward_eval(be, BN_ROWS, BN_C, DTYPE_F32, bx, bres, 1, gamma, beta, rm, rv, BN_EPS, by);
    be->bn_forward_eval(be, BN_ROWS, BN_C, dt, bxh, bresh, 1, gamma, beta, rm, rv, BN_EPS, byh);
    assert_dt_close("bn_forward_eval", dt, byh, by, nb);
    free(bx), free(bres), free(bdy), free(gamma), free(beta), free(bxh), free(bresh), free(bdyh);
    free(by), free(bdx), free(bdres), free(byh), free(bdxh), free(bdresh), free(dgh), free(dbh);

    // Pooling.
    PoolShape ps = maxpool_shape(2, 7, 8, 3);
    const size_t px = pool_x_count(&ps), py = pool_y_count(&ps);
    float *mx = random_in(dt, px, 1420, -1, 1), *mdy = random_in(dt, py, 1421, -1, 1);
    void *mxh = to_dt(dt, mx, px), *mdyh = to_dt(dt, mdy, py);
    float *my = floats(py), *mdx = floats(px);
    void *myh = to_dt(dt, my, py), *mdxh = to_dt(dt, mdx, px);
    be->maxpool_forward(be, &ps, DTYPE_F32, mx, my);
    be->maxpool_forward(be, &ps, dt, mxh, myh);
    assert_dt_close("maxpool_forward", dt, myh, my, py);
    be->maxpool_backward(be, &ps, DTYPE_F32, mx, my, mdy, mdx);
    be->maxpool_backward(be, &ps, dt, mxh, myh, mdyh, mdxh);
    assert_dt_close("maxpool_backward", dt, mdxh, mdx, px);
    be->avgpool_forward(be, 2, 28, 6, DTYPE_F32, mx, my);  // (2, 28, 6) view of the same 336 values
    be->avgpool_forward(be, 2, 28, 6, dt, mxh, myh);
    assert_dt_close("avgpool_forward", dt, myh, my, 12);
    be->avgpool_backward(be, 2, 28, 6, DTYPE_F32, mdy, mdx);
    be->avgpool_backward(be, 2, 28, 6, dt, mdyh, mdxh);
    assert_dt_close("avgpool_backward", dt, mdxh, mdx, 2 * 28 * 6);
    free(mx), free(mdy), free(mxh), free(mdyh), free(my), free(mdx), free(myh), free(mdxh);

    // Linear.
    const int n = 4, in = 12, out = 7;
    float *lx = random_in(dt, n * in, 1430, -1, 1), *lw = random_in(dt, out * in, 1431, -1, 1);
    float *lb = random_in(dt, out, 1432, -1, 1), *ldy = random_in(dt, n * out, 1433, -1, 1);
    void *lxh = to_dt(dt, lx, n * in), *lwh = to_dt(dt, lw, out * in), *lbh = to_dt(dt, lb, out),
         *ldyh = to_dt(dt, ldy, n * out);
    float *ly = floats(n * out), *ldx = floats(n * in), *ldw = floats(out * in), *ldb = floats(out);
    void *lyh = to_dt(dt, ly, n * out), *ldxh = to_dt(dt, ldx, n * in), *ldwh = to_dt(dt, ldw, out * in),
         *ldbh = to_dt(dt, ldb, out);
    be->linear_forward(be, n, in, out, DTYPE_F32, lx, lw, lb, ly);
    be->linear_forward(be, n, in, out, dt, lxh, lwh, lbh, lyh);
    assert_dt_close("linear_forward", dt, lyh, ly, n * out);
    be->linear_backward(be, n, in, out, DTYPE_F32, lx, lw, ldy, ldx, ldw, ldb, 0);
    be->linear_backward(be, n, in, out, dt, lxh, lwh, ldyh, ldxh, ldwh, ldbh, 0);
    assert_dt_close("linear_backward dx", dt, ldxh, ldx, n * in);
    assert_dt_close("linear_backward dw", dt, ldwh, ldw, out * in);
    assert_dt_close("linear_backward db", dt, ldbh, ldb, out);

    // Softmax cross-entropy with 16-bit logits: the loss is fp32 either way.
    int32_t labels[4] = {0, 3, 6, 2};
    const float scale = 65536.0f;
    float loss, loss_h, *dz = floats(n * out);
    void *dzh = to_dt(dt, dz, n * out);
    be->softmax_xent(be, n, out, DTYPE_F32, ly, labels, NULL, 0.0f, &loss, dz, &scale, 1.0f / n);
    float *ly_rounded = floats(n * out);
    for (int i = 0; i < n * out; i++) ly_rounded[i] = dtype_load(lyh, dt, i);
    float loss_rounded;
    be->softmax_xent(be, n, out, DTYPE_F32, ly_rounded, labels, NULL, 0.0f, &loss_rounded, dz, &scale,
                     1.0f / n);
    be->softmax_xent(be, n, out, dt, lyh, labels, NULL, 0.0f, &loss_h, dzh, &scale, 1.0f / n);
    ck_assert_double_eq_tol(loss_h, loss_rounded, 1e-6 * loss_rounded);  // fp32 math on the same values
    ck_assert_double_eq_tol(loss_h, loss, tol_of(dt) * loss);
    assert_dt_close("softmax_xent dlogits", dt, dzh, dz, n * out);
    free(lx), free(lw), free(lb), free(ldy), free(lxh), free(lwh), free(lbh), free(ldyh);
    free(ly), free(ldx), free(ldw), free(ldb), free(lyh), free(ldxh), free(ldwh), free(ldbh);
    free(dz), free(dzh), free(ly_rounded);
}
END_TEST

// ---- batch mixing -----------------------------------------------------------------------------------

// x[i] with x[i - 1] (x[0] with x[n - 1]) as torchvision.transforms.v2 computes it: MixUp's
// rolled.mul_(rest).add_(own.mul(lam)), each product and the sum rounded to fp32 (volatile: one rounding per
// operation whatever the compiler would fuse); CutMix's box copied from the rolled image, the rest kept.
static float mixed_value(const BatchMix *m, int row, int col, float own, float rolled) {
    if (!m->blend) return row >= m->y1 && row < m->y2 && col >= m->x1 && col < m->x2 ? rolled : own;
    volatile float a = rolled * m->rest, b = own * m->lam;
    return a + b;
}

START_TEST(test_batch_mix_matches_torchvision_arithmetic) {
    enum { N = 3, H = 5, W = 4, C = 3, IMAGE = H * W * C, COUNT = N * IMAGE };
    const BatchMix cases[] = {
        {.lam = 0.3f, .rest = (float)(1.0 - (double)0.3f), .blend = 1},
        {.lam = 0.65f,
         .rest = 0.35f,
         .blend = 0,
         .x1 = 1,
         .y1 = 2,
         .x2 = 3,
         .y2 = 5},  // a box at the bottom edge
        {.lam = 1.0f, .rest = 0.0f, .blend = 0, .x1 = 2, .y1 = 2, .x2 = 2, .y2 = 4},  // an empty box
    };
    float *x = random_floats(COUNT, 1330, -2.5f, 2.5f);
    const DType dts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
            const BatchMix *m = &cases[ci];
            const DType dt = dts[di];
            float in[COUNT], want[COUNT], got[COUNT];
            for (int i = 0; i < COUNT; i++) in[i] = dt == DTYPE_F32 ? x[i] : round_to(dt, x[i]);
            for (int i = 0; i < N; i++)
                for (int row = 0; row < H; row++)
                    for (int col = 0; col < W; col++)
                        for (int ch = 0; ch < C; ch++) {
                            const int p = (row * W + col) * C + ch;
                            const float own = in[i * IMAGE + p], rolled = in[(i + N - 1) % N * IMAGE + p];
                            const float v = mixed_value(m, row, col, own, rolled);
                            want[i * IMAGE + p] = dt == DTYPE_F32 ? v : round_to(dt, v);
                        }
            if (dt == DTYPE_F32) {
                memcpy(got, in, sizeof got);
                be->batch_mix(be, DTYPE_F32, got, N, H, W, C, m);
            } else {
                void *h = to_dt(dt, in, COUNT);
                be->batch_mix(be, dt, h, N, H, W, C, m);
                for (int i = 0; i < COUNT; i++) got[i] = dtype_load(h, dt, i);
                free(h);
            }
            ck_assert_msg(memcmp(got, want, sizeof got) == 0,
                          "case %zu %s: the mixed batch differs from torchvision's", ci, dtype_name(dt));
            if (ci == 1) {  // not vacuous: the box changed values, and only inside it
                ck_assert(got[(2 * W + 1) * C] != in[(2 * W + 1) * C] && got[0] == in[0]);
            }
        }
    free(x);
}
END_TEST

// ---- optimizer and loss scaler ----------------------------------------------------------------------

START_TEST(test_sgd_step_matches_pytorch_semantics) {
    // torch.optim.SGD (dampening 0) with two param groups, on grads unscaled by 1/S and clipped by
    // clip_grad_norm_'s factor c = min(1, max_norm / (norm + 1e-6)) (c = 1 without a norm):
    //   g = grad / S * c + wd[group] * p;  buf = momentum * buf + g;  d = nesterov ? g + momentum * buf : buf;
    //   p -= lr * d
    // The groups of 257 elements: spans of 64, the last one partial. 16-bit gradients come with the compute
    // copy in their dtype, fp32 ones without (the model's fp32 weights are the masters themselves).
    const uint8_t groups[5] = {0, 1, 1, 0, 1};
    const struct {
        float lr;
        SgdParams p;
        DType grad_dt;
        int with_groups;
        float norm;  // 0: no clipping
    } cases[] = {
        {0.1f, {0.9f, {1e-4f, 1e-4f}, 0, 0}, DTYPE_F16, 0, 0},
        {0.1f, {0.9f, {1e-4f, 0.0f}, 1, 0}, DTYPE_F16, 1, 0},
        {0.05f, {0.0f, {0.0f, 0.0f}, 0, 0}, DTYPE_F32, 0, 0},
        {0.2f, {0.5f, {5e-4f, 2e-2f}, 1, 0}, DTYPE_F32, 1, 0},
        {0.1f, {0.9f, {1e-4f, 0.0f}, 0, 0.5f}, DTYPE_F16, 1, 20.0f},   // clipped to a fortieth
        {0.1f, {0.9f, {1e-4f, 0.0f}, 0, 50.0f}, DTYPE_F32, 1, 20.0f},  // below max_norm: c = 1
        {0.1f, {0.9f, {1e-4f, 0.0f}, 1, 0}, DTYPE_BF16, 1, 0},
        {0.1f, {0.9f, {1e-4f, 1e-4f}, 0, 0.5f}, DTYPE_BF16, 0, 20.0f},  // clipped to a fortieth
    };
    const size_t n = 257;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const SgdParams *p = &cases[k].p;
        const DType dt = cases[k].grad_dt;
        const uint8_t *group = cases[k].with_groups ? groups : NULL;
        const float *norm = cases[k].norm > 0 ? &cases[k].norm : NULL;
        float *master = random_floats(n, 1500 + k, -1, 1), *mom = random_floats(n, 1510 + k, -0.1f, 0.1f);
        float *grad32 = random_floats(n, 1520 + k, -4096, 4096);  // scaled gradients, S = 4096
        void *grad16 = dt == DTYPE_F32 ? NULL : to_dt(dt, grad32, n);
        const void *grad = grad16 ? grad16 : (const void *)grad32;
        void *copy = grad16 ? calloc(n, dtype_size(dt)) : NULL;
        ScalerState st = {.scale = 4096.0f, .found_inf = 0};

        const double c = norm ? fmin(1.0, (double)p->max_norm / ((double)*norm + 1e-6)) : 1.0;
        double *want_master = calloc(n, sizeof(double)), *want_mom = calloc(n, sizeof(double));
        for (size_t i = 0; i < n; i++) {
            const double graw = grad16 ? dtype_load(grad16, dt, i) : grad32[i];
            const double wd = p->weight_decay[group ? group[i / 64] : 0];
            const double g = graw / st.scale * c + wd * master[i];
            want_mom[i] = (double)p->momentum * mom[i] + g;
            const double d = p->nesterov ? g + (double)p->momentum * want_mom[i] : want_mom[i];
            want_master[i] = master[i] - (double)cases[k].lr * d;
        }
        be->sgd_step(be, n, dt, grad, master, mom, copy, p, group, &cases[k].lr, norm, &st);
        for (size_t i = 0; i < n; i++) {
            ck_assert_double_eq_tol(master[i], want_master[i], 1e-6);
            ck_assert_double_eq_tol(mom[i], want_mom[i], 1e-6);
            // The compute copy is the new master rounded once.
            if (copy) ck_assert_float_eq(dtype_load(copy, dt, i), round_to(dt, master[i]));
        }

        // NULL copy: only the fp32 state moves.
        be->sgd_step(be, n, dt, grad, master, mom, NULL, p, group, &cases[k].lr, norm, &st);

        // found_inf: master, momentum and copy stay bitwise as they were, whatever the norm says.
        float *master_before = copy_floats(master, n), *mom_before = copy_floats(mom, n);
        void *copy_before = copy ? calloc(n, dtype_size(dt)) : NULL;
        if (copy) memcpy(copy_before, copy, n * dtype_size(dt));
        st.found_inf = 1.0f;
        const float nan_norm = NAN;
        be->sgd_step(be, n, dt, grad, master, mom, copy, p, group, &cases[k].lr, norm ? &nan_norm : NULL,
                     &st);
        ck_assert_mem_eq(master, master_before, n * sizeof(float));
        ck_assert_mem_eq(mom, mom_before, n * sizeof(float));
        if (copy) ck_assert_mem_eq(copy, copy_before, n * dtype_size(dt));

        free(master), free(mom), free(grad32), free(grad16), free(copy), free(want_master), free(want_mom);
        free(master_before), free(mom_before), free(copy_before);
    }
}
END_TEST

// A norm that overflowed to +inf from finite gradients scales them to 0: only the weight decay moves the
// weights (torch: clip_coef = max_norm / inf = 0), nothing turns NaN.
START_TEST(test_sgd_step_with_an_infinite_norm_keeps_only_the_decay) {
    const size_t n = 64;
    const SgdParams p = {0.0f, {0.5f, 0.5f}, 0, 1.0f};
    const float lr = 0.1f, norm = INFINITY;
    float *master = random_floats(n, 1530, -1, 1), *mom = floats(n),
          *grad = random_floats(n, 1531, -1e30f, 1e30f);
    float *before = copy_floats(master, n);
    ScalerState st = {.scale = 1.0f};
    be->sgd_step(be, n, DTYPE_F32, grad, master, mom, NULL, &p, NULL, &lr, &norm, &st);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(master[i], before[i] - 0.1f * (0.5f * before[i]));
    free(master), free(mom), free(grad), free(before);
}
END_TEST

// The norm of grad / S against a direct double-precision sum, fp32, fp16 and bf16 gradients, and inf/NaN
// through.
START_TEST(test_grad_norm_matches_a_double_sum) {
    const size_t n = 1000;
    float *grad32 = random_floats(n, 1540, -3000, 3000);
    const DType dts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
        const DType dt = dts[di];
        void *grad = dt == DTYPE_F32 ? copy_floats(grad32, n) : to_dt(dt, grad32, n);
        ScalerState st = {.scale = 512.0f};
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            const double g = dtype_load(grad, dt, i) / 512.0;
            sum += g * g;
        }
        float norm = -1;
        be->grad_norm(be, dt, grad, n, &st, &norm);
        ck_assert_msg(fabs(norm - sqrt(sum)) <= 1e-6 * sqrt(sum), "%s: norm %.9g, want %.9g", dtype_name(dt),
                      norm, sqrt(sum));
        free(grad);
    }
    float bad[3] = {1, INFINITY, 1}, nan_bad[3] = {1, NAN, 1}, norm;
    ScalerState st = {.scale = 1.0f};
    be->grad_norm(be, DTYPE_F32, bad, 3, &st, &norm);
    ck_assert(isinf(norm));
    be->grad_norm(be, DTYPE_F32, nan_bad, 3, &st, &norm);
    ck_assert(isnan(norm));
    be->grad_norm(be, DTYPE_F32, bad, 0, &st, &norm);
    ck_assert_float_eq(norm, 0.0f);
    free(grad32);
}
END_TEST

// ema_update: skip writes nothing, copy copies, average is decay * avg + weight * src with both products
// rounded to fp32 before the sum (a hand-computed case: 0.75 * 4 + 0.25 * 8 = 5; 0.5 * 3 + 0.5 * 2 = 2.5).
START_TEST(test_ema_update_modes) {
    float avg[2] = {4, 3}, src[2] = {8, 2};
    EmaControl skip = {EMA_SKIP, 0.75f, 0.25f}, copy = {EMA_COPY, 0.75f, 0.25f};
    EmaControl average = {EMA_AVERAGE, 0.75f, 0.25f}, half_half = {EMA_AVERAGE, 0.5f, 0.5f};
    be->ema_update(be, 2, avg, src, &skip);
    ck_assert(avg[0] == 4 && avg[1] == 3);
    be->ema_update(be, 1, avg, src, &average);
    ck_assert(avg[0] == 5 && avg[1] == 3);
    be->ema_update(be, 2, avg, src, &half_half);
    ck_assert(avg[0] == 6.5f && avg[1] == 2.5f);
    be->ema_update(be, 2, avg, src, &copy);
    ck_assert(avg[0] == 8 && avg[1] == 2);
    // Rounding: each product is an fp32 value before the addition.
    float a = 0.1f, x = 0.7f;
    const EmaControl c = {EMA_AVERAGE, 0.999f, (float)(1.0 - 0.999)};
    volatile float p1 = c.decay * a, p2 = c.weight * x;
    const float want = p1 + p2;
    be->ema_update(be, 1, &a, &x, &c);
    ck_assert_msg(a == want, "%a, want %a", a, want);
}
END_TEST

START_TEST(test_scaler_update_follows_gradscaler) {
    // growth 2, backoff 0.5, interval 3; after each step: the scale, growth count and skipped total.
    const struct {
        int dynamic;
        int steps;
        float found_inf[8];
        float scale[8];
        int count[8];
        int skipped[8];
    } cases[] = {
        // Grows exactly at the 3rd clean step in a row, then counts again from 0.
        {1, 7, {0}, {8, 8, 16, 16, 16, 32, 32}, {1, 2, 0, 1, 2, 0, 1}, {0}},  // all clean
        // An overflow halves the scale and resets the count, so growth needs 3 fresh clean steps.
        {1, 6, {0, 0, 1, 0, 0, 0}, {8, 8, 4, 4, 4, 8}, {1, 2, 0, 1, 2, 0}, {0, 0, 1, 1, 1, 1}},
        {1, 4, {1, 1, 0, 1}, {4, 2, 2, 1}, {0, 0, 1, 0}, {1, 2, 2, 3}},
        // Static scaling: the scale never moves, skips are still counted.
        {0, 5, {0, 0, 0, 1, 0}, {8, 8, 8, 8, 8}, {0, 0, 0, 0, 0}, {0, 0, 0, 1, 1}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ScalerState st = {.scale = 8.0f, .growth_count = 0, .found_inf = 0, .skipped_total = 0};
        for (int t = 0; t < cases[k].steps; t++) {
            st.found_inf = cases[k].found_inf[t];
            be->scaler_update(be, &st, 2.0f, 0.5f, 3, cases[k].dynamic);
            ck_assert_msg(st.scale == cases[k].scale[t], "case %zu step %d: scale %g, want %g", k, t,
                          st.scale, cases[k].scale[t]);
            ck_assert_int_eq(st.growth_count, cases[k].count[t]);
            ck_assert_int_eq(st.skipped_total, cases[k].skipped[t]);
        }
    }
    // A growth that would overflow fp32 keeps the scale (torch checks the grown scale is finite).
    ScalerState big = {.scale = 3.0e38f, .growth_count = 0, .found_inf = 0, .skipped_total = 0};
    be->scaler_update(be, &big, 2.0f, 0.5f, 1, 1);
    ck_assert_float_eq(big.scale, 3.0e38f);
    ck_assert_int_eq(big.growth_count, 0);
}
END_TEST

START_TEST(test_nonfinite_check_finds_inf_and_nan_anywhere) {
    const size_t n = 101;
    const size_t positions[] = {0, n / 2, n - 1};
    const float bad_values[] = {INFINITY, -INFINITY, NAN};
    // The largest finite value of each dtype is still clean: fp16 65504, bf16 0x7f7f = 3.3895314e38.
    const struct {
        DType dt;
        float largest;
    } dts[] = {{DTYPE_F32, 3.0e38f}, {DTYPE_F16, FP16_MAX}, {DTYPE_BF16, 0x1.fep127f}};
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
        const DType dt = dts[di].dt;
        float *clean = random_floats(n, 1600, -1, 1);
        clean[7] = dts[di].largest;
        clean[8] = -dts[di].largest;
        void *buf = calloc(n, sizeof(float));
        be->cast(be, buf, dt, clean, DTYPE_F32, n);

        float flag = 0.0f;
        be->nonfinite_check(be, dt, buf, n, &flag);
        ck_assert_float_eq(flag, 0.0f);
        flag = 1.0f;  // a flag raised by an earlier buffer stays raised
        be->nonfinite_check(be, dt, buf, n, &flag);
        ck_assert_float_eq(flag, 1.0f);

        for (size_t p = 0; p < 3; p++)
            for (size_t v = 0; v < 3; v++) {
                float *dirty = copy_floats(clean, n);
                dirty[positions[p]] = bad_values[v];
                be->cast(be, buf, dt, dirty, DTYPE_F32, n);
                flag = 0.0f;
                be->nonfinite_check(be, dt, buf, n, &flag);
                ck_assert_msg(flag == 1.0f, "%s: %g at %zu not found", dtype_name(dt), bad_values[v],
                              positions[p]);
                free(dirty);
            }
        free(clean);
        free(buf);
    }
}
END_TEST

START_TEST(test_cast_rounds_to_nearest_even_and_overflows_to_inf) {
    const float in[] = {70000.0f,
                        -70000.0f,
                        65504.0f,
                        65519.0f,
                        65520.0f,
                        1.0f + 0x1p-11f,      // halfway between 1 and 1 + 2^-10: ties to even, 1
                        1.0f + 3 * 0x1p-11f,  // halfway between 1 + 2^-10 and 1 + 2^-9: ties to even
                        0x1p-24f};            // the smallest fp16 subnormal
    const float want[] = {INFINITY, -INFINITY, 65504.0f, 65504.0f, INFINITY, 1.0f, 1.0f + 0x1p-9f, 0x1p-24f};
    const size_t n = sizeof in / sizeof in[0];
    half h[8];
    float back[8];
    be->cast(be, h, DTYPE_F16, in, DTYPE_F32, n);
    be->cast(be, back, DTYPE_F32, h, DTYPE_F16, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(back[i] == want[i], "%a -> %a, want %a", in[i], back[i], want[i]);
}
END_TEST

// fp32 -> bf16 against bit patterns worked out by hand (__float2bfloat16_rn's rule): the top 16 bits, the
// dropped low 16 rounding to nearest with ties to even, carries running into the exponent up to inf, every
// NaN the canonical 0x7fff; bf16 -> fp32 puts the bits back on top of 16 zeros.
START_TEST(test_bf16_cast_rounds_as_cuda) {
    const struct {
        uint32_t in;
        uint16_t want;
    } cases[] = {
        {0x3f800000u, 0x3f80u},  // 1
        {0x3f807fffu, 0x3f80u},  // just below halfway: down
        {0x3f808000u, 0x3f80u},  // 1 + 2^-8, halfway between 0x3f80 and 0x3f81: ties to the even 0x3f80
        {0x3f808001u, 0x3f81u},  // just above halfway: up
        {0x3f818000u, 0x3f82u},  // halfway between 0x3f81 and 0x3f82: ties to the even 0x3f82
        {0xbf808000u, 0xbf80u},  // -(1 + 2^-8): the same tie with the sign
        {0x3fffffffu, 0x4000u},  // rounding up carries into the exponent: 2
        {0x7f7f7fffu, 0x7f7fu},  // below halfway to inf: the largest bf16, 3.3895314e38
        {0x7f7f8000u, 0x7f80u},  // halfway between 0x7f7f (odd) and inf: ties to even, overflows to inf
        {0x7f7fffffu, 0x7f80u},  // FLT_MAX overflows to inf
        {0xff7fffffu, 0xff80u},  // -FLT_MAX to -inf
        {0x7f800000u, 0x7f80u},  // inf
        {0xff800000u, 0xff80u},  // -inf
        {0x7fc00000u, 0x7fffu},  // quiet NaN: canonical
        {0xffc00000u, 0x7fffu},  // negative NaN: canonical
        {0x7f800001u, 0x7fffu},  // NaN whose payload lies in the dropped bits: still NaN, not inf
        {0x00000000u, 0x0000u},  // +0
        {0x80000000u, 0x8000u},  // -0
        {0x00000001u, 0x0000u},  // the smallest fp32 subnormal, far below half of bf16's smallest: 0
        {0x00008000u, 0x0000u},  // half of bf16's smallest subnormal (2^-134): ties to the even 0
        {0x00008001u, 0x0001u},  // just above it: bf16's smallest subnormal, 2^-133
        {0x00010000u, 0x0001u},  // 2^-133 exactly
        {0x00018000u, 0x0002u},  // halfway between subnormals 0x0001 and 0x0002: ties to even
        {0x80008001u, 0x8001u},  // a negative subnormal, above halfway
        {0x007fffffu, 0x0080u},  // the largest fp32 subnormal rounds up to the smallest normal, 2^-126
    };
    const size_t n = sizeof cases / sizeof cases[0];
    float in[32], back[32];
    uint16_t out[32];
    ck_assert_uint_le(n, 32);
    for (size_t i = 0; i < n; i++) memcpy(&in[i], &cases[i].in, sizeof in[i]);
    be->cast(be, out, DTYPE_BF16, in, DTYPE_F32, n);
    be->cast(be, back, DTYPE_F32, out, DTYPE_BF16, n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(out[i] == cases[i].want, "0x%08x -> 0x%04x, want 0x%04x", cases[i].in, out[i],
                      cases[i].want);
        uint32_t widened;
        memcpy(&widened, &back[i], sizeof widened);
        ck_assert_msg(widened == (uint32_t)cases[i].want << 16, "0x%04x widens to 0x%08x", out[i], widened);
    }
    // fp16 -> bf16 goes through fp32: 65504 is 0x477fe000, whose dropped 0xe000 rounds up to 0x4780 (65536).
    half h = half_from_float(65504.0f);
    uint16_t b;
    be->cast(be, &b, DTYPE_BF16, &h, DTYPE_F16, 1);
    ck_assert_uint_eq(b, 0x4780u);
}
END_TEST

// bf16x2_equal_mask (the CUDA max-pool backward's route compare before sm_90) against comparing the widened
// fp32 values: every bf16 x against itself, its negation, its neighbours and the special values (zeros, the
// smallest subnormals, 1, the largest finite, inf, NaNs), in the low half and in the high half with an
// unrelated other half.
static int bf16_equal_by_float(uint16_t x, uint16_t y) { return bf16_to_float(x) == bf16_to_float(y); }

START_TEST(test_bf16x2_equal_mask_is_ieee_equality) {
    const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x3f80, 0xbf80, 0x7f7f, 0xff7f,
                                 0x7f80, 0xff80, 0x7f81, 0x7fc0, 0x7fff, 0xffff, 0xffc0};
    const size_t n_specials = sizeof specials / sizeof specials[0];
    long checked = 0;
    for (uint32_t x = 0; x <= 0xffffu; x++) {
        uint16_t others[4 + sizeof specials / sizeof specials[0]] = {(uint16_t)x, (uint16_t)(x ^ 0x8000u),
                                                                     (uint16_t)(x + 1), (uint16_t)(x - 1)};
        memcpy(others + 4, specials, sizeof specials);
        for (size_t k = 0; k < 4 + n_specials; k++) {
            const uint32_t y = others[k];  // unsigned before any shift (a uint16_t promotes to int)
            const uint32_t want = bf16_equal_by_float((uint16_t)x, (uint16_t)y) ? 0xffffu : 0u;
            const uint32_t filler = 0x3f80u;  // 1.0 against 0.0: never equal
            const uint32_t low = bf16x2_equal_mask(x | filler << 16, y),
                           high = bf16x2_equal_mask(x << 16, y << 16 | filler);
            ck_assert_msg(low == want, "low half 0x%04x vs 0x%04x: mask 0x%08x, want 0x%08x", x, y, low,
                          want);
            ck_assert_msg(high == want << 16, "high half 0x%04x vs 0x%04x: mask 0x%08x, want 0x%08x", x, y,
                          high, want << 16);
            checked++;
        }
    }
    ck_assert_int_eq(checked, 65536L * (long)(4 + n_specials));
}
END_TEST

START_TEST(test_peak_bytes_tracks_allocations) {
    ck_assert_uint_eq(be->current_bytes(be), 0);
    void *a = be->alloc(be, 1000);
    void *b = be->alloc(be, 3000);
    ck_assert_uint_eq(be->current_bytes(be), 4000);
    ck_assert_uint_eq(be->peak_bytes(be), 4000);
    be->free(be, b);
    ck_assert_uint_eq(be->current_bytes(be), 1000);
    void *c = be->alloc(be, 500);
    ck_assert_uint_eq(be->current_bytes(be), 1500);
    ck_assert_uint_eq(be->peak_bytes(be), 4000);  // a high-water mark, not the current use
    void *d = be->alloc(be, 3000);
    ck_assert_uint_eq(be->peak_bytes(be), 4500);
    // The memory is usable: the copy ops move bytes faithfully.
    memset(a, 0x5a, 1000);
    be->copy(be, d, a, 1000);
    ck_assert_mem_eq(d, a, 1000);
    be->zero(be, d, 1000);
    ck_assert_uint_eq(((unsigned char *)d)[999], 0);
    be->free(be, a);
    be->free(be, c);
    be->free(be, d);
    ck_assert_uint_eq(be->current_bytes(be), 0);
    ck_assert_uint_eq(be->peak_bytes(be), 4500);
}
END_TEST

static Suite *cpu_ops_suite(void) {
    Suite *s = suite_create("cpu_ops");
    TCase *tc = tcase_create("cpu_ops");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_conv_forward_matches_textbook_nchw);
    tcase_add_test(tc, test_conv_backward_matches_finite_differences);
    tcase_add_test(tc, test_bn_backward_matches_finite_differences);
    tcase_add_test(tc, test_bn_conv_backward_data_matches_finite_differences);
    tcase_add_test(tc, test_bn_forward_matches_direct_formulas);
    tcase_add_test(tc, test_maxpool_backward_matches_finite_differences);
    tcase_add_test(tc, test_maxpool_padding_and_tie_rule);
    tcase_add_test(tc, test_avgpool_matches_mean_and_finite_differences);
    tcase_add_test(tc, test_linear_matches_formula_and_finite_differences);
    tcase_add_test(tc, test_softmax_xent_matches_formula_and_finite_differences);
    tcase_add_test(tc, test_softmax_xent_smoothing_and_mixing_match_hand_computed_targets);
    tcase_add_test(tc, test_softmax_xent_smoothing_and_mixing_match_finite_differences);
    tcase_add_test(tc, test_softmax_xent_without_smoothing_or_mixing_is_bitwise_the_one_hot_formula);
    tcase_add_test(tc, test_batch_mix_matches_torchvision_arithmetic);
    tcase_add_loop_test(tc, test_16bit_storage_matches_fp32, 0, HALF_DTYPES);
    tcase_add_test(tc, test_sgd_step_matches_pytorch_semantics);
    tcase_add_test(tc, test_sgd_step_with_an_infinite_norm_keeps_only_the_decay);
    tcase_add_test(tc, test_grad_norm_matches_a_double_sum);
    tcase_add_test(tc, test_ema_update_modes);
    tcase_add_test(tc, test_scaler_update_follows_gradscaler);
    tcase_add_test(tc, test_nonfinite_check_finds_inf_and_nan_anywhere);
    tcase_add_test(tc, test_cast_rounds_to_nearest_even_and_overflows_to_inf);
    tcase_add_test(tc, test_bf16_cast_rounds_as_cuda);
    tcase_add_test(tc, test_bf16x2_equal_mask_is_ieee_equality);
    tcase_add_test(tc, test_peak_bytes_tracks_allocations);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(cpu_ops_suite(), 1); }
