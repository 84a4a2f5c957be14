// test_cli.c - the amptrain command line as a user meets it: help, version, exit codes, config errors that
// write nothing, --print-config round trip, --dry-run facts, a short run's outputs, SIGTERM.
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/test_util.h"

#define TINY AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml"
#define SEED AMPTRAIN_SOURCE_DIR "/configs/seed_resnext50.yaml"
// Overrides that keep a CLI run small and quiet.
#define QUICK "backend.device=cpu data.train_size=256 data.val_size=64 data.prefetch=0 log.progress=never"

static char out[1 << 16];

START_TEST(test_help_and_version) {
    ck_assert_int_eq(tu_run_cli("--help", out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: amptrain"));
    ck_assert_ptr_nonnull(strstr(out, "--dry-run"));
    ck_assert_ptr_nonnull(strstr(out, "exit codes"));
    ck_assert_int_eq(tu_run_cli("--version", out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "amptrain " AMPTRAIN_VERSION));
}
END_TEST

START_TEST(test_usage_errors_exit_2) {
    ck_assert_int_eq(tu_run_cli("", out, sizeof out), 2);
    ck_assert_ptr_nonnull(strstr(out, "no CONFIG given"));
    ck_assert_int_eq(tu_run_cli("--frobnicate " TINY, out, sizeof out), 2);
    ck_assert_ptr_nonnull(strstr(out, "unknown option '--frobnicate'"));
    ck_assert_int_eq(tu_run_cli("no_such.yaml", out, sizeof out), 2);
    ck_assert_ptr_nonnull(strstr(out, "no_such.yaml: cannot read"));
    ck_assert_int_eq(tu_run_cli(TINY " --bench-steps zero", out, sizeof out), 2);
}
END_TEST

// A config error names file, line and key, exits 2, and creates none of the run's outputs.
START_TEST(test_config_error_writes_nothing) {
    tu_write_file("bad.yaml", "log:\n  metrics: bad_run/metrics.jsonl\ncheckpoint:\n  dir: bad_run\n"
                              "train:\n  lr: 0.1\n  momentun: 0.9\n");
    ck_assert_int_eq(tu_run_cli("bad.yaml", out, sizeof out), 2);
    ck_assert_msg(strstr(out, "bad.yaml:7: train.momentun: unknown key (did you mean train.momentum?)") !=
                      NULL,
                  "got: %s", out);
    ck_assert(!tu_file_exists("bad_run"));
    ck_assert_int_eq(tu_run_cli(TINY " train.lr=-1 log.metrics=bad_run2/m.jsonl", out, sizeof out), 2);
    ck_assert_ptr_nonnull(strstr(out, "command line: train.lr"));
    ck_assert(!tu_file_exists("bad_run2"));
}
END_TEST

// A descriptor limit that leaves too few for the loader threads and the final writes is refused at start-up
// (exit 2, nothing written), not after the run trained; the same run with room to spare starts.
START_TEST(test_descriptor_limit_refused_at_start) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "ulimit -n 16 && %s " TINY " " QUICK " train.steps=1 data.workers=8 "
             "checkpoint.dir=fd_run log.metrics=fd_run/m.jsonl 2>&1; echo \"rc=$?\"",
             AMPTRAIN_BIN);
    tu_run_shell(cmd, out, sizeof out);
    ck_assert_msg(strstr(out, "file descriptors: this run holds") && strstr(out, "rc=2"), "%s", out);
    ck_assert(!tu_file_exists("fd_run"));
    snprintf(cmd, sizeof cmd,
             "ulimit -n 64 && %s " TINY " " QUICK " train.steps=1 data.workers=8 "
             "checkpoint.dir=fd_run log.metrics=fd_run/m.jsonl 2>&1; echo \"rc=$?\"",
             AMPTRAIN_BIN);
    tu_run_shell(cmd, out, sizeof out);
    ck_assert_msg(strstr(out, "rc=0"), "%s", out);
}
END_TEST

