// test_checkpoint_checks.c - a checkpoint whose values no run could have written is refused at resume,
// exit 2, with one line naming the tensor or the metadata key: non-finite weights, momentum or BN
// statistics, a negative variance, a loss scale that is no positive normal fp32 number, negative,
// inconsistent or absurd counters, a non-positive world/batch/accumulation; so is one that would not
// continue the same run (another seed, other data, another autocast dtype) and one whose data does not
// match its checksum.
// --dry-run refuses each the same way. A resume at or past the run's end has nothing to do (exit 0, no
// summary). A resume with another batch size trains to the end of train.epochs and says how the position maps.
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"
#include "checkpoint/safetensors.h"

#define TINY AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml"
// tiny.yaml's model on 256 samples: 8 steps of 32 per epoch, train.epochs 3.
#define QUICK                                                                                                \
    TINY " backend.device=cpu data.train_size=256 data.val_size=0 data.prefetch=0 log.progress=never "       \
         "log.metrics="
#define GOOD "ckpt_checks/last.safetensors"

static char out[1 << 16];

typedef struct {
    const char *victim;   // tensor changed, or NULL
    double value;         // its element 0
    const char *meta[5];  // metadata changed: "key", "value" pairs, NULL-terminated
    const char *expect;
} BadCheckpoint;

// Sets element 0 of the F32 or I64 tensor c->victim to c->value.
static void set_first(const char *name, int dtype, int64_t *shape, void *data, void *ctx) {
    const BadCheckpoint *c = ctx;
    (void)shape;
    if (!c->victim || strcmp(name, c->victim) != 0) return;
    if (dtype == ST_F32)
        ((float *)data)[0] = (float)c->value;
    else
        ((int64_t *)data)[0] = (int64_t)c->value;
}

// Copies GOOD to dst with the changes of `c`.
static void copy_changed(const char *dst, const BadCheckpoint *c) {
    tu_copy_checkpoint(GOOD, dst, set_first, (void *)c, c->meta);
}

static void make_good_checkpoint(void) {
    if (tu_file_exists(GOOD)) return;
    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=3 checkpoint.dir=ckpt_checks", out, sizeof out), 0);
}

// Resuming from `path` exits 2 before the first step, with one error line containing `expect`; so does
// --dry-run with it.
static void assert_refused(const char *path, const char *expect) {
    for (int dry = 0; dry < 2; dry++) {
        char args[1024];
        snprintf(args, sizeof args, QUICK " checkpoint.resume=%s%s", path, dry ? " --dry-run" : "");
        int rc = tu_run_cli(args, out, sizeof out);
        ck_assert_msg(rc == 2, "%s%s: exit %d, output:\n%s", path, dry ? " --dry-run" : "", rc, out);
        ck_assert_msg(strstr(out, expect) != NULL, "%s: want '%s' in:\n%s", path, expect, out);
        ck_assert_msg(strstr(out, "step 1/") == NULL && strstr(out, "parameters") == NULL,
                      "%s: went on after refusing:\n%s", path, out);
    }
}

