// comm.c - picks the communicator at start-up, the single-process communicator, and the check that a
// host has a GPU for each of its ranks.
//
// The launcher, not a flag, decides: under mpirun/srun the launcher's environment variables are set and
// MPI starts; without them amptrain is one process and makes no MPI call at all (so a build with MPI
// still runs where no MPI runtime is configured).
#include "dist/comm.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/check.h"
#include "core/op_log.h"
#include "dist/dist.h"
#ifdef AMPTRAIN_HAVE_MPI
#include "dist/comm_mpi.h"
#endif

// ---- the single-process communicator: every collective over one rank is the identity ---------------

static void comm_single_allreduce_sum(Comm *c, void *buf, size_t n, DType dt) {
    (void)c, (void)buf, (void)n, (void)dt;
}
static void comm_single_allreduce_max_flag(Comm *c, float *flag) { (void)c, (void)flag; }
static void comm_single_broadcast(Comm *c, void *buf, size_t bytes, int root) {
    (void)c, (void)buf, (void)bytes, (void)root;
}
static void comm_single_barrier(Comm *c) { (void)c; }
static void comm_single_wait(Comm *c) { (void)c; }
static void comm_single_destroy(Comm *c) { free(c); }

Comm *comm_single_create(void) {
    Comm *c = xcalloc(1, sizeof *c);
    c->name = "single";
    c->rank = 0, c->size = 1;
    c->local_rank = 0, c->local_size = 1;
    c->allreduce_sum = comm_single_allreduce_sum;
    c->allreduce_max_flag = comm_single_allreduce_max_flag;
    c->broadcast = comm_single_broadcast;
    c->barrier = comm_single_barrier;
    c->wait = comm_single_wait;
    c->destroy = comm_single_destroy;
    return c;
}

// ---- collectives recorded into an op log (a CPU graph capture) ------------------------------------------

typedef struct { Comm *c; void *buf; size_t n; DType dt; } RecordedSum;
typedef struct { Comm *c; float *flag; } RecordedFlag;

static void replay_sum(const void *p) {
    const RecordedSum *a = p;
    a->c->live_allreduce_sum(a->c, a->buf, a->n, a->dt);
}
static void replay_flag(const void *p) {
    const RecordedFlag *a = p;
    a->c->live_allreduce_max_flag(a->c, a->flag);
}
static void replay_wait(const void *p) {
    Comm *const *c = p;
    (*c)->live_wait(*c);
}
static void record_sum(Comm *c, void *buf, size_t n, DType dt) {
    RecordedSum a = {c, buf, n, dt};
    op_log_append(c->recording, replay_sum, &a, sizeof a);
}
static void record_flag(Comm *c, float *flag) {
    RecordedFlag a = {c, flag};
    op_log_append(c->recording, replay_flag, &a, sizeof a);
}
static void record_wait(Comm *c) { op_log_append(c->recording, replay_wait, &c, sizeof c); }

void comm_record_into(Comm *c, struct OpLog *log) {
    if (log && !c->recording) {
        c->live_allreduce_sum = c->allreduce_sum, c->live_allreduce_max_flag = c->allreduce_max_flag;
        c->live_wait = c->wait;
        c->allreduce_sum = record_sum, c->allreduce_max_flag = record_flag, c->wait = record_wait;
    } else if (!log && c->recording) {
        c->allreduce_sum = c->live_allreduce_sum, c->allreduce_max_flag = c->live_allreduce_max_flag;
        c->wait = c->live_wait;
    }
    c->recording = log;
}

// ---- the step a failure is reported in ------------------------------------------------------------------

// Written by the training thread, read by the watchdog threads.
static atomic_long noted_step;

void comm_note_step(long step) { atomic_store_explicit(&noted_step, step, memory_order_relaxed); }

long comm_noted_step(void) { return atomic_load_explicit(&noted_step, memory_order_relaxed); }

// ---- start-up ------------------------------------------------------------------------------------------

// The variable that gives the launcher away, or NULL when the process was started on its own.
//   Open MPI's mpirun: OMPI_COMM_WORLD_SIZE; PMIx (Open MPI 5, srun --mpi=pmix): PMIX_RANK;
//   MPICH/Intel MPI hydra and srun --mpi=pmi2: PMI_SIZE, PMI_RANK; MVAPICH2: MV2_COMM_WORLD_SIZE.
static const char *comm_launcher_variable(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                                        "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (getenv(names[i])) return names[i];
    return NULL;
}

Comm *comm_init(int *argc, char ***argv, double timeout_s) {
    const char *launcher = comm_launcher_variable();
    if (!launcher) return comm_single_create();
#ifdef AMPTRAIN_HAVE_MPI
    return comm_mpi_create(argc, argv, timeout_s);
#else
    (void)argc, (void)argv, (void)timeout_s;
    // Running N copies of a single-process trainer would silently train N independent models.
    fprintf(stderr,
            "error: started by an MPI launcher (%s is set) but this amptrain was built without MPI; "
            "install MPI (Debian: libopenmpi-dev openmpi-bin) and rebuild, or run without mpirun\n",
            launcher);
    exit(2);
#endif
}

void comm_finalize(void) {
#ifdef AMPTRAIN_HAVE_MPI
    comm_mpi_finalize();
#endif
}

#ifndef AMPTRAIN_HAVE_NCCL
// Without NCCL (no CUDA, or CUDA without MPI) gradients are reduced by the host communicator.
Comm *comm_nccl_create(Comm *host, void *compute_stream) {
    (void)host, (void)compute_stream;
    return NULL;
}
#endif

// ---- one GPU per rank ----------------------------------------------------------------------------------

int comm_check_local_gpus(Comm *c, int visible_gpus, char *why, size_t n) {
    int short_here = c->local_size > visible_gpus;
    float flag = (float)short_here;
    c->allreduce_max_flag(c, &flag);
    if (flag == 0) return 0;

    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const char *devices = getenv("CUDA_VISIBLE_DEVICES");
    char devices_note[160];
    if (devices)
        snprintf(devices_note, sizeof devices_note, "CUDA_VISIBLE_DEVICES=%s", devices);
    else
        snprintf(devices_note, sizeof devices_note, "CUDA_VISIBLE_DEVICES is not set");
    if (short_here)
        snprintf(why, n, "%d ranks on host %s but only %d visible GPUs (%s); start at most %d ranks per host",
                 c->local_size, host, visible_gpus, devices_note, visible_gpus);
    else
        snprintf(why, n,
                 "another host runs more ranks than it has visible GPUs (see its error); this host %s "
                 "has %d ranks and %d visible GPUs",
                 host, c->local_size, visible_gpus);
    return 1;
}