// An epoch that would end by handing a rank one image (the tiny model's last stage is 1x1) is refused
// before anything is written, naming data.drop_last; with it the same run trains its full steps. A batch
// of one is refused as such.
START_TEST(test_single_image_last_step_refused_at_start) {
    ck_assert_int_eq(tu_run_cli(TINY " data.train_size=65 data.val_size=0 checkpoint.dir= "
                                     "log.metrics=split_run/m.jsonl",
                                out, sizeof out),
                     2);
    ck_assert_ptr_nonnull(strstr(out, "gives rank 0 one image"));
    ck_assert_ptr_nonnull(strstr(out, "data.drop_last: true"));
    ck_assert(!tu_file_exists("split_run"));
    ck_assert_int_eq(tu_run_cli(TINY " data.train_size=65 data.val_size=0 checkpoint.dir= log.metrics= "
                                     "train.epochs=1 log.progress=never data.drop_last=true",
                                out, sizeof out),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "summary: 2 steps"));
    // a run that stops before the epoch's last step never meets it
    ck_assert_int_eq(tu_run_cli(TINY " data.train_size=65 data.val_size=0 checkpoint.dir= log.metrics= "
                                     "train.steps=2 log.progress=never",
                                out, sizeof out),
                     0);
    // one image per step can never train a 1x1 batch norm: drop_last would not help, so it is not offered
    ck_assert_int_eq(tu_run_cli(TINY " data.batch_size=1 checkpoint.dir= log.metrics=", out, sizeof out), 2);
    ck_assert_ptr_nonnull(strstr(out, "data.batch_size 1"));
    ck_assert_ptr_null(strstr(out, "drop_last"));
}
END_TEST

START_TEST(test_print_config_round_trips) {
    ck_assert_int_eq(tu_run_cli(TINY " --print-config train.lr=0.05 model.layers=[2,1,1,1]", out, sizeof out),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "lr: 0.05"));
    tu_write_file("printed.yaml", out);
    static char again[1 << 16];
    ck_assert_int_eq(tu_run_cli("printed.yaml --print-config", again, sizeof again), 0);
    // Identical but for the first line, which names the file it came from.
    ck_assert_str_eq(strchr(out, '\n'), strchr(again, '\n'));
}
END_TEST

START_TEST(test_dry_run_describes_resnext50) {
    ck_assert_int_eq(tu_run_cli(SEED " --dry-run", out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "parameters   25028904"));
    ck_assert_ptr_nonnull(strstr(out, "multiply-adds per image  4.230 G"));
    ck_assert_ptr_nonnull(strstr(out, "activations"));
    ck_assert(!tu_file_exists("runs"));  // a dry run writes nothing
}
END_TEST

// A short run: plain progress lines (not a terminal), the metrics file, the summary, the checkpoint.
START_TEST(test_short_run_outputs) {
    ck_assert_int_eq(system("rm -rf short"), 0);
    ck_assert_int_eq(tu_run_cli(TINY " " QUICK " train.steps=4 log.every=2 log.metrics=short/m.jsonl "
                                     "checkpoint.dir=short",
                                out, sizeof out),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "step 2/4"));
    ck_assert_ptr_nonnull(strstr(out, "summary: 4 steps"));
    ck_assert_ptr_nonnull(strstr(out, "images/s"));
    ck_assert_ptr_nonnull(strstr(out, "peak cpu memory"));
    ck_assert_ptr_nonnull(strstr(out, "steps skipped"));
    // the CPU's start-up is the model build and the first step: no cuDNN search, no CUDA graph
    ck_assert_ptr_nonnull(strstr(out, "s (model build "));
    ck_assert_ptr_nonnull(strstr(out, ", buffers and first step "));
    ck_assert_ptr_null(strstr(out, "kernel choices"));
    ck_assert_ptr_null(strstr(out, "cuDNN"));
    ck_assert_ptr_null(strstr(out, "CUDA graph"));
    ck_assert(tu_file_exists("short/last.safetensors"));
    FILE *f = fopen("short/m.jsonl", "r");
    ck_assert_ptr_nonnull(f);
    char line[1024];
    int records = 0, summaries = 0, headers = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "{\"header\":true,", 15)) {  // the first record
            ck_assert_int_eq(records + summaries, 0);
            headers++;
            continue;
        }
        if (!strncmp(line, "{\"summary\":true,", 16)) {
            // the last record: what launch/compare-amp reads
            ck_assert_ptr_nonnull(strstr(line, "\"steps\":4,"));
            ck_assert_ptr_nonnull(strstr(line, "\"backend\":\"cpu\""));
            ck_assert_ptr_nonnull(strstr(line, "\"final_loss\":"));
            // start-up and its parts: the model build and the kernel choices lie within it
            const char *st = strstr(line, "\"startup_s\":"), *bu = strstr(line, "\"startup_build_s\":"),
                       *ch = strstr(line, "\"startup_choices_s\":");
            ck_assert(st && bu && ch);
            const double startup = atof(st + 12), build = atof(bu + 18), choices = atof(ch + 20);
            ck_assert_msg(startup > 0 && build > 0 && choices >= 0 && build + choices <= startup,
                          "start-up %g s, build %g s, choices %g s", startup, build, choices);
            // the CPU times no kernels
            ck_assert_ptr_nonnull(strstr(line, "\"startup_search_s\":0,"));
            // the trainer's whole time: start-up, then the loop after it (the loop began inside start-up)
            const char *tot = strstr(line, "\"total_s\":"), *sec = strstr(line, "\"seconds\":");
            ck_assert(tot && sec);
            const double total = atof(tot + 10), seconds = atof(sec + 10);
            ck_assert_msg(total >= startup && total >= seconds && total <= startup + seconds + 1e-3,
                          "total %g s, start-up %g s, loop %g s", total, startup, seconds);
            summaries++;
            continue;
        }
        ck_assert_int_eq(summaries, 0);
        ck_assert_ptr_nonnull(strstr(line, "\"loss\":"));
        ck_assert_ptr_nonnull(strstr(line, "\"scale\":"));
        ck_assert_ptr_nonnull(strstr(line, "\"images_per_s\":"));
        records++;
    }
    fclose(f);
    ck_assert_int_eq(records, 3);  // steps 1, 2, 4
    ck_assert_int_eq(summaries, 1);
    ck_assert_int_eq(headers, 1);
}
END_TEST

