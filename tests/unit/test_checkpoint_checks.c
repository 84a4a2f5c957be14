// test_checkpoint_checks.c - a checkpoint whose values no run could have written is refused at resume,
// exit 2, with one line naming the tensor or the metadata key: non-finite weights, momentum or BN
// statistics, a negative variance, a loss scale that is no positive normal fp32 number, negative or
// inconsistent counters, a non-positive world/batch/accumulation. A resume with another batch size
// trains to the end of train.epochs (it used to run the loader dry).
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "train/safetensors.h"

#define TINY AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml"
// tiny.yaml's model on 256 samples: 8 steps of 32 per epoch, train.epochs 3.
#define QUICK TINY " backend.device=cpu data.train_size=256 data.val_size=0 data.prefetch=0 log.progress=never " \
                   "log.metrics="
#define GOOD "ckpt_checks/last.safetensors"

static char out[1 << 16];

// The metadata keys an amptrain checkpoint carries (checkpoint.h).
static const char *const meta_keys[] = {"format", "model",        "arch",  "amp",   "scale",
                                        "growth_count", "skipped_total", "step", "epoch", "samples_done",
                                        "seed",   "world_size",   "batch_size", "accum_steps"};

typedef struct {
    const char *victim;   // tensor changed, or NULL
    double value;         // its element 0
    const char *key[2];   // metadata changed (NULL: none)
    const char *text[2];
    const char *expect;
} BadCheckpoint;

// The new text of metadata `key`, or `old`.
static const char *meta_text(const BadCheckpoint *c, const char *key, const char *old) {
    for (int i = 0; i < 2; i++)
        if (c->key[i] && strcmp(c->key[i], key) == 0) return c->text[i];
    return old;
}

