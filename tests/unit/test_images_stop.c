// test_images_stop.c - SIGTERM while the run waits for a batch that never comes: one image's read is held
// for ever (tests/stall_read.c, preloaded into amptrain), so a loader worker is stuck in it as on a hung
// file system. Whether the wait is the training thread's for the decode thread (data.decode=device: the
// CPU backend decodes with its reference decoder), one for the second micro-batch of a step
// (train.accum_steps 2), or the decode thread's own read of the sample that replaces one its decoder
// refused, the run ends within seconds and exits 0 as after any stop, and its checkpoint is
// the state after the steps it completed: bitwise an uninterrupted run's after as many steps, and a run
// resumed from it goes on bitwise as that run does (the interrupted step's samples are trained then).
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "tests/image_fixtures.h"
#include "tests/stall_run.h"
#include "tests/test_util.h"

// Every run: 48 images in batches of 4, two loader workers two batches ahead; the learning rate does not
// depend on the run's length (train.schedule step), so runs of other lengths match step for step.
#define DATA "stop_data"
#define RUN                                                                                                  \
    AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml backend.device=cpu data.source=imagefolder data.path=" DATA      \
                        " data.batch_size=4 data.prefetch=2 data.workers=2 train.epochs=2 "                  \
                        "train.schedule=step log.every=1 log.progress=never"

typedef struct StopCase {
    const char *dir;     // the case's folder
    const char *decode;  // data.decode
    int accum;           // train.accum_steps
    int step, micro;     // the stuck read: its micro-batch (0-based) of step `step` (0-based) of epoch 0
    int refused;         // 1: a sample of that micro-batch is cut, and the read of its replacement sticks
} StopCase;

static char out[1 << 16];

// Cuts the JPEG at path one byte into its entropy-coded data: its headers parse (the loader makes its job),
// its pixels do not decode (the decoder refuses it).
static void cut_after_scan_header(const char *path) {
    size_t len;
    unsigned char *jpeg = (unsigned char *)tu_read_file(path, &len);
    size_t keep = 0;
    for (size_t i = 2; i + 3 < len && !keep; i++)
        if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xDA)
            keep = i + 2 + ((size_t)jpeg[i + 2] << 8 | jpeg[i + 3]) + 1;
    ck_assert_msg(keep > 0 && keep < len, "%s: no scan header to cut after", path);
    fx_write(path, jpeg, keep);
    free(jpeg);
}

