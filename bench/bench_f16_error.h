// bench_f16_error.h - how far one fp16 tensor on the device is from another, for the benches' checks. CUDA.
#ifndef AMPTRAIN_BENCH_F16_ERROR_H
#define AMPTRAIN_BENCH_F16_ERROR_H

#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"

// ||got - want|| / ||want|| over n fp16 elements on the device (copied to the host).
static double bench_f16_rel_error(Backend *be, const void *got, const void *want, size_t n) {
    __half *g = (__half *)malloc(n * sizeof(__half)), *w = (__half *)malloc(n * sizeof(__half));
    be->to_host(be, g, got, n * sizeof(__half));
    be->to_host(be, w, want, n * sizeof(__half));
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double a = __half2float(g[i]), b = __half2float(w[i]);
        diff += (a - b) * (a - b);
        norm += b * b;
    }
    free(g);
    free(w);
    return norm > 0.0 ? sqrt(diff / norm) : (diff > 0.0 ? INFINITY : 0.0);
}

#endif
