// comm.c - picks the communicator at start-up (refusing Slurm tasks that are not one MPI job), the
// single-process communicator, and which GPU each rank of a host takes.
//
// The launcher, not a flag, decides: under mpirun/srun the launcher's environment variables are set and
// MPI starts; without them amptrain is one process and makes no MPI call at all (so a build with MPI
// still runs where no MPI runtime is configured).
#include "dist/comm.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/cpus.h"
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
    c->local_cpus = cpus_usable();
    c->allreduce_sum = comm_single_allreduce_sum;
    c->allreduce_max_flag = comm_single_allreduce_max_flag;
    c->broadcast = comm_single_broadcast;
    c->barrier = comm_single_barrier;
    c->wait = comm_single_wait;
    c->destroy = comm_single_destroy;
    return c;
}

// ---- collectives recorded into an op log (a CPU graph capture) ------------------------------------------

typedef struct {
    Comm *c;
    void *buf;
    size_t n;
    DType dt;
} RecordedSum;
typedef struct {
    Comm *c;
    float *flag;
} RecordedFlag;

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

// Written once at start-up by the training thread, read by the watchdog threads (published by the pointer).
static char peers_text[COMM_PEERS_MAX];
static _Atomic(const char *) noted_peers;

void comm_note_peers(const char *text) {
    snprintf(peers_text, sizeof peers_text, "%s", text);
    atomic_store_explicit(&noted_peers, peers_text, memory_order_release);
}

const char *comm_noted_peers(void) {
    const char *p = atomic_load_explicit(&noted_peers, memory_order_acquire);
    return p ? p : "the other ranks";
}

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

int comm_slurm_tasks(void) {
    static const char *const names[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v) > 0 ? atoi(v) : 0;
    }
    return 0;
}

// srun without an MPI plugin that this MPI speaks (no --mpi=pmix, or an MPI without PMIx support) starts
// every task as a world of its own: N copies would each train the whole model alone and write the same
// checkpoints. Refused before anything is written (exit 2).
static int comm_refuse_unwired_tasks(int world_size) {
    int tasks = comm_slurm_tasks();
    if (tasks <= 1 || world_size > 1) return 0;
    fprintf(
        stderr,
        "error: Slurm started %d tasks (SLURM_STEP_NUM_TASKS, SLURM_NTASKS or SLURM_NPROCS) but this one is an "
        "MPI world of %d rank: the tasks are not wired into one job and would each train alone, writing the "
        "same files. Launch them with srun --mpi=pmix (srun --mpi=list shows what this Slurm offers), or "
        "with mpirun inside the allocation; for a single process, srun --ntasks=1\n",
        tasks, world_size);
    return 1;
}

Comm *comm_init(int *argc, char ***argv, double timeout_s) {
    const char *launcher = comm_launcher_variable();
    if (!launcher) {
        if (comm_refuse_unwired_tasks(1)) exit(2);
        return comm_single_create();
    }
#ifdef AMPTRAIN_HAVE_MPI
    Comm *c = comm_mpi_create(argc, argv, timeout_s);
    // mpirun sets the world's size itself: -np 1 inside a larger allocation is one rank by request.
    if (strcmp(launcher, "OMPI_COMM_WORLD_SIZE") != 0 && comm_refuse_unwired_tasks(c->size)) {
        c->destroy(c);
        comm_mpi_finalize();
        exit(2);
    }
    return c;
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

int comm_local_gpu(int local_rank, int local_size, int visible_gpus) {
    // srun --gpus-per-task=1 (or a CUDA_VISIBLE_DEVICES of one entry per rank): the one GPU is this rank's
    if (visible_gpus == 1) return 0;
    return local_size <= visible_gpus ? local_rank : -1;
}

// A rank's GPU as 3 floats of 22 bits (FNV-1a 64 of its host name and UUID, 66 bits kept): summed into a
// vector of every rank's, each slot written by one rank only, so the float sum is exact (< 2^24).
#define GPU_KEY_FLOATS 3
static void gpu_key(const char *host, const unsigned char uuid[16], float key[GPU_KEY_FLOATS]) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    for (int i = 0; i < 16; i++) h = (h ^ uuid[i]) * 0x100000001b3ull;
    // +1: a rank without a GPU of its own leaves zeros, which match nobody's key
    for (int i = 0; i < GPU_KEY_FLOATS; i++) key[i] = (float)((h >> (22 * i)) & 0x3fffff) + 1.0f;
}

