// cpu_linear.c - the classifier: y = x w^T + b with x (n, in), w (out, in) as in torch, fp32 accumulation.
#include <stdlib.h>

#include "kernels/cpu/cpu_ops.h"

void cpu_linear_forward(Backend *be, int n, int in, int out, DType dt, const void *x, const void *w,
                        const void *b, void *y) {
    (void)be;
    float *xf = cpu_floats_load(x, dt, (size_t)n * in);    // (n, in)
    float *wf = cpu_floats_load(w, dt, (size_t)out * in);  // (out, in)
    float *bf = cpu_floats_load(b, dt, (size_t)out);       // (out)
    float *yf = cpu_scratch((size_t)n * out);              // (n, out)
    // Rows of x and w are both contiguous in `in`, so each output is one dot product.
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out; o++) {
            const float *xrow = xf + (size_t)r * in, *wrow = wf + (size_t)o * in;
            float acc = bf[o];
            for (int i = 0; i < in; i++) acc += xrow[i] * wrow[i];
            yf[(size_t)r * out + o] = acc;
        }
    cpu_floats_store(y, dt, yf, (size_t)n * out, 0);
    free(xf);
    free(wf);
    free(bf);
    free(yf);
}

void cpu_linear_backward(Backend *be, int n, int in, int out, DType dt, const void *x, const void *w,
                         const void *dy, void *dx, void *dw, void *db, int accumulate) {
    (void)be;
    float *xf = cpu_floats_load(x, dt, (size_t)n * in);     // (n, in)
    float *wf = cpu_floats_load(w, dt, (size_t)out * in);   // (out, in)
    float *dyf = cpu_floats_load(dy, dt, (size_t)n * out);  // (n, out)
    float *dxf = cpu_scratch((size_t)n * in);               // (n, in)  = dy w
    float *dwf = cpu_scratch((size_t)out * in);             // (out, in) = dy^T x
    float *dbf = cpu_scratch((size_t)out);                  // (out)     = sum over n of dy
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out; o++) {
            const float d = dyf[(size_t)r * out + o];
            const float *xrow = xf + (size_t)r * in, *wrow = wf + (size_t)o * in;
            float *dxrow = dxf + (size_t)r * in, *dwrow = dwf + (size_t)o * in;
            for (int i = 0; i < in; i++) dxrow[i] += d * wrow[i];
            for (int i = 0; i < in; i++) dwrow[i] += d * xrow[i];
            dbf[o] += d;
        }
    cpu_floats_store(dx, dt, dxf, (size_t)n * in, 0);
    cpu_floats_store(dw, dt, dwf, (size_t)out * in, accumulate);
    cpu_floats_store(db, dt, dbf, (size_t)out, accumulate);
    free(xf);
    free(wf);
    free(dyf);
    free(dxf);
    free(dwf);
    free(dbf);
}
