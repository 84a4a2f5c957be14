// test_startup.c - one agreed start-up: two ranks started with different configs, or one of them
// unable to start (its config, its data, its resume file, the outputs, the GPU), all end at once with
// one line naming the key or the failing rank, exit 2 (1 for the GPU), before any step; so do ranks
// whose checkpoint.resume auto finds different checkpoints. Before this,
// another train.lr trained inconsistent replicas, another model.planes crashed in the allreduce, and a
// rank that failed alone left the others waiting for dist.timeout_s.
//
// The jobs are MPMD launches, `mpiexec -np 1 amptrain A : -np 1 amptrain B`, each rank in a folder of
// its own (--wdir), so relative data and resume paths can name a file one rank has and the other lacks.
// Like test_fault_trainer.c, a job under test cannot run inside the job ctest started: the 1-rank launch
// forgets its launcher's environment and runs them; the 2- and 3-rank launches exit 77 (skipped).
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "tests/test_util.h"

#define TINY AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml"
// A large dist.timeout_s: a rank left waiting would hit the `timeout` of the job (exit 124), never a
// quick exit 2.
#define RUN_OPTIONS                                                                                          \
    "backend.device=cpu data.prefetch=0 log.progress=never log.metrics= checkpoint.dir= "                    \
    "train.steps=2 dist.timeout_s=600"
#define QUICK RUN_OPTIONS " data.train_size=256 data.val_size=0"  // learnable data: sizes are for it alone
#define JOB_TIMEOUT_S 120

static char out[1 << 16];

// Runs rank 0 with `a` and rank 1 with `b` (extra arguments after tiny.yaml and `options`), each in its
// own folder under startup/; returns the job's exit status, output in `out`.
static int run_pair_with(const char *options, const char *a, const char *b) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "timeout %d mpiexec --allow-run-as-root --oversubscribe "
             "-np 1 --wdir startup/r0 %s %s %s %s : -np 1 --wdir startup/r1 %s %s %s %s 2>&1",
             JOB_TIMEOUT_S, AMPTRAIN_BIN, TINY, options, a, AMPTRAIN_BIN, TINY, options, b);
    return tu_run_shell(cmd, out, sizeof out);
}

static int run_pair(const char *a, const char *b) { return run_pair_with(QUICK, a, b); }

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *s = strstr(text, needle); s; s = strstr(s + 1, needle)) n++;
    return n;
}

// The job ended with `code` before any step, and said `expect` exactly once.
static void assert_refused(int rc, int code, const char *expect) {
    ck_assert_msg(rc == code, "exit %d, want %d (124: it waited for the timeout):\n%s", rc, code, out);
    ck_assert_msg(count(out, expect) == 1, "want '%s' once in:\n%s", expect, out);
    ck_assert_msg(strstr(out, "step 1/") == NULL, "trained before refusing:\n%s", out);
    ck_assert_msg(strstr(out, "waited") == NULL, "a rank waited for the watchdog:\n%s", out);
}

typedef struct {
    const char *a, *b;  // rank 0's and rank 1's extra arguments
    const char *expect;
} Mismatch;

static const Mismatch mismatches[] = {
    {"train.lr=0.1", "train.lr=0.05",
     "the configs differ between ranks: train.lr is 0.05 on rank 1 but 0.1 on rank 0"},
    {"", "data.batch_size=16", "data.batch_size is 16 on rank 1 but 32 on rank 0"},
    {"", "train.seed=7", "train.seed is 7 on rank 1 but 42 on rank 0"},
    {"", "data.source=synthetic", "data.source is synthetic on rank 1 but learnable on rank 0"},
    {"", "model.planes=8", "model.planes is 8 on rank 1 but 16 on rank 0"},
    {"", "train.steps=3", "train.steps is 3 on rank 1 but 2 on rank 0"},
    {"", "model.layers=[2,1,1,1]", "model.layers is [2, 1, 1, 1] on rank 1 but [1, 1, 1, 1] on rank 0"},
    {"", "amp.enabled=false", "amp.enabled is false on rank 1 but true on rank 0"},
    {"", "model.num_classes=12", "model.num_classes is 12 on rank 1 but 10 on rank 0"},
    {"", "train.accum_steps=2", "train.accum_steps is 2 on rank 1 but 1 on rank 0"},
    // one rank's config is invalid: its own message, from the rank that has it
    {"", "train.lr=-1", "rank 1 of 2: command line: train.lr: must be > 0 (got -1)"},
    {"train.momentun=0.9", "", "rank 0 of 2: command line: train.momentun: unknown key"},
};

