// test_nccl_faults.c - an NCCL collective that stalls because a peer rank is stopped (SIGSTOP: alive,
// holding its connections, never answering) ends the job within dist.timeout_s, with one line naming the
// collective, the step, both ranks and their host, exit 3, and no rank left behind.
//
// Needs two GPUs and a build with NCCL: `mpiexec -np 2` of this binary's "nccl_stopped" scenario, one
// rank per GPU. Without a GPU it exits 77 (skipped), or fails under AMPTRAIN_REQUIRE_GPU=1; with one GPU
// it is skipped (NCCL refuses two ranks on one device). Run it on its own, not under mpiexec:
//     AMPTRAIN_REQUIRE_GPU=1 build/test_nccl_faults        (dev/device_suite.sh dp2, two GPUs)
// The scenario's expected error lines are kept and shown only inside a failing assertion.
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "dist/comm.h"
#include "dist/dist.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/test_util.h"

#define TIMEOUT_S 3.0

#ifdef AMPTRAIN_HAVE_NCCL

// ---- the program under test ------------------------------------------------------------------------

// Both ranks finish one allreduce (NCCL has made its connections), then the last rank stops itself; the
// others issue step 5's allreduce, whose kernel waits for the stopped peer while the host blocks in a
// sync. The watchdog must see the collective start on the device and not finish.
static int scenario_nccl_stopped(int argc, char **argv) {
    Comm *host = comm_init(&argc, &argv, TIMEOUT_S);
    char why[256];
    Backend *be = cuda_backend_create(host->local_rank, NULL, why, sizeof why);
    if (!be) {
        fprintf(stderr, "rank %d: %s\n", host->rank, why);
        return 1;
    }
    Comm *nccl = comm_nccl_create(host, cuda_backend_stream(be));
    if (!nccl) {
        fprintf(stderr, "rank %d: this build has no NCCL\n", host->rank);
        return 1;
    }
    enum { N = 1 << 16 };
    float *buf = be->alloc(be, N * sizeof(float));  // (N,) fp32 on the device
    be->zero(be, buf, N * sizeof(float));
    nccl->allreduce_sum(nccl, buf, N, DTYPE_F32);
    nccl->wait(nccl);
    be->sync(be);
    comm_note_step(5);
    if (host->rank == host->size - 1) raise(SIGSTOP);
    nccl->allreduce_sum(nccl, buf, N, DTYPE_F32);
    nccl->wait(nccl);
    be->sync(be);
    printf("rank %d: step 5's allreduce completed with a stopped peer\n", host->rank);
    be->free(be, buf);
    nccl->destroy(nccl);
    be->destroy(be);
    host->destroy(host);
    comm_finalize();
    return 0;
}

// ---- the suite ----------------------------------------------------------------------------------------

START_TEST(stopped_peer_ends_the_job_within_the_timeout) {
    static TuRun run;
    // NVLink SHARP stays off (it can hang inside NCCL's init on some machines, see launch/amptrain-mpirun).
    tu_run_scenario(&run, 2, "-x NCCL_NVLS_ENABLE=0", "nccl_stopped");
    int left = tu_end_scenario_leftovers("nccl_stopped");
    ck_assert_msg(run.status == COMM_EXIT_TIMEOUT, "exit status %d:\n%s", run.status, run.output);
    char want[1024];
    tu_timeout_line(want, sizeof want, "NCCL allreduce_sum", 5, TIMEOUT_S);
    ck_assert_msg(strstr(run.output, want) != NULL, "wanted: %s\n%s", want, run.output);
    ck_assert_msg(!strstr(run.output, "completed with a stopped peer"), "%s", run.output);
    // The timeout, then the job's end (abort, mpirun's teardown of the stopped rank) well before `timeout 120`.
    ck_assert_msg(run.seconds >= TIMEOUT_S && run.seconds < 60.0, "took %.1f s:\n%s", run.seconds,
                  run.output);
    ck_assert_msg(left == 0, "%d rank(s) outlived the job", left);
}
END_TEST
#endif

int main(int argc, char **argv) {
#ifdef AMPTRAIN_HAVE_NCCL
    if (argc > 1 && strcmp(argv[1], "nccl_stopped") == 0) return scenario_nccl_stopped(argc, argv);
#endif
    if (argc > 1) {
        fprintf(stderr, "unknown scenario '%s'\n", argv[1]);
        return 2;
    }
    int skip = tu_leave_launch("test_nccl_faults");
    if (skip) return skip;
#ifndef AMPTRAIN_HAVE_NCCL
    return tu_skip_gpu("test_nccl_faults", "this build has no NCCL (it needs CUDA and MPI)");
#else
    int gpus = cuda_visible_device_count();
    if (gpus < 1) return tu_skip_gpu("test_nccl_faults", "no GPU visible");
    if (gpus < 2) return tu_skip("test_nccl_faults", "needs 2 GPUs (one rank per GPU), %d visible", gpus);
    Suite *s = suite_create("nccl_faults");
    TCase *tc = tcase_create("stopped");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, stopped_peer_ends_the_job_within_the_timeout);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 1);
#endif
}
