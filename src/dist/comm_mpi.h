// comm_mpi.h - internal to src/dist: the MPI start-up and communicator that comm_init picks under
// mpirun. Compiled only when the build found MPI (AMPTRAIN_HAVE_MPI).
#ifndef AMPTRAIN_COMM_MPI_H
#define AMPTRAIN_COMM_MPI_H

#include "dist/comm.h"

// MPI_Init_thread, error handler, abort hook, log rank; returns the communicator over host buffers.
Comm *comm_mpi_create(int *argc, char ***argv, double timeout_s);

// MPI_Finalize if MPI was started and not yet finalized.
void comm_mpi_finalize(void);

#endif
