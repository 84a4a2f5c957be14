// test_recipe_optim.c - the optimizer side of the modern recipe on the CPU backend, through the trainer:
// weight decay by parameter kind (train.norm_weight_decay), clipping of the global gradient norm
// (train.clip_grad_norm) and the EMA of the weights (train.ema_decay, train.ema_every), each against a
// direct computation of PyTorch's / torchvision's rule here, and the EMA through checkpoints.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "core/backend.h"
#include "dist/dist.h"
#include "kernels/cpu/half.h"
#include "tests/test_util.h"
#include "train/lr_schedule.h"
#include "train/trainer.h"

// A small, fast model: one block per stage, 8 planes, 32x32 images, batch 8, no files written; a constant
// learning rate without warm-up unless a test says otherwise.
#define SMALL_MODEL                                                                                          \
    "model.planes=8", "model.base_width=32", "model.cardinality=2", "data.batch_size=8",                     \
        "data.train_size=64", "data.val_size=0", "data.prefetch=0",                                          \
        "log.metrics=", "checkpoint.dir=", "log.progress=never", "train.schedule=constant",                  \
        "train.warmup_steps=0"

// Host copy of n floats of CPU-backend memory (host memory).
static float *copy_floats(const float *src, size_t n) {
    float *dst = malloc((n ? n : 1) * sizeof(float));
    memcpy(dst, src, n * sizeof(float));
    return dst;
}

// The gradients the last step used, unscaled, as doubles (in the autocast dtype under AMP, fp32 without).
static double *unscaled_grads(const Model *m, float scale) {
    size_t n = m->params.padded_numel;
    double *g = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) g[i] = dtype_load(m->grads, m->act_dt, i) / scale;
    return g;
}

// Random masters (the BN biases start at zero, where no decay shows), the compute copy refreshed.
static void randomise_weights(TuTrainer *r, uint64_t seed) {
    Model *m = &r->t.model;
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        tu_fill_uniform(m->master + p->offset, p->numel, seed + (uint64_t)i, -0.5f, 0.5f);
    }
    model_refresh_compute(m, r->be);
}

// ---- weight decay by parameter kind ------------------------------------------------------------------

// One fp32 step from zero momentum: w' = w - lr * (g + wd * w), with wd the kind's decay: train.weight_decay
// for convolution weights, fc.weight and fc.bias, train.norm_weight_decay for BN weights and biases
// (torchvision's set_weight_decay). Each kind is checked to move by its own decay and not by the other.
START_TEST(test_norm_weight_decay_applies_to_bn_parameters_only) {
    const char *ov[] = {SMALL_MODEL,
                        "amp.enabled=false",
                        "train.lr=0.1",
                        "train.weight_decay=0.02",
                        "train.norm_weight_decay=0.005",
                        NULL};
    TuTrainer r;
    tu_trainer_start(&r, ov);
    ck_assert_double_eq(r.cfg.train.norm_weight_decay, 0.005);
    randomise_weights(&r, 7000);
    Model *m = &r.t.model;
    size_t np = m->params.padded_numel;
    float *before = copy_floats(m->master, np);
    tu_train_step(&r.t);
    double *g = unscaled_grads(m, 1.0f);
    const double lr = 0.1;
    int checked[5] = {0};
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        const int norm = p->kind == PARAM_BN_WEIGHT || p->kind == PARAM_BN_BIAS;
        const double wd = norm ? 0.005 : 0.02, other = norm ? 0.02 : 0.005;
        double err = 0, wrong = 0;
        for (size_t k = 0; k < p->numel; k++) {
            size_t j = p->offset + k;
            double want = before[j] - lr * (g[j] + wd * before[j]);
            double with_other = before[j] - lr * (g[j] + other * before[j]);
            err = fmax(err, fabs(m->master[j] - want));
            wrong = fmax(wrong, fabs(m->master[j] - with_other));
        }
        ck_assert_msg(err < 1e-6, "%s: off the direct computation by %g", p->name, err);
        ck_assert_msg(wrong > 1e-4, "%s: the other group's decay fits as well (%g)", p->name, wrong);
        checked[p->kind]++;
    }
    for (int k = 0; k < 5; k++) ck_assert_msg(checked[k] > 0, "parameter kind %d not seen", k);
    free(before), free(g);
    tu_trainer_stop(&r);
}
END_TEST