static void make_folders(void) {
    ck_assert_int_eq(system("rm -rf startup && mkdir -p startup/r0 startup/r1"), 0);
}

START_TEST(different_configs_are_refused) {
    make_folders();
    const Mismatch *m = &mismatches[_i];
    assert_refused(run_pair(m->a, m->b), 2, m->expect);
}
END_TEST

// Not vacuous: the same configs in the same MPMD form train.
START_TEST(same_configs_train) {
    make_folders();
    int rc = run_pair("", "");
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "summary: 2 steps"), "%s", out);
}
END_TEST

// A CIFAR-10 folder of zero records (6 x 64 of them): what cifar10.c reads, small.
static void make_cifar(const char *dir) {
    const char *names[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                           "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
    static char zeros[64 * 3073];
    for (int i = 0; i < 6; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fwrite(zeros, 1, sizeof zeros, f), sizeof zeros);
        fclose(f);
    }
}

START_TEST(one_rank_without_its_data) {
    make_folders();
    ck_assert_int_eq(system("mkdir -p startup/r0/cifar startup/r1/cifar"), 0);
    make_cifar("startup/r0/cifar");
    const char *args = "data.source=cifar10 data.path=cifar data.augment=false";
    assert_refused(run_pair_with(RUN_OPTIONS, args, args), 2,
                   "rank 1 of 2: cifar10: cannot open cifar/data_batch_1.bin");
}
END_TEST

