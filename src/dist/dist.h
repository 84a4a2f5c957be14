// dist.h - what src/dist offers beyond the communicator interface (comm.h): the start-up check that
// every rank on a host has a GPU, and the exit code of a rank ended by the collective timeout.
#ifndef AMPTRAIN_DIST_H
#define AMPTRAIN_DIST_H

#include <stddef.h>

#include "dist/comm.h"

// Exit status of a rank whose collective waited longer than dist.timeout_s (a peer died or stalled).
#define COMM_EXIT_TIMEOUT 3

// Nonzero when some host runs more ranks than it has visible GPUs; the verdict is agreed on every rank
// (MAX allreduce of the local flag), so all ranks refuse together instead of some of them hanging in
// NCCL start-up. why (n bytes) then holds one line for the user, e.g. "4 ranks on host gpu7 but only 2
// visible GPUs (CUDA_VISIBLE_DEVICES=0,1)". c: a host communicator (single or mpi), not the NCCL one.
int comm_check_local_gpus(Comm *c, int visible_gpus, char *why, size_t n);

// The step comm_note_step recorded last (what the collective-timeout message names).
long comm_noted_step(void);

// A one-rank communicator whose collectives are the identity (what comm_init returns without a
// launcher). Also usable under mpirun, e.g. for a single-rank reference run inside an MPI test.
Comm *comm_single_create(void);

#endif