static const BadCheckpoint bad_checkpoints[] = {
    {"conv1.weight", NAN, {NULL}, "tensor 'conv1.weight' holds NaN at element 0"},
    {"layer2.0.conv2.weight", INFINITY, {NULL}, "tensor 'layer2.0.conv2.weight' holds +inf"},
    {"amptrain.momentum.fc.weight", -INFINITY, {NULL}, "tensor 'amptrain.momentum.fc.weight' holds -inf"},
    {"bn1.running_var", NAN, {NULL}, "tensor 'bn1.running_var' holds NaN"},
    {"layer1.0.bn2.running_mean", INFINITY, {NULL}, "tensor 'layer1.0.bn2.running_mean' holds +inf"},
    {"bn1.running_var", -1, {NULL}, "tensor 'bn1.running_var' holds the negative variance -1"},
    {"bn1.num_batches_tracked", -3, {NULL}, "tensor 'bn1.num_batches_tracked' is -3: must not be negative"},
    {NULL,
     0,
     {"scale", "nan"},
     "'scale' is nan: the loss scale must be a finite, positive, normal fp32 number"},
    {NULL, 0, {"scale", "inf"}, "'scale' is inf"},
    {NULL, 0, {"scale", "0"}, "'scale' is 0"},
    {NULL, 0, {"scale", "-1"}, "'scale' is -1"},
    {NULL, 0, {"scale", "1e-40"}, "'scale' is 1e-40"},  // a normal double, a denormal float
    {NULL, 0, {"scale", "1e+39"}, "'scale' is 1e+39"},  // inf as a float
    {NULL, 0, {"step", "-5"}, "step -5, epoch 0, samples_done 96: counters must not be negative"},
    {NULL, 0, {"epoch", "-1"}, "counters must not be negative"},
    {NULL, 0, {"samples_done", "-64"}, "samples_done -64: counters must not be negative"},
    {NULL, 0, {"samples_done", "256"}, "'samples_done' is 256, beyond the epoch of 256 samples"},
    {NULL, 0, {"step", "9223372036854775807"}, "step 9223372036854775807 is more than a run can have taken"},
    {NULL,
     0,
     {"step", "97"},
     "step 97 is more than a run can have taken: 0 epochs of 256 samples and 96 more allow "
     "at most 96 steps"},
    {NULL, 0, {"epoch", "9000000", "step", "2147483648"}, "and a run counts at most 2147483647"},
    {NULL, 0, {"seed", "7"}, "checkpoint metadata 'seed' is 7, this run's train.seed is 42"},
    {NULL, 0, {"train_samples", "2048"}, "'dataset' is learnable, 2048 training samples"},
    {NULL,
     0,
     {"dataset_digest", "0123456789abcdef"},
     "(digest 0123456789abcdef); this run's data is learnable, "
     "256 samples"},
    {NULL, 0, {"dataset", "synthetic"}, "'dataset' is synthetic"},
    {NULL, 0, {"dynamic_scale", "2"}, "'dynamic_scale' is 2: must be 0 or 1"},
    {NULL, 0, {"epoch", "5"}, "step 3 is too few for epoch 5 and samples_done 96"},
    {NULL, 0, {"step", "0"}, "step 0 is too few for epoch 0 and samples_done 96"},
    {NULL, 0, {"world_size", "0"}, "'world_size' is 0: must be at least 1"},
    {NULL, 0, {"batch_size", "-32"}, "'batch_size' is -32: must be at least 1"},
    {NULL, 0, {"accum_steps", "0"}, "'accum_steps' is 0: must be at least 1"},
    {NULL, 0, {"amp", "2"}, "'amp' is 2: must be 0 or 1"},
    {NULL, 0, {"amp_dtype", "float32"}, "'amp_dtype' is 'float32': must be float16 or bfloat16 (amp is 1)"},
    {NULL, 0, {"amp", "0"}, "'amp_dtype' is 'float16': must be float32 (amp is 0)"},
    {NULL,
     0,
     {"amp_dtype", "bfloat16"},
     "'amp_dtype' is bfloat16, this run's amp.dtype is float16: a run continues in the precision it trained "
     "in (resume with amp.dtype=bfloat16; model.init=bad_"},
    {NULL, 0, {"growth_count", "-1"}, "growth_count -1, skipped_total "},
    {NULL, 0, {"skipped_total", "4"}, "skipped_total 4: each must be in [0, step 3]"},
    {NULL, 0, {"step", "1.5"}, "checkpoint metadata 'step' is not an integer"},
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

// The copier changes nothing else: an unchanged copy resumes, and the run ends at train.steps.
START_TEST(unchanged_copy_resumes) {
    make_good_checkpoint();
    copy_changed("same.safetensors", &(BadCheckpoint){0});
    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=5 checkpoint.resume=same.safetensors", out, sizeof out),
                     0);
    ck_assert_msg(strstr(out, "resumed from same.safetensors at epoch 1, step 3"), "%s", out);
    ck_assert_msg(strstr(out, "summary: 5 steps"), "%s", out);
    ck_assert_msg(strstr(out, "warning") == NULL, "%s", out);
}
END_TEST

