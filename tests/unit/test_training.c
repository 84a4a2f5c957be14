// test_training.c - the trainer on the CPU backend, end to end: model facts, the AMP step contract
// (skip on inf, scale back-off), AMP vs fp32 agreement, learning, bitwise resume, checkpoint rejection.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/backend.h"
#include "config/config.h"
#include "dist/dist.h"
#include "model/resnext.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "train/trainer.h"

// ---- helpers ---------------------------------------------------------------------------------------

// A small, fast model: one block per stage, 8 planes, 32x32 images, batch 8, no files written.
#define SMALL_MODEL                                                                                          \
    "model.planes=8", "model.base_width=32", "model.cardinality=2", "data.batch_size=8",                     \
        "data.train_size=64", "data.val_size=0", "data.prefetch=0", "log.metrics=", "checkpoint.dir="

// Host copies of the fp32 masters and momentum (the CPU backend's memory is host memory).
static float *copy_floats(const float *src, size_t n) {
    float *dst = malloc(n * sizeof(float));
    memcpy(dst, src, n * sizeof(float));
    return dst;
}

static ScalerState scaler_now(TuTrainer *r) { return scaler_read(&r->t.scaler, r->be); }

static int floats_equal(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

// ---- model facts -----------------------------------------------------------------------------------

START_TEST(test_resnext50_matches_torchvision_counts) {
    Config cfg;
    const char *ov[] = {"model.arch=resnext50_32x4d", "model.num_classes=1000", "model.image_size=224", NULL};
    tu_config(&cfg, ov);
    Model m;
    model_init_shapes(&m, &cfg.model, DTYPE_F16);
    ck_assert_uint_eq(m.params.numel, 25028904u);        // torchvision: sum(p.numel() for p in parameters())
    ck_assert_int_eq(m.params.count, 161);               // parameter tensors
    ck_assert_int_eq(m.n_bn, 53);                        // 1 stem + 16 blocks x 3 + 4 downsample BNs
    ck_assert_int_eq(m.params.count + 3 * m.n_bn, 320);  // len(state_dict()) in torchvision
    ck_assert_double_eq_tol(model_macs_per_image(&m) / 1e9, 4.23, 0.005);  // torchvision's 4.23 GFLOPS
    const char *names[] = {"conv1.weight",
                           "bn1.weight",
                           "layer1.0.conv2.weight",
                           "layer2.0.downsample.0.weight",
                           "layer2.0.downsample.1.bias",
                           "layer3.5.bn3.weight",
                           "layer4.2.conv3.weight",
                           "fc.weight",
                           "fc.bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_int_ge(params_find(&m.params, names[i]), 0);
    ck_assert_int_lt(params_find(&m.params, "layer1.1.downsample.0.weight"), 0);  // identity shortcut there
    const ParamInfo *g = &m.params.items[params_find(&m.params, "layer1.0.conv2.weight")];
    ck_assert_int_eq(g->shape[0], 128);  // width 128 out
    ck_assert_int_eq(g->shape[1], 4);    // 128 / 32 groups in
    ck_assert_int_eq(g->shape[2], 3);
    ck_assert_int_eq(g->shape[3], 3);
    // torchvision's state_dict order: the registry lists the stem first and fc last
    ck_assert_str_eq(m.params.items[0].name, "conv1.weight");
    ck_assert_str_eq(m.params.items[m.params.count - 1].name, "fc.bias");
    // backward order in the flat buffer: fc first, the stem conv last
    ck_assert_uint_eq(m.params.items[params_find(&m.params, "fc.weight")].offset, 0);
    size_t max_offset = 0;
    for (int i = 0; i < m.params.count; i++)
        if (m.params.items[i].offset > max_offset) max_offset = m.params.items[i].offset;
    ck_assert_uint_eq(m.params.items[0].offset, max_offset);
    model_free(&m, NULL);
}
END_TEST

// ---- the step contract -----------------------------------------------------------------------------

// An inf in the gradients at step 2 skips exactly that step: masters and momentum unchanged, scale
// halved, growth counter reset; the steps after it train again. _i 1: bf16, which trains unscaled: the
// scale is 1 and stays 1 through the skip (never backed off nor grown), while the verdict still skips.
START_TEST(test_injected_inf_skips_exactly_that_step) {
    const int bf16 = _i;
    const char *ov[] = {SMALL_MODEL, bf16 ? "amp.dtype=bfloat16" : "amp.init_scale=1024",
                        "debug.inject_step=2", "debug.inject_value=.inf", NULL};
    TuTrainer r;
    tu_trainer_start(&r, ov);
    ck_assert_int_eq(r.t.model.act_dt, bf16 ? DTYPE_BF16 : DTYPE_F16);
    size_t np = r.t.model.params.padded_numel;
    tu_train_step(&r.t);
    tu_train_step(&r.t);
    ScalerState before_state = scaler_now(&r);
    ck_assert_int_eq(before_state.skipped_total, 0);
    ck_assert_int_eq(before_state.growth_count, bf16 ? 0 : 2);
    ck_assert_float_eq(before_state.scale, bf16 ? 1.0f : 1024.0f);
    float *w = copy_floats(r.t.model.master, np), *mom = copy_floats(r.t.opt.momentum, np);
    tu_train_step(&r.t);
    ScalerState after = scaler_now(&r);
    ck_assert(floats_equal(w, r.t.model.master, np));
    ck_assert(floats_equal(mom, r.t.opt.momentum, np));
    ck_assert_float_eq(after.scale, bf16 ? 1.0f : before_state.scale * 0.5f);
    ck_assert_int_eq(after.growth_count, 0);
    ck_assert_int_eq(after.skipped_total, 1);
    ck_assert_int_eq(after.skipped_run, 1);
    tu_train_step(&r.t);
    ck_assert(!floats_equal(w, r.t.model.master, np));
    ck_assert_int_eq(scaler_now(&r).skipped_total, 1);
    ck_assert_int_eq(scaler_now(&r).skipped_run, 0);
    free(w), free(mom);
    tu_trainer_stop(&r);
}
END_TEST

START_TEST(test_nan_injection_also_skips) {
    const char *ov[] = {SMALL_MODEL, "amp.init_scale=1024", "debug.inject_step=0", "debug.inject_value=.nan",
                        NULL};
    TuTrainer r;
    tu_trainer_start(&r, ov);
    size_t np = r.t.model.params.padded_numel;
    float *w = copy_floats(r.t.model.master, np);
    tu_train_step(&r.t);
    ck_assert(floats_equal(w, r.t.model.master, np));
    ck_assert_float_eq(scaler_now(&r).scale, 512.0f);
    free(w);
    tu_trainer_stop(&r);
}
END_TEST

// The scale grows exactly at growth_interval clean steps in a row (GradScaler's rule) through the trainer.
START_TEST(test_scale_grows_at_the_interval) {
    const char *ov[] = {SMALL_MODEL, "amp.init_scale=256", "amp.growth_interval=3", NULL};
    TuTrainer r;
    tu_trainer_start(&r, ov);
    float expect[] = {256, 256, 512, 512, 512, 1024};
    for (int s = 0; s < 6; s++) {
        tu_train_step(&r.t);
        ScalerState st = scaler_now(&r);
        ck_assert_int_eq(st.skipped_total, 0);
        ck_assert_float_eq(st.scale, expect[s]);
    }
    tu_trainer_stop(&r);
}
END_TEST

// One AMP step and one fp32 step from the same weights agree within fp16 tolerance:
// - the loss (fp32 softmax over fp16 logits) within 1e-2 relative,
// - the weights after the step within 1e-3 relative (what training carries forward),
// - the update directions (cosine > 0.97) and the classifier's own update within 1e-2.
// Deeper updates differ by ~10%: with 8 samples, batch-norm gradients are sums of terms that largely
// cancel, so fp16 activations' 1e-3 rounding is amplified; PyTorch AMP behaves the same way.
static double cosine(const float *a, const float *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / sqrt(aa * bb);
}

START_TEST(test_amp_step_agrees_with_fp32_step) {
    const char *amp_ov[] = {SMALL_MODEL, "amp.init_scale=1024", "train.weight_decay=0", "train.momentum=0",
                            NULL};
    const char *fp32_ov[] = {SMALL_MODEL, "amp.enabled=false", "train.weight_decay=0", "train.momentum=0",
                             NULL};
    TuTrainer a, f;
    tu_trainer_start(&a, amp_ov);
    tu_trainer_start(&f, fp32_ov);
    size_t np = a.t.model.params.padded_numel;
    ck_assert_uint_eq(np, f.t.model.params.padded_numel);
    float *w0 = copy_floats(f.t.model.master, np);
    ck_assert(floats_equal(w0, a.t.model.master, np));  // same seed, same initial weights
    tu_train_step(&a.t);
    tu_train_step(&f.t);
    ck_assert_int_eq(scaler_now(&a).skipped_total, 0);
    float la = *a.t.act.loss, lf = *f.t.act.loss;
    ck_assert_msg(fabsf(la - lf) < 1e-2f * fabsf(lf), "loss amp %g vs fp32 %g", la, lf);
    double weights_err = tu_rel_error(a.t.model.master, f.t.model.master, np);
    ck_assert_msg(weights_err < 1e-3, "weights after the step differ by %g", weights_err);
    float *da = malloc(np * sizeof(float)), *df = malloc(np * sizeof(float));
    for (size_t i = 0; i < np; i++) da[i] = a.t.model.master[i] - w0[i], df[i] = f.t.model.master[i] - w0[i];
    ck_assert(tu_rel_error(df, w0, np) > 1e-4);  // the step did move the weights
    double cos = cosine(da, df, np);
    ck_assert_msg(cos > 0.97, "update directions: cosine %g", cos);
    const ParamInfo *fc = &a.t.model.params.items[a.t.model.fc_weight];
    double fc_err = tu_rel_error(da + fc->offset, df + fc->offset, fc->numel);
    ck_assert_msg(fc_err < 1e-2, "classifier update differs by %g", fc_err);
    free(w0), free(da), free(df);
    tu_trainer_stop(&a);
    tu_trainer_stop(&f);
}
END_TEST

// The demo model on learnable data: the validation loss falls far below chance (ln 10 = 2.30).
// The batch is an argument of the step, whichever way it arrives: raw bytes from the host (through an
// input slot), raw bytes already in backend memory (the benchmark's resident batches), or fp32 images
// the caller normalised itself. Three steps on three different batches must leave bitwise the same
// weights in all three runs, with AMP and in fp32. (A step that read a buffer the batch was not copied
// into, as the fp32 benchmark path once did, trains on the previous batch and fails here.)
static void train_three_ways(const char *amp) {
    const char *ov[] = {SMALL_MODEL, amp, NULL};
    TuTrainer host, bytes, floats;
    tu_trainer_start(&host, ov);
    tu_trainer_start(&bytes, ov);
    tu_trainer_start(&floats, ov);
    const Dataset *ds = host.t.train_set;
    int b = host.cfg.data.batch_size;
    size_t image = dataset_image_bytes(ds);
    uint8_t *raw = malloc((size_t)b * image);
    float *normalised = malloc((size_t)b * image * sizeof(float));
    int32_t *labels = malloc((size_t)b * sizeof(int32_t)), *idx = malloc((size_t)b * sizeof(int32_t));
    PixelAffine a = pixel_affine_of(&ds->norm);
    for (int step = 0; step < 3; step++) {
        int count = sampler_block(&host.t.sampler, 0, step, 0, idx);
        ck_assert_int_eq(count, b);
        dataset_get_batch(ds, idx, count, 0, raw, labels);
        for (size_t k = 0; k < (size_t)b * image; k++)
            normalised[k] = (float)raw[k] * a.scale[k % 3] + a.shift[k % 3];
        MicroBatch from_host = {.count = b, .step_total = b, .host_images = raw, .host_labels = labels};
        MicroBatch from_bytes = {.count = b,
                                 .step_total = b,
                                 .device_images = raw,
                                 .device_dt = DTYPE_U8,
                                 .device_labels = labels};
        MicroBatch from_floats = {.count = b,
                                  .step_total = b,
                                  .device_images = normalised,
                                  .device_dt = DTYPE_F32,
                                  .device_labels = labels};
        trainer_step_array(&host.t, &from_host, 1);
        trainer_step_array(&bytes.t, &from_bytes, 1);
        trainer_step_array(&floats.t, &from_floats, 1);
    }
    size_t np = host.t.model.params.padded_numel;
    ck_assert_msg(floats_equal(host.t.model.master, bytes.t.model.master, np), "%s: resident bytes differ",
                  amp);
    ck_assert_msg(floats_equal(host.t.model.master, floats.t.model.master, np), "%s: fp32 images differ",
                  amp);
    free(raw), free(normalised), free(labels), free(idx);
    tu_trainer_stop(&host), tu_trainer_stop(&bytes), tu_trainer_stop(&floats);
}

START_TEST(test_every_batch_path_trains_on_its_batch) {
    train_three_ways("amp.enabled=true");
    train_three_ways("amp.dtype=bfloat16");
    train_three_ways("amp.enabled=false");
}
END_TEST

// The demo model learns under fp16 and under bf16 autocast; bf16's scale is 1 from the first step to the
// last.
START_TEST(test_tiny_model_learns) {
    const char *precision = _i ? "amp.dtype=bfloat16" : "amp.dtype=float16";
    const char *ov[] = {
        "data.train_size=1024", "data.val_size=256",  "train.epochs=4", "log.metrics=", "checkpoint.dir=",
        "data.prefetch=0",      "log.progress=never", "log.every=1000", precision,      NULL};
    TuTrainer r;
    tu_trainer_start(&r, ov);
    EvalRecord before = trainer_evaluate(&r.t);
    ck_assert_int_eq(trainer_run(&r.t, NULL), 0);
    ck_assert_int_eq(r.t.eval.has_last, 1);
    EvalRecord after = r.t.eval.last;
    ck_assert_msg(before.loss > 2.0, "%s: initial validation loss %g", precision, before.loss);
    ck_assert_msg(after.loss < 0.5 * before.loss, "%s: validation loss %g -> %g", precision, before.loss,
                  after.loss);
    ck_assert_msg(after.top1 > 0.6, "%s: top-1 %g", precision, after.top1);
    ck_assert_int_eq(after.samples, 256);
    if (_i) {
        const ScalerState st = scaler_now(&r);
        ck_assert_float_eq(st.scale, 1.0f);
        ck_assert_int_eq(st.skipped_total, 0);
    }
    tu_trainer_stop(&r);
}
END_TEST

// ---- checkpoints -----------------------------------------------------------------------------------

static void run_steps(TuTrainer *r) { ck_assert_int_eq(trainer_run(&r->t, NULL), 0); }

// N steps straight vs N/2, checkpoint, resume, N/2 more: bitwise-identical masters, momentum, scale.
// The checkpoint falls mid-epoch (16 steps per epoch) so the sampler position is restored too. fp16 with a
// scale that grows during the run, and bf16 (scale 1 throughout).
START_TEST(test_resume_is_bitwise_identical) {
    const char *precision = _i ? "amp.dtype=bfloat16" : "amp.growth_interval=4";
    const char *straight[] = {SMALL_MODEL,      "data.train_size=128",     "train.epochs=3",
                              "train.steps=24", "train.schedule=constant", "train.warmup_steps=5",
                              precision,        "log.progress=never",      NULL};
    const char *first_half[] = {SMALL_MODEL,
                                "data.train_size=128",
                                "train.epochs=3",
                                "train.steps=12",
                                "train.schedule=constant",
                                "train.warmup_steps=5",
                                precision,
                                "log.progress=never",
                                "checkpoint.dir=resume_test",
                                "checkpoint.overwrite=true",
                                NULL};
    const char *second_half[] = {SMALL_MODEL,
                                 "data.train_size=128",
                                 "train.epochs=3",
                                 "train.steps=24",
                                 "train.schedule=constant",
                                 "train.warmup_steps=5",
                                 precision,
                                 "log.progress=never",
                                 "checkpoint.resume=resume_test/last.safetensors",
                                 NULL};
    TuTrainer a, b, c;
    tu_trainer_start(&a, straight);
    run_steps(&a);
    tu_trainer_start(&b, first_half);
    run_steps(&b);
    ck_assert_int_eq(b.t.step, 12);
    tu_trainer_stop(&b);
    tu_trainer_start(&c, second_half);
    ck_assert_int_eq(c.t.step, 12);
    run_steps(&c);
    ck_assert_int_eq(c.t.step, 24);
    size_t np = a.t.model.params.padded_numel;
    ck_assert(floats_equal(a.t.model.master, c.t.model.master, np));
    ck_assert(floats_equal(a.t.opt.momentum, c.t.opt.momentum, np));
    ScalerState sa = scaler_now(&a), sc = scaler_now(&c);
    ck_assert_float_eq(sa.scale, sc.scale);
    ck_assert_int_eq(sa.growth_count, sc.growth_count);
    ck_assert_int_eq(sa.skipped_total, sc.skipped_total);
    ck_assert(floats_equal(a.t.model.running, c.t.model.running, a.t.model.stats_numel));
    tu_trainer_stop(&a);
    tu_trainer_stop(&c);
}
END_TEST

// Writes a checkpoint of the small model to `path` (3 steps).
static void write_small_checkpoint(const char *dir) {
    char dir_override[256];
    snprintf(dir_override, sizeof dir_override, "checkpoint.dir=%s", dir);
    const char *ov[] = {SMALL_MODEL, "train.steps=3", "log.progress=never", dir_override, NULL};
    TuTrainer r;
    tu_trainer_start(&r, ov);
    run_steps(&r);
    tu_trainer_stop(&r);
}

// Resuming from `path` must fail with a message containing `expect`.
static void assert_resume_refused(const char *path, const char *expect) {
    Config cfg;
    char resume[512];
    snprintf(resume, sizeof resume, "checkpoint.resume=%s", path);
    const char *ov[] = {SMALL_MODEL, resume, NULL};
    tu_config(&cfg, ov);
    Backend *be = cpu_backend_create();
    Comm *comm = comm_single_create();
    Trainer t;
    char err[2048];
    // checkpoint_load reports through its err buffer; trainer_init prints it. Check the buffer directly.
    memset(&t, 0, sizeof t);
    ck_assert_int_eq(trainer_init(&t, &cfg, be, comm, comm), 2);
    trainer_free(&t);
    // The same file through checkpoint_load, to see the message.
    Config ok_cfg;
    const char *ok_ov[] = {SMALL_MODEL, NULL};
    tu_config(&ok_cfg, ok_ov);
    ck_assert_int_eq(trainer_init(&t, &ok_cfg, be, comm, comm), 0);
    ck_assert_int_ne(checkpoint_load(&t, path, err, sizeof err), 0);
    ck_assert_msg(strstr(err, expect) != NULL, "message '%s' lacks '%s'", err, expect);
    trainer_free(&t);
    be->destroy(be);
    comm->destroy(comm);
}

// Gives the tensor named ctx a different shape (one row fewer).
static void one_row_fewer(const char *name, int dtype, int64_t *shape, void *data, void *ctx) {
    (void)dtype, (void)data;
    if (strcmp(name, (const char *)ctx) == 0) shape[0] -= 1;
}

static void truncate_copy(const char *src, const char *dst, long keep) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    ck_assert(in && out);
    for (long i = 0; i < keep; i++) {
        int ch = fgetc(in);
        ck_assert_int_ne(ch, EOF);
        fputc(ch, out);
    }
    fclose(in), fclose(out);
}

START_TEST(test_corrupted_checkpoints_are_refused) {
    write_small_checkpoint("ckpt_ok");
    const char *good = "ckpt_ok/last.safetensors";
    struct stat st;
    ck_assert_int_eq(stat(good, &st), 0);
    // 1. truncated data
    truncate_copy(good, "ckpt_truncated.safetensors", (long)st.st_size - 100);
    assert_resume_refused("ckpt_truncated.safetensors", "exceed");
    // 2. a header that is not JSON
    tu_write_file("ckpt_garbage.safetensors", "\x10\x00\x00\x00\x00\x00\x00\x00not json at all!");
    assert_resume_refused("ckpt_garbage.safetensors", "ckpt_garbage.safetensors");
    // 3. a tensor of the wrong shape
    tu_copy_checkpoint(good, "ckpt_shape.safetensors", one_row_fewer, "fc.weight", NULL);
    assert_resume_refused("ckpt_shape.safetensors", "fc.weight");
    // 4. a checkpoint of another model
    char dir[64];
    snprintf(dir, sizeof dir, "ckpt_other");
    {
        const char *ov[] = {SMALL_MODEL,          "model.planes=16",           "train.steps=1",
                            "log.progress=never", "checkpoint.dir=ckpt_other", NULL};
        TuTrainer r;
        tu_trainer_start(&r, ov);
        run_steps(&r);
        tu_trainer_stop(&r);
    }
    assert_resume_refused("ckpt_other/last.safetensors", "checkpoint is for model");
    // 5. a missing file
    assert_resume_refused("no_such_checkpoint.safetensors", "no_such_checkpoint.safetensors");
}
END_TEST

// A run continues in the autocast dtype it trained in: a bf16 checkpoint does not resume under fp16.
START_TEST(test_other_autocast_dtype_is_refused) {
    const char *ov[] = {SMALL_MODEL,          "amp.dtype=bfloat16",       "train.steps=2",
                        "log.progress=never", "checkpoint.dir=ckpt_bf16", NULL};
    TuTrainer r;
    tu_trainer_start(&r, ov);
    run_steps(&r);
    tu_trainer_stop(&r);
    assert_resume_refused("ckpt_bf16/last.safetensors",
                          "'amp_dtype' is bfloat16, this run's amp.dtype is float16: a run continues in the "
                          "precision it trained in (resume with amp.dtype=bfloat16;");
}
END_TEST

// torchvision-loadable content: names, shapes in torch layout, running stats and num_batches_tracked.
START_TEST(test_checkpoint_holds_torchvision_state) {
    write_small_checkpoint("ckpt_names");
    char err[512];
    SafetensorsFile *f = st_open("ckpt_names/last.safetensors", err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    const StTensor *conv = st_find(f, "layer1.0.conv2.weight");
    ck_assert_ptr_nonnull(conv);
    ck_assert_int_eq(conv->ndim, 4);
    ck_assert_int_eq(conv->shape[2], 3);  // (C_out, C_in/g, kh, kw): kernel last, as torch
    ck_assert_ptr_nonnull(st_find(f, "layer4.0.downsample.1.running_var"));
    const StTensor *nbt = st_find(f, "bn1.num_batches_tracked");
    ck_assert_ptr_nonnull(nbt);
    ck_assert_int_eq(nbt->dtype, ST_I64);
    int64_t tracked;
    ck_assert_int_eq(st_read(f, "bn1.num_batches_tracked", ST_I64, 0, NULL, &tracked, err, sizeof err), 0);
    ck_assert_int_eq(tracked, 3);
    ck_assert_ptr_nonnull(st_find(f, CHECKPOINT_MOMENTUM_PREFIX "fc.weight"));
    ck_assert_str_eq(st_meta(f, "step"), "3");
    st_close(f);
}
END_TEST

Suite *training_suite(void) {
    Suite *s = suite_create("training");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_resnext50_matches_torchvision_counts);
    tcase_add_loop_test(tc, test_injected_inf_skips_exactly_that_step, 0, 2);
    tcase_add_test(tc, test_nan_injection_also_skips);
    tcase_add_test(tc, test_scale_grows_at_the_interval);
    tcase_add_test(tc, test_amp_step_agrees_with_fp32_step);
    tcase_add_test(tc, test_every_batch_path_trains_on_its_batch);
    tcase_add_loop_test(tc, test_tiny_model_learns, 0, 2);
    tcase_add_loop_test(tc, test_resume_is_bitwise_identical, 0, 2);
    tcase_add_test(tc, test_corrupted_checkpoints_are_refused);
    tcase_add_test(tc, test_other_autocast_dtype_is_refused);
    tcase_add_test(tc, test_checkpoint_holds_torchvision_state);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(training_suite(), 1); }
