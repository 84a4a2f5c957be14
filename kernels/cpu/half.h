// half.h - 16-bit float storage on the CPU: fp16 as gcc's _Float16, bf16 as its bits (core/bf16.h), both
// converted to and from fp32.
//
// fp32 -> fp16 rounds to nearest even and overflows to inf (the same rule as CUDA's __float2half_rn), and
// fp32 -> bf16 follows __float2bfloat16_rn, so a CPU buffer holds the values a GPU would hold.
#ifndef AMPTRAIN_CPU_HALF_H
#define AMPTRAIN_CPU_HALF_H

#include <stddef.h>
#include <stdint.h>

#include "core/bf16.h"
#include "core/check.h"
#include "core/dtype.h"

typedef _Float16 half;

static inline float half_to_float(half h) { return (float)h; }
static inline half half_from_float(float f) { return (half)f; }

// Element i of a buffer of float dtype dt (fp32, fp16 or bf16), as fp32.
static inline float dtype_load(const void *p, DType dt, size_t i) {
    switch (dt) {
    case DTYPE_F32: return ((const float *)p)[i];
    case DTYPE_F16: return half_to_float(((const half *)p)[i]);
    case DTYPE_BF16: return bf16_to_float(((const uint16_t *)p)[i]);
    default: amp_fatal(__FILE__, __LINE__, "dtype_load: %s is not a float dtype", dtype_name(dt));
    }
}

// Element i of a buffer of float dtype dt = v, rounded to dt.
static inline void dtype_store(void *p, DType dt, size_t i, float v) {
    switch (dt) {
    case DTYPE_F32: ((float *)p)[i] = v; break;
    case DTYPE_F16: ((half *)p)[i] = half_from_float(v); break;
    case DTYPE_BF16: ((uint16_t *)p)[i] = bf16_from_float(v); break;
    default: amp_fatal(__FILE__, __LINE__, "dtype_store: %s is not a float dtype", dtype_name(dt));
    }
}

#endif
