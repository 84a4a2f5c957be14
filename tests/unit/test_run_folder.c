// test_run_folder.c - a run folder belongs to one run: a fresh start does not replace an earlier run's
// checkpoint or metrics (exit 2, naming the file and the two ways on), checkpoint.resume auto continues
// it (or starts fresh when there is nothing to continue), checkpoint.overwrite starts over; a live run's
// lock refuses a second run and a dead run's lock is taken; outputs that are the config, the resume file
// or each other are refused; the folder keeps the merged config, the metrics file a header per start,
// and a partial last line is moved aside before appending. --dry-run refuses what a start refuses.
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"
#include "core/digest.h"
#include "tests/test_util.h"

#define TINY AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml"
// tiny.yaml's model on 256 learnable samples: 8 steps of 32 per epoch.
#define QUICK                                                                                                \
    TINY " backend.device=cpu data.train_size=256 data.val_size=0 data.prefetch=0 log.progress=never"

static char out[1 << 16];

// Runs QUICK plus `extra`, asserts the exit code, and for a refusal that no step ran.
static void run_expect(int code, const char *extra) {
    char args[4096];
    snprintf(args, sizeof args, QUICK " %s", extra);
    int rc = tu_run_cli(args, out, sizeof out);
    ck_assert_msg(rc == code, "exit %d, want %d, for %s:\n%s", rc, code, extra, out);
    if (code != 0) ck_assert_msg(strstr(out, "step 1/") == NULL, "trained before failing:\n%s", out);
}

static void assert_said(const char *text) {
    ck_assert_msg(strstr(out, text) != NULL, "want '%s' in:\n%s", text, out);
}

// The whole file as a string (malloc'd), "" when it does not exist.
static char *slurp(const char *path) {
    char *text = tu_read_file(path, NULL);
    return text ? text : strdup("");
}

// A fresh start into a folder with an earlier run's checkpoint, or onto a metrics file with records, is
// refused, by the run and by --dry-run, and both files stay as they were.
START_TEST(fresh_start_keeps_an_earlier_run) {
    ck_assert_int_eq(system("rm -rf rf rf_m.jsonl rf_new"), 0);
    run_expect(0, "train.steps=2 checkpoint.dir=rf log.metrics=rf/m.jsonl");
    char *metrics = slurp("rf/m.jsonl");
    for (int dry = 0; dry < 2; dry++) {
        run_expect(2, dry ? "train.steps=4 checkpoint.dir=rf log.metrics=rf/m.jsonl --dry-run"
                          : "train.steps=4 checkpoint.dir=rf log.metrics=rf/m.jsonl");
        assert_said(
            "checkpoint.dir: 'rf' holds last.safetensors (step 2) of an earlier run: continue it with "
            "checkpoint.resume=auto, or start over with checkpoint.overwrite=true");
    }
    ck_assert_int_eq(tu_checkpoint_step("rf/last.safetensors"), 2);
    char *again = slurp("rf/m.jsonl");
    ck_assert_str_eq(again, metrics);
    free(again);
    // the metrics file alone
    tu_write_file("rf_m.jsonl", "{\"step\":1,\"epoch\":1,\"loss\":2.3}\n");
    run_expect(2, "train.steps=2 checkpoint.dir= log.metrics=rf_m.jsonl");
    assert_said("log.metrics: 'rf_m.jsonl' holds 32 bytes of an earlier run's records: give this run a file "
                "of its own with log.metrics=PATH");
    ck_assert_int_eq(tu_count_lines("rf_m.jsonl", "{"), 1);
    // a new checkpoint.dir beside the earlier run's metrics file (a config's log.metrics left as it was)
    run_expect(2, "train.steps=2 checkpoint.dir=rf_new log.metrics=rf/m.jsonl");
    assert_said("log.metrics: 'rf/m.jsonl' holds");
    ck_assert_int_ne(access("rf_new", F_OK), 0);  // nothing made for the refused run
    again = slurp("rf/m.jsonl");
    ck_assert_str_eq(again, metrics);
    free(again);
    free(metrics);
}
END_TEST