// Unwritten, norm_weight_decay is weight_decay (torchvision without --norm-weight-decay: one group).
START_TEST(test_norm_weight_decay_defaults_to_weight_decay) {
    Config cfg;
    tu_config(&cfg, (const char *const[]){"train.weight_decay=3e-5", NULL});
    ck_assert_double_eq(cfg.train.norm_weight_decay, 3e-5);
    tu_config(&cfg, (const char *const[]){"train.weight_decay=3e-5", "train.norm_weight_decay=0", NULL});
    ck_assert_double_eq(cfg.train.norm_weight_decay, 0);
}
END_TEST

// The keys' ranges: one line naming the key, status 2.
START_TEST(test_recipe_keys_refuse_values_torch_would_not_take) {
    const char *bad[] = {"train.ema_decay=1", "train.ema_decay=-0.1", "train.ema_every=0",
                         "train.clip_grad_norm=-1", "train.norm_weight_decay=-1e-5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Config cfg;
        char *ov[] = {(char *)bad[i]};
        FILE *err = tmpfile();
        ck_assert_int_eq(config_load(&cfg, NULL, 1, ov, err), 2);
        char line[512] = "";
        rewind(err);
        ck_assert_ptr_nonnull(fgets(line, sizeof line, err));
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(strchr(bad[i], '=') - bad[i]), bad[i]);
        ck_assert_msg(strstr(line, key) != NULL, "'%s' does not name %s", line, key);
        fclose(err);
    }
}
END_TEST

// ---- clipping ----------------------------------------------------------------------------------------

// An AMP step with max_norm far below the gradient norm: the norm the step used is the L2 norm of the
// unscaled gradients (a double sum here), and the weights moved by -lr * (g * c + wd * w) with
// c = max_norm / (norm + 1e-6). lr 10 makes the move large against the masters' fp32 rounding, so a
// factor a per mille off would show.
START_TEST(test_clipped_step_matches_a_direct_computation) {
    const char *ov[] = {SMALL_MODEL,
                        "amp.init_scale=1024",
                        "train.lr=10",
                        "train.weight_decay=1e-3",
                        "train.clip_grad_norm=0.05",
                        NULL};
    TuTrainer r;
    tu_trainer_start(&r, ov);
    Model *m = &r.t.model;
    size_t np = m->params.padded_numel;
    float *before = copy_floats(m->master, np);
    tu_train_step(&r.t);
    ck_assert_int_eq(scaler_read(&r.t.scaler, r.be).skipped_total, 0);
    double *g = unscaled_grads(m, 1024.0f);
    double sum = 0;
    for (size_t i = 0; i < np; i++) sum += g[i] * g[i];
    const double norm = sqrt(sum), got = *r.t.opt.grad_norm;
    ck_assert_msg(fabs(got - norm) <= 1e-6 * norm, "grad norm %.9g, direct %.9g", got, norm);
    ck_assert_msg(norm > 10 * 0.05, "the gradient norm %g would not be clipped", norm);
    const double c = 0.05 / (norm + 1e-6);
    double diff2 = 0, want2 = 0;
    for (size_t i = 0; i < np; i++) {
        double want = -10 * (g[i] * c + 1e-3 * before[i]), moved = (double)m->master[i] - before[i];
        diff2 += (moved - want) * (moved - want), want2 += want * want;
    }
    ck_assert_msg(sqrt(diff2 / want2) < 1e-3, "the clipped step is %g off the direct computation",
                  sqrt(diff2 / want2));
    free(before), free(g);
    tu_trainer_stop(&r);
}
END_TEST

// A max_norm the gradients never reach leaves the factor at exactly 1: the weights equal, bit for bit,
// those of a run without clipping.
START_TEST(test_unreached_max_norm_changes_nothing) {
    const char *with[] = {SMALL_MODEL, "amp.init_scale=1024", "train.clip_grad_norm=1e9", NULL};
    const char *without[] = {SMALL_MODEL, "amp.init_scale=1024", NULL};
    TuTrainer a, b;
    tu_trainer_start(&a, with);
    tu_trainer_start(&b, without);
    tu_train_steps(&a.t, 3);
    tu_train_steps(&b.t, 3);
    size_t np = a.t.model.params.padded_numel;
    ck_assert(memcmp(a.t.model.master, b.t.model.master, np * sizeof(float)) == 0);
    ck_assert(*a.t.opt.grad_norm > 0);
    tu_trainer_stop(&a);
    tu_trainer_stop(&b);
}
END_TEST

