// cuda_backend.h - what the host code outside kernels/ may ask of the CUDA backend beyond backend.h:
// the compute stream, for the NCCL communicator to chain its own stream to with events.
#ifndef AMPTRAIN_CUDA_BACKEND_H
#define AMPTRAIN_CUDA_BACKEND_H

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// The backend's cudaStream_t, as void* so C files need no CUDA headers.
void *cuda_backend_stream(Backend *be);
// The largest workspace a convolution algorithm may use (default 512 MiB): a smaller cap trades the
// fastest algorithms of a few layers for memory (cudnn.workspace_mb).
void cuda_backend_set_workspace_cap(Backend *be, size_t bytes);
// Training batch norm on cuDNN's fused kernels where cuDNN takes the call (1, the default) or always on
// our own (0); inference and recomputation always run our own (cudnn.batch_norm).
void cuda_backend_set_batch_norm_cudnn(Backend *be, int use_cudnn);
// Whether a convolution direction (0 forward, 1 backward data, 2 backward filter) of shape s in dt runs as
// one cuBLAS GEMM (1x1 stride-1 ungrouped shapes, cuda_conv_gemm.cu) rather than on cuDNN; -1 when that
// direction's route is not chosen yet. For tests and diagnostics.
int cuda_backend_conv_route_is_gemm(Backend *be, const ConvShape *s, DType dt, int direction);
// Number of CUDA devices visible to this process (CUDA_VISIBLE_DEVICES respected); 0 when none.
int cuda_visible_device_count(void);

#ifdef __cplusplus
}
#endif

#endif
