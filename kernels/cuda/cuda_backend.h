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
// Whose kernels run training batch norm (cudnn.batch_norm); inference and recomputation always run our own.
// A pair names the forward's kernels, then the backward's; a backward runs on cuDNN only where cuDNN took
// the call and has what it needs from the forward (cudnn_batchnorm.cu), else on our own.
typedef enum CudaBnMode {
    CUDA_BN_CUDNN = 0,         // cuDNN forward, cuDNN backward (the default)
    CUDA_BN_OWN,               // our own forward and backward
    CUDA_BN_AUTO,              // per shape, the fastest pair timed by bn_prepare (cuDNN's pair if not prepared)
    CUDA_BN_OWN_CUDNN,         // our own forward, cuDNN's backward: the pair auto may pick, fixed (tests); never
                               // on an add+ReLU shape (cuDNN's backward needs its own forward's reserve)
    CUDA_BN_CUDNN_OWN,         // cuDNN's forward, our own backward: likewise
} CudaBnMode;
void cuda_backend_set_batch_norm(Backend *be, CudaBnMode mode);
// Whether a convolution direction (0 forward, 1 backward data, 2 backward filter) of shape s in dt runs as
// one cuBLAS GEMM (1x1 stride-1 ungrouped shapes, cuda_conv_gemm.cu) rather than on cuDNN; -1 when that
// direction's route is not chosen yet. For tests and diagnostics.
int cuda_backend_conv_route_is_gemm(Backend *be, const ConvShape *s, DType dt, int direction);
// For tests and diagnostics: the paths of the last training forward of the batch-norm layer whose save_mean
// buffer is save_mean (1 cuDNN, 0 our own), and the path its backward takes when dx is overwritten; 0 when
// no forward of that layer ran.
int cuda_backend_bn_layer_paths(Backend *be, const float *save_mean, int *forward_cudnn, int *backward_cudnn);
// For tests and diagnostics: the pair cudnn.batch_norm auto chose for this shape (bn_prepare); 0 when the shape
// was not prepared under auto.
int cuda_backend_bn_prepared_pair(Backend *be, int rows, int c, DType dt, int residual, int relu, int *forward_cudnn,
                                  int *backward_cudnn);
// Number of CUDA devices visible to this process (CUDA_VISIBLE_DEVICES respected); 0 when none.
int cuda_visible_device_count(void);
// Which physical device visible device `device` is: its UUID (16 bytes; a MIG instance has its own) and PCI
// address ("0000:3b:00.0", pci_len bytes). 0 on success, -1 when the device cannot be queried.
int cuda_device_identity(int device, unsigned char uuid[16], char *pci, size_t pci_len);

#ifdef __cplusplus
}
#endif

#endif
