// half.h - fp16 storage on the CPU: IEEE binary16 as gcc's _Float16, converted to and from fp32.
//
// fp32 -> fp16 rounds to nearest even and overflows to inf (the same rule as CUDA's __float2half_rn),
// so a CPU fp16 buffer holds the values a GPU would hold.
#ifndef AMPTRAIN_CPU_HALF_H
#define AMPTRAIN_CPU_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"

typedef _Float16 half;

static inline float half_to_float(half h) { return (float)h; }
static inline half half_from_float(float f) { return (half)f; }

// 1 if the fp16 bit pattern is inf or NaN: all exponent bits set.
static inline int half_bits_nonfinite(uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u; }

static inline uint16_t half_bits(half h) {
    uint16_t bits;
    memcpy(&bits, &h, sizeof bits);
    return bits;
}

// Element i of a buffer of dtype dt, as fp32.
static inline float dtype_load(const void *p, DType dt, size_t i) {
    return dt == DTYPE_F16 ? half_to_float(((const half *)p)[i]) : ((const float *)p)[i];
}

#endif
