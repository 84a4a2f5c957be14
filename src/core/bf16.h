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

#endif