// Copies GOOD to dst with the changes of `c` (element 0 of an F32 or I64 tensor, metadata values).
static void copy_changed(const char *dst, const BadCheckpoint *c) {
    char err[1024];
    SafetensorsFile *f = st_open(GOOD, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    SafetensorsWriter *w = st_writer_open(dst);
    for (size_t i = 0; i < st_count(f); i++) {
        const StTensor *t = st_tensor(f, i);
        void *data = malloc(t->nbytes ? t->nbytes : 1);
        ck_assert_int_eq(st_read(f, t->name, t->dtype, t->ndim, t->shape, data, err, sizeof err), 0);
        if (c->victim && strcmp(t->name, c->victim) == 0) {
            if (t->dtype == ST_F32)
                ((float *)data)[0] = (float)c->value;
            else
                ((int64_t *)data)[0] = (int64_t)c->value;
        }
        st_writer_add_copy(w, t->name, t->dtype, t->ndim, t->shape, data);
        free(data);
    }
    for (size_t k = 0; k < sizeof meta_keys / sizeof meta_keys[0]; k++) {
        const char *v = st_meta(f, meta_keys[k]);
        ck_assert_ptr_nonnull(v);
        st_writer_set_meta(w, meta_keys[k], meta_text(c, meta_keys[k], v));
    }
    ck_assert_int_eq(st_writer_commit(w, err, sizeof err), 0);
    st_close(f);
}

static void make_good_checkpoint(void) {
    if (tu_file_exists(GOOD)) return;
    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=3 checkpoint.dir=ckpt_checks", out, sizeof out), 0);
}

// Resuming from `path` exits 2 before the first step, with one error line containing `expect`.
static void assert_refused(const char *path, const char *expect) {
    char args[1024];
    snprintf(args, sizeof args, QUICK " checkpoint.resume=%s", path);
    int rc = tu_run_cli(args, out, sizeof out);
    ck_assert_msg(rc == 2, "%s: exit %d, output:\n%s", path, rc, out);
    ck_assert_msg(strstr(out, expect) != NULL, "%s: want '%s' in:\n%s", path, expect, out);
    ck_assert_msg(strstr(out, "step 1/") == NULL, "%s: trained before refusing:\n%s", path, out);
}

static const BadCheckpoint bad_checkpoints[] = {
    {"conv1.weight", NAN, {NULL}, {NULL}, "tensor 'conv1.weight' holds NaN at element 0"},
    {"layer2.0.conv2.weight", INFINITY, {NULL}, {NULL}, "tensor 'layer2.0.conv2.weight' holds +inf"},
    {"amptrain.momentum.fc.weight", -INFINITY, {NULL}, {NULL}, "tensor 'amptrain.momentum.fc.weight' holds -inf"},
    {"bn1.running_var", NAN, {NULL}, {NULL}, "tensor 'bn1.running_var' holds NaN"},
    {"layer1.0.bn2.running_mean", INFINITY, {NULL}, {NULL}, "tensor 'layer1.0.bn2.running_mean' holds +inf"},
    {"bn1.running_var", -1, {NULL}, {NULL}, "tensor 'bn1.running_var' holds the negative variance -1"},
    {"bn1.num_batches_tracked", -3, {NULL}, {NULL}, "tensor 'bn1.num_batches_tracked' is -3: must not be negative"},
    {NULL, 0, {"scale"}, {"nan"}, "'scale' is nan: the loss scale must be a finite, positive, normal fp32 number"},
    {NULL, 0, {"scale"}, {"inf"}, "'scale' is inf"},
    {NULL, 0, {"scale"}, {"0"}, "'scale' is 0"},
    {NULL, 0, {"scale"}, {"-1"}, "'scale' is -1"},
    {NULL, 0, {"scale"}, {"1e-40"}, "'scale' is 1e-40"},   // a normal double, a denormal float
    {NULL, 0, {"scale"}, {"1e+39"}, "'scale' is 1e+39"},   // inf as a float
    {NULL, 0, {"step"}, {"-5"}, "step -5, epoch 0, samples_done 96: counters must not be negative"},
    {NULL, 0, {"epoch"}, {"-1"}, "counters must not be negative"},
    {NULL, 0, {"samples_done"}, {"-64"}, "samples_done -64: counters must not be negative"},
    {NULL, 0, {"samples_done"}, {"256"}, "'samples_done' is 256, beyond the epoch of 256 samples"},
    {NULL, 0, {"epoch", "step"}, {"5", "80"}, "epoch 5 (+96 samples) is past the end of train.epochs 3"},
    {NULL, 0, {"epoch", "step"}, {"3", "80"}, "epoch 3 (+96 samples) is past the end of train.epochs 3"},
    {NULL, 0, {"epoch"}, {"5"}, "step 3 is too few for epoch 5 and samples_done 96"},
    {NULL, 0, {"step"}, {"0"}, "step 0 is too few for epoch 0 and samples_done 96"},
    {NULL, 0, {"world_size"}, {"0"}, "'world_size' is 0: must be at least 1"},
    {NULL, 0, {"batch_size"}, {"-32"}, "'batch_size' is -32: must be at least 1"},
    {NULL, 0, {"accum_steps"}, {"0"}, "'accum_steps' is 0: must be at least 1"},
    {NULL, 0, {"amp"}, {"2"}, "'amp' is 2: must be 0 or 1"},
    {NULL, 0, {"growth_count"}, {"-1"}, "growth_count -1, skipped_total "},
    {NULL, 0, {"skipped_total"}, {"4"}, "skipped_total 4: each must be in [0, step 3]"},
    {NULL, 0, {"step"}, {"1.5"}, "checkpoint metadata 'step' is not an integer"},
};

START_TEST(bad_checkpoint_is_refused) {
    make_good_checkpoint();
    const BadCheckpoint *bad = &bad_checkpoints[_i];
    char path[64];
    snprintf(path, sizeof path, "bad_%d.safetensors", _i);
    copy_changed(path, bad);
    assert_refused(path, bad->expect);
}
END_TEST

// The copier changes nothing else: an unchanged copy resumes, and the run ends at train.steps. A run at
// the very end of train.epochs (epoch 3, no samples of it done) is consistent: nothing is left to train.
START_TEST(unchanged_copy_resumes) {
    make_good_checkpoint();
    copy_changed("same.safetensors", &(BadCheckpoint){0});
    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=5 checkpoint.resume=same.safetensors", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "resumed from same.safetensors at epoch 0, step 3"), "%s", out);
    ck_assert_msg(strstr(out, "summary: 5 steps"), "%s", out);
    BadCheckpoint at_end = {.key = {"epoch", "samples_done"}, .text = {"3", "0"}};
    copy_changed("finished.safetensors", &at_end);
    ck_assert_int_eq(tu_run_cli(QUICK " checkpoint.resume=finished.safetensors", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "summary: 3 steps, epoch 3"), "%s", out);
}
END_TEST

// A run of 1 epoch at batch 32 (8 steps) resumed at batch 16 with train.epochs 2: the second epoch has 16
// steps of 16, so the run ends at step 8 + 16 = 24, not at 2 x 16 = 32 (the loader has no 17th step).
// The same global batch resumes where it stopped; a batch that does not divide the samples done skips to
// the next epoch and says so.
START_TEST(resume_with_another_batch_size_ends_with_the_epochs) {
    ck_assert_int_eq(tu_run_cli(QUICK " train.epochs=1 checkpoint.dir=ckpt_epoch", out, sizeof out), 0);
    ck_assert_int_eq(tu_run_cli(QUICK " train.epochs=2 data.batch_size=16 "
                                "checkpoint.resume=ckpt_epoch/last.safetensors", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "resumed from ckpt_epoch/last.safetensors at epoch 1, step 8"), "%s", out);
    ck_assert_msg(strstr(out, "summary: 24 steps, epoch 2"), "%s", out);

    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=3 checkpoint.dir=ckpt_mid", out, sizeof out), 0);
    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=5 data.batch_size=40 "
                                "checkpoint.resume=ckpt_mid/last.safetensors", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "does not divide the 96 samples done in epoch 0, so it continues at the start "
                              "of epoch 1"), "%s", out);
    ck_assert_msg(strstr(out, "resumed from ckpt_mid/last.safetensors at epoch 1, step 3"), "%s", out);
}
END_TEST

static Suite *checkpoint_checks_suite(void) {
    Suite *s = suite_create("checkpoint_checks");
    TCase *tc = tcase_create("resume");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, bad_checkpoint_is_refused, 0, (int)(sizeof bad_checkpoints / sizeof bad_checkpoints[0]));
    tcase_add_test(tc, unchanged_copy_resumes);
    tcase_add_test(tc, resume_with_another_batch_size_ends_with_the_epochs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(checkpoint_checks_suite(), 1); }
