// agree.h - one agreed start-up. Before the first step every rank learns whether any rank failed to
// start (its config, data, resume file, output folders, GPU) and whether all ranks were given the same
// run, so that all of them end together, at once, with the failing rank's message, instead of the
// healthy ones waiting in the next collective until dist.timeout_s.
//
// Every rank makes the same sequence of agree_* calls: a rank that failed makes no further start-up
// work but still joins the call that ends the start-up. On the single-process communicator the calls
// only print.
#ifndef AMPTRAIN_AGREE_H
#define AMPTRAIN_AGREE_H

#include <stddef.h>

#include "dist/comm.h"

#define AGREE_MESSAGE_MAX 1024

// The lowest failing rank's result, on every rank: rc 0 (fine) or this rank's code with a one-line
// message. Returns 0 when no rank failed (out zeroed); otherwise the lowest failing rank's code, with its
// rank, its message and how many ranks failed in out. Prints nothing.
typedef struct AgreedFailure {
    int rank, count;
    char text[AGREE_MESSAGE_MAX];
} AgreedFailure;
int agree_first(Comm *c, int rc, const char *message, AgreedFailure *out);

// Combines this rank's start-up result over all ranks: rc 0 (fine), or its exit code with a one-line
// message. Returns 0 when every rank is fine; otherwise, on every rank, the exit code of the lowest
// failing rank, whose message rank 0 has written to stderr: as it is in a single process, else
// "rank R of N: message", plus how many ranks failed when more than one did.
int agree_startup(Comm *c, int rc, const char *message);

// The same run everywhere: n named values (names[i] names values[i], the same names in the same order
// on every rank) are compared with rank 0's. Returns 0 when all are equal; otherwise 2 on every rank,
// and rank 0 has written "<what> differ between ranks: NAME is X on rank R but Y on rank 0" for the
// first differing name of the lowest differing rank.
int agree_same(Comm *c, const char *what, size_t n, const char *const *names, const char *const *values);

#endif