// checkpoint.resume auto: a fresh start where there is nothing, then the run continued from its last
// checkpoint; a damaged last.safetensors is passed over for the newest valid other checkpoint.
START_TEST(resume_auto_continues_or_starts) {
    ck_assert_int_eq(system("rm -rf ra"), 0);
    run_expect(0, "train.steps=2 checkpoint.dir=ra log.metrics=ra/m.jsonl checkpoint.resume=auto");
    assert_said("checkpoint.resume auto: no checkpoint to resume in ra, so a fresh start");
    assert_said("summary: 2 steps");
    run_expect(0, "train.steps=4 checkpoint.dir=ra log.metrics=ra/m.jsonl checkpoint.resume=auto");
    assert_said("resumed from ra/last.safetensors at epoch 1, step 2");
    assert_said("summary: 4 steps");
    ck_assert_int_eq(tu_count_lines("ra/m.jsonl", "{\"header\":true,"), 2);
    ck_assert_int_eq(tu_count_lines("ra/m.jsonl", "{\"summary\":true,"), 2);
    // last.safetensors cut short; an older copy of step 4 is the newest valid one
    ck_assert_int_eq(system("cp ra/last.safetensors ra/step4.safetensors && touch -d '1 hour ago' "
                            "ra/step4.safetensors && truncate -s 1000 ra/last.safetensors"),
                     0);
    tu_write_file("ra/notes.safetensors", "not a checkpoint");
    run_expect(0, "train.steps=6 checkpoint.dir=ra log.metrics=ra/m.jsonl checkpoint.resume=auto");
    assert_said("checkpoint.resume auto passes over ra/last.safetensors: ");
    assert_said("resumed from ra/step4.safetensors at epoch 1, step 4");
    assert_said("summary: 6 steps");
    ck_assert_int_eq(tu_checkpoint_step("ra/last.safetensors"), 6);
}
END_TEST

// checkpoint.overwrite: the earlier run's checkpoints are removed and its metrics emptied.
START_TEST(overwrite_starts_over) {
    ck_assert_int_eq(system("rm -rf ow"), 0);
    run_expect(0, "train.steps=3 checkpoint.dir=ow log.metrics=ow/m.jsonl");
    ck_assert_int_eq(system("cp ow/last.safetensors ow/copy.safetensors"), 0);
    run_expect(0, "train.steps=1 checkpoint.dir=ow log.metrics=ow/m.jsonl checkpoint.overwrite=true");
    assert_said("checkpoint.overwrite: removed ow/last.safetensors (step 3) of the earlier run");
    assert_said("checkpoint.overwrite: removed ow/copy.safetensors (step 3) of the earlier run");
    ck_assert(!tu_file_exists("ow/copy.safetensors"));
    ck_assert_int_eq(tu_checkpoint_step("ow/last.safetensors"), 1);
    ck_assert_int_eq(tu_count_lines("ow/m.jsonl", "{\"header\":true,"), 1);
    ck_assert_int_eq(tu_count_lines("ow/m.jsonl", "{\"step\":"), 1);
}
END_TEST

// Starts a long run in `dir` in the background; returns its pid once it has logged a step.
static pid_t start_live_run(const char *dir, const char *metrics, const char *log) {
    char dir_arg[256], metrics_arg[256];
    snprintf(dir_arg, sizeof dir_arg, "checkpoint.dir=%s", dir);
    snprintf(metrics_arg, sizeof metrics_arg, "log.metrics=%s", metrics);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(log, "w", stdout)) _exit(126);
        execl(AMPTRAIN_BIN, AMPTRAIN_BIN, TINY, "backend.device=cpu", "data.prefetch=0", "log.every=1",
              "data.val_size=0", dir_arg, metrics_arg, "train.epochs=50", "log.progress=never", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 600 && tu_count_lines(metrics, "{\"step\":") == 0; i++) usleep(50000);
    ck_assert_int_gt(tu_count_lines(metrics, "{\"step\":"), 0);
    return pid;
}

