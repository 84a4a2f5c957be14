// dtype.h - the storage types: two that amptrain computes in (fp32, fp16; math always accumulates in
// fp32) and the uint8 of raw image bytes (input batches only, see pixels.h).
// Buffers cross the backend interface as void*; fp16 is IEEE binary16 (_Float16 on the CPU, __half on CUDA).
#ifndef AMPTRAIN_DTYPE_H
#define AMPTRAIN_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { DTYPE_F32 = 0, DTYPE_F16 = 1, DTYPE_U8 = 2 } DType;

static inline size_t dtype_size(DType t) { return t == DTYPE_F16 ? 2 : t == DTYPE_U8 ? 1 : 4; }
static inline const char *dtype_name(DType t) {
    return t == DTYPE_F16 ? "fp16" : t == DTYPE_U8 ? "u8" : "fp32";
}

#define FP16_MAX 65504.0f

#endif