// 1 when needle occurs in the line that starts at line.
static int in_line(const char *line, const char *needle) {
    const char *hit = strstr(line, needle), *end = strchr(line, '\n');
    return hit && (!end || hit < end);
}

// 1 when the record starting at line has "grad_norm" as a positive number.
static int positive_grad_norm(const char *line) {
    const char *key = "\"grad_norm\":", *hit = strstr(line, key);
    if (!in_line(line, key)) return 0;
    char *end;
    double v = strtod(hit + strlen(key), &end);
    return end != hit + strlen(key) && isfinite(v) && v > 0;
}

// An inf in the gradients makes the norm non-finite: the step is skipped (weights and momentum bitwise
// unchanged, the scale backed off), the steps after it train on finite weights, and the metrics records
// carry grad_norm (null, with the reason, for the skipped step).
START_TEST(test_nonfinite_norm_skips_the_step) {
    ck_assert_int_eq(system("rm -rf clip_inf && mkdir clip_inf"), 0);
    const char *ov[] = {SMALL_MODEL,           "amp.init_scale=1024",          "train.clip_grad_norm=0.05",
                        "debug.inject_step=1", "debug.inject_value=.inf",      "train.steps=3",
                        "log.every=1",         "log.metrics=clip_inf/m.jsonl", NULL};
    TuTrainer r;
    tu_trainer_start(&r, ov);
    size_t np = r.t.model.params.padded_numel;
    tu_train_step(&r.t);
    float *w = copy_floats(r.t.model.master, np), *mom = copy_floats(r.t.opt.momentum, np);
    tu_train_step(&r.t);
    ck_assert(!isfinite(*r.t.opt.grad_norm));
    ck_assert(memcmp(w, r.t.model.master, np * sizeof(float)) == 0);
    ck_assert(memcmp(mom, r.t.opt.momentum, np * sizeof(float)) == 0);
    ScalerState st = scaler_read(&r.t.scaler, r.be);
    ck_assert_int_eq(st.skipped_total, 1);
    ck_assert_float_eq(st.scale, 512.0f);
    tu_train_step(&r.t);
    ck_assert(isfinite(*r.t.opt.grad_norm));
    ck_assert(memcmp(w, r.t.model.master, np * sizeof(float)) != 0);
    for (size_t i = 0; i < np; i++) ck_assert(isfinite(r.t.model.master[i]));
    free(w), free(mom);
    tu_trainer_stop(&r);

    // The same run through trainer_run, for its records.
    TuTrainer f;
    tu_trainer_start(&f, ov);
    ck_assert_int_eq(trainer_run(&f.t, NULL), 0);
    tu_trainer_stop(&f);
    char *text = tu_read_file("clip_inf/m.jsonl", NULL);
    ck_assert_ptr_nonnull(text);
    const char *s1 = strstr(text, "{\"step\":1,"), *s2 = strstr(text, "{\"step\":2,"),
               *s3 = strstr(text, "{\"step\":3,");
    ck_assert_msg(s1 && s2 && s3, "%s", text);
    ck_assert_msg(positive_grad_norm(s1) && positive_grad_norm(s3), "%s", text);
    ck_assert_msg(in_line(s2, "\"grad_norm\":null") && in_line(s2, "\"not_finite\":{\"grad_norm\":\"inf\"}"),
                  "%s", text);
    free(text);
}
END_TEST

// ---- the EMA -----------------------------------------------------------------------------------------

// torchvision's train.py with the run's numbers: adjust = global batch x every / epochs,
// alpha = min(1, (1 - ema_decay) x adjust), decay = 1 - alpha.
static double torchvision_decay(double ema_decay, int global_batch, int every, int epochs) {
    double adjust = (double)global_batch * every / epochs, alpha = (1.0 - ema_decay) * adjust;
    return 1.0 - (alpha < 1.0 ? alpha : 1.0);
}

// torchvision's ema_avg on fp32 tensors: decay * avg and (1 - decay) * p each rounded to fp32, then added.
static float ema_avg(float decay, float avg, float weight, float p) {
    volatile float a = decay * avg, b = weight * p;
    return a + b;
}

