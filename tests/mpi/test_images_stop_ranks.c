// test_images_stop_ranks.c - a stop inside a step of two micro-batches on two ranks, while rank 0 waits for
// its second micro-batch, which never comes (one image's read is held for ever, tests/stall_read.c), and
// rank 1 has both and waits for the step's sums: the ranks agree before the last micro-step, neither takes
// the step, and the job exits 0 with the checkpoint of the step before, bitwise that of a job that ended
// there (train.steps).
//
// Like test_fault_trainer.c, the job under test cannot run inside another job: ctest starts this suite
// once, without mpiexec (tests/tests.cmake).
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "tests/stall_run.h"
#include "tests/test_util.h"

#define DATA "stop_ranks_data"
#define STEP 2  // the 0-based step whose second micro-batch rank 0 waits for
// 48 images, 2 ranks x batch 2 x 2 micro-batches: 6 steps an epoch; the learning rate does not depend on the
// run's length (train.schedule step).
#define JOB                                                                                                  \
    "mpiexec --allow-run-as-root --oversubscribe -np 2 %s " AMPTRAIN_BIN " " AMPTRAIN_SOURCE_DIR             \
    "/configs/tiny.yaml backend.device=cpu data.source=imagefolder data.path=" DATA                          \
    " data.batch_size=2 train.accum_steps=2 data.prefetch=2 data.workers=2 train.epochs=2 "                  \
    "train.schedule=step log.every=1 log.progress=never %s"

START_TEST(stop_inside_an_accumulated_step_on_two_ranks) {
    const StallData data = {.root = DATA, .per_class = 24, .world = 2, .batch = 2, .accum = 2, .seed = 42};
    char image[128], env[1024], cmd[4096], out[1 << 14];
    stall_folder_make(&data);
    ck_assert_int_eq(system("rm -rf stop_ranks && mkdir stop_ranks"), 0);
    stall_image(&data, 0, STEP, 1, image, sizeof image);
    stall_env(image, "-x ", env, sizeof env);
    snprintf(cmd, sizeof cmd, JOB, env, "checkpoint.dir=stop_ranks/run log.metrics=stop_ranks/run/m.jsonl");
    pid_t job = stall_start(cmd, "stop_ranks/job.log");

    // STEP steps done, the record of the last one still to be written; then nothing more comes.
    for (int i = 0; i < 1200 && tu_count_lines("stop_ranks/run/m.jsonl", "{\"step\":") < STEP - 1; i++)
        usleep(50000);
    usleep(1500000);
    int status;
    ck_assert_int_eq(waitpid(job, &status, WNOHANG), 0);
    ck_assert_int_eq(tu_count_lines("stop_ranks/run/m.jsonl", "{\"step\":"), STEP - 1);
    const double start = clock_seconds();
    ck_assert_int_eq(kill(job, SIGUSR1), 0);  // mpiexec passes it to both ranks
    status = stall_wait_exit(job, 60);
    const double took = clock_seconds() - start;
    char *said = tu_read_file("stop_ranks/job.log", NULL);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x:\n%s", status, said);
    ck_assert_msg(took < 15, "the stop took %.1f s", took);
    char line[128];
    snprintf(line, sizeof line, "step %d not taken", STEP + 1);
    ck_assert_msg(strstr(said, line), "no '%s' in:\n%s", line, said);
    snprintf(line, sizeof line, "stopped by signal after step %d", STEP);
    ck_assert_msg(strstr(said, line), "no '%s' in:\n%s", line, said);
    free(said);
    ck_assert_int_eq(tu_checkpoint_step("stop_ranks/run/last.safetensors"), STEP);

    // Neither rank moved its BN statistics or took the step: the state is a job's that ran STEP steps.
    snprintf(cmd, sizeof cmd, JOB " train.steps=%d 2>&1", "",
             "checkpoint.dir=stop_ranks/ref log.metrics=", STEP);
    ck_assert_msg(tu_run_shell(cmd, out, sizeof out) == 0, "%s", out);
    ck_assert(tu_checkpoints_equal("stop_ranks/run/last.safetensors", "stop_ranks/ref/last.safetensors"));
}
END_TEST

int main(void) {
    int skip = tu_leave_launch("test_images_stop_ranks");
    if (skip) return skip;
    Suite *s = suite_create("images_stop_ranks");
    TCase *tc = tcase_create("stop");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, stop_inside_an_accumulated_step_on_two_ranks);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 1);
}