// A checkpoint at or past the end of the run (train.steps, or the end of train.epochs, or another run's
// more epochs) has nothing to train: it says so, exits 0, prints no summary and writes no checkpoint.
START_TEST(resume_at_the_end_has_nothing_to_do) {
    make_good_checkpoint();
    ck_assert_int_eq(system("rm -rf end_dir"), 0);
    static const struct {
        const char *meta[5];
        const char *args, *said;
    } cases[] = {
        {{NULL}, "train.steps=3", "nothing to do: checkpoint at step 3, run ends at step 3"},
        {{NULL}, "train.steps=2", "nothing to do: checkpoint at step 3, run ends at step 2"},
        {{"epoch", "3", "samples_done", "0"}, "", "nothing to do: checkpoint at step 3, run ends at step 3"},
        {{"epoch", "5", "step", "80"}, "", "nothing to do: checkpoint at step 80, run ends at step 24"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        BadCheckpoint c = {
            .meta = {cases[i].meta[0], cases[i].meta[1], cases[i].meta[2], cases[i].meta[3], NULL}};
        copy_changed("end.safetensors", &c);
        char args[512];
        snprintf(args, sizeof args, QUICK " checkpoint.dir=end_dir checkpoint.resume=end.safetensors %s",
                 cases[i].args);
        ck_assert_int_eq(tu_run_cli(args, out, sizeof out), 0);
        ck_assert_msg(strstr(out, cases[i].said) && !strstr(out, "summary") && !strstr(out, "step 1/"),
                      "%zu: %s", i, out);
        ck_assert(!tu_file_exists("end_dir/last.safetensors"));
    }
}
END_TEST

// Offset of the data region: after the 8-byte length and the header.
static long data_start(const unsigned char *bytes) {
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)bytes[i] << (8 * i);
    return 8 + (long)n;
}

static void spill(const char *path, const unsigned char *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
    fclose(f);
}

// Renames the metadata key `key` (quoted, as the header spells it) by changing its first letter: the
// header stays valid JSON of the same length, and the key is gone.
static void hide_key(unsigned char *bytes, const char *key) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    long end = data_start(bytes), n = (long)strlen(quoted);
    for (long at = 8; at + n <= end; at++)
        if (memcmp(bytes + at, quoted, (size_t)n) == 0) {
            bytes[at + 1] = 'X';
            return;
        }
    ck_abort_msg("no key %s", key);
}

// One flipped bit in the data region (a weight's mantissa, still finite) is refused by the checksum, by
// the run and by --dry-run. A file without a checksum and without the record of its data (an older
// amptrain's) still resumes, with a warning for each.
START_TEST(checksum_refuses_a_flipped_bit) {
    make_good_checkpoint();
    size_t len;
    unsigned char *bytes = (unsigned char *)tu_read_file(GOOD, &len);
    ck_assert_ptr_nonnull(bytes);
    long start = data_start(bytes);
    bytes[start + 1] ^= 0x01;  // conv1.weight[0]'s second byte: a mantissa bit
    spill("flipped.safetensors", bytes, len);
    bytes[start + 1] ^= 0x01;
    assert_refused("flipped.safetensors", "flipped.safetensors: the tensor data's checksum is ");
    hide_key(bytes, "data_checksum");
    hide_key(bytes, "dataset");
    spill("older.safetensors", bytes, len);
    free(bytes);
    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=4 checkpoint.resume=older.safetensors", out, sizeof out),
                     0);
    ck_assert_msg(strstr(out,
                         "older.safetensors has no data checksum (an older amptrain wrote it): its tensors "
                         "load unchecked"),
                  "%s", out);
    ck_assert_msg(strstr(out, "older.safetensors records no identity of its data"), "%s", out);
    ck_assert_msg(strstr(out, "summary: 4 steps"), "%s", out);
}
END_TEST

// A checkpoint of another model: refused by the run and by --dry-run alike.
START_TEST(another_model_is_refused_by_the_dry_run_too) {
    make_good_checkpoint();
    for (int dry = 0; dry < 2; dry++) {
        int rc = tu_run_cli(dry ? QUICK " model.planes=8 checkpoint.resume=" GOOD " --dry-run"
                                : QUICK " model.planes=8 checkpoint.resume=" GOOD,
                            out, sizeof out);
        ck_assert_msg(rc == 2 &&
                          strstr(out,
                                 GOOD ": checkpoint is for model 'layers=1,1,1,1 cardinality=4 base_width=16 "
                                      "planes=16 classes=10', this run builds '"),
                      "exit %d: %s", rc, out);
    }
}
END_TEST