// The rule written out here: after step s (index i = s mod steps_per_epoch in its epoch) with i % every
// == 0, update_parameters: a copy while n_averaged is 0, else decay * avg + (1 - decay) * p in fp32
// (each product rounded); n_averaged += 1, and 0 again after a warm-up step. Weights, statistics and
// num_batches_tracked (int64: the fp32 average truncated) after 13 steps (two epochs of 8 and part of a
// third) must equal the trainer's bit for bit.
START_TEST(test_ema_equals_the_rule_after_n_steps) {
    enum { STEPS = 13, EVERY = 2, WARMUP = 3 };
    const char *ov[] = {SMALL_MODEL,
                        "train.epochs=3",
                        "train.ema_decay=0.9",
                        "train.ema_every=2",
                        "train.warmup_steps=3",
                        "train.clip_grad_norm=1",
                        "train.norm_weight_decay=0",
                        NULL};
    TuTrainer r;
    tu_trainer_start(&r, ov);
    Model *m = &r.t.model;
    ck_assert_int_eq(r.t.steps_per_epoch, 8);
    const double decay = torchvision_decay(0.9, 8, EVERY, 3);
    ck_assert_double_eq(r.t.ema.decay, decay);
    ck_assert(decay > 0.4 && decay < 0.5);  // a real average: neither copy nor frozen
    const float d32 = (float)decay, w32 = (float)(1.0 - decay);
    size_t np = m->params.padded_numel, ns = m->stats_numel;
    float *avg = copy_floats(m->master, np), *avg_stats = copy_floats(m->running, ns);
    long n_averaged = 0;
    int64_t tracked = m->num_batches_tracked;
    int updates = 0, averages = 0;
    for (int s = 0; s < STEPS; s++) {
        tu_train_step(&r.t);
        if ((s % 8) % EVERY != 0) continue;
        updates++;
        averages += n_averaged > 0;
        for (size_t k = 0; k < np; k++)
            avg[k] = n_averaged == 0 ? m->master[k] : ema_avg(d32, avg[k], w32, m->master[k]);
        for (size_t k = 0; k < ns; k++)
            avg_stats[k] = n_averaged == 0 ? m->running[k] : ema_avg(d32, avg_stats[k], w32, m->running[k]);
        tracked = n_averaged == 0 ? m->num_batches_tracked
                                  : (int64_t)ema_avg(d32, (float)tracked, w32, (float)m->num_batches_tracked);
        n_averaged = s < WARMUP ? 0 : n_averaged + 1;
        ck_assert_msg(memcmp(avg, r.t.ema.params, np * sizeof(float)) == 0,
                      "EMA weights differ after step %d", s + 1);
        ck_assert_msg(memcmp(avg_stats, r.t.ema.stats, ns * sizeof(float)) == 0,
                      "EMA statistics differ after step %d", s + 1);
    }
    // Indices 0, 2, 4, 6 of the first epoch and 0, 2, 4 of the second; steps 0 and 2 were warm-up ones,
    // so 4 copied and steps 6, 8, 10, 12 averaged.
    ck_assert_int_eq(updates, 7);
    ck_assert_int_eq(averages, 4);
    ck_assert_int_eq(r.t.ema.n_averaged, n_averaged);
    ck_assert_int_eq(r.t.ema.num_batches_tracked, tracked);
    ck_assert(tracked != m->num_batches_tracked);  // an average, not a copy
    ck_assert(memcmp(avg, m->master, np * sizeof(float)) != 0);
    free(avg), free(avg_stats);
    tu_trainer_stop(&r);
}
END_TEST

// The start-up line names the adjusted decay and how much of the run the average remembers: tiny.yaml's
// global batch 32, every 4 steps, 3 epochs: alpha = 0.001 x 32 x 4 / 3 = 0.042667, decay 0.957333; its
// time constant 4 / 0.042667 = 93.75 steps, 4687.5% of a 2-step run.
START_TEST(test_ema_start_up_line_names_its_memory) {
    char out[8192];
    ck_assert_int_eq(tu_run_cli(AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml backend.device=cpu data.prefetch=0 "
                                                    "log.progress=never log.metrics= checkpoint.dir= "
                                                    "train.steps=2 train.ema_decay=0.999 train.ema_every=4",
                                out, sizeof out),
                     0);
    ck_assert_msg(strstr(out, "EMA of the weights: decay 0.957333 per update every 4 steps (train.ema_decay "
                              "0.999 adjusted for a global batch of 32 over 3 epochs); it remembers 94 "
                              "steps, 4687.5% of the run's 2") != NULL,
                  "%s", out);
    ck_assert_int_eq(tu_run_cli(AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml backend.device=cpu data.prefetch=0 "
                                                    "log.progress=never log.metrics= checkpoint.dir= "
                                                    "train.steps=1",
                                out, sizeof out),
                     0);
    ck_assert_msg(strstr(out, "EMA of the weights") == NULL, "%s", out);  // off: no line
}
END_TEST

