// cuda_elem.cuh - element access shared by the custom kernels: fp16/bf16/fp32 to and from fp32 math, a
// VEC-element pack moved as one aligned load or store (16 bytes for 8 fp16 or bf16, or 4 fp32), and on the
// host the choice of pack width and the launch with the matching template arguments.
#ifndef AMPTRAIN_CUDA_ELEM_CUH
#define AMPTRAIN_CUDA_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <initializer_list>

#include "kernels/cuda/cuda_internal.h"

// Narrowing rounds to nearest even and overflows to inf; a NaN stays NaN (the CPU's half.h alike).
static __device__ __forceinline__ float to_f32(float v) { return v; }
static __device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
static __device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
static __device__ __forceinline__ void from_f32(float *dst, float v) { *dst = v; }
static __device__ __forceinline__ void from_f32(__half *dst, float v) { *dst = __float2half_rn(v); }
static __device__ __forceinline__ void from_f32(__nv_bfloat16 *dst, float v) {
    *dst = __float2bfloat16_rn(v);
}

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) ElemPack {
    T e[VEC];
};

// The VEC elements at p (aligned to the pack) as fp32, and back.
template <typename T, int VEC>
static __device__ __forceinline__ void pack_load(const T *p, float *v) {
    const ElemPack<T, VEC> pk = *(const ElemPack<T, VEC> *)p;
#pragma unroll
    for (int j = 0; j < VEC; j++) v[j] = to_f32(pk.e[j]);
}

template <typename T, int VEC>
static __device__ __forceinline__ void pack_store(T *p, const float *v) {
    ElemPack<T, VEC> pk;
#pragma unroll
    for (int j = 0; j < VEC; j++) from_f32(&pk.e[j], v[j]);
    *(ElemPack<T, VEC> *)p = pk;
}

// ---- host: which pack, and the launch with it ------------------------------------------------------

// 16-byte packs (8 fp16 or bf16, or 4 fp32) when every row of c channels splits into them and every buffer
// given starts on 16 bytes (NULL ones do not count); else 1, one element at a time.
static inline int pack_width(DType dt, int c, std::initializer_list<const void *> bufs) {
    const int vec = (int)(16 / dtype_size(dt));
    if (c % vec != 0) return 1;
    for (const void *b : bufs)
        if (b && (uintptr_t)b % 16 != 0) return 1;
    return vec;
}

// The element type and pack width of one launch, as a value a generic lambda can take.
template <typename T, int VEC>
struct PackOf {
    typedef T type;
    static constexpr int vec = VEC;
};

// launch(PackOf<T, 16 / sizeof(T)>()) when vec > 1, else launch(PackOf<T, 1>()).
template <typename T, typename F>
static void with_vec(int vec, F &&launch) {
    if (vec > 1)
        launch(PackOf<T, 16 / sizeof(T)>());
    else
        launch(PackOf<T, 1>());
}

// Calls launch(PackOf<T, VEC>()) with T = __half for fp16, __nv_bfloat16 for bf16, float for fp32, and
// VEC = pack_width's answer `vec` (16 bytes or 1), so each kernel is written once for all six combinations:
//   with_pack(dt, vec, [&](auto pk) { using T = typename decltype(pk)::type; kernel<T, decltype(pk)::vec><<<...>>>(...); });
template <typename F>
static void with_pack(DType dt, int vec, F &&launch) {
    switch (dt) {
    case DTYPE_F16: with_vec<__half>(vec, launch); break;
    case DTYPE_BF16: with_vec<__nv_bfloat16>(vec, launch); break;
    case DTYPE_F32: with_vec<float>(vec, launch); break;
    default: amp_fatal(__FILE__, __LINE__, "a kernel of float elements given %s", dtype_name(dt));
    }
}

// with_pack for a kernel that moves single elements: launch(PackOf<T, 1>()) with T the type of dt.
template <typename F>
static void with_elem(DType dt, F &&launch) {
    with_pack(dt, 1, launch);
}

// with_elem for a kernel of 16-bit elements only: T = __half for fp16, __nv_bfloat16 for bf16.
template <typename F>
static void with_half(DType dt, F &&launch) {
    switch (dt) {
    case DTYPE_F16: launch(PackOf<__half, 1>()); break;
    case DTYPE_BF16: launch(PackOf<__nv_bfloat16, 1>()); break;
    default: amp_fatal(__FILE__, __LINE__, "a kernel of 16-bit elements given %s", dtype_name(dt));
    }
}

// Blocks of `threads` for a grid-stride loop over `work` items: one item per thread, at least 1 block and at
// most `most` (the loop covers the rest).
static inline unsigned grid_stride_blocks(size_t work, unsigned threads, unsigned most) {
    const size_t blocks = (work + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks > most ? most : blocks);
}

#endif