static void stop_live_run(pid_t pid) {
    kill(pid, SIGTERM);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// A live run's folder refuses a second run, whatever else it is told (resume, overwrite, --dry-run), and
// so does its metrics file from another folder; the lock of a run that is gone is taken.
START_TEST(live_run_holds_its_folder) {
    ck_assert_int_eq(system("rm -rf live live2 stale"), 0);
    ck_assert_int_eq(mkdir("live", 0755), 0);
    pid_t pid = start_live_run("live", "live/m.jsonl", "live.log");
    char holder[64];
    snprintf(holder, sizeof holder, "is in use by another run (pid %ld on host ", (long)pid);
    const char *seconds[] = {"checkpoint.dir=live log.metrics=live/m.jsonl checkpoint.resume=auto",
                             "checkpoint.dir=live log.metrics=live2.jsonl checkpoint.overwrite=true",
                             "checkpoint.dir=live log.metrics= --dry-run"};
    for (size_t i = 0; i < sizeof seconds / sizeof seconds[0]; i++) {
        run_expect(2, seconds[i]);
        assert_said("checkpoint.dir: 'live' ");
        assert_said(holder);
    }
    run_expect(2, "checkpoint.dir=live2 log.metrics=live/m.jsonl checkpoint.overwrite=true");
    assert_said("log.metrics: 'live/m.jsonl' is being written by another run");
    ck_assert(!tu_file_exists("live2"));
    stop_live_run(pid);
    // the lock file of a run that died (kill -9) still names it, but nobody holds it any more
    ck_assert_int_eq(mkdir("stale", 0755), 0);
    tu_write_file("stale/.amptrain.lock", "999999 elsewhere\n");
    run_expect(0, "train.steps=1 checkpoint.dir=stale log.metrics=stale/m.jsonl checkpoint.resume=auto");
    assert_said("stale/.amptrain.lock: took over the lock of pid 999999 on host elsewhere");
    char *lock = slurp("stale/.amptrain.lock");
    ck_assert_str_eq(lock, "");  // a run that ends leaves it naming nobody
    free(lock);
}
END_TEST

// An output that is the config file, the resume file or another output is refused, and nothing changes.
START_TEST(colliding_paths_are_refused) {
    ck_assert_int_eq(system("rm -rf col && mkdir col && cp " TINY " col/my.yaml"), 0);
    char *config = slurp("col/my.yaml");
    char args[1024];
    snprintf(args, sizeof args,
             "col/my.yaml backend.device=cpu data.val_size=0 train.steps=1 checkpoint.dir=col/ck "
             "log.metrics=col/my.yaml");
    ck_assert_int_eq(tu_run_cli(args, out, sizeof out), 2);
    assert_said("log.metrics: 'col/my.yaml' is the same file as the config file 'col/my.yaml'");
    char *after = slurp("col/my.yaml");
    ck_assert_str_eq(after, config);
    free(after);
    free(config);
    run_expect(0, "train.steps=1 checkpoint.dir=col/ck log.metrics=col/m.jsonl");
    long size = 0;
    struct stat st;
    ck_assert_int_eq(stat("col/ck/last.safetensors", &st), 0);
    size = st.st_size;
    // the resume file, through another name of it
    run_expect(2, "train.steps=2 checkpoint.dir=col/ck log.metrics=col/./ck/last.safetensors "
                  "checkpoint.resume=col/ck/last.safetensors");
    assert_said("log.metrics: 'col/./ck/last.safetensors' is the same file as checkpoint.resume "
                "'col/ck/last.safetensors'");
    run_expect(2, "train.steps=2 checkpoint.dir=col/ck2 log.metrics=col/ck2/last.safetensors --dry-run");
    assert_said("log.metrics: 'col/ck2/last.safetensors' is the same file as checkpoint.dir's checkpoint");
    run_expect(
        2, "train.steps=2 checkpoint.dir=col/ck log.metrics=col/ck/.amptrain.lock checkpoint.resume=auto");
    assert_said("is the same file as checkpoint.dir's lock");
    ck_assert_int_eq(stat("col/ck/last.safetensors", &st), 0);
    ck_assert_int_eq(st.st_size, size);
    ck_assert_int_eq(tu_checkpoint_step("col/ck/last.safetensors"), 1);
}
END_TEST

// checkpoint.dir/config.yaml is --print-config's text of the same command, the header's config_hash its
// digest; started from that file again (auto), the run keeps it as it is.
START_TEST(folder_keeps_the_merged_config) {
    ck_assert_int_eq(system("rm -rf cfg"), 0);
    const char *extra = " train.steps=2 train.lr=0.05 checkpoint.dir=cfg log.metrics=cfg/m.jsonl";
    char args[1024];
    snprintf(args, sizeof args, QUICK "%s --print-config", extra);
    ck_assert_int_eq(tu_run_cli(args, out, sizeof out), 0);
    char *printed = strdup(out);
    run_expect(0, extra);
    char *kept = slurp("cfg/config.yaml");
    ck_assert_str_eq(kept, printed);
    Digest d;
    digest_init(&d);
    digest_add(&d, kept, strlen(kept));
    char hash[17], want[64];
    digest_hex(digest_end(&d), hash);
    snprintf(want, sizeof want, "\"config_hash\":\"%s\"", hash);
    char *metrics = slurp("cfg/m.jsonl");
    ck_assert_msg(strstr(metrics, want) != NULL, "want %s in:\n%s", want, metrics);
    free(metrics);
    ck_assert_int_eq(tu_run_cli("cfg/config.yaml train.steps=3 checkpoint.resume=auto", out, sizeof out), 0);
    assert_said("resumed from cfg/last.safetensors at epoch 1, step 2");
    char *again = slurp("cfg/config.yaml");
    ck_assert_str_eq(again, kept);
    free(again);
    free(kept);
    free(printed);
}
END_TEST

// A metrics file whose last line lost its end (kill -9, a full disk): the resumed run moves the piece to
// <metrics>.partial, says so, and every line of the file is a whole record.
START_TEST(partial_last_line_is_moved_aside) {
    ck_assert_int_eq(system("rm -rf part"), 0);
    run_expect(0, "train.steps=2 log.every=1 checkpoint.dir=part log.metrics=part/m.jsonl");
    FILE *f = fopen("part/m.jsonl", "a");
    fputs("{\"step\":3,\"epoch\":1,\"lo", f);
    fclose(f);
    run_expect(
        0, "train.steps=4 log.every=1 checkpoint.dir=part log.metrics=part/m.jsonl checkpoint.resume=auto");
    assert_said(
        "log.metrics: the last line of part/m.jsonl was cut short (23 bytes without a newline, a run that "
        "died while writing it): moved to part/m.jsonl.partial");
    char *partial = slurp("part/m.jsonl.partial");
    ck_assert_str_eq(partial, "{\"step\":3,\"epoch\":1,\"lo");
    free(partial);
    char *text = slurp("part/m.jsonl");
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++)
        ck_assert_msg(line[0] == '{' && line[strlen(line) - 1] == '}', "not a whole record: %s", line);
    free(text);
    ck_assert_int_eq(lines, 2 * 4);  // each run: the header, steps 1|3 and 2|4, the summary
}
END_TEST

static Suite *run_folder_suite(void) {
    Suite *s = suite_create("run_folder");
    TCase *tc = tcase_create("run_folder");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, fresh_start_keeps_an_earlier_run);
    tcase_add_test(tc, resume_auto_continues_or_starts);
    tcase_add_test(tc, overwrite_starts_over);
    tcase_add_test(tc, live_run_holds_its_folder);
    tcase_add_test(tc, colliding_paths_are_refused);
    tcase_add_test(tc, folder_keeps_the_merged_config);
    tcase_add_test(tc, partial_last_line_is_moved_aside);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(run_folder_suite(), 1); }
