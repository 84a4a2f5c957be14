// test_comm_faults.c - a dead, stalled or stopped (SIGSTOP) rank, or a failing MPI call, ends the whole job
// with a clear message naming the collective, the step, the waiting rank and the rank it waited for (with their
// host) within a bounded time; and without a launcher comm_init makes no MPI call at all.
//
// Each scenario kills (or avoids) an MPI job, so it cannot run inside the job ctest started. This binary
// plays two parts: given a scenario name it is the program under test (one rank of a job); otherwise it
// is the Check suite, which launches `mpiexec -np 2 <itself> <scenario>` (or the single scenario with no
// launcher at all) and asserts on exit status, output and elapsed time. ctest starts the suite once,
// without mpiexec (tests/tests.cmake). A scenario's output - the error lines it is meant to produce - is
// kept and shown only inside a failing assertion, so a passing `ctest -V` prints no expected errors.
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef AMPTRAIN_HAVE_MPI
#include <mpi.h>
#endif

#include "dist/comm.h"
#include "dist/dist.h"
#include "tests/test_util.h"

// ---- the program under test ------------------------------------------------------------------------

// The last rank sleeps far past the 2 s timeout; the others wait in an allreduce of step 7 and their
// watchdog ends the job.
static int scenario_stall(int argc, char **argv) {
    Comm *c = comm_init(&argc, &argv, 2.0);
    comm_note_step(7);
    float x = 1.0f;
    if (c->rank == c->size - 1)
        sleep(60);
    else
        c->allreduce_sum(c, &x, 1, DTYPE_F32);
    c->destroy(c);
    comm_finalize();
    return 0;
}

// The last rank stops itself (SIGSTOP: alive, holding its sockets, never answering) before step 3's
// allreduce; the others' watchdog ends the job, and mpirun must end the stopped rank too.
static int scenario_stopped(int argc, char **argv) {
    Comm *c = comm_init(&argc, &argv, 2.0);
    comm_note_step(3);
    float x = 1.0f;
    if (c->rank == c->size - 1) raise(SIGSTOP);
    c->allreduce_sum(c, &x, 1, DTYPE_F32);
    c->destroy(c);
    comm_finalize();
    return 0;
}

// The last rank dies outright while the others wait in a barrier with the watchdog disabled: mpirun
// alone must tear the job down.
static int scenario_die(int argc, char **argv) {
    Comm *c = comm_init(&argc, &argv, 0.0);
    if (c->rank == c->size - 1) {
        fprintf(stderr, "rank %d dies now\n", c->rank);
        _exit(7);
    }
    c->barrier(c);
    c->destroy(c);
    comm_finalize();
    return 0;
}

// A broadcast from a root that does not exist: MPI's error handler must name the call and end the job.
static int scenario_mpi_error(int argc, char **argv) {
    Comm *c = comm_init(&argc, &argv, 20.0);
    char byte = 0;
    c->broadcast(c, &byte, 1, c->size + 5);
    c->destroy(c);
    comm_finalize();
    return 0;
}

// No launcher variables: the single communicator, identity collectives, and MPI never initialised.
static int scenario_single(int argc, char **argv) {
    Comm *c = comm_init(&argc, &argv, 2.0);
    _Float16 h = (_Float16)40000.0f;
    float flag = 0.5f;
    unsigned char bytes[4] = {1, 2, 3, 4};
    c->allreduce_sum(c, &h, 1, DTYPE_F16);
    c->allreduce_max_flag(c, &flag);
    c->broadcast(c, bytes, sizeof bytes, 0);
    c->barrier(c);
    c->wait(c);
    int mpi_started = 0;
#ifdef AMPTRAIN_HAVE_MPI
    MPI_Initialized(&mpi_started);
#endif
    printf("name=%s rank=%d size=%d local=%d/%d sum=%g flag=%g bytes=%d%d%d%d mpi_started=%d\n", c->name,
           c->rank, c->size, c->local_rank, c->local_size, (float)h, flag, bytes[0], bytes[1], bytes[2],
           bytes[3], mpi_started);
    c->destroy(c);
    comm_finalize();
    return 0;
}

// ---- the suite ----------------------------------------------------------------------------------------

