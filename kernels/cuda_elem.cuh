// cuda_elem.cuh - element access shared by the custom kernels: fp16/fp32 to and from fp32 math, and a
// VEC-element pack moved as one aligned load or store (16 bytes for 8 fp16 or 4 fp32).
#ifndef AMPTRAIN_CUDA_ELEM_CUH
#define AMPTRAIN_CUDA_ELEM_CUH

#include <cuda_fp16.h>

static __device__ __forceinline__ float to_f32(float v) { return v; }
static __device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
static __device__ __forceinline__ void from_f32(float *dst, float v) { *dst = v; }
static __device__ __forceinline__ void from_f32(__half *dst, float v) { *dst = __float2half_rn(v); }

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) ElemPack {
    T e[VEC];
};

#endif
