// cpu_conv.c - grouped 2-D convolution, NHWC activations, OHWI weights, no bias, fp32 accumulation.
//
// All three passes walk the output pixels and, for each kernel tap that lands inside the input, do an
// axpy whose innermost loop runs over contiguous channels of one group: output channels in forward
// (against weights re-laid out as (kh, kw, c_in/g, c_out)), input channels in backward_data and
// backward_filter (against the OHWI weights and the NHWC input as stored). An axpy has no loop-carried
// dependency, so it runs at the core's load/store rate instead of an add's latency.
#include <stdlib.h>

#include "kernels/cpu/cpu_ops.h"

static size_t conv_x_count(const ConvShape *s) { return (size_t)s->n * s->h * s->w * s->c_in; }
static size_t conv_y_count(const ConvShape *s) { return (size_t)s->n * s->out_h * s->out_w * s->c_out; }
static size_t conv_w_count(const ConvShape *s) {
    return (size_t)s->c_out * s->kh * s->kw * (s->c_in / s->groups);
}

// Offset of pixel (n, y, x) in an NHWC tensor of spatial size (h, w) with c channels.
static size_t conv_pixel(int n, int y, int x, int h, int w, int c) {
    return (((size_t)n * h + y) * w + x) * c;
}

void cpu_conv_forward(Backend *be, const ConvShape *s, DType dt, const void *x, const void *w, void *y) {
    (void)be;
    const int cig = s->c_in / s->groups, cog = s->c_out / s->groups;
    const size_t w_count = conv_w_count(s);
    float *xf = cpu_floats_load(x, dt, conv_x_count(s));  // (n, h, w, c_in)
    float *wf = cpu_floats_load(w, dt, w_count);          // (c_out, kh, kw, c_in/g)
    float *wt = cpu_scratch(w_count);                     // (kh, kw, c_in/g, c_out)
    float *yf = cpu_scratch(conv_y_count(s));             // (n, out_h, out_w, c_out)

    for (int co = 0; co < s->c_out; co++)
        for (int ky = 0; ky < s->kh; ky++)
            for (int kx = 0; kx < s->kw; kx++)
                for (int ci = 0; ci < cig; ci++)
                    wt[(((size_t)ky * s->kw + kx) * cig + ci) * s->c_out + co] =
                        wf[(((size_t)co * s->kh + ky) * s->kw + kx) * cig + ci];

    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->out_h; oy++)
            for (int ox = 0; ox < s->out_w; ox++) {
                float *restrict yrow = yf + conv_pixel(n, oy, ox, s->out_h, s->out_w, s->c_out);
                for (int ky = 0; ky < s->kh; ky++) {
                    const int iy = oy * s->stride - s->pad + ky;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int kx = 0; kx < s->kw; kx++) {
                        const int ix = ox * s->stride - s->pad + kx;
                        if (ix < 0 || ix >= s->w) continue;
                        const float *xrow = xf + conv_pixel(n, iy, ix, s->h, s->w, s->c_in);
                        const float *wtap = wt + ((size_t)ky * s->kw + kx) * cig * s->c_out;
                        for (int g = 0; g < s->groups; g++) {
                            float *restrict yg = yrow + (size_t)g * cog;
                            for (int ci = 0; ci < cig; ci++) {
                                const float xv = xrow[g * cig + ci];
                                const float *restrict wc = wtap + (size_t)ci * s->c_out + (size_t)g * cog;
                                for (int co = 0; co < cog; co++) yg[co] += xv * wc[co];
                            }
                        }
                    }
                }
            }

    cpu_floats_store(y, dt, yf, conv_y_count(s), 0);
    free(xf);
    free(wf);
    free(wt);
    free(yf);
}

void cpu_conv_backward_data(Backend *be, const ConvShape *s, DType dt, const void *dy, const void *w,
                            void *dx, int accumulate) {
    (void)be;
    const int cig = s->c_in / s->groups, cog = s->c_out / s->groups;
    float *dyf = cpu_floats_load(dy, dt, conv_y_count(s));  // (n, out_h, out_w, c_out)
    float *wf = cpu_floats_load(w, dt, conv_w_count(s));    // (c_out, kh, kw, c_in/g)
    float *dxf = cpu_scratch(conv_x_count(s));              // (n, h, w, c_in)

    // Scatter form: every output pixel adds its gradient back to the input pixels its window read.
    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->out_h; oy++)
            for (int ox = 0; ox < s->out_w; ox++) {
                const float *dyrow = dyf + conv_pixel(n, oy, ox, s->out_h, s->out_w, s->c_out);
                for (int ky = 0; ky < s->kh; ky++) {
                    const int iy = oy * s->stride - s->pad + ky;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int kx = 0; kx < s->kw; kx++) {
                        const int ix = ox * s->stride - s->pad + kx;
                        if (ix < 0 || ix >= s->w) continue;
                        float *dxrow = dxf + conv_pixel(n, iy, ix, s->h, s->w, s->c_in);
                        for (int co = 0; co < s->c_out; co++) {
                            const float d = dyrow[co];
                            const float *restrict wc = wf + (((size_t)co * s->kh + ky) * s->kw + kx) * cig;
                            float *restrict dxg = dxrow + (size_t)(co / cog) * cig;
                            for (int ci = 0; ci < cig; ci++) dxg[ci] += d * wc[ci];
                        }
                    }
                }
            }

    cpu_floats_store(dx, dt, dxf, conv_x_count(s), accumulate);
    free(dyf);
    free(wf);
    free(dxf);
}

void cpu_conv_backward_filter(Backend *be, const ConvShape *s, DType dt, const void *x, const void *dy,
                              void *dw, int accumulate) {
    (void)be;
    const int cig = s->c_in / s->groups, cog = s->c_out / s->groups;
    float *xf = cpu_floats_load(x, dt, conv_x_count(s));    // (n, h, w, c_in)
    float *dyf = cpu_floats_load(dy, dt, conv_y_count(s));  // (n, out_h, out_w, c_out)
    float *dwf = cpu_scratch(conv_w_count(s));              // (c_out, kh, kw, c_in/g)

    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->out_h; oy++)
            for (int ox = 0; ox < s->out_w; ox++) {
                const float *dyrow = dyf + conv_pixel(n, oy, ox, s->out_h, s->out_w, s->c_out);
                for (int ky = 0; ky < s->kh; ky++) {
                    const int iy = oy * s->stride - s->pad + ky;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int kx = 0; kx < s->kw; kx++) {
                        const int ix = ox * s->stride - s->pad + kx;
                        if (ix < 0 || ix >= s->w) continue;
                        const float *xrow = xf + conv_pixel(n, iy, ix, s->h, s->w, s->c_in);
                        for (int co = 0; co < s->c_out; co++) {
                            const float d = dyrow[co];
                            const float *restrict xg = xrow + (size_t)(co / cog) * cig;
                            float *restrict dwc = dwf + (((size_t)co * s->kh + ky) * s->kw + kx) * cig;
                            for (int ci = 0; ci < cig; ci++) dwc[ci] += d * xg[ci];
                        }
                    }
                }
            }

    cpu_floats_store(dw, dt, dwf, conv_w_count(s), accumulate);
    free(xf);
    free(dyf);
    free(dwf);
}
