// cpu_batchnorm.c - batch norm over NHWC rows (rows = n*h*w, c channels), fused with an optional
// residual add and ReLU, as one ResNeXt block ends: y = relu(bn(x) + residual).
//
// Statistics and the backward reductions accumulate in double over all rows; the per-element math is
// fp32. Loops run rows outer, channels inner, so every pass reads the NHWC tensor front to back.
#include <math.h>
#include <stdlib.h>

#include "core/check.h"
#include "kernels/cpu/cpu_ops.h"

// y = act(scale[ch] * x + shift[ch] + residual): both forward modes reduce to a per-channel affine map.
static void bn_apply(int rows, int c, DType dt, const float *xf, const void *residual, int relu,
                     const float *scale, const float *shift, void *y) {
    const size_t count = (size_t)rows * c;
    float *yf = residual ? cpu_floats_load(residual, dt, count) : cpu_scratch(count);
    for (int r = 0; r < rows; r++) {
        const float *xrow = xf + (size_t)r * c;
        float *yrow = yf + (size_t)r * c;
        for (int ch = 0; ch < c; ch++) {
            const float v = scale[ch] * xrow[ch] + shift[ch] + yrow[ch];
            yrow[ch] = relu && v < 0.0f ? 0.0f : v;
        }
    }
    cpu_floats_store(y, dt, yf, count, 0);
    free(yf);
}

void cpu_bn_forward_train(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                          int relu, const float *gamma, const float *beta, float *running_mean,
                          float *running_var, float momentum, float eps, float *save_mean, float *save_invstd,
                          void *y) {
    (void)be;
    // torch refuses one value per channel too: the unbiased variance would divide by zero.
    AMP_ASSERT(rows > 1, "batch norm in training needs more than 1 value per channel (rows=%d)", rows);
    float *xf = cpu_floats_load(x, dt, (size_t)rows * c);  // (rows, c)
    double *sum = xcalloc((size_t)c, sizeof(double));
    double *sq = xcalloc((size_t)c, sizeof(double));
    float *scale = cpu_scratch((size_t)c);
    float *shift = cpu_scratch((size_t)c);

    // Two passes (mean, then squared deviations) so the variance does not cancel for large means.
    for (int r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) sum[ch] += xf[(size_t)r * c + ch];
    for (int ch = 0; ch < c; ch++) sum[ch] /= rows;
    for (int r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) {
            const double d = xf[(size_t)r * c + ch] - sum[ch];
            sq[ch] += d * d;
        }

    for (int ch = 0; ch < c; ch++) {
        const double mean = sum[ch], var = sq[ch] / rows;  // biased: what normalizes this batch
        const double unbiased = sq[ch] / (rows - 1);       // what the running estimate tracks (torch)
        const float invstd = (float)(1.0 / sqrt(var + eps));
        save_mean[ch] = (float)mean;
        save_invstd[ch] = invstd;
        running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * (float)mean;
        running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * (float)unbiased;
        scale[ch] = gamma[ch] * invstd;
        shift[ch] = beta[ch] - (float)mean * scale[ch];
    }
    bn_apply(rows, c, dt, xf, residual, relu, scale, shift, y);

    free(xf);
    free(sum);
    free(sq);
    free(scale);
    free(shift);
}

void cpu_bn_forward_eval(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                         int relu, const float *gamma, const float *beta, const float *running_mean,
                         const float *running_var, float eps, void *y) {
    (void)be;
    float *xf = cpu_floats_load(x, dt, (size_t)rows * c);  // (rows, c)
    float *scale = cpu_scratch((size_t)c);
    float *shift = cpu_scratch((size_t)c);
    for (int ch = 0; ch < c; ch++) {
        scale[ch] = gamma[ch] / sqrtf(running_var[ch] + eps);
        shift[ch] = beta[ch] - running_mean[ch] * scale[ch];
    }
    bn_apply(rows, c, dt, xf, residual, relu, scale, shift, y);
    free(xf);
    free(scale);
    free(shift);
}

// The forward's scale and shift from its saved statistics, as cpu_bn_forward_train computed them.
void cpu_bn_forward_saved(Backend *be, int rows, int c, DType dt, const void *x, int relu, const float *gamma,
                          const float *beta, const float *save_mean, const float *save_invstd, void *y) {
    (void)be;
    float *xf = cpu_floats_load(x, dt, (size_t)rows * c);  // (rows, c)
    float *scale = cpu_scratch((size_t)c);
    float *shift = cpu_scratch((size_t)c);
    for (int ch = 0; ch < c; ch++) {
        scale[ch] = gamma[ch] * save_invstd[ch];
        shift[ch] = beta[ch] - save_mean[ch] * scale[ch];
    }
    bn_apply(rows, c, dt, xf, NULL, relu, scale, shift, y);
    free(xf);
    free(scale);
    free(shift);
}