// The EMA's evaluation is the evaluation of a model holding its weights and statistics (a second trainer
// given them), and it leaves the raw model as it was (its evaluation again gives the same numbers).
START_TEST(test_ema_evaluation_is_the_averaged_model_s) {
    const char *ov[] = {SMALL_MODEL, "data.val_size=24", "train.ema_decay=0.99", "train.ema_every=1", NULL};
    const char *plain[] = {SMALL_MODEL, "data.val_size=24", NULL};
    TuTrainer r, ref;
    tu_trainer_start(&r, ov);
    tu_train_steps(&r.t, 5);
    EvalRecord first = trainer_evaluate(&r.t);
    ck_assert_int_eq(first.has_ema, 1);
    ck_assert_int_eq(first.samples, 24);
    EvalRecord again = trainer_evaluate(&r.t);
    ck_assert(first.loss == again.loss && first.top1 == again.top1 && first.ema_loss == again.ema_loss);
    ck_assert(first.loss != first.ema_loss);
    Model *m = &r.t.model;
    tu_trainer_start(&ref, plain);
    memcpy(ref.t.model.master, r.t.ema.params, m->params.padded_numel * sizeof(float));
    memcpy(ref.t.model.running, r.t.ema.stats, m->stats_numel * sizeof(float));
    model_refresh_compute(&ref.t.model, ref.be);
    EvalRecord want = trainer_evaluate(&ref.t);
    ck_assert_int_eq(want.has_ema, 0);
    ck_assert_msg(want.loss == first.ema_loss && want.top1 == first.ema_top1 && want.top5 == first.ema_top5,
                  "EMA evaluation loss %.9g top-1 %g, the averaged model's %.9g %g", first.ema_loss,
                  first.ema_top1, want.loss, want.top1);
    tu_trainer_stop(&ref);
    tu_trainer_stop(&r);
}
END_TEST

// ---- checkpoints ---------------------------------------------------------------------------------------

