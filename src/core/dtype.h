// dtype.h - the storage types: three that amptrain computes in (fp32, and the two autocast dtypes fp16 and
// bf16; math always accumulates in fp32) and the uint8 of raw image bytes (input batches only, see pixels.h).
// Buffers cross the backend interface as void*; fp16 is IEEE binary16 (_Float16 on the CPU, __half on CUDA),
// bf16 the top half of an fp32 (its bits as uint16_t on the CPU, core/bf16.h; __nv_bfloat16 on CUDA).
#ifndef AMPTRAIN_DTYPE_H
#define AMPTRAIN_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { DTYPE_F32 = 0, DTYPE_F16 = 1, DTYPE_U8 = 2, DTYPE_BF16 = 3 } DType;

// 1 for the 16-bit float types, the dtypes autocast lowers to (fp16, bf16).
static inline int dtype_is_16bit(DType t) { return t == DTYPE_F16 || t == DTYPE_BF16; }

static inline size_t dtype_size(DType t) { return dtype_is_16bit(t) ? 2 : t == DTYPE_U8 ? 1 : 4; }
static inline const char *dtype_name(DType t) {
    return t == DTYPE_F16 ? "fp16" : t == DTYPE_BF16 ? "bf16" : t == DTYPE_U8 ? "u8" : "fp32";
}

#define FP16_MAX 65504.0f

#endif
