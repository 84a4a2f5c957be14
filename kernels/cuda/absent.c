// absent.c - linked instead of kernels/cuda/*.cu when the build has no CUDA: cuda_backend.h and cuda_diag.h,
// the constructor refusing with the reason.
#include <stdio.h>

#include "core/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_diag.h"

Backend *cuda_backend_create(int device, const CudaOptions *opts, char *why, size_t why_len) {
    (void)device, (void)opts;
    snprintf(why, why_len, "amptrain was built without CUDA (cmake found no nvcc/cuDNN/cuBLAS)");
    return NULL;
}

int cuda_visible_device_count(void) { return 0; }

int cuda_device_identity(int device, unsigned char uuid[16], char *pci, size_t pci_len) {
    (void)device, (void)uuid, (void)pci, (void)pci_len;
    return -1;
}

void *cuda_backend_stream(Backend *be) {
    (void)be;
    return NULL;
}

void cuda_backend_set_batch_norm(Backend *be, CudaBnMode mode) { (void)be, (void)mode; }

int cuda_backend_conv_route_is_gemm(Backend *be, const ConvShape *s, DType dt, int direction) {
    (void)be, (void)s, (void)dt, (void)direction;
    return -1;
}

int cuda_backend_conv_padded_channels(Backend *be, const ConvShape *s, DType dt, int direction) {
    (void)be, (void)s, (void)dt, (void)direction;
    return -1;
}

void cuda_backend_set_conv_padding(Backend *be, int channels) { (void)be, (void)channels; }

int cuda_backend_conv_route_is_own(Backend *be, const ConvShape *s, DType dt, int direction) {
    (void)be, (void)s, (void)dt, (void)direction;
    return -1;
}

void cuda_backend_set_conv_own(Backend *be, int mode) { (void)be, (void)mode; }

int cuda_backend_conv_bn_fused(Backend *be, const ConvShape *s, DType dt, int residual, int relu,
                               int fusion) {
    (void)be, (void)s, (void)dt, (void)residual, (void)relu, (void)fusion;
    return -1;
}

void cuda_backend_set_conv_bn(Backend *be, int mode) { (void)be, (void)mode; }

int cuda_backend_bn_layer_paths(Backend *be, const float *save_mean, int *forward_cudnn,
                                int *backward_cudnn) {
    (void)be, (void)save_mean, (void)forward_cudnn, (void)backward_cudnn;
    return 0;
}

int cuda_backend_bn_prepared_pair(Backend *be, int rows, int c, DType dt, int residual, int relu,
                                  int *forward_cudnn, int *backward_cudnn) {
    (void)be, (void)rows, (void)c, (void)dt, (void)residual, (void)relu, (void)forward_cudnn,
        (void)backward_cudnn;
    return 0;
}