// 2k steps straight vs k, checkpoint, resume, k more with all three features on: masters, momentum, the
// EMA's weights and statistics, n_averaged and its num_batches_tracked bitwise equal. The checkpoint holds
// the EMA under AveragedModel's state-dict names.
START_TEST(test_resume_restores_the_ema_bitwise) {
#define RECIPE                                                                                               \
    SMALL_MODEL, "data.train_size=96", "train.epochs=3", "train.warmup_steps=4", "amp.growth_interval=4",    \
        "train.norm_weight_decay=0", "train.clip_grad_norm=0.5", "train.ema_decay=0.95", "train.ema_every=3"
    const char *straight[] = {RECIPE, "train.steps=20", NULL};
    const char *first_half[] = {RECIPE, "train.steps=10", "checkpoint.dir=ema_resume", NULL};
    const char *second_half[] = {RECIPE, "train.steps=20", "checkpoint.resume=ema_resume/last.safetensors",
                                 NULL};
#undef RECIPE
    TuTrainer a, b, c;
    tu_trainer_start(&a, straight);
    ck_assert_int_eq(trainer_run(&a.t, NULL), 0);
    tu_trainer_start(&b, first_half);
    ck_assert_int_eq(trainer_run(&b.t, NULL), 0);
    ck_assert_int_eq(b.t.step, 10);
    tu_trainer_stop(&b);
    tu_trainer_start(&c, second_half);
    ck_assert_int_eq(c.t.step, 10);
    ck_assert_int_eq(trainer_run(&c.t, NULL), 0);
    ck_assert_int_eq(c.t.step, 20);
    const Model *ma = &a.t.model, *mc = &c.t.model;
    size_t np = ma->params.padded_numel, ns = ma->stats_numel;
    ck_assert(memcmp(ma->master, mc->master, np * sizeof(float)) == 0);
    ck_assert(memcmp(a.t.opt.momentum, c.t.opt.momentum, np * sizeof(float)) == 0);
    ck_assert(memcmp(a.t.ema.params, c.t.ema.params, np * sizeof(float)) == 0);
    ck_assert(memcmp(a.t.ema.stats, c.t.ema.stats, ns * sizeof(float)) == 0);
    ck_assert_int_eq(a.t.ema.n_averaged, c.t.ema.n_averaged);
    ck_assert_int_eq(a.t.ema.num_batches_tracked, c.t.ema.num_batches_tracked);
    ck_assert_int_gt(a.t.ema.n_averaged, 0);

    char err[512];
    SafetensorsFile *f = st_open("ema_resume/last.safetensors", err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    for (int i = 0; i < ma->params.count; i++) {
        char name[PARAM_NAME_MAX + 16];
        snprintf(name, sizeof name, "module.%s", ma->params.items[i].name);
        const StTensor *t = st_find(f, name), *raw = st_find(f, ma->params.items[i].name);
        ck_assert_msg(t && raw && t->ndim == raw->ndim && memcmp(t->shape, raw->shape, sizeof t->shape) == 0,
                      "%s", name);
    }
    ck_assert_ptr_nonnull(st_find(f, "module.bn1.running_mean"));
    ck_assert_ptr_nonnull(st_find(f, "module.layer4.0.downsample.1.running_var"));
    int64_t n_averaged, tracked;
    ck_assert_int_eq(st_read(f, "n_averaged", ST_I64, 0, NULL, &n_averaged, err, sizeof err), 0);
    ck_assert_int_eq(st_read(f, "module.bn1.num_batches_tracked", ST_I64, 0, NULL, &tracked, err, sizeof err),
                     0);
    // Steps 0, 3, 6, 9 updated it; the first two were warm-up steps (n_averaged back to 0).
    ck_assert_int_eq(n_averaged, 2);
    ck_assert_int_lt(tracked, 10);
    st_close(f);
    tu_trainer_stop(&a);
    tu_trainer_stop(&c);
}
END_TEST

// A checkpoint written without the EMA resumed with it on: the average starts from the loaded weights.
START_TEST(test_resume_without_an_ema_starts_it_from_the_weights) {
    const char *writer[] = {SMALL_MODEL, "train.steps=3", "checkpoint.dir=ema_none", NULL};
    const char *reader[] = {SMALL_MODEL, "train.steps=6", "train.ema_decay=0.9",
                            "checkpoint.resume=ema_none/last.safetensors", NULL};
    TuTrainer w, r;
    tu_trainer_start(&w, writer);
    ck_assert_int_eq(trainer_run(&w.t, NULL), 0);
    tu_trainer_stop(&w);
    tu_trainer_start(&r, reader);
    size_t np = r.t.model.params.padded_numel;
    ck_assert(memcmp(r.t.ema.params, r.t.model.master, np * sizeof(float)) == 0);
    ck_assert_int_eq(r.t.ema.n_averaged, 0);
    ck_assert_int_eq(r.t.ema.num_batches_tracked, 3);
    tu_trainer_stop(&r);
}
END_TEST

static Suite *recipe_optim_suite(void) {
    Suite *s = suite_create("recipe_optim");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_norm_weight_decay_applies_to_bn_parameters_only);
    tcase_add_test(tc, test_norm_weight_decay_defaults_to_weight_decay);
    tcase_add_test(tc, test_recipe_keys_refuse_values_torch_would_not_take);
    tcase_add_test(tc, test_clipped_step_matches_a_direct_computation);
    tcase_add_test(tc, test_unreached_max_norm_changes_nothing);
    tcase_add_test(tc, test_nonfinite_norm_skips_the_step);
    tcase_add_test(tc, test_ema_equals_the_rule_after_n_steps);
    tcase_add_test(tc, test_ema_start_up_line_names_its_memory);
    tcase_add_test(tc, test_ema_evaluation_is_the_averaged_model_s);
    tcase_add_test(tc, test_resume_restores_the_ema_bitwise);
    tcase_add_test(tc, test_resume_without_an_ema_starts_it_from_the_weights);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(recipe_optim_suite(), 1); }
