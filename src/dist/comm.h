// comm.h - the communicator: how ranks sum gradients and agree on verdicts.
//
// Three implementations behind one interface:
//   single  one process, every collective is the identity (no MPI needed at run time)
//   mpi     host buffers (CPU backend); fp16 and bf16 sums use user-defined MPI ops (see comm_mpi.c for why)
//   nccl    device buffers (CUDA backend), on its own stream chained to compute with events
// All collectives are in place. Counts are ELEMENTS, never bytes.
#ifndef AMPTRAIN_COMM_H
#define AMPTRAIN_COMM_H

#include <stddef.h>

#include "core/dtype.h"

typedef struct Comm Comm;
struct Comm {
    const char *name;            // "single", "mpi", "nccl"
    int rank, size;              // in the world
    int local_rank, local_size;  // on this host (shared-memory split of the world)
    int local_cpus;    // CPUs the ranks on this host may use together: their affinity masks ORed, capped by
                       // the cgroup quota (core/cpus.h); what data.workers=0 shares out
    double timeout_s;  // dist.timeout_s: how long a collective may wait for peers (<= 0: for ever)

    // buf[i] = sum over ranks of buf[i]; n elements of dt. fp16 and bf16 sums accumulate pairwise in fp32
    // and round once per combine, overflowing to inf exactly like a 16-bit add would.
    void (*allreduce_sum)(Comm *c, void *buf, size_t n, DType dt);
    // flag[0] = max over ranks (the inf/NaN verdict; 1 float).
    void (*allreduce_max_flag)(Comm *c, float *flag);
    // buf from `root` to every rank; n bytes.
    void (*broadcast)(Comm *c, void *buf, size_t bytes, int root);
    void (*barrier)(Comm *c);
    // Waits until every collective issued so far has finished (NCCL: stream order; MPI: already done).
    void (*wait)(Comm *c);
    void (*destroy)(Comm *c);
    void *impl;
    // comm_record_into: while set, the two sums and wait are appended to this log (run at its replay);
    // live_* keep the implementation's own.
    struct OpLog *recording;
    void (*live_allreduce_sum)(Comm *c, void *buf, size_t n, DType dt);
    void (*live_allreduce_max_flag)(Comm *c, float *flag);
    void (*live_wait)(Comm *c);
};

// A graph captured as an op log (Backend.graph_log: the CPU backend's) must hold the step's collectives
// too, in their place among the ops: with log set, allreduce_sum, allreduce_max_flag and wait are recorded
// into it instead of run; with NULL they run again. Every rank captures the same sequence.
void comm_record_into(Comm *c, struct OpLog *log);

// Start-up: under mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE, ... set) initialises MPI and returns the MPI
// communicator; otherwise the single-process one without touching MPI. Installs the MPI_Abort hook for
// amp_fatal and the rank prefix for logging. timeout_s bounds how long a rank waits for a dead peer.
Comm *comm_init(int *argc, char ***argv, double timeout_s);

// The NCCL communicator over device buffers, bootstrapped through `host` (rank 0 makes the unique id,
// host->broadcast sends it). stream: the compute stream (cudaStream_t) to chain to. NULL without CUDA.
// Bounded by host->timeout_s like the host communicator: a collective that started on the device and
// did not finish in time, or an NCCL error, aborts the communicator and ends the job (watchdog.h).
Comm *comm_nccl_create(Comm *host, void *compute_stream);

// The training step under way (1-based; 0 before the first), for the message of a collective that
// times out or fails. Process-wide: every communicator's watchdog names it.
void comm_note_step(long step);

// Ends MPI cleanly (after comm destroy) when it was started.
void comm_finalize(void);

#endif
