// dist.h - what src/dist offers beyond the communicator interface (comm.h): the start-up checks (every rank
// on a host has a GPU of its own; Slurm's tasks form one MPI job), what the collective-timeout message
// names, and the exit code of a rank ended by that timeout.
#ifndef AMPTRAIN_DIST_H
#define AMPTRAIN_DIST_H

#include <stddef.h>

#include "dist/comm.h"

// Exit status of a rank whose collective waited longer than dist.timeout_s (a peer died or stalled).
#define COMM_EXIT_TIMEOUT 3

// The CUDA device (an index among the visible ones) of local rank local_rank of local_size on a host where
// it sees visible_gpus GPUs, or -1 when it has none of its own. A rank that sees exactly one GPU uses it
// (srun --gpus-per-task=1 gives each rank its own as device 0); otherwise local rank r uses GPU r, so
// local_size may not exceed visible_gpus.
int comm_local_gpu(int local_rank, int local_size, int visible_gpus);

// Which physical GPU visible device `device` is (kernels/cuda: cuda_device_identity): UUID and PCI address.
typedef int (*GpuIdentify)(int device, unsigned char uuid[16], char *pci, size_t pci_len);

// Sets *device to this rank's GPU (comm_local_gpu) and returns nonzero when some rank of the job has none,
// or (with identify, in a job of several ranks) when two ranks of a host would use the same physical GPU.
// The verdict is agreed on every rank (MAX allreduce of the local flags), so all ranks refuse together
// instead of some of them failing in NCCL's start-up. why (n bytes) then holds one line for the user, e.g.
// "4 ranks on host gpu7 but only 2 visible GPUs (CUDA_VISIBLE_DEVICES=0,1); ...", "ranks 0 and 1 on host
// gpu7 both use the GPU at 0000:3b:00.0 ...". c: a host communicator (single or mpi), not the NCCL one.
int comm_check_local_gpus(Comm *c, int visible_gpus, GpuIdentify identify, int *device, char *why, size_t n);

// The tasks of this Slurm job step as the environment gives them (SLURM_STEP_NUM_TASKS, which srun sets for
// its step, else SLURM_NTASKS, else SLURM_NPROCS); 0 outside Slurm. comm_init refuses a world of one rank
// when this is more than 1 (exit 2): srun started several unconnected copies.
int comm_slurm_tasks(void);

// The step comm_note_step recorded last (what the collective-timeout message names).
long comm_noted_step(void);

// Whom a collective of this process waits for, as the collective-timeout message names them: "rank 1 (host
// gpu8)" in a job of two, "the other 15 ranks (hosts gpu7, gpu8)" beyond; set once at start-up by the MPI
// communicator (which knows every rank's host). comm_noted_peers: "the other ranks" until then.
#define COMM_PEERS_MAX 256
void comm_note_peers(const char *text);
const char *comm_noted_peers(void);

// A one-rank communicator whose collectives are the identity (what comm_init returns without a
// launcher). Also usable under mpirun, e.g. for a single-rank reference run inside an MPI test.
Comm *comm_single_create(void);

#endif
