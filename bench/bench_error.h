// bench_error.h - how far one tensor on the device is from another (fp16, bf16 or fp32), for the benches'
// checks. CUDA.
#ifndef AMPTRAIN_BENCH_ERROR_H
#define AMPTRAIN_BENCH_ERROR_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"

// Element i of n values of dt on the host.
static double bench_element(const void *v, DType dt, size_t i) {
    if (dt == DTYPE_F16) return __half2float(((const __half *)v)[i]);
    if (dt == DTYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)v)[i]);
    return ((const float *)v)[i];
}

// ||got - want|| / ||want|| over n elements of dt on the device (copied to the host).
static double bench_rel_error(Backend *be, DType dt, const void *got, const void *want, size_t n) {
    const size_t bytes = n * dtype_size(dt);
    void *g = malloc(bytes), *w = malloc(bytes);
    be->to_host(be, g, got, bytes);
    be->to_host(be, w, want, bytes);
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double a = bench_element(g, dt, i), b = bench_element(w, dt, i);
        diff += (a - b) * (a - b);
        norm += b * b;
    }
    free(g);
    free(w);
    return norm > 0.0 ? sqrt(diff / norm) : (diff > 0.0 ? INFINITY : 0.0);
}

#endif
