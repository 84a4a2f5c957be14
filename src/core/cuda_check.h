// cuda_check.h - CUDA_CHECK, the CUDA runtime's check macro, for every file that calls the runtime (the
// CUDA backend under kernels/cuda, the NCCL communicator): names the failing expression, file and line
// with the runtime's reason, then ends the job through amp_fatal (MPI_Abort under mpirun).
#ifndef AMPTRAIN_CUDA_CHECK_H
#define AMPTRAIN_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "core/check.h"

#define CUDA_CHECK(expr)                                                                                     \
    do {                                                                                                     \
        cudaError_t cuda_err_ = (expr);                                                                      \
        if (cuda_err_ != cudaSuccess)                                                                        \
            amp_fatal(__FILE__, __LINE__, "%s: %s", #expr, cudaGetErrorString(cuda_err_));                   \
    } while (0)

#endif