// Writes startup/<folder>/ck.safetensors from a single-process run of `steps` steps.
static void make_checkpoint(const char *folder, int steps) {
    char args[1024];
    snprintf(args, sizeof args, "%s " QUICK " train.steps=%d checkpoint.dir=startup/%s/ck_run", TINY, steps,
             folder);
    ck_assert_int_eq(tu_run_cli(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "mv startup/%s/ck_run/last.safetensors startup/%s/ck.safetensors", folder,
             folder);
    ck_assert_int_eq(system(args), 0);
}

START_TEST(one_rank_without_its_resume_file) {
    make_folders();
    make_checkpoint("r0", 1);
    const char *args = "checkpoint.resume=ck.safetensors train.steps=3";
    assert_refused(run_pair(args, args), 2,
                   "rank 1 of 2: ck.safetensors: cannot open: No such file or directory");
}
END_TEST

START_TEST(different_resume_files_are_refused) {
    make_folders();
    make_checkpoint("r0", 1);
    make_checkpoint("r1", 2);
    const char *args = "checkpoint.resume=ck.safetensors train.steps=3";
    assert_refused(run_pair(args, args), 2,
                   "the resumed checkpoints differ between ranks: step is 2 on rank 1 but 1 on rank 0");
}
END_TEST

// checkpoint.resume auto: every rank looks in its own checkpoint.dir, and they must find the same file;
// when they do, the job resumes from it.
START_TEST(resume_auto_must_find_the_same_checkpoint) {
    make_folders();
    char args[1024];
    snprintf(args, sizeof args, "%s " QUICK " train.steps=2 checkpoint.dir=startup/r0/ck_run", TINY);
    ck_assert_int_eq(tu_run_cli(args, out, sizeof out), 0);
    const char *resume = "checkpoint.dir=ck_run checkpoint.resume=auto train.steps=3";
    assert_refused(
        run_pair(resume, resume), 2,
        "the checkpoints checkpoint.resume auto chose differ between ranks: checkpoint is none (a fresh "
        "start) on rank 1 but ck_run/last.safetensors on rank 0");
    ck_assert_int_eq(system("cp -r startup/r0/ck_run startup/r1/ck_run"), 0);
    int rc = run_pair(resume, resume);
    // 64 samples done, one step of 2 ranks x 32: the position maps exactly
    ck_assert_msg(
        rc == 0 && strstr(out, "resumed from ck_run/last.safetensors at epoch 1, step 2") &&
            strstr(out, "this run has 2 x 32 x 1: the sample order continues exactly, with 64 samples per "
                        "step instead of 32") &&
            strstr(out, "summary: 3 steps"),
        "exit %d:\n%s", rc, out);
}
END_TEST

START_TEST(unwritable_output_ends_every_rank) {
    make_folders();
    tu_write_file("startup/r0/a_file", "not a folder\n");
    const char *args = "checkpoint.dir=a_file/ck";
    assert_refused(run_pair(args, args), 2,
                   "rank 0 of 2: checkpoint.dir: cannot create the folder 'a_file/ck'");
}
END_TEST

// backend.device=cuda where no GPU is visible: every rank fails to start, exit 1, one line.
START_TEST(no_gpu_ends_every_rank) {
    if (cuda_visible_device_count() > 0) {  // with a GPU this job would train: nothing to refuse
        printf("no_gpu_ends_every_rank: a GPU is visible, so not tested here\n");
        return;
    }
    make_folders();
    const char *args = "backend.device=cuda";
    assert_refused(run_pair(args, args), 1,
                   "rank 0 of 2: backend.device is cuda but the CUDA backend is unavailable");
    ck_assert_msg(strstr(out, "[2 of 2 ranks failed to start; the lowest is shown]"), "%s", out);
}
END_TEST

// A rank started in another mode (a flag of its own) meets the others in the first, fixed-size exchange:
// exit 2 everywhere at once, naming the rank and both modes (--eval among them). Before, --version or
// --print-config on one rank left the others waiting for it forever, --dry-run or --bench for
// dist.timeout_s or in MPI_ERR_TRUNCATE.
static const Mismatch modes[] = {
    {"--version", "",
     "the command lines differ between ranks: the mode is training on rank 1 but --version on rank 0"},
    {"", "--print-config",
     "the command lines differ between ranks: the mode is --print-config on rank 1 but training on rank 0"},
    {"", "--dry-run",
     "the command lines differ between ranks: the mode is --dry-run on rank 1 but training on rank 0"},
    {"--eval", "",
     "the command lines differ between ranks: the mode is training on rank 1 but --eval on rank 0"},
    {"--eval", "--dry-run", "the mode is --dry-run on rank 1 but --eval on rank 0"},
    {"", "--bench", "the mode is --bench --bench-steps 30 --bench-warmup 8 on rank 1 but training on rank 0"},
    {"--bench-data", "--bench-data --bench-steps 4",
     "the mode is --bench-data --bench-steps 4 on rank 1 but --bench-data --bench-steps 30 on rank 0"},
    {"", "--frobnicate", "the mode is a command-line error (exit 2) on rank 1 but training on rank 0"},
};

START_TEST(different_modes_are_refused) {
    make_folders();
    const Mismatch *m = &modes[_i];
    assert_refused(run_pair(m->a, m->b), 2, m->expect);
}
END_TEST

// --eval under mpiexec: each rank evaluates its shard of the validation split and the sums are reduced,
// so two ranks report the samples, top-1 and top-5 of one process (the loss to rounding); ranks whose
// files differ are refused.
static void eval_line(char *line, size_t cap) {
    const char *at = strstr(out, "eval  ck.safetensors  ");
    ck_assert_msg(at != NULL, "no evaluation line in:\n%s", out);
    snprintf(line, cap, "%.*s", (int)strcspn(at, "\n"), at);
}

static double field_after(const char *line, const char *key) {
    const char *at = strstr(line, key);
    ck_assert_msg(at != NULL, "no '%s' in %s", key, line);
    return atof(at + strlen(key));
}

START_TEST(eval_over_two_ranks_is_one_evaluation) {
    make_folders();
    make_checkpoint("r0", 2);
    ck_assert_int_eq(system("cp startup/r0/ck.safetensors startup/r1/ck.safetensors"), 0);
    char args[1024], one[512], two[512];
    snprintf(args, sizeof args,
             "cd startup/r0 && %s %s " QUICK " data.val_size=96 --eval checkpoint.resume=ck.safetensors "
             "2>&1",
             AMPTRAIN_BIN, TINY);
    ck_assert_int_eq(tu_run_shell(args, out, sizeof out), 0);
    eval_line(one, sizeof one);
    const char *eval = "data.val_size=96 --eval checkpoint.resume=ck.safetensors";
    int rc = run_pair(eval, eval);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    eval_line(two, sizeof two);
    ck_assert_msg(strstr(one, "(96 samples)") && strstr(two, "(96 samples)"), "%s\n%s", one, two);
    ck_assert_double_eq(field_after(two, "top-1 "), field_after(one, "top-1 "));
    ck_assert_double_eq(field_after(two, "top-5 "), field_after(one, "top-5 "));
    ck_assert_double_eq_tol(field_after(two, "loss "), field_after(one, "loss "), 2e-4);
    make_checkpoint("r1", 1);
    assert_refused(run_pair(eval, eval), 2,
                   "the weights --eval loaded differ between ranks: the digest of the weights "
                   "and BN statistics read is ");
}
END_TEST

// Per-node copies of data.path that differ: the same sample counts but another label, or other counts.
// Before, the ranks trained on different labels, or ended in MPI_ERR_TRUNCATE.
START_TEST(different_data_is_refused) {
    make_folders();
    ck_assert_int_eq(system("mkdir -p startup/r0/cifar startup/r1/cifar"), 0);
    make_cifar("startup/r0/cifar");
    make_cifar("startup/r1/cifar");
    FILE *f = fopen("startup/r1/cifar/data_batch_3.bin", "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputc(7, f), 7);  // the first record's label
    fclose(f);
    const char *args = "data.source=cifar10 data.path=cifar data.augment=false";
    assert_refused(run_pair_with(RUN_OPTIONS, args, args), 2,
                   "the data differ between ranks: the digest of the training samples is ");
    ck_assert_msg(strstr(out, " on rank 1 but "), "%s", out);
    static char record[3073];
    f = fopen("startup/r1/cifar/test_batch.bin", "ab");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(record, 1, sizeof record, f), sizeof record);
    fclose(f);
    assert_refused(
        run_pair_with(RUN_OPTIONS, args, args), 2,
        "the data differ between ranks: the validation sample count is 65 on rank 1 but 64 on rank 0");
}
END_TEST

static Suite *startup_suite(void) {
    Suite *s = suite_create("startup");
    TCase *tc = tcase_create("mpmd");
    tcase_set_timeout(tc, 2 * JOB_TIMEOUT_S + 60);
    tcase_add_loop_test(tc, different_configs_are_refused, 0,
                        (int)(sizeof mismatches / sizeof mismatches[0]));
    tcase_add_test(tc, same_configs_train);
    tcase_add_test(tc, one_rank_without_its_data);
    tcase_add_test(tc, one_rank_without_its_resume_file);
    tcase_add_test(tc, different_resume_files_are_refused);
    tcase_add_test(tc, resume_auto_must_find_the_same_checkpoint);
    tcase_add_test(tc, unwritable_output_ends_every_rank);
    tcase_add_test(tc, no_gpu_ends_every_rank);
    tcase_add_loop_test(tc, different_modes_are_refused, 0, (int)(sizeof modes / sizeof modes[0]));
    tcase_add_test(tc, different_data_is_refused);
    tcase_add_test(tc, eval_over_two_ranks_is_one_evaluation);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    int skip = tu_leave_launch("test_startup");
    return skip ? skip : tu_run_suite(startup_suite(), 0);
}