START_TEST(stalled_rank_ends_the_job_after_the_timeout) {
    static TuRun run;
    tu_run_scenario(&run, 2, "", "stall");
    // Open MPI's mpiexec exits with the status of the first rank that failed: the watchdog's.
    ck_assert_msg(run.status == COMM_EXIT_TIMEOUT, "exit status %d:\n%s", run.status, run.output);
    // Both ranks run on this host: the line names the waiting rank, the one it waited for, and their host.
    char want[1024];
    tu_timeout_line(want, sizeof want, "allreduce_sum", 7, 2.0);
    ck_assert_msg(strstr(run.output, want) != NULL, "wanted: %s\n%s", want, run.output);
    // It waited the timeout, then ended the job long before the stalled rank's 60 s sleep.
    ck_assert_msg(run.seconds >= 2.0 && run.seconds < 30.0, "took %.1f s:\n%s", run.seconds, run.output);
}
END_TEST

START_TEST(stopped_rank_ends_the_job_after_the_timeout) {
    static TuRun run;
    tu_run_scenario(&run, 2, "", "stopped");
    int left = tu_end_scenario_leftovers("stopped");
    ck_assert_msg(run.status == COMM_EXIT_TIMEOUT, "exit status %d:\n%s", run.status, run.output);
    ck_assert_msg(strstr(run.output, "[rank 0] error: collective allreduce_sum (step 3) on rank 0 (host ") !=
                      NULL,
                  "%s", run.output);
    ck_assert_msg(run.seconds >= 2.0 && run.seconds < 30.0, "took %.1f s:\n%s", run.seconds, run.output);
    ck_assert_msg(left == 0, "%d stopped rank(s) outlived the job", left);
}
END_TEST

START_TEST(dead_rank_ends_the_job) {
    static TuRun run;
    tu_run_scenario(&run, 2, "", "die");
    ck_assert_msg(run.status != 0 && run.status != 124, "exit status %d:\n%s", run.status, run.output);
    ck_assert_msg(strstr(run.output, "rank 1 dies now") != NULL, "%s", run.output);
    ck_assert_msg(run.seconds < 30.0, "took %.1f s:\n%s", run.seconds, run.output);
}
END_TEST

START_TEST(failing_mpi_call_is_named) {
    static TuRun run;
    tu_run_scenario(&run, 2, "", "mpi_error");
    ck_assert_msg(run.status != 0 && run.status != 124, "exit status %d:\n%s", run.status, run.output);
    ck_assert_msg(strstr(run.output, "error: ") && strstr(run.output, "src/dist/comm_mpi.c:") &&
                      strstr(run.output, "MPI call failed: MPI_Bcast(") && strstr(run.output, "MPI_ERR_ROOT"),
                  "%s", run.output);
    ck_assert_msg(run.seconds < 30.0, "took %.1f s:\n%s", run.seconds, run.output);
}
END_TEST

START_TEST(no_launcher_means_single_and_no_mpi) {
    static TuRun run;
    tu_run_scenario(&run, 0, "", "single");
    ck_assert_msg(run.status == 0, "exit status %d:\n%s", run.status, run.output);
    ck_assert_msg(strstr(run.output, "name=single rank=0 size=1 local=0/1 sum=40000 flag=0.5 bytes=1234 "
                                     "mpi_started=0") != NULL,
                  "%s", run.output);
}
END_TEST

static Suite *comm_faults_suite(void) {
    Suite *s = suite_create("comm_faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, stalled_rank_ends_the_job_after_the_timeout);
    tcase_add_test(tc, stopped_rank_ends_the_job_after_the_timeout);
    tcase_add_test(tc, dead_rank_ends_the_job);
    tcase_add_test(tc, failing_mpi_call_is_named);
    tcase_add_test(tc, no_launcher_means_single_and_no_mpi);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        if (strcmp(argv[1], "stall") == 0) return scenario_stall(argc, argv);
        if (strcmp(argv[1], "stopped") == 0) return scenario_stopped(argc, argv);
        if (strcmp(argv[1], "die") == 0) return scenario_die(argc, argv);
        if (strcmp(argv[1], "mpi_error") == 0) return scenario_mpi_error(argc, argv);
        if (strcmp(argv[1], "single") == 0) return scenario_single(argc, argv);
        fprintf(stderr, "unknown scenario '%s'\n", argv[1]);
        return 2;
    }
    int skip = tu_leave_launch("test_comm_faults");
    return skip ? skip : tu_run_suite(comm_faults_suite(), 1);
}
