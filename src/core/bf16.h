// bf16.h - bfloat16 on the host: the top 16 bits of an fp32 (sign, 8 exponent bits, 7 mantissa bits), held
// as uint16_t. Widening is exact; narrowing follows CUDA's __float2bfloat16_rn, so a host bf16 value is the
// one a GPU stores:
//   - round to nearest, ties to even (subnormals too: bf16 has fp32's exponent range, nothing flushes);
//   - a finite value half an ulp or more above the largest bf16 (0x7f7f, 3.3895e38) rounds to inf, the
//     carry running into the exponent as any other round-up;
//   - NaN stays NaN: every NaN becomes the canonical 0x7fff, as __float2bfloat16_rn returns it.
#ifndef AMPTRAIN_BF16_H
#define AMPTRAIN_BF16_H

#include <stdint.h>
#include <string.h>

#define BF16_CANONICAL_NAN 0x7fffu

static inline uint16_t bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return BF16_CANONICAL_NAN;
    // 0x7fff plus the lowest kept bit carries into bit 16 exactly when the dropped half exceeds 0x8000, or
    // equals it under an odd kept half: nearest, ties to even.
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t bits) {
    const uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// IEEE equality of the two bf16 values packed in each of a and b (low half with low half, high with high):
// 0xffff in each half where they are equal, else 0. Equal means the same bits and not NaN, or two zeros of
// either sign, as comparing the widened fp32 values. The CUDA kernels use it where the GPU has no bf16
// compare of its own (before sm_90).
#ifdef __CUDACC__
#define BF16_HOST_DEVICE __host__ __device__
#else
#define BF16_HOST_DEVICE
#endif
static inline BF16_HOST_DEVICE uint32_t bf16x2_equal_mask(uint32_t a, uint32_t b) {
    // Both halves at once: bit 15 of each half set where that half is non-zero (its low 15 bits plus 0x7fff
    // carry into bit 15, or bit 15 is set already), or, for nan, where |half| exceeds 0x7f80 (inf).
    const uint32_t low15 = 0x7fff7fffu, top = 0x80008000u;
    const uint32_t differs = ((((a ^ b) & low15) + low15) | (a ^ b)) & top;
    const uint32_t a_nan = ((a & low15) + 0x007f007fu) & top;
    const uint32_t not_both_zero = ((((a | b) & low15) + low15)) & top;
    const uint32_t equal = (~(differs | a_nan) | ~not_both_zero) & top;
    return (equal >> 15) * 0xffffu;  // bit 15 of each half spread over the half
}

#endif
