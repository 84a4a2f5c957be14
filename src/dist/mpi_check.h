// mpi_check.h - MPI_CHECK(expr): how every MPI call in src/dist is made.
//
// A failing call ends the job through amp_fatal (hence MPI_Abort) with one line:
//   "FILE:LINE: MPI call failed: MPI_Barrier(m->world): MPI_ERR_COMM: invalid communicator"
// MPI_COMM_WORLD and the communicators derived from it carry an error handler that reports the same way,
// because there MPI raises errors through the handler instead of returning them. The macro notes the
// call before making it, so the handler can name the expression, file and line too.
// Main thread only (MPI runs at MPI_THREAD_FUNNELED), so the noted call needs no locking.
#ifndef AMPTRAIN_MPI_CHECK_H
#define AMPTRAIN_MPI_CHECK_H

#include <mpi.h>

void mpi_check_note(const char *expr, const char *file, int line);
// Fails with the noted call unless err == MPI_SUCCESS.
void mpi_check_result(int err);

#define MPI_CHECK(expr)                                                                                      \
    do {                                                                                                     \
        mpi_check_note(#expr, __FILE__, __LINE__);                                                           \
        mpi_check_result(expr);                                                                              \
    } while (0)

#endif
