// comm_mpi.c - MPI start-up and the communicator over host buffers (the CPU backend's gradients).
//
// Also the bootstrap for NCCL: rank 0's NCCL unique id travels through this communicator's broadcast.
// Every blocking call is bracketed by the watchdog (watchdog.h), so a dead or stalled peer ends the job
// after dist.timeout_s instead of hanging it.
#include "dist/comm_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bf16.h"
#include "core/check.h"
#include "core/cpus.h"
#include "core/log.h"
#include "dist/dist.h"
#include "dist/mpi_check.h"
#include "dist/watchdog.h"

typedef struct {
    MPI_Comm world;  // a duplicate of MPI_COMM_WORLD, so amptrain's messages never match anyone else's
    MPI_Op fp16_sum, bf16_sum;
    Watchdog *watchdog;  // NULL when dist.timeout_s <= 0
} MpiComm;

// ---- MPI_CHECK and the error handler -------------------------------------------------------------

static struct {
    const char *expr, *file;
    int line;
} noted_call;

void mpi_check_note(const char *expr, const char *file, int line) {
    noted_call.expr = expr;
    noted_call.file = file;
    noted_call.line = line;
}

static void mpi_check_fail(int err) __attribute__((noreturn));
static void mpi_check_fail(int err) {
    char reason[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(err, reason, &len) != MPI_SUCCESS)
        len = snprintf(reason, sizeof reason, "MPI error code %d", err);
    reason[len] = 0;
    if (noted_call.expr)
        amp_fatal(noted_call.file, noted_call.line, "MPI call failed: %s: %s", noted_call.expr, reason);
    amp_fatal(__FILE__, __LINE__, "MPI error outside MPI_CHECK: %s", reason);
}

void mpi_check_result(int err) {
    if (err != MPI_SUCCESS) mpi_check_fail(err);
    noted_call.expr = NULL;
}

static void comm_mpi_error_handler(MPI_Comm *comm, int *err, ...) {
    (void)comm;
    mpi_check_fail(*err);
}

// amp_fatal's hook: one rank's failure takes the whole job down instead of leaving peers in a collective.
static void comm_mpi_abort(int exit_code) {
    int started = 0, finished = 0;
    MPI_Initialized(&started);
    MPI_Finalized(&finished);
    if (started && !finished) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

// ---- fp16 and bf16 sums ----------------------------------------------------------------------------

// MPI has no standard binary16 or bfloat16 datatype (MPIX_C_FLOAT16 is an MPICH extension; Open MPI has
// none), so 16-bit float buffers travel as MPI_UINT16_T. MPI_SUM on those would add bit patterns as
// integers: wrong values, with carries running from mantissa into exponent. So each sum is a user-defined
// op: decode each pair to fp32, add, round back - one rounding per pairwise combine. fp32 has 24 bits >=
// 2*11+2 (fp16) and >= 2*8+2 (bf16), so add-then-round equals a correctly rounded 16-bit add, and it
// overflows exactly like one: fp16 40000 + 40000 is +inf, the verdict the inf/NaN check must see.
static void comm_mpi_fp16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const _Float16 *a = in;
    _Float16 *b = inout;
    for (int i = 0; i < *len; i++) b[i] = (_Float16)((float)a[i] + (float)b[i]);
}

static void comm_mpi_bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = bf16_from_float(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

// ---- collectives (MPI counts are int: large buffers go in INT_MAX-element chunks) ---------------------

static void comm_mpi_allreduce_sum(Comm *c, void *buf, size_t n, DType dt) {
    MpiComm *m = c->impl;
    MPI_Datatype type = dtype_is_16bit(dt) ? MPI_UINT16_T : MPI_FLOAT;
    MPI_Op op = dt == DTYPE_F16 ? m->fp16_sum : dt == DTYPE_BF16 ? m->bf16_sum : MPI_SUM;
    char *bytes = buf;
    watchdog_enter(m->watchdog, "allreduce_sum");
    for (size_t done = 0; done < n;) {
        int count = n - done > INT_MAX ? INT_MAX : (int)(n - done);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + done * dtype_size(dt), count, type, op, m->world));
        done += (size_t)count;
    }
    watchdog_leave(m->watchdog);
}

static void comm_mpi_allreduce_max_flag(Comm *c, float *flag) {
    MpiComm *m = c->impl;
    watchdog_enter(m->watchdog, "allreduce_max_flag");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, flag, 1, MPI_FLOAT, MPI_MAX, m->world));
    watchdog_leave(m->watchdog);
}

static void comm_mpi_broadcast(Comm *c, void *buf, size_t bytes, int root) {
    MpiComm *m = c->impl;
    char *p = buf;
    watchdog_enter(m->watchdog, "broadcast");
    for (size_t done = 0; done < bytes;) {
        int count = bytes - done > INT_MAX ? INT_MAX : (int)(bytes - done);
        MPI_CHECK(MPI_Bcast(p + done, count, MPI_BYTE, root, m->world));
        done += (size_t)count;
    }
    watchdog_leave(m->watchdog);
}

static void comm_mpi_barrier(Comm *c) {
    MpiComm *m = c->impl;
    watchdog_enter(m->watchdog, "barrier");
    MPI_CHECK(MPI_Barrier(m->world));
    watchdog_leave(m->watchdog);
}

// Blocking MPI calls have finished by the time they return: nothing is ever outstanding.
static void comm_mpi_wait(Comm *c) { (void)c; }

