// cuda_input.cu - input batches: the copy stream's slots and the batch's first op (normalisation).
//
// A batch crosses PCIe as raw bytes on the copy stream while the step before it runs; events hand each
// device slot between the streams (core/backend_ops.def, "input batches on the copy stream"):
//   copy:    wait consumed[slot] -> memcpy H2D -> record uploaded[slot]
//   compute: wait uploaded[slot] -> read the slot (a device copy into the step's static input) ->
//            record consumed[slot]
#include "kernels/cuda/cuda_elem.cuh"
#include "kernels/cuda/cuda_internal.h"

void cuda_input_slot_claim(CudaBackend *cb, int slot) {
    CUDA_CHECK(cudaStreamWaitEvent(cb->copy_stream, cb->input_consumed[slot], 0));
}

void cuda_input_slot_filled(CudaBackend *cb, int slot) {
    CUDA_CHECK(cudaEventRecord(cb->input_uploaded[slot], cb->copy_stream));
}

void cuda_input_upload(Backend *be, int slot, void *dst, const void *host_src, size_t bytes) {
    CudaBackend *cb = cuda_state(be);
    cuda_input_slot_claim(cb, slot);
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cb->copy_stream));
    cuda_input_slot_filled(cb, slot);
}

void cuda_input_upload_wait(Backend *be, int slot) {
    CUDA_CHECK(cudaEventSynchronize(cuda_state(be)->input_uploaded[slot]));
}

void cuda_input_acquire(Backend *be, int slot) {
    CudaBackend *cb = cuda_state(be);
    CUDA_CHECK(cudaStreamWaitEvent(cb->stream, cb->input_uploaded[slot], 0));
}

void cuda_input_release(Backend *be, int slot) {
    CudaBackend *cb = cuda_state(be);
    CUDA_CHECK(cudaEventRecord(cb->input_consumed[slot], cb->stream));
}

// src (pixels*3) S -> dst (pixels*3) D: v * scale[ch] + shift[ch], ch = i % 3. Memory-bound: 1 (u8) or 4
// bytes in and 2 (fp16, bf16) or 4 out per value.
template <typename S, typename D>
__global__ void input_normalize_kernel(size_t count, const S *src, PixelAffine a, D *dst) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        const int ch = (int)(i % 3);
        from_f32(&dst[i],
                 __fadd_rn(__fmul_rn((float)src[i], a.scale[ch]), a.shift[ch]));  // as the CPU rounds
    }
}

void cuda_input_normalize(Backend *be, size_t pixels, DType src_dt, const void *src,
                          const PixelAffine *affine, DType dst_dt, void *dst) {
    const size_t count = pixels * 3;
    if (count == 0) return;
    cudaStream_t stream = cuda_state(be)->stream;
    const unsigned threads = 256;
    size_t want = (count + threads - 1) / threads;
    const unsigned blocks = (unsigned)(want < 8192 ? want : 8192);
    AMP_ASSERT(src_dt == DTYPE_U8 || src_dt == DTYPE_F32, "input_normalize: source must be u8 or fp32");
    with_elem(dst_dt, [&](auto pk) {
        typedef typename decltype(pk)::type D;
        if (src_dt == DTYPE_U8)
            input_normalize_kernel<<<blocks, threads, 0, stream>>>(count, (const uint8_t *)src, *affine,
                                                                   (D *)dst);
        else
            input_normalize_kernel<<<blocks, threads, 0, stream>>>(count, (const float *)src, *affine,
                                                                   (D *)dst);
    });
    CUDA_CHECK_LAUNCH();
}
