// comm_nccl.c - the communicator over device buffers (the CUDA backend's gradients), after llm.c's zero.cuh.
//
// Start-up: rank 0 makes the NCCL unique id and the host communicator (MPI) broadcasts it; the device is
// already bound by the CUDA backend (local rank -> GPU). Collectives run on NCCL's own stream so they
// overlap the backward pass, chained to the compute stream with events, never with a host sync:
//   collective: compute --(ready event)--> nccl stream: [started] ncclAllReduce [finished]
//   wait:       nccl stream --(done event)--> compute
// NCCL counts ELEMENTS of its datatype, never bytes.
//
// Bounded in time (dist.timeout_s, watchdog.h). A peer that stalls leaves this rank's NCCL kernel
// spinning and, soon after, the host blocked on a stream; nothing returns an error. So:
//   - [started] and [finished] are host callbacks on the NCCL stream: the watchdog times each
//     collective from the moment its inputs were ready on the device to the moment it completed;
//   - the watchdog polls ncclCommGetAsyncError, so an error NCCL finds on its own (a peer's socket
//     closed) ends the job at once instead of after the timeout;
//   - either way it aborts the communicator (ncclCommAbort frees the spinning kernel) and ends the
//     process; mpirun then ends the other ranks.
// The communicator is non-blocking (config.blocking = 0): start-up and the connections NCCL makes on
// the first collectives return ncclInProgress instead of blocking inside NCCL where no one could stop
// them, and this file waits for them with the same bound.
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/clock.h"
#include "dist/comm.h"
#include "dist/nccl_check.h"
#include "dist/watchdog.h"

// What a [started] callback tells the watchdog: which collective is now in flight.
typedef struct NcclMark {
    Watchdog *watchdog;
    const char *what;
} NcclMark;

typedef struct {
    ncclComm_t nccl;
    cudaStream_t stream;   // NCCL's stream
    cudaStream_t compute;  // the backend's compute stream (not owned)
    cudaEvent_t ready;     // recorded on compute: what the next collective must wait for
    cudaEvent_t done;      // recorded on the NCCL stream: what compute must wait for in `wait`
    Comm *host;            // the bootstrap communicator, for barrier (not owned; outlives this one)
    Watchdog *watchdog;    // NULL when dist.timeout_s <= 0
    NcclMark sum_mark, max_mark, broadcast_mark;
} NcclComm;

// ---- waiting for a non-blocking communicator ------------------------------------------------------------

// res: what an NCCL call on m returned. While it is ncclInProgress, polls the communicator's state until
// it settles, at most host->timeout_s (then the watchdog's timeout ends the job, naming `what`). Any
// error ends the job through amp_fatal with the call, file and line.
static void comm_nccl_settle(NcclComm *m, ncclResult_t res, const char *what, const char *expr,
                             const char *file, int line) {
    double start = clock_seconds(), timeout = m->host->timeout_s;
    while (res == ncclInProgress) {
        if (m->watchdog && clock_seconds() - start > timeout) watchdog_expire(m->watchdog, what);
        sched_yield();
        ncclResult_t query = ncclCommGetAsyncError(m->nccl, &res);
        if (query != ncclSuccess) res = query;
    }
    if (res != ncclSuccess)
        amp_fatal(file, line, "%s: %s (%s)", expr, ncclGetErrorString(res), ncclGetLastError(m->nccl));
}
#define NCCL_SETTLE(m, what, expr) comm_nccl_settle((m), (expr), (what), #expr, __FILE__, __LINE__)

// ---- the watchdog's view of the device --------------------------------------------------------------------

static void CUDART_CB comm_nccl_started(void *arg) {
    NcclMark *mark = arg;
    watchdog_enter(mark->watchdog, mark->what);
}

static void CUDART_CB comm_nccl_finished(void *arg) { watchdog_leave(arg); }

// WatchdogHooks.probe: an error NCCL found by itself (ncclInProgress is not one).
static int comm_nccl_probe(void *arg, char *why, size_t n) {
    NcclComm *m = arg;
    ncclResult_t state = ncclSuccess;
    ncclResult_t query = ncclCommGetAsyncError(m->nccl, &state);
    if (query != ncclSuccess) state = query;
    if (state == ncclSuccess || state == ncclInProgress) return 0;
    snprintf(why, n, "NCCL: %s (%s)", ncclGetErrorString(state), ncclGetLastError(m->nccl));
    return 1;
}

