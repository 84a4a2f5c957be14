// nccl_check.h - NCCL_CHECK for comm_nccl.c: names the failing expression, file and line with NCCL's own
// reason, then ends the job through amp_fatal (MPI_Abort under mpirun). CUDA_CHECK is core/cuda_check.h's.
#ifndef AMPTRAIN_NCCL_CHECK_H
#define AMPTRAIN_NCCL_CHECK_H

#include <nccl.h>

#include "core/check.h"
#include "core/cuda_check.h"

// ncclGetLastError adds NCCL's detail (which peer, which transport) to the generic result string.
#define NCCL_CHECK(expr)                                                                                     \
    do {                                                                                                     \
        ncclResult_t nccl_res_ = (expr);                                                                     \
        if (nccl_res_ != ncclSuccess)                                                                        \
            amp_fatal(__FILE__, __LINE__, "%s: %s (%s)", #expr, ncclGetErrorString(nccl_res_),               \
                      ncclGetLastError(NULL));                                                               \
    } while (0)

#endif