static void comm_mpi_destroy(Comm *c) {
    MpiComm *m = c->impl;
    watchdog_stop(m->watchdog);
    MPI_CHECK(MPI_Op_free(&m->fp16_sum));
    MPI_CHECK(MPI_Op_free(&m->bf16_sum));
    MPI_CHECK(MPI_Comm_free(&m->world));
    free(m);
    free(c);
}

// ---- start-up ------------------------------------------------------------------------------------------

// Ranks that share memory with this one, i.e. the ranks on this host: they pick GPUs by local rank, and
// share out the CPUs their affinity masks hold together (one mask each when srun binds every task to its
// own CPUs, the same mask for all under mpirun --bind-to none).
static void comm_mpi_local_ranks(MPI_Comm world, int rank, Comm *c) {
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    MPI_CHECK(MPI_Comm_rank(local, &c->local_rank));
    MPI_CHECK(MPI_Comm_size(local, &c->local_size));
    unsigned char cpus[CPUS_MASK_BYTES];
    cpus_affinity_bits(cpus);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, cpus, CPUS_MASK_BYTES, MPI_BYTE, MPI_BOR, local));
    c->local_cpus = cpus_count(cpus, cpus_quota_limit());
    MPI_CHECK(MPI_Comm_free(&local));
}

// Every rank's host name, for the collective-timeout message's "waited for ...": the one peer of a job of
// two by rank and host, beyond that how many and their hosts (the first few).
static void comm_mpi_note_peers(MPI_Comm world, int rank, int size) {
    enum { HOST = 64, LISTED = 4 };
    char *hosts = xcalloc((size_t)size, HOST);
    gethostname(hosts + (size_t)rank * HOST, HOST - 1);
    MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hosts, HOST, MPI_CHAR, world));
    char text[COMM_PEERS_MAX];
    if (size == 2) {
        snprintf(text, sizeof text, "rank %d (host %s)", 1 - rank, hosts + (size_t)(1 - rank) * HOST);
    } else {
        // the distinct hosts of the other ranks, the first LISTED of them (then "...")
        const char *distinct[LISTED + 1];
        int found = 0;
        for (int r = 0; r < size && found <= LISTED; r++) {
            const char *h = hosts + (size_t)r * HOST;
            int seen = r == rank;
            for (int i = 0; i < found && !seen; i++) seen = !strcmp(h, distinct[i]);
            if (!seen) distinct[found++] = h;
        }
        int n = snprintf(text, sizeof text, "the other %d ranks (host%s", size - 1, found > 1 ? "s" : "");
        for (int i = 0; i < found && n < (int)sizeof text; i++)
            n += snprintf(text + n, sizeof text - (size_t)n, "%s%s", i ? ", " : " ",
                          i < LISTED ? distinct[i] : "...");
        if (n < (int)sizeof text) snprintf(text + n, sizeof text - (size_t)n, ")");
    }
    comm_note_peers(text);
    free(hosts);
}

Comm *comm_mpi_create(int *argc, char ***argv, double timeout_s) {
    // FUNNELED: only the main thread calls MPI, but other threads exist (the collective watchdog, the
    // data loader's prefetch workers), which MPI_THREAD_SINGLE would forbid. Nothing needs MULTIPLE.
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    amp_set_abort_hook(comm_mpi_abort);

    MPI_Errhandler handler;
    MPI_CHECK(MPI_Comm_create_errhandler(comm_mpi_error_handler, &handler));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, handler));
    MPI_CHECK(MPI_Errhandler_free(&handler));  // stays attached to the communicators that use it

    Comm *c = xcalloc(1, sizeof *c);
    MpiComm *m = xcalloc(1, sizeof *m);
    c->name = "mpi";
    c->impl = m;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    log_set_rank(c->rank, c->size);
    AMP_ASSERT(provided >= MPI_THREAD_FUNNELED,
               "this MPI provides thread level %d, amptrain needs MPI_THREAD_FUNNELED (%d)", provided,
               MPI_THREAD_FUNNELED);

    c->timeout_s = timeout_s;
    m->watchdog = watchdog_start(timeout_s, NULL);
    watchdog_enter(m->watchdog, "start-up");
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &m->world));  // inherits the error handler
    comm_mpi_local_ranks(m->world, c->rank, c);
    if (c->size > 1) comm_mpi_note_peers(m->world, c->rank, c->size);
    watchdog_leave(m->watchdog);
    MPI_CHECK(MPI_Op_create(comm_mpi_fp16_sum, 1, &m->fp16_sum));
    MPI_CHECK(MPI_Op_create(comm_mpi_bf16_sum, 1, &m->bf16_sum));

    c->allreduce_sum = comm_mpi_allreduce_sum;
    c->allreduce_max_flag = comm_mpi_allreduce_max_flag;
    c->broadcast = comm_mpi_broadcast;
    c->barrier = comm_mpi_barrier;
    c->wait = comm_mpi_wait;
    c->destroy = comm_mpi_destroy;
    return c;
}

void comm_mpi_finalize(void) {
    int started = 0, finished = 0;
    MPI_CHECK(MPI_Initialized(&started));
    MPI_CHECK(MPI_Finalized(&finished));
    if (!started || finished) return;
    amp_set_abort_hook(NULL);  // after MPI_Finalize a fatal error is a plain exit(1)
    MPI_CHECK(MPI_Finalize());
}
