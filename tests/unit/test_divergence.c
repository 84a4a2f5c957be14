// test_divergence.c - a run that diverges is an outcome, not a success: exit 4, the reason named on stderr
// and in the metrics summary, no non-finite checkpoint, last.safetensors the newest finite state and
// accepted by a resume; checkpoint.keep's history and best.safetensors of a healthy run.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors.h"
#include "tests/test_util.h"

#define TINY AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml"
// 8 steps of 32 per epoch, no evaluation unless asked, no bar.
#define QUICK                                                                                                \
    TINY " backend.device=cpu data.train_size=256 data.val_size=0 data.prefetch=0 log.progress=never"

static char out[1 << 16];

// The last line of a text file (its final record), into line.
static void last_line(const char *path, char *line, size_t cap) {
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s is missing", path);
    char buf[8192];
    line[0] = 0;
    while (fgets(buf, sizeof buf, f))
        if (buf[0] && buf[0] != '\n') snprintf(line, cap, "%s", buf);
    fclose(f);
}

// A checkpoint's metadata value as a number.
static long meta_long(const char *path, const char *key) {
    char err[1024];
    SafetensorsFile *f = st_open(path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    const char *v = st_meta(f, key);
    ck_assert_msg(v != NULL, "%s has no '%s'", path, key);
    long value = strtol(v, NULL, 10);
    st_close(f);
    return value;
}

// lr 50 poisons the BN statistics within ten steps (the forward moves them on skipped steps too). The run
// stops with 4 naming the tensor and the step, writes no checkpoint from that state, and the last one
// written (every 2 steps) resumes.
START_TEST(test_nonfinite_state_stops_with_4) {
    int rc = tu_run_cli(QUICK " train.lr=50 checkpoint.dir=nan checkpoint.every=2 log.metrics=nan/m.jsonl",
                        out, sizeof out);
    ck_assert_msg(rc == 4, "exit %d: %s", rc, out);
    const char *said = strstr(out, "the run diverged: ");
    ck_assert_msg(said != NULL, "%s", out);
    ck_assert_msg(strstr(said, "running_mean holds inf/NaN at step") ||
                      strstr(said, "running_var holds inf/NaN at step"),
                  "%s", said);
    ck_assert_ptr_nonnull(strstr(out, "not written at step"));
    char line[8192];
    last_line("nan/m.jsonl", line, sizeof line);
    ck_assert_msg(strstr(line, "\"summary\":true,\"outcome\":\"diverged\",\"reason\":\"layer") != NULL, "%s",
                  line);
    long kept = meta_long("nan/last.safetensors", "step");
    char expect[96];
    snprintf(expect, sizeof expect, "nan/last.safetensors holds step %ld", kept);
    ck_assert_msg(strstr(out, expect) != NULL, "%s", out);
    ck_assert_int_eq(kept % 2, 0);
    // The checkpoint was finite: the resume checks every tensor and accepts it; its weights, grown large
    // at lr 50, train on in fp32 at a small lr.
    rc = tu_run_cli(QUICK
                    " checkpoint.resume=nan/last.safetensors train.steps=12 amp.enabled=false train.lr=0.001 "
                    "checkpoint.dir=nan2 "
                    "log.metrics=nan2/m.jsonl",
                    out, sizeof out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_ptr_nonnull(strstr(out, "resumed from nan/last.safetensors"));
    last_line("nan2/m.jsonl", line, sizeof line);
    ck_assert_msg(strstr(line, "\"outcome\":\"done\"") != NULL && strstr(line, "\"reason\"") == NULL, "%s",
                  line);
}
END_TEST

// The loss scale backs off by half per skipped step from 65536: below 10000 after three.
START_TEST(test_scale_below_min_scale_stops_with_4) {
    int rc = tu_run_cli(
        QUICK " train.lr=50 amp.min_scale=1e4 log.every=1 checkpoint.dir=scale log.metrics=scale/m.jsonl",
        out, sizeof out);
    ck_assert_msg(rc == 4, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "the loss scale fell to 8192, below amp.min_scale 10000, by step") != NULL,
                  "%s", out);
    char line[8192];
    last_line("scale/m.jsonl", line, sizeof line);
    ck_assert_msg(strstr(line, "\"outcome\":\"diverged\",\"reason\":\"the loss scale fell to 8192") != NULL,
                  "%s", line);
}
END_TEST

// A static scale of 1e30 overflows every fp16 gradient: every step is skipped, the state stays finite.
// The row of skips is kept in the checkpoint, so the resumed run stops after the skips it has left.
START_TEST(test_skips_in_a_row_stop_and_survive_resume) {
#define SKIPPING QUICK " amp.dynamic=false amp.init_scale=1e30 log.every=1"
    int rc = tu_run_cli(SKIPPING " amp.max_consecutive_skips=5 checkpoint.dir=skip log.metrics=skip/m.jsonl",
                        out, sizeof out);
    ck_assert_msg(rc == 4, "exit %d: %s", rc, out);
    ck_assert_msg(
        strstr(out, "5 steps in a row skipped for inf/NaN gradients by step 5 (amp.max_consecutive_skips 5)"),
        "%s", out);
    long step = meta_long("skip/last.safetensors", "step");
    ck_assert_int_eq(meta_long("skip/last.safetensors", "skipped_run"), step);
    rc = tu_run_cli(
        SKIPPING " amp.max_consecutive_skips=8 checkpoint.resume=skip/last.safetensors checkpoint.dir=skip2 "
                 "log.metrics=skip2/m.jsonl",
        out, sizeof out);
    ck_assert_msg(rc == 4, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "8 steps in a row skipped for inf/NaN gradients by step 8 "), "%s", out);
    // off: the run ends its steps and exits 0
    rc = tu_run_cli(SKIPPING " amp.max_consecutive_skips=0 train.steps=6 checkpoint.dir= log.metrics=", out,
                    sizeof out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_ptr_nonnull(strstr(out, "6 steps skipped"));
#undef SKIPPING
}
END_TEST

// checkpoint.keep 2 with a checkpoint every 2 of 8 steps: last and the step files of the newest two; an
// evaluation after the epoch writes best.safetensors at its step.
START_TEST(test_keep_and_best) {
    int rc = tu_run_cli(QUICK " data.val_size=64 train.epochs=1 checkpoint.every=2 checkpoint.keep=2 "
                              "checkpoint.dir=keep log.metrics=keep/m.jsonl",
                        out, sizeof out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert(!tu_file_exists("keep/step-00000002.safetensors"));
    ck_assert(!tu_file_exists("keep/step-00000004.safetensors"));
    ck_assert(tu_file_exists("keep/step-00000006.safetensors"));
    ck_assert(tu_file_exists("keep/step-00000008.safetensors"));
    ck_assert_int_eq(meta_long("keep/step-00000006.safetensors", "step"), 6);
    ck_assert_int_eq(meta_long("keep/last.safetensors", "step"), 8);
    ck_assert_int_eq(meta_long("keep/best.safetensors", "step"), 8);
    char line[8192];
    last_line("keep/m.jsonl", line, sizeof line);
    ck_assert_msg(strstr(line, "\"summary\":true,\"outcome\":\"done\",\"steps\":8") != NULL, "%s", line);
    // keep 1 (the default): last alone
    rc = tu_run_cli(QUICK " train.epochs=1 checkpoint.every=2 checkpoint.dir=one log.metrics=", out,
                    sizeof out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert(tu_file_exists("one/last.safetensors"));
    ck_assert(!tu_file_exists("one/step-00000008.safetensors"));
    ck_assert(!tu_file_exists("one/best.safetensors"));
}
END_TEST

int main(void) {
    Suite *s = suite_create("divergence");
    TCase *tc = tcase_create("divergence");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_nonfinite_state_stops_with_4);
    tcase_add_test(tc, test_scale_below_min_scale_stops_with_4);
    tcase_add_test(tc, test_skips_in_a_row_stop_and_survive_resume);
    tcase_add_test(tc, test_keep_and_best);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 1);
}