// WatchdogHooks.abort: ends the communicator's kernels and proxy threads.
static void comm_nccl_abort(void *arg) {
    NcclComm *m = arg;
    ncclCommAbort(m->nccl);
}

// Before a collective: the NCCL stream waits for everything compute has issued so far (e.g. the
// bucket's gradients), then tells the watchdog that `mark` is in flight.
static void comm_nccl_before(NcclComm *m, NcclMark *mark) {
    CUDA_CHECK(cudaEventRecord(m->ready, m->compute));
    CUDA_CHECK(cudaStreamWaitEvent(m->stream, m->ready, 0));
    if (m->watchdog) CUDA_CHECK(cudaLaunchHostFunc(m->stream, comm_nccl_started, mark));
}

// After it: the watchdog hears when it completed on the device.
static void comm_nccl_after(NcclComm *m) {
    if (m->watchdog) CUDA_CHECK(cudaLaunchHostFunc(m->stream, comm_nccl_finished, m->watchdog));
}

// ---- collectives ------------------------------------------------------------------------------------------

// buf: (n,) fp16, bf16 or fp32 on the device. 16-bit sums are NCCL's fp16 and bf16 adds, overflowing to
// inf like the MPI path, so the inf/NaN check sees the same verdict.
static void comm_nccl_allreduce_sum(Comm *c, void *buf, size_t n, DType dt) {
    NcclComm *m = c->impl;
    ncclDataType_t type = dt == DTYPE_F16 ? ncclFloat16 : dt == DTYPE_BF16 ? ncclBfloat16 : ncclFloat32;
    comm_nccl_before(m, &m->sum_mark);
    NCCL_SETTLE(m, m->sum_mark.what, ncclAllReduce(buf, buf, n, type, ncclSum, m->nccl, m->stream));
    comm_nccl_after(m);
}

// flag: (1,) fp32 on the device.
static void comm_nccl_allreduce_max_flag(Comm *c, float *flag) {
    NcclComm *m = c->impl;
    comm_nccl_before(m, &m->max_mark);
    NCCL_SETTLE(m, m->max_mark.what, ncclAllReduce(flag, flag, 1, ncclFloat32, ncclMax, m->nccl, m->stream));
    comm_nccl_after(m);
}

// buf: bytes on the device; as ncclUint8 elements the count is the byte count.
static void comm_nccl_broadcast(Comm *c, void *buf, size_t bytes, int root) {
    NcclComm *m = c->impl;
    comm_nccl_before(m, &m->broadcast_mark);
    NCCL_SETTLE(m, m->broadcast_mark.what,
                ncclBroadcast(buf, buf, bytes, ncclUint8, root, m->nccl, m->stream));
    comm_nccl_after(m);
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
    NCCL_SETTLE(m, "finalize", ncclCommFinalize(m->nccl));
    watchdog_stop(m->watchdog);
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
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t started = ncclCommInitRankConfig(&m->nccl, host->size, id, host->rank, &config);
    WatchdogHooks hooks = {.probe = comm_nccl_probe, .abort = comm_nccl_abort, .arg = m};
    if (started == ncclSuccess || started == ncclInProgress)
        m->watchdog = watchdog_start(host->timeout_s, &hooks);
    NCCL_SETTLE(m, "NCCL start-up", started);
    m->sum_mark = (NcclMark){m->watchdog, "NCCL allreduce_sum"};
    m->max_mark = (NcclMark){m->watchdog, "NCCL allreduce_max_flag"};
    m->broadcast_mark = (NcclMark){m->watchdog, "NCCL broadcast"};
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
    c->local_rank = host->local_rank, c->local_size = host->local_size, c->local_cpus = host->local_cpus;
    c->timeout_s = host->timeout_s;
    c->allreduce_sum = comm_nccl_allreduce_sum;
    c->allreduce_max_flag = comm_nccl_allreduce_max_flag;
    c->broadcast = comm_nccl_broadcast;
    c->barrier = comm_nccl_barrier;
    c->wait = comm_nccl_wait;
    c->destroy = comm_nccl_destroy;
    c->impl = m;
    return c;
}