// Epochs count from 1 alike in step lines, evaluation lines, the metrics file and the summary: 8 steps per
// epoch (256 samples / 32), so step 8 is epoch 1's last, evaluation 1 follows it, step 9 opens epoch 2.
START_TEST(test_epochs_count_alike_everywhere) {
    ck_assert_int_eq(system("rm -rf epochs"), 0);
    ck_assert_int_eq(tu_run_cli(TINY " " QUICK " train.epochs=2 log.every=1 log.metrics=epochs/m.jsonl "
                                     "checkpoint.dir=",
                                out, sizeof out),
                     0);
    static const char *const lines[] = {"step 1/16  epoch 1 ",        "step 8/16  epoch 1 ",
                                        "eval  epoch 1  step 8 ",     "step 9/16  epoch 2 ",
                                        "step 16/16  epoch 2 ",       "eval  epoch 2  step 16 ",
                                        "summary: 16 steps, epoch 2,"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        ck_assert_msg(strstr(out, lines[i]) != NULL, "no '%s' in:\n%s", lines[i], out);
    FILE *f = fopen("epochs/m.jsonl", "r");
    ck_assert_ptr_nonnull(f);
    char line[1024];
    int checked = 0;
    int summaries = 0;
    while (fgets(line, sizeof line, f)) {
        long step = -1;
        int epoch = -1;
        if (strncmp(line, "{\"header\":true,", 15) == 0) continue;
        if (strncmp(line, "{\"summary\":true,", 16) == 0) {  // the last record: the run's last epoch
            ck_assert_msg(strstr(line, "\"epoch\":2,") != NULL, "%s", line);
            summaries++;
            continue;
        }
        const char *s = strstr(line, "\"step\":"), *e = strstr(line, "\"epoch\":");
        ck_assert_msg(s && e && sscanf(s, "\"step\":%ld", &step) == 1 &&
                          sscanf(e, "\"epoch\":%d", &epoch) == 1,
                      "%s", line);
        ck_assert_msg(epoch == (step - 1) / 8 + 1, "step %ld in epoch %d: %s", step, epoch, line);
        checked++;
    }
    fclose(f);
    ck_assert_int_eq(checked, 16 + 2);  // 16 step records, 2 evaluations
    ck_assert_int_eq(summaries, 1);
}
END_TEST

// SIGTERM: the step finishes, a checkpoint is written, exit 0.
START_TEST(test_sigterm_checkpoints_and_exits_0) {
    // Outputs of an earlier run of this test would make the wait below end too early.
    ck_assert_int_eq(system("rm -rf sig sigterm.log"), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen("sigterm.log", "w", stdout)) _exit(126);
        execl(AMPTRAIN_BIN, AMPTRAIN_BIN, TINY, "backend.device=cpu", "data.prefetch=0", "log.every=1",
              "log.metrics=sig/m.jsonl", "checkpoint.dir=sig", "train.epochs=50", "log.progress=never",
              (char *)NULL);
        _exit(127);
    }
    // Wait until it has trained a step (the metrics file has a line after its header), then ask it to stop.
    for (int i = 0; i < 600; i++) {
        FILE *m = fopen("sig/m.jsonl", "r");
        char line[1024];
        int lines = 0;
        while (m && fgets(line, sizeof line, m)) lines++;
        if (m) fclose(m);
        if (lines >= 2) break;
        usleep(50000);
    }
    kill(pid, SIGTERM);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert(tu_file_exists("sig/last.safetensors"));
    FILE *f = fopen("sigterm.log", "r");
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    fclose(f);
    ck_assert_ptr_nonnull(strstr(out, "stopped by signal"));
}
END_TEST

