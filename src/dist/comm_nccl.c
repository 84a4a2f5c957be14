// comm_nccl.c - the communicator over device buffers (the CUDA backend's gradients), after llm.c's zero.cuh.
//
// Start-up: rank 0 makes the NCCL unique id and the host communicator (MPI) broadcasts it; the device is
// already bound by the CUDA backend (local rank -> GPU). Collectives run on NCCL's own stream so they
// overlap the backward pass, chained to the compute stream with events, never with a host sync:
//   collective: compute --(ready event)--> nccl stream: ncclAllReduce
//   wait:       nccl stream --(done event)--> compute
// NCCL counts ELEMENTS of its datatype, never bytes.
#include <stdlib.h>

#include "../core/check.h"
#include "comm.h"
#include "nccl_check.h"

typedef struct {
    ncclComm_t nccl;
    cudaStream_t stream;   // NCCL's stream
    cudaStream_t compute;  // the backend's compute stream (not owned)
    cudaEvent_t ready;     // recorded on compute: what the next collective must wait for
    cudaEvent_t done;      // recorded on the NCCL stream: what compute must wait for in `wait`
    Comm *host;            // the bootstrap communicator, for barrier (not owned; outlives this one)
} NcclComm;

// Makes the NCCL stream wait for everything compute has issued so far (e.g. the bucket's gradients).
static void comm_nccl_follow_compute(NcclComm *m) {
    CUDA_CHECK(cudaEventRecord(m->ready, m->compute));
    CUDA_CHECK(cudaStreamWaitEvent(m->stream, m->ready, 0));
}

// buf: (n,) fp16 or fp32 on the device. fp16 sums are NCCL's fp16 adds, overflowing to inf like the
// MPI path, so the inf/NaN check sees the same verdict.
static void comm_nccl_allreduce_sum(Comm *c, void *buf, size_t n, DType dt) {
    NcclComm *m = c->impl;
    comm_nccl_follow_compute(m);
    ncclDataType_t type = dt == DTYPE_F16 ? ncclFloat16 : ncclFloat32;
    NCCL_CHECK(ncclAllReduce(buf, buf, n, type, ncclSum, m->nccl, m->stream));
}

// flag: (1,) fp32 on the device.
static void comm_nccl_allreduce_max_flag(Comm *c, float *flag) {
    NcclComm *m = c->impl;
    comm_nccl_follow_compute(m);
    NCCL_CHECK(ncclAllReduce(flag, flag, 1, ncclFloat32, ncclMax, m->nccl, m->stream));
}

// buf: bytes on the device; as ncclUint8 elements the count is the byte count.
static void comm_nccl_broadcast(Comm *c, void *buf, size_t bytes, int root) {
    NcclComm *m = c->impl;
    comm_nccl_follow_compute(m);
    NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, m->nccl, m->stream));
}

static void comm_nccl_wait(Comm *c) {
    NcclComm *m = c->impl;
    CUDA_CHECK(cudaEventRecord(m->done, m->stream));
    CUDA_CHECK(cudaStreamWaitEvent(m->compute, m->done, 0));
}

// A barrier means "every rank got here with its communication finished": drain the NCCL stream, then
// meet on the host communicator.
static void comm_nccl_barrier(Comm *c) {
    NcclComm *m = c->impl;
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    m->host->barrier(m->host);
}

static void comm_nccl_destroy(Comm *c) {
    NcclComm *m = c->impl;
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    // Finalize flushes outstanding operations with the peers before the resources go.
    NCCL_CHECK(ncclCommFinalize(m->nccl));
    NCCL_CHECK(ncclCommDestroy(m->nccl));
    CUDA_CHECK(cudaEventDestroy(m->ready));
    CUDA_CHECK(cudaEventDestroy(m->done));
    CUDA_CHECK(cudaStreamDestroy(m->stream));
    free(m);
    free(c);
}

Comm *comm_nccl_create(Comm *host, void *compute_stream) {
    ncclUniqueId id;
    if (host->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    host->broadcast(host, &id, sizeof id, 0);

    NcclComm *m = xcalloc(1, sizeof *m);
    m->compute = (cudaStream_t)compute_stream;
    m->host = host;
    NCCL_CHECK(ncclCommInitRank(&m->nccl, host->size, id, host->rank));
    // Highest priority, so gradient buckets go out as soon as backward produced them instead of queueing
    // behind the rest of backward's kernels; non-blocking, so it never syncs with the legacy stream.
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&m->stream, cudaStreamNonBlocking, greatest));
    CUDA_CHECK(cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&m->done, cudaEventDisableTiming));

    Comm *c = xcalloc(1, sizeof *c);
    c->name = "nccl";
    c->rank = host->rank, c->size = host->size;
    c->local_rank = host->local_rank, c->local_size = host->local_size;
    c->allreduce_sum = comm_nccl_allreduce_sum;
    c->allreduce_max_flag = comm_nccl_allreduce_max_flag;
    c->broadcast = comm_nccl_broadcast;
    c->barrier = comm_nccl_barrier;
    c->wait = comm_nccl_wait;
    c->destroy = comm_nccl_destroy;
    c->impl = m;
    return c;
}