// amp.dynamic false keeps amp.init_scale, whatever scale the checkpoint's dynamic run reached, and says so.
START_TEST(static_scale_is_the_configs) {
    make_good_checkpoint();
    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=4 amp.dynamic=false amp.init_scale=1024 "
                                      "checkpoint.resume=" GOOD,
                                out, sizeof out),
                     0);
    ck_assert_msg(
        strstr(out, "amp.dynamic is false, so the loss scale is amp.init_scale 1024, not the checkpoint's"),
        "%s", out);
    ck_assert_msg(strstr(out, "loss scale 1024,"), "%s", out);
}
END_TEST

// A run of 1 epoch at batch 32 (8 steps) resumed at batch 16 with train.epochs 2: the second epoch has 16
// steps of 16, so the run ends at step 8 + 16 = 24, not at 2 x 16 = 32 (the loader has no 17th step).
// The same global batch resumes where it stopped; a batch that does not divide the samples done skips to
// the next epoch and says so.
START_TEST(resume_with_another_batch_size_ends_with_the_epochs) {
    ck_assert_int_eq(system("rm -rf ckpt_epoch ckpt_mid"), 0);
    ck_assert_int_eq(tu_run_cli(QUICK " train.epochs=1 checkpoint.dir=ckpt_epoch", out, sizeof out), 0);
    ck_assert_int_eq(tu_run_cli(QUICK " train.epochs=2 data.batch_size=16 "
                                      "checkpoint.resume=ckpt_epoch/last.safetensors",
                                out, sizeof out),
                     0);
    ck_assert_msg(strstr(out, "resumed from ckpt_epoch/last.safetensors at epoch 1, step 8"), "%s", out);
    ck_assert_msg(
        strstr(out, "ckpt_epoch/last.safetensors was written with 1 ranks x batch 32 x accum_steps 1, this "
                    "run has 1 x 16 x 1: the sample order continues exactly, with 16 samples per step "
                    "instead of 32"),
        "%s", out);
    ck_assert_msg(strstr(out, "summary: 24 steps, epoch 2"), "%s", out);

    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=3 checkpoint.dir=ckpt_mid", out, sizeof out), 0);
    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=5 data.batch_size=40 "
                                      "checkpoint.resume=ckpt_mid/last.safetensors",
                                out, sizeof out),
                     0);
    ck_assert_msg(strstr(out, "does not divide the 96 samples done in epoch 0, so it continues at the start "
                              "of epoch 1"),
                  "%s", out);
    ck_assert_msg(strstr(out, "resumed from ckpt_mid/last.safetensors at epoch 1, step 3"), "%s", out);
}
END_TEST

// A refused resume touches no output: the metrics file of the run it would continue keeps its records
// (none is emptied before the checks are done).
START_TEST(refused_resume_keeps_the_metrics_file) {
    make_good_checkpoint();
    copy_changed("nan.safetensors", &(BadCheckpoint){.victim = "fc.weight", .value = NAN});
    const char *records = "{\"step\":1,\"epoch\":0,\"loss\":2.3}\n";
    tu_write_file("kept.jsonl", records);
    ck_assert_int_eq(
        tu_run_cli(QUICK " log.metrics=kept.jsonl checkpoint.resume=nan.safetensors", out, sizeof out), 2);
    char text[256] = "";
    FILE *f = fopen("kept.jsonl", "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    ck_assert_str_eq(text, records);
}
END_TEST

static Suite *checkpoint_checks_suite(void) {
    Suite *s = suite_create("checkpoint_checks");
    TCase *tc = tcase_create("resume");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, bad_checkpoint_is_refused, 0,
                        (int)(sizeof bad_checkpoints / sizeof bad_checkpoints[0]));
    tcase_add_test(tc, unchanged_copy_resumes);
    tcase_add_test(tc, resume_at_the_end_has_nothing_to_do);
    tcase_add_test(tc, checksum_refuses_a_flipped_bit);
    tcase_add_test(tc, static_scale_is_the_configs);
    tcase_add_test(tc, another_model_is_refused_by_the_dry_run_too);
    tcase_add_test(tc, refused_resume_keeps_the_metrics_file);
    tcase_add_test(tc, resume_with_another_batch_size_ends_with_the_epochs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    // The good checkpoint is made once per run of the suite, by this build: one an older build left in the
    // scratch folder would be refused for what it lacks.
    tu_run_shell("rm -rf ckpt_checks", NULL, 0);
    return tu_run_suite(checkpoint_checks_suite(), 1);
}
