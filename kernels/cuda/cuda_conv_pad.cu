// cuda_conv_pad.cu - channel padding for convolutions with few input channels (the stem's 3): a tensor whose
// rows hold c channels copied into rows of pc (4 or 8) with zeros after them, and a padded weight gradient's
// first c channels of each row written (or added) back. cudnn_conv.cu runs such a convolution on the padded
// tensors when that is faster: cuDNN has a dedicated first-layer kernel for 3-channel fp16 but none for bf16,
// where its 4- and 8-channel kernels are the fast ones. Zero channels add exact zeros to every sum, so the
// padded convolution's output, and the weight gradient's first c channels, are the unpadded ones'.
#include "kernels/cuda/cuda_elem.cuh"

// x (rows, c) T -> xp (rows, PC) T, channels c..PC-1 zero; one row per thread, stored as one PC-element pack.
template <typename T, int PC>
__global__ void pad_channels_k(const T *__restrict__ x, T *__restrict__ xp, size_t rows, int c) {
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < rows;
         r += (size_t)gridDim.x * blockDim.x) {
        ElemPack<T, PC> pk;
#pragma unroll
        for (int j = 0; j < PC; j++) pk.e[j] = j < c ? x[r * c + j] : T(0.0f);
        *(ElemPack<T, PC> *)(xp + r * PC) = pk;
    }
}

// dwp (rows, pc) T -> dw (rows, c) T: dw = dwp's first c channels, or dw + them (accumulate, in fp32).
template <typename T>
__global__ void unpad_channels_k(const T *__restrict__ dwp, T *__restrict__ dw, size_t rows, int c, int pc,
                                 int accumulate) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * c;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / c, j = i % c;
        float v = to_f32(dwp[r * pc + j]);
        if (accumulate) v += to_f32(dw[i]);
        from_f32(&dw[i], v);
    }
}

#define CONV_PAD_THREADS 256

// Blocks for `items` rows or elements: up to 32 blocks per multiprocessor, the loops are grid-stride.
static unsigned conv_pad_blocks(const CudaBackend *cb, size_t items) {
    return grid_stride_blocks(items, CONV_PAD_THREADS, (unsigned)cb->sm_count * 32);
}

// x (rows, c) dt -> xp (rows, pc) dt; dt fp16 or bf16, c < pc, pc 4 or 8, xp aligned to 2 * pc bytes.
void conv_pad_channels(CudaBackend *cb, DType dt, const void *x, void *xp, size_t rows, int c, int pc) {
    AMP_ASSERT(c < pc && (pc == 4 || pc == 8), "conv_pad_channels: %d -> %d channels", c, pc);
    const unsigned blocks = conv_pad_blocks(cb, rows);
    with_half(dt, [&](auto pk) {
        using T = typename decltype(pk)::type;
        if (pc == 4)
            pad_channels_k<T, 4><<<blocks, CONV_PAD_THREADS, 0, cb->stream>>>((const T *)x, (T *)xp, rows, c);
        else
            pad_channels_k<T, 8><<<blocks, CONV_PAD_THREADS, 0, cb->stream>>>((const T *)x, (T *)xp, rows, c);
    });
    CUDA_CHECK_LAUNCH();
}

// dwp (rows, pc) dt -> dw (rows, c) dt (= or +=).
void conv_unpad_channels(CudaBackend *cb, DType dt, const void *dwp, void *dw, size_t rows, int c, int pc,
                         int accumulate) {
    const unsigned blocks = conv_pad_blocks(cb, rows * c);
    with_half(dt, [&](auto pk) {
        using T = typename decltype(pk)::type;
        unpad_channels_k<T>
            <<<blocks, CONV_PAD_THREADS, 0, cb->stream>>>((const T *)dwp, (T *)dw, rows, c, pc, accumulate);
    });
    CUDA_CHECK_LAUNCH();
}
