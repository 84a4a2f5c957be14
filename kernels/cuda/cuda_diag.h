// cuda_diag.h - for tests and benchmarks: the CUDA backend's choices, asked for or read back on a backend
// already made (kernels/cuda/absent.c implements it too, in a build without CUDA).
#ifndef AMPTRAIN_CUDA_DIAG_H
#define AMPTRAIN_CUDA_DIAG_H

#include "kernels/cuda/cuda_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// Switches whose kernels train batch norm from here on (CudaOptions.batch_norm at creation).
void cuda_backend_set_batch_norm(Backend *be, CudaBnMode mode);
// Whether a convolution direction (0 forward, 1 backward data, 2 backward filter) of shape s in dt runs as
// one cuBLAS GEMM (1x1 stride-1 ungrouped shapes, cuda_conv_gemm.cu) rather than on cuDNN; -1 when that
// direction's route is not chosen yet.
int cuda_backend_conv_route_is_gemm(Backend *be, const ConvShape *s, DType dt, int direction);
// The input channels a convolution direction of shape s in dt runs padded to (fp16 or bf16 with fewer than 8,
// cudnn_conv.cu): 0 unpadded, -1 not chosen yet.
int cuda_backend_conv_padded_channels(Backend *be, const ConvShape *s, DType dt, int direction);
// How directions chosen from here on treat such convolutions: 0 padded where the timed search finds it
// faster (the default), -1 never padded, 4 or 8 always padded to that many channels.
void cuda_backend_set_conv_padding(Backend *be, int channels);
// Whether a convolution direction of shape s in dt runs on amptrain's stem kernels (cuda_conv_stem.cu): 1 or
// 0, -1 when not chosen yet.
int cuda_backend_conv_route_is_own(Backend *be, const ConvShape *s, DType dt, int direction);
// How directions chosen from here on treat shapes those kernels take: 0 on them where the timed search finds
// them fastest (the default), -1 never, 1 always.
void cuda_backend_set_conv_own(Backend *be, int mode);
// Whether the op `fusion` (ConvBnFusion, core/backend.h) of shape s in dt (with a residual, with ReLU) runs
// cuDNN's fused graph (cudnn_conv_bn.cu): 1 or 0, -1 when not prepared.
int cuda_backend_conv_bn_fused(Backend *be, const ConvShape *s, DType dt, int residual, int relu, int fusion);
// How conv_bn_prepare chooses from here on: 0 the faster way, timed, under cudnn.batch_norm auto with
// cudnn.benchmark (the default; otherwise the two calls), -1 always the two calls, 1 the fused way wherever
// an engine takes the shape, whatever the settings (its choices neither read nor write cudnn.cache).
void cuda_backend_set_conv_bn(Backend *be, int mode);
// The paths of the last training forward of the batch-norm layer whose save_mean buffer is save_mean (1
// cuDNN, 0 our own), and the path its backward takes when dx is overwritten; 0 when no forward of that layer
// ran.
int cuda_backend_bn_layer_paths(Backend *be, const float *save_mean, int *forward_cudnn, int *backward_cudnn);
// The pair cudnn.batch_norm auto chose for this shape (bn_prepare); 0 when the shape was not prepared under
// auto.
int cuda_backend_bn_prepared_pair(Backend *be, int rows, int c, DType dt, int residual, int relu,
                                  int *forward_cudnn, int *backward_cudnn);

#ifdef __cplusplus
}
#endif

#endif
