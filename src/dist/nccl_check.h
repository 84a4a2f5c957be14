// nccl_check.h - NCCL_CHECK and CUDA_CHECK for comm_nccl.c: name the failing expression, file and line
// with the library's own reason, then end the job through amp_fatal (MPI_Abort under mpirun).
#ifndef AMPTRAIN_NCCL_CHECK_H
#define AMPTRAIN_NCCL_CHECK_H

#include <cuda_runtime.h>
#include <nccl.h>

#include "core/check.h"

#define CUDA_CHECK(expr)                                                                           \
    do {                                                                                           \
        cudaError_t cuda_err_ = (expr);                                                            \
        if (cuda_err_ != cudaSuccess)                                                              \
            amp_fatal(__FILE__, __LINE__, "%s: %s", #expr, cudaGetErrorString(cuda_err_));         \
    } while (0)

// ncclGetLastError adds NCCL's detail (which peer, which transport) to the generic result string.
#define NCCL_CHECK(expr)                                                                           \
    do {                                                                                           \
        ncclResult_t nccl_res_ = (expr);                                                           \
        if (nccl_res_ != ncclSuccess)                                                              \
            amp_fatal(__FILE__, __LINE__, "%s: %s (%s)", #expr, ncclGetErrorString(nccl_res_),     \
                      ncclGetLastError(NULL));                                                     \
    } while (0)

#endif
