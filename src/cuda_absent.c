// Linked instead of kernels/ when the build has no CUDA: the CUDA backend reports why it is missing.
#include <stdio.h>

#include "backend.h"

Backend *cuda_backend_create(int device, int cudnn_benchmark, int allow_tf32, char *why, size_t why_len) {
    (void)device, (void)cudnn_benchmark, (void)allow_tf32;
    snprintf(why, why_len, "amptrain was built without CUDA (cmake found no nvcc/cuDNN/cuBLAS)");
    return NULL;
}