static void stop_while_stuck(const StopCase *c) {
    char image[128], env[1024], args[1024], cmd[4096], log[128], metrics[128], last[128], ref[128];
    // configs/tiny.yaml's train.seed gives the runs' sample order
    const StallData data =
        {.root = DATA, .per_class = 24, .world = 1, .batch = 4, .accum = c->accum, .seed = 42};
    stall_folder_make(&data);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", c->dir, c->dir);
    ck_assert_int_eq(system(cmd), 0);
    char refused[128] = "";
    if (c->refused) {
        // the replacement is first read by its own batch well after the loader's and the feed's reach
        stall_refused_and_successor(&data, c->step, c->micro, 6, refused, image, sizeof image);
        cut_after_scan_header(refused + 1);
    } else {
        stall_image(&data, 0, c->step, c->micro, image, sizeof image);
    }
    stall_env(image, "", env, sizeof env);
    snprintf(log, sizeof log, "%s/run.log", c->dir);
    snprintf(metrics, sizeof metrics, "%s/run/m.jsonl", c->dir);
    snprintf(last, sizeof last, "%s/run/last.safetensors", c->dir);
    snprintf(args, sizeof args, "data.decode=%s train.accum_steps=%d checkpoint.dir=%s/run log.metrics=%s",
             c->decode, c->accum, c->dir, metrics);
    snprintf(cmd, sizeof cmd, "env %s %s %s %s", env, AMPTRAIN_BIN, RUN, args);
    pid_t pid = stall_start(cmd, log);

    // After c->step steps it waits for ever. A step's record is written when the next step logs, and the
    // wait for a step's first micro-batch comes before the step ahead of it logs.
    const int written = c->micro > 0 ? c->step - 1 : c->step - 2;
    for (int i = 0; i < 1200 && tu_count_lines(metrics, "{\"step\":") < written; i++) usleep(50000);
    usleep(1500000);  // time for more steps, were the run not stuck
    int status;
    ck_assert_int_eq(waitpid(pid, &status, WNOHANG), 0);
    ck_assert_int_eq(tu_count_lines(metrics, "{\"step\":"), written);
    double start = clock_seconds();
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    status = stall_wait_exit(pid, 60);
    double took = clock_seconds() - start;
    char *said = tu_read_file(log, NULL);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d:\n%s", status, said);
    ck_assert_msg(took < 10, "the stop took %.1f s", took);
    char line[128];
    snprintf(line, sizeof line, "stopped by signal after step %d", c->step);
    ck_assert_msg(strstr(said, line), "no '%s' in:\n%s", line, said);
    snprintf(line, sizeof line, "step %d not taken", c->step + 1);
    ck_assert_msg((strstr(said, line) != NULL) == (c->micro > 0), "'%s' said or not, wrongly:\n%s", line,
                  said);
    if (c->refused)  // the stuck read was the decode thread's replacement of this file
        ck_assert_msg(strstr(said, "the device decoder refused it") && strstr(said, refused + 1),
                      "no refusal of %s in:\n%s", refused + 1, said);
    free(said);
    ck_assert_int_eq(tu_checkpoint_step(last), c->step);
    ck_assert_int_eq(tu_count_lines(metrics, "{\"step\":"), c->step);
    ck_assert_int_eq(tu_count_lines(metrics, "{\"summary\":true,\"outcome\":\"stopped\""), 1);

    // An uninterrupted run keeps its state after every step (checkpoint.keep).
    snprintf(cmd, sizeof cmd,
             "%s data.decode=%s train.accum_steps=%d train.steps=%d checkpoint.every=1 checkpoint.keep=10 "
             "checkpoint.dir=%s/ref log.metrics= 2>&1",
             RUN, c->decode, c->accum, c->step + 2, c->dir);
    ck_assert_msg(tu_run_cli(cmd, out, sizeof out) == 0, "%s", out);
    snprintf(ref, sizeof ref, "%s/ref/step-%08d.safetensors", c->dir, c->step);
    ck_assert_msg(tu_checkpoints_equal(last, ref), "%s differs from %s", last, ref);

    // Resumed (the read no longer stuck), the run trains the interrupted step's samples and goes on.
    snprintf(cmd, sizeof cmd, "%s %s train.steps=%d checkpoint.resume=auto 2>&1", RUN, args, c->step + 2);
    ck_assert_msg(tu_run_cli(cmd, out, sizeof out) == 0, "%s", out);
    snprintf(line, sizeof line, "at epoch 1, step %d", c->step);
    ck_assert_msg(strstr(out, line), "no '%s' in:\n%s", line, out);
    snprintf(ref, sizeof ref, "%s/ref/last.safetensors", c->dir);
    ck_assert_msg(tu_checkpoints_equal(last, ref), "%s differs from %s", last, ref);
}

// The training thread waits for the decode thread, which waits for the stuck loader between steps.
START_TEST(stop_while_the_decode_thread_waits) {
    stop_while_stuck(&(StopCase){.dir = "stop_device", .decode = "device", .accum = 1, .step = 3});
}
END_TEST

// The decode thread refuses a sample of step 3 and is stuck reading its replacement: the training thread
// waits for it, and the stop leaves it in its read.
START_TEST(stop_while_the_decode_thread_reads_a_replacement) {
    stop_while_stuck(
        &(StopCase){.dir = "stop_device_replace", .decode = "device", .accum = 1, .step = 3, .refused = 1});
}
END_TEST

// The second micro-batch of step 3 never comes: the step is not taken.
START_TEST(stop_inside_an_accumulated_step) {
    stop_while_stuck(&(StopCase){.dir = "stop_accum", .decode = "host", .accum = 2, .step = 2, .micro = 1});
}
END_TEST

// The same with the decode thread between the loader and the step.
START_TEST(stop_inside_an_accumulated_step_decoding) {
    stop_while_stuck(
        &(StopCase){.dir = "stop_device_accum", .decode = "device", .accum = 2, .step = 2, .micro = 1});
}
END_TEST

int main(void) {
    Suite *s = suite_create("images_stop");
    TCase *tc = tcase_create("stop");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, stop_while_the_decode_thread_waits);
    tcase_add_test(tc, stop_while_the_decode_thread_reads_a_replacement);
    tcase_add_test(tc, stop_inside_an_accumulated_step);
    tcase_add_test(tc, stop_inside_an_accumulated_step_decoding);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 1);
}
