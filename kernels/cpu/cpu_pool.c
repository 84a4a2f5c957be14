// cpu_pool.c - max pooling (square window, NHWC) and global average pooling.
#include <math.h>
#include <stdlib.h>

#include "core/check.h"
#include "kernels/cpu/cpu_ops.h"

// Offset of pixel (n, y, x) in an NHWC tensor of spatial size (h, w) with c channels.
static size_t pool_pixel(int n, int y, int x, int h, int w, int c) {
    return (((size_t)n * h + y) * w + x) * c;
}

void cpu_maxpool_forward(Backend *be, const PoolShape *s, DType dt, const void *x, void *y) {
    (void)be;
    const size_t y_count = (size_t)s->n * s->out_h * s->out_w * s->c;
    float *xf = cpu_floats_load(x, dt, (size_t)s->n * s->h * s->w * s->c);  // (n, h, w, c)
    float *yf = cpu_scratch(y_count);                                       // (n, out_h, out_w, c)

    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->out_h; oy++)
            for (int ox = 0; ox < s->out_w; ox++) {
                float *yrow = yf + pool_pixel(n, oy, ox, s->out_h, s->out_w, s->c);
                for (int ch = 0; ch < s->c; ch++) yrow[ch] = -INFINITY;
                // Padded positions are skipped, not read as zeros: padding never wins the max.
                for (int ky = 0; ky < s->k; ky++) {
                    const int iy = oy * s->stride - s->pad + ky;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int kx = 0; kx < s->k; kx++) {
                        const int ix = ox * s->stride - s->pad + kx;
                        if (ix < 0 || ix >= s->w) continue;
                        const float *xrow = xf + pool_pixel(n, iy, ix, s->h, s->w, s->c);
                        // NaN wins the max (as torch, and the CUDA backend), so an overflow upstream
                        // reaches the loss and the step's inf/NaN verdict instead of vanishing here.
                        for (int ch = 0; ch < s->c; ch++)
                            if (xrow[ch] > yrow[ch] || isnan(xrow[ch])) yrow[ch] = xrow[ch];
                    }
                }
            }

    cpu_floats_store(y, dt, yf, y_count, 0);
    free(xf);
    free(yf);
}

void cpu_maxpool_backward(Backend *be, const PoolShape *s, DType dt, const void *x, const void *y,
                          const void *dy, void *dx) {
    (void)be;
    const size_t x_count = (size_t)s->n * s->h * s->w * s->c;
    const size_t y_count = (size_t)s->n * s->out_h * s->out_w * s->c;
    float *xf = cpu_floats_load(x, dt, x_count);    // (n, h, w, c)
    float *yf = cpu_floats_load(y, dt, y_count);    // (n, out_h, out_w, c)
    float *dyf = cpu_floats_load(dy, dt, y_count);  // (n, out_h, out_w, c)
    float *dxf = cpu_scratch(x_count);              // (n, h, w, c); windows overlap, so it sums
    int *routed = xcalloc((size_t)s->c, sizeof(int));

    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->out_h; oy++)
            for (int ox = 0; ox < s->out_w; ox++) {
                const size_t o = pool_pixel(n, oy, ox, s->out_h, s->out_w, s->c);
                // Each channel's gradient goes to the first window position (row-major) holding the
                // max; routed[ch] records that it has been placed, so ties do not duplicate it. A NaN
                // max equals nothing: its gradient goes nowhere (as on CUDA).
                for (int ch = 0; ch < s->c; ch++) routed[ch] = 0;
                for (int ky = 0; ky < s->k; ky++) {
                    const int iy = oy * s->stride - s->pad + ky;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int kx = 0; kx < s->k; kx++) {
                        const int ix = ox * s->stride - s->pad + kx;
                        if (ix < 0 || ix >= s->w) continue;
                        const size_t i = pool_pixel(n, iy, ix, s->h, s->w, s->c);
                        for (int ch = 0; ch < s->c; ch++)
                            if (!routed[ch] && xf[i + ch] == yf[o + ch]) {
                                dxf[i + ch] += dyf[o + ch];
                                routed[ch] = 1;
                            }
                    }
                }
            }

    cpu_floats_store(dx, dt, dxf, x_count, 0);
    free(routed);
    free(xf);
    free(yf);
    free(dyf);
    free(dxf);
}

void cpu_avgpool_forward(Backend *be, int n, int hw, int c, DType dt, const void *x, void *y) {
    (void)be;
    float *xf = cpu_floats_load(x, dt, (size_t)n * hw * c);  // (n, hw, c)
    float *yf = cpu_scratch((size_t)n * c);                  // (n, c)
    for (int b = 0; b < n; b++) {
        float *yrow = yf + (size_t)b * c;
        for (int p = 0; p < hw; p++) {
            const float *xrow = xf + ((size_t)b * hw + p) * c;
            for (int ch = 0; ch < c; ch++) yrow[ch] += xrow[ch];
        }
        for (int ch = 0; ch < c; ch++) yrow[ch] /= (float)hw;
    }
    cpu_floats_store(y, dt, yf, (size_t)n * c, 0);
    free(xf);
    free(yf);
}

void cpu_avgpool_backward(Backend *be, int n, int hw, int c, DType dt, const void *dy, void *dx) {
    (void)be;
    float *dyf = cpu_floats_load(dy, dt, (size_t)n * c);  // (n, c)
    float *dxf = cpu_scratch((size_t)n * hw * c);         // (n, hw, c)
    for (int b = 0; b < n; b++)
        for (int p = 0; p < hw; p++)
            for (int ch = 0; ch < c; ch++)
                dxf[((size_t)b * hw + p) * c + ch] = dyf[(size_t)b * c + ch] / (float)hw;
    cpu_floats_store(dx, dt, dxf, (size_t)n * hw * c, 0);
    free(dyf);
    free(dxf);
}
