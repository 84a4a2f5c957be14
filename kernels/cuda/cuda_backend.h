// cuda_backend.h - the CUDA backend's constructor and its options, and what host code outside kernels/cuda
// may ask of it beyond core/backend.h: how many GPUs are visible, and its compute stream (for the NCCL
// communicator to chain its own stream to with events). Plain C, no CUDA header: kernels/cuda/absent.c
// implements it in a build without CUDA.
#ifndef AMPTRAIN_CUDA_BACKEND_H
#define AMPTRAIN_CUDA_BACKEND_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "core/backend.h"

// Whose kernels run training batch norm (cudnn.batch_norm); inference and recomputation always run our own.
// A pair names the forward's kernels, then the backward's; a backward runs on cuDNN only where cuDNN took
// the call and has what it needs from the forward (cudnn_batchnorm.cu), else on our own.
typedef enum CudaBnMode {
    CUDA_BN_CUDNN = 0,  // cuDNN forward, cuDNN backward (the default)
    CUDA_BN_OWN,        // our own forward and backward
    CUDA_BN_AUTO,       // per shape, the fastest pair timed by bn_prepare (cuDNN's pair if not prepared)
    CUDA_BN_OWN_CUDNN,  // our own forward, cuDNN's backward: the pair auto may pick, fixed (tests); never
                        // on an add+ReLU shape (cuDNN's backward needs its own forward's reserve)
    CUDA_BN_CUDNN_OWN,  // cuDNN's forward, our own backward: likewise
} CudaBnMode;

// The backend's settings, fixed when it is made (the config's cudnn section; data.decode).
typedef struct CudaOptions {
    int cudnn_benchmark;         // cudnn.benchmark: cuDNN's timed algorithm search, once per shape
    int conv_tf32;               // fp32 convolutions may use TF32 (cudnn.tf32)
    int matmul_tf32;             // the fp32 classifier matmul may use TF32 (cudnn.matmul_tf32)
    size_t conv_workspace_cap;   // bytes: the largest workspace a convolution algorithm may use
                                 // (cudnn.workspace_mb); a smaller cap trades the fastest algorithms of a
                                 // few layers for memory
    CudaBnMode batch_norm;       // cudnn.batch_norm
    int device_max_connections;  // > 0: CUDA_DEVICE_MAX_CONNECTIONS (CUDA's hardware work queues, 8 by
                                 // default, 32 at most) for this process unless the environment sets it;
                                 // set before the backend makes its CUDA context; 0 leaves it alone
    const char *kernel_cache;    // the file of timed kernel choices (cudnn.cache, core/kernel_cache.h):
                                 // read at creation, written after the start-up choices (the trainer) and
                                 // when the backend is destroyed; NULL: the choices are kept in memory only
                                 // (cudnn.cache off, and every rank but 0)
    int batch_norm_unfused;      // 1: a convolution's batch norm never takes its statistics from the
                                 // convolution's epilogue (cudnn.batch_norm unfused; cudnn_conv_bn.cu)
} CudaOptions;

// cudnn.benchmark and TF32 off, a 512 MiB workspace cap (cudnn.workspace_mb's AMP default), cuDNN's batch
// norm, CUDA's own number of hardware queues, no kernel-choice file.
static inline CudaOptions cuda_options_default(void) {
    const CudaOptions o = {0, 0, 0, (size_t)512 << 20, CUDA_BN_CUDNN, 0, NULL, 0};
    return o;
}

// The CUDA backend on device ordinal `device`, with opts (NULL: cuda_options_default()). Returns NULL with
// a reason in `why` when built without CUDA or when no usable GPU exists.
Backend *cuda_backend_create(int device, const CudaOptions *opts, char *why, size_t why_len);
// Number of CUDA devices visible to this process (CUDA_VISIBLE_DEVICES respected); 0 when none.
int cuda_visible_device_count(void);
// The backend's cudaStream_t, as void* so C files need no CUDA headers.
void *cuda_backend_stream(Backend *be);
// Which physical device visible device `device` is: its UUID (16 bytes; a MIG instance has its own) and PCI
// address ("0000:3b:00.0", pci_len bytes). 0 on success, -1 when the device cannot be queried.
int cuda_device_identity(int device, unsigned char uuid[16], char *pci, size_t pci_len);

#ifdef __cplusplus
}
#endif

#endif
