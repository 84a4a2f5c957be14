// test_outputs.c - outputs fail before training, not after: a checkpoint.dir or log.metrics that cannot
// be created or written (under a file, a name too long) ends the run at start-up with exit 2 and leaves
// nothing behind; --dry-run checks the same paths (and the data and resume file) and leaves the disk as
// it was; temp files of a dead run are removed at start, a live process's are kept.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/test_util.h"

#define TINY AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml"
#define TINY_CPU TINY " backend.device=cpu data.prefetch=0 log.progress=never"
#define QUICK TINY_CPU " data.train_size=256 data.val_size=0"  // learnable data: sizes are for it alone

static char out[1 << 16];
static char args[8192];

// Runs `base` plus `extra`; asserts the exit code and that no step ran when it is not 0.
static void run_expect_from(const char *base, int code, const char *extra) {
    snprintf(args, sizeof args, "%s %s", base, extra);
    int rc = tu_run_cli(args, out, sizeof out);
    ck_assert_msg(rc == code, "exit %d, want %d, for %s:\n%s", rc, code, extra, out);
    if (code != 0) ck_assert_msg(strstr(out, "step 1/") == NULL, "trained before failing:\n%s", out);
}

static void run_expect(int code, const char *extra) { run_expect_from(QUICK, code, extra); }

static void assert_said(const char *text) {
    ck_assert_msg(strstr(out, text) != NULL, "want '%s' in:\n%s", text, out);
}

START_TEST(unwritable_checkpoint_dir_fails_at_start) {
    ck_assert_int_eq(system("rm -rf a_file out_a"), 0);
    tu_write_file("a_file", "not a folder\n");
    run_expect(2, "train.steps=2 checkpoint.dir=a_file/sub log.metrics=out_a/m.jsonl");
    assert_said("checkpoint.dir: cannot create the folder 'a_file/sub': Not a directory");
    ck_assert(!tu_file_exists("out_a"));
    // a metrics file that cannot be written: the checkpoint folder made for this run is removed again
    run_expect(2, "train.steps=2 checkpoint.dir=out_a/ck log.metrics=a_file/m.jsonl");
    assert_said("log.metrics: cannot create the folder 'a_file': Not a directory");
    ck_assert(!tu_file_exists("out_a"));
    run_expect(2, "train.steps=2 checkpoint.dir= log.metrics=.");
    assert_said("log.metrics: '.' is a folder, not a file");
}
END_TEST

// Runs with `key`=long/<length d's> (train.steps=1, the other output off); asserts the exit code and,
// for a refusal, `said` and "File name too long", and that nothing is left behind.
static void run_long_name(const char *key, int length, int code, const char *said) {
    char name[512], extra[1024];
    memset(name, 'd', (size_t)length);
    name[length] = '\0';
    const char *other = strcmp(key, "log.metrics") == 0 ? "checkpoint.dir" : "log.metrics";
    snprintf(extra, sizeof extra, "train.steps=1 %s= %s=long/%s", other, key, name);
    run_expect(code, extra);
    if (code != 0) {
        assert_said(said);
        assert_said("File name too long");
        ck_assert(!tu_file_exists("long"));
    }
    ck_assert_int_eq(system("rm -rf long"), 0);
}

// A 497-character folder name (more than a file name may hold) fails at start, not after the whole run.
START_TEST(name_too_long_fails_at_start) {
    ck_assert_int_eq(system("rm -rf long"), 0);
    run_long_name("checkpoint.dir", 497, 2, "checkpoint.dir: cannot create the folder 'long/ddd");
    // a metrics file name one character too long; one that just fits is fine
    run_long_name("log.metrics", 256, 2, "log.metrics: cannot write 'long/ddd");
    run_long_name("log.metrics", 255, 0, NULL);
}
END_TEST

// The pid of a process that has exited (and been reaped).
static long dead_pid(void) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) _exit(0);
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    return (long)pid;
}

START_TEST(dead_runs_temp_files_are_removed) {
    ck_assert_int_eq(system("rm -rf left && mkdir left"), 0);
    char dead[64], live[64];
    snprintf(dead, sizeof dead, "left/last.safetensors.tmp.%ld", dead_pid());
    snprintf(live, sizeof live, "left/last.safetensors.tmp.%ld", (long)getpid());
    tu_write_file(dead, "half a checkpoint");
    tu_write_file(live, "a checkpoint being written");
    tu_write_file("left/notes.tmp.1", "not ours");
    // a dry run reports it and removes nothing
    run_expect(0, "checkpoint.dir=left log.metrics= --dry-run");
    assert_said("temp file of a run that died");
    ck_assert(tu_file_exists(dead));
    run_expect(0, "train.steps=1 checkpoint.dir=left log.metrics=");
    assert_said("removed left/last.safetensors.tmp.");
    ck_assert(!tu_file_exists(dead));
    ck_assert(tu_file_exists(live));
    ck_assert(tu_file_exists("left/notes.tmp.1"));
    ck_assert(tu_file_exists("left/last.safetensors"));
}
END_TEST

START_TEST(dry_run_checks_paths_and_writes_nothing) {
    ck_assert_int_eq(system("rm -rf dry dry2 a_file"), 0);
    tu_write_file("a_file", "not a folder\n");
    run_expect(0, "checkpoint.dir=dry/a/b log.metrics=dry2/m.jsonl --dry-run");
    assert_said("parameters");
    ck_assert(!tu_file_exists("dry"));
    ck_assert(!tu_file_exists("dry2"));
    run_expect(2, "checkpoint.dir=a_file/x --dry-run");
    assert_said("checkpoint.dir: cannot create the folder 'a_file/x'");
    run_expect(2, "log.metrics=a_file/m.jsonl --dry-run");
    assert_said("log.metrics: cannot create the folder 'a_file'");
    run_expect(2, "checkpoint.resume=no_such.safetensors --dry-run");
    assert_said("no_such.safetensors: cannot open: No such file or directory");
    run_expect_from(TINY_CPU, 2, "data.source=cifar10 data.path=no_such_folder --dry-run");
    assert_said("no_such_folder");
    ck_assert_ptr_null(strstr(out, "parameters"));
}
END_TEST

static Suite *outputs_suite(void) {
    Suite *s = suite_create("outputs");
    TCase *tc = tcase_create("outputs");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, unwritable_checkpoint_dir_fails_at_start);
    tcase_add_test(tc, name_too_long_fails_at_start);
    tcase_add_test(tc, dead_runs_temp_files_are_removed);
    tcase_add_test(tc, dry_run_checks_paths_and_writes_nothing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(outputs_suite(), 1); }