void cpu_bn_backward(Backend *be, int rows, int c, DType dt, const void *x, const void *y, const void *dy,
                     int relu, const float *gamma, const float *save_mean, const float *save_invstd, void *dx,
                     int accumulate, void *dgamma, void *dbeta, int accumulate_params, void *d_residual) {
    (void)be;
    const size_t count = (size_t)rows * c;
    float *xf = cpu_floats_load(x, dt, count);    // (rows, c)
    float *dzf = cpu_floats_load(dy, dt, count);  // (rows, c): dy, then the gradient before the ReLU
    double *dbeta_sum = xcalloc((size_t)c, sizeof(double));
    double *dgamma_sum = xcalloc((size_t)c, sizeof(double));

    // The ReLU passes gradient where its output is positive (torch's threshold_backward on the output).
    if (relu) {
        float *yf = cpu_floats_load(y, dt, count);
        for (size_t i = 0; i < count; i++)
            if (!(yf[i] > 0.0f)) dzf[i] = 0.0f;
        free(yf);
    }
    if (d_residual) cpu_floats_store(d_residual, dt, dzf, count, 0);

    for (int r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) {
            const size_t i = (size_t)r * c + ch;
            const float xhat = (xf[i] - save_mean[ch]) * save_invstd[ch];
            dbeta_sum[ch] += dzf[i];
            dgamma_sum[ch] += (double)dzf[i] * xhat;
        }

    float *params = cpu_scratch((size_t)c);
    for (int ch = 0; ch < c; ch++) params[ch] = (float)dgamma_sum[ch];
    cpu_floats_store(dgamma, dt, params, (size_t)c, accumulate_params);
    for (int ch = 0; ch < c; ch++) params[ch] = (float)dbeta_sum[ch];
    cpu_floats_store(dbeta, dt, params, (size_t)c, accumulate_params);

    // dx = gamma * invstd * (dz - mean(dz) - xhat * mean(dz * xhat)), reusing xf's storage for dx.
    for (int ch = 0; ch < c; ch++) {
        dbeta_sum[ch] /= rows;
        dgamma_sum[ch] /= rows;
    }
    for (int r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) {
            const size_t i = (size_t)r * c + ch;
            const float xhat = (xf[i] - save_mean[ch]) * save_invstd[ch];
            xf[i] = gamma[ch] * save_invstd[ch] *
                    (dzf[i] - (float)dbeta_sum[ch] - xhat * (float)dgamma_sum[ch]);
        }
    cpu_floats_store(dx, dt, xf, count, accumulate);

    free(params);
    free(xf);
    free(dzf);
    free(dbeta_sum);
    free(dgamma_sum);
}

// The reference makes the two calls: the statistics from a pass over the stored y_conv, as torch's.
void cpu_conv_bn_forward_train(Backend *be, const ConvShape *s, DType dt, const void *x, const void *w,
                               const BnArgs *bn, const void *residual, int relu, float momentum, float eps,
                               void *y_conv, void *y) {
    cpu_conv_forward(be, s, dt, x, w, y_conv);
    cpu_bn_forward_train(be, s->n * s->out_h * s->out_w, s->c_out, dt, y_conv, residual, relu, bn->gamma,
                         bn->beta, bn->running_mean, bn->running_var, momentum, eps, bn->save_mean,
                         bn->save_invstd, y);
}

// The reference writes bn_in's output into scratch and makes the calls it stands for.
void cpu_bn_conv_bn_forward_train(Backend *be, const BnArgs *bn_in, void *scratch, const ConvShape *s,
                                  DType dt, const void *w, const BnArgs *bn, const void *residual, int relu,
                                  float momentum, float eps, void *y_conv, void *y) {
    cpu_bn_forward_train(be, s->n * s->h * s->w, s->c_in, dt, bn_in->x, NULL, 1, bn_in->gamma, bn_in->beta,
                         bn_in->running_mean, bn_in->running_var, momentum, eps, bn_in->save_mean,
                         bn_in->save_invstd, scratch);
    cpu_conv_bn_forward_train(be, s, dt, scratch, w, bn, residual, relu, momentum, eps, y_conv, y);
}

// The reference makes the two calls: the data gradient into scratch, then the batch norm's backward with the
// ReLU's mask from y.
void cpu_bn_conv_backward_data(Backend *be, const ConvShape *s, DType dt, const void *dy, const void *w,
                               const BnArgs *bn, const void *y, void *scratch, void *dx,
                               int accumulate_params) {
    cpu_conv_backward_data(be, s, dt, dy, w, scratch, 0);
    cpu_bn_backward(be, s->n * s->h * s->w, s->c_in, dt, bn->x, y, scratch, 1, bn->gamma, bn->save_mean,
                    bn->save_invstd, dx, 0, bn->dgamma, bn->dbeta, accumulate_params, NULL);
}