// Lines of a text file (0 when it does not exist).
static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0;
    for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
    fclose(f);
    return n;
}

// A stop during an evaluation (200000 validation samples: minutes on the CPU) ends it at its next batch:
// the run writes the checkpoint of its last step and exits 0 within seconds, the cut-short evaluation
// noted and not recorded.
START_TEST(test_sigterm_during_evaluation_stops_it) {
    ck_assert_int_eq(system("rm -rf sigeval sigeval.log"), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen("sigeval.log", "w", stdout)) _exit(126);
        execl(AMPTRAIN_BIN, AMPTRAIN_BIN, TINY, "backend.device=cpu", "data.prefetch=0", "log.every=1",
              "data.train_size=64", "data.val_size=200000", "log.metrics=sigeval/m.jsonl",
              "checkpoint.dir=sigeval", "log.progress=never", (char *)NULL);
        _exit(127);
    }
    // Both steps of the epoch are recorded before its evaluation starts.
    for (int i = 0; i < 600 && count_lines("sigeval/m.jsonl") < 2; i++) usleep(50000);
    usleep(300000);
    kill(pid, SIGTERM);
    time_t start = time(NULL);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(time(NULL) - start <= 10, "the stop took %ld s", (long)(time(NULL) - start));
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert_int_eq(tu_run_shell("cat sigeval.log", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "evaluation at step 2 stopped by signal after ") &&
                      strstr(out, "of 200000 samples"),
                  "%s", out);
    ck_assert_msg(strstr(out, "checkpoint written: sigeval/last.safetensors (step 2)"), "%s", out);
    ck_assert_int_eq(tu_run_shell("grep -c '\"eval\":true' sigeval/m.jsonl; true", out, sizeof out), 0);
    ck_assert_str_eq(out, "0\n");
    ck_assert_int_eq(tu_run_shell("tail -n 1 sigeval/m.jsonl", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"outcome\":\"stopped\""), "%s", out);
}
END_TEST

// A closed stdout (| head -1) makes every later line fail with EPIPE: the run still trains its steps,
// writes its checkpoint and metrics summary, and exits 0 (SIGPIPE would have killed it with 141).
START_TEST(test_closed_stdout_keeps_the_run) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "(%s " TINY " " QUICK " train.epochs=1 log.every=1 checkpoint.dir=pipe "
             "log.metrics=pipe/m.jsonl 2>pipe.err; echo $? > pipe.rc) | head -1",
             AMPTRAIN_BIN);
    ck_assert_int_eq(tu_run_shell(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "amptrain ") == out && strchr(out, '\n') == out + strlen(out) - 1, "%s", out);
    FILE *f = fopen("pipe.rc", "r");
    ck_assert_ptr_nonnull(f);
    int rc = -1;
    ck_assert_int_eq(fscanf(f, "%d", &rc), 1);
    fclose(f);
    ck_assert_int_eq(rc, 0);
    ck_assert(tu_file_exists("pipe/last.safetensors"));
    ck_assert_int_eq(tu_run_shell("tail -n 1 pipe/m.jsonl", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"summary\":true,\"outcome\":\"done\",\"steps\":8,"), "%s", out);
}
END_TEST

Suite *cli_suite(void) {
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_help_and_version);
    tcase_add_test(tc, test_usage_errors_exit_2);
    tcase_add_test(tc, test_config_error_writes_nothing);
    tcase_add_test(tc, test_descriptor_limit_refused_at_start);
    tcase_add_test(tc, test_print_config_round_trips);
    tcase_add_test(tc, test_single_image_last_step_refused_at_start);
    tcase_add_test(tc, test_dry_run_describes_resnext50);
    tcase_add_test(tc, test_short_run_outputs);
    tcase_add_test(tc, test_epochs_count_alike_everywhere);
    tcase_add_test(tc, test_sigterm_checkpoints_and_exits_0);
    tcase_add_test(tc, test_closed_stdout_keeps_the_run);
    tcase_add_test(tc, test_sigterm_during_evaluation_stops_it);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(cli_suite(), 1); }