// The lowest other rank whose GPU is this rank's (same host, same UUID), or -1. Every rank calls it.
static int gpu_shared_with(Comm *c, const float key[GPU_KEY_FLOATS]) {
    size_t len = (size_t)c->size * GPU_KEY_FLOATS;
    float *all = xcalloc(len, sizeof *all);
    memcpy(all + (size_t)c->rank * GPU_KEY_FLOATS, key, GPU_KEY_FLOATS * sizeof *key);
    c->allreduce_sum(c, all, len, DTYPE_F32);
    c->wait(c);
    int other = -1;
    for (int r = 0; r < c->size && other < 0; r++)
        if (r != c->rank && key[0] != 0 &&
            !memcmp(all + (size_t)r * GPU_KEY_FLOATS, key, GPU_KEY_FLOATS * sizeof *key))
            other = r;
    free(all);
    return other;
}

int comm_check_local_gpus(Comm *c, int visible_gpus, GpuIdentify identify, int *device, char *why, size_t n) {
    *device = comm_local_gpu(c->local_rank, c->local_size, visible_gpus);
    int short_here = *device < 0;
    float flag = (float)short_here;
    c->allreduce_max_flag(c, &flag);

    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    if (flag == 0 && c->size > 1 && identify) {
        // A rank that sees one GPU takes it; two ranks of a host that see the same one would meet in NCCL's
        // start-up as "duplicate GPU": said here instead, with the ranks and the device.
        unsigned char uuid[16];
        char pci[32] = "?";
        float key[GPU_KEY_FLOATS] = {0};
        if (identify(*device, uuid, pci, sizeof pci) == 0) gpu_key(host, uuid, key);
        int other = gpu_shared_with(c, key);
        float shared = other >= 0;
        c->allreduce_max_flag(c, &shared);
        if (shared == 0) return 0;
        if (other >= 0)
            snprintf(
                why, n,
                "ranks %d and %d on host %s both use the GPU at %s (each sees one GPU, the same one); give "
                "each rank its own (srun --gpus-per-task=1, or one CUDA_VISIBLE_DEVICES entry per rank), or "
                "start one rank per GPU",
                c->rank < other ? c->rank : other, c->rank < other ? other : c->rank, host, pci);
        else
            snprintf(why, n,
                     "two ranks of another host share a GPU (see its error); rank %d on host %s has its own",
                     c->rank, host);
        return 1;
    }
    if (flag == 0) return 0;

    const char *devices = getenv("CUDA_VISIBLE_DEVICES");
    char devices_note[160];
    if (devices)
        snprintf(devices_note, sizeof devices_note, "CUDA_VISIBLE_DEVICES=%s", devices);
    else
        snprintf(devices_note, sizeof devices_note, "CUDA_VISIBLE_DEVICES is not set");
    if (short_here)
        snprintf(
            why, n,
            "%d ranks on host %s but only %d visible GPUs (%s); each rank needs a GPU of its own: start at "
            "most %d ranks per host, or give each rank exactly one (srun --gpus-per-task=1)",
            c->local_size, host, visible_gpus, devices_note, visible_gpus);
    else
        snprintf(why, n,
                 "another host runs more ranks than it has visible GPUs (see its error); this host %s "
                 "has %d ranks and %d visible GPUs",
                 host, c->local_size, visible_gpus);
    return 1;
}
