// test_recipe_optim_parity.c - amptrain's optimizer steps against PyTorch's on the same numbers: SGD with
// torchvision's weight-decay groups (train.norm_weight_decay), clip_grad_norm_ (train.clip_grad_norm) and
// torchvision's ExponentialMovingAverage (train.ema_decay, train.ema_every).
//
// tests/parity/recipe_optim.py (device machine, torch) draws a small torchvision ResNeXt, the gradients and
// BN statistics of 10 steps, and runs torch's optimizer over them, fp32 and under GradScaler (one step with
// an inf); AMPTRAIN_RECIPE_OPTIM_FILE names its file. Here the same model is built as a trainer (model.arch
// custom, planes 64), the gradients are written into its gradient buffer (fp16(g x S) under AMP, as the
// backward leaves them), the statistics into its running statistics, and trainer_apply_gradients runs the
// step's optimizer end: verdict, clip norm, SGD, scaler, EMA. Compared, on the CPU backend and, with a GPU,
// on CUDA: each step's gradient norm (relative 1e-5: fp32 sums in other orders), the weights, momentum and
// EMA weights after the last step (relative 1e-5: the clip factor differs by the norm's rounding), the EMA's
// statistics (1e-6: the same three fp32 operations on the same inputs; printed whether bitwise), n_averaged,
// the EMA's num_batches_tracked and torchvision's adjusted decay (exact). Without the file (CI) the suite
// is skipped.
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
#include "kernels/cuda/cuda_backend.h"
#include "tests/test_util.h"
#include "train/lr_schedule.h"
#include "train/trainer.h"

static const char *parity_path;

static double meta_number(SafetensorsFile *f, const char *key) {
    const char *v = st_meta(f, key);
    ck_assert_msg(v != NULL, "%s lacks metadata '%s'", parity_path, key);
    return strtod(v, NULL);
}

// The named tensor as fp32 (or I64 into dst as it is), its element count in *numel.
static void *read_tensor(SafetensorsFile *f, const char *name, size_t *numel) {
    const StTensor *t = st_find(f, name);
    ck_assert_msg(t != NULL, "%s lacks %s", parity_path, name);
    void *dst = malloc(t->nbytes ? t->nbytes : 1);
    char err[512];
    ck_assert_msg(st_read(f, name, t->dtype, t->ndim, t->shape, dst, err, sizeof err) == 0, "%s", err);
    if (numel) *numel = t->numel;
    return dst;
}

// Every parameter's tensor `prefix<param>` into a flat buffer in our layout (padded_numel, gaps zero).
static float *read_params(SafetensorsFile *f, const Model *m, const char *prefix) {
    float *flat = calloc(m->params.padded_numel, sizeof(float));
    char name[256];
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        float *torch_order = read_tensor(f, name, NULL);
        params_from_torch_layout(p, torch_order, flat + p->offset);
        free(torch_order);
    }
    return flat;
}

// Every BN layer's `prefix<bn>.running_mean` / `.running_var` into our statistics layout (stats_numel).
static float *read_stats(SafetensorsFile *f, const Model *m, const char *prefix) {
    float *flat = calloc(m->stats_numel, sizeof(float));
    char name[256];
    for (int i = 0; i < m->n_bn; i++) {
        const ModelBnLayer *bn = m->bn_list[i];
        const char *what[2] = {"running_mean", "running_var"};
        for (int w = 0; w < 2; w++) {
            snprintf(name, sizeof name, "%s%s.%s", prefix, bn->prefix, what[w]);
            float *t = read_tensor(f, name, NULL);
            memcpy(flat + bn->stats_offset + (size_t)w * bn->c, t, (size_t)bn->c * sizeof(float));
            free(t);
        }
    }
    return flat;
}

static float *download(Backend *be, const float *src, size_t n) {
    float *host = malloc((n ? n : 1) * sizeof(float));
    be->to_host(be, host, src, n * sizeof(float));
    return host;
}

static void expect_close(const char *tag, const char *what, const float *got, const float *want, size_t n,
                         double tol) {
    double err = tu_rel_error(got, want, n);
    printf("recipe_optim %-5s %-26s relative %.2e%s\n", tag, what, err,
           memcmp(got, want, n * sizeof(float)) == 0 ? " (bitwise)" : "");
    ck_assert_msg(err < tol, "%s %s: relative error %g, tolerance %g", tag, what, err, tol);
}

static void run_case(Backend *be, const char *tag, int amp) {
    char err[1024];
    SafetensorsFile *f = st_open(parity_path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    const int steps = (int)meta_number(f, "steps"), spe = (int)meta_number(f, "steps_per_epoch");
    const int inf_step = (int)meta_number(f, "inf_step");
    char ov[16][96];
    snprintf(ov[0], sizeof ov[0], "data.batch_size=%d", (int)meta_number(f, "batch"));
    snprintf(ov[1], sizeof ov[1], "data.train_size=%d", (int)meta_number(f, "batch") * spe);
    snprintf(ov[2], sizeof ov[2], "train.epochs=%d", (int)meta_number(f, "epochs"));
    snprintf(ov[3], sizeof ov[3], "train.ema_every=%d", (int)meta_number(f, "ema_every"));
    snprintf(ov[4], sizeof ov[4], "train.ema_decay=%s", st_meta(f, "ema_decay"));
    snprintf(ov[5], sizeof ov[5], "train.warmup_steps=%d", (int)meta_number(f, "warmup_steps"));
    snprintf(ov[6], sizeof ov[6], "train.weight_decay=%s", st_meta(f, "weight_decay"));
    snprintf(ov[7], sizeof ov[7], "train.norm_weight_decay=%s", st_meta(f, "norm_weight_decay"));
    snprintf(ov[8], sizeof ov[8], "train.momentum=%s", st_meta(f, "momentum"));
    snprintf(ov[9], sizeof ov[9], "train.clip_grad_norm=%s", st_meta(f, "clip"));
    snprintf(ov[10], sizeof ov[10], "amp.enabled=%s", amp ? "true" : "false");
    snprintf(ov[11], sizeof ov[11], "amp.init_scale=%s", st_meta(f, "amp_scale"));
    snprintf(ov[12], sizeof ov[12], "model.num_classes=%d", (int)meta_number(f, "classes"));
    const char *fixed[] = {"model.arch=custom",       "model.layers=[1,1,1,1]",
                           "model.planes=64",         "model.cardinality=2",
                           "model.base_width=4",      "model.image_size=32",
                           "data.source=synthetic",   "data.val_size=0",
                           "data.prefetch=0",         "log.metrics=",
                           "checkpoint.dir=",         "train.schedule=constant",
                           "amp.growth_interval=2000"};
    char *all[32];
    int n = 0;
    for (int i = 0; i < 13; i++) all[n++] = ov[i];
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) all[n++] = (char *)fixed[i];
    Config cfg;
    ck_assert_int_eq(config_load(&cfg, NULL, n, all, stderr), 0);
    Comm *comm = comm_single_create();
    Trainer t;
    ck_assert_int_eq(trainer_init(&t, &cfg, be, comm, comm), 0);
    Model *m = &t.model;
    const size_t np = m->params.padded_numel, ns = m->stats_numel;
    ck_assert_int_eq(t.steps_per_epoch, spe);
    ck_assert_msg(t.ema.decay == meta_number(f, "ema_adjusted_decay"), "EMA decay %.17g, torchvision's %s",
                  t.ema.decay, st_meta(f, "ema_adjusted_decay"));

    float *master = calloc(np, sizeof(float)), *stats = calloc(ns, sizeof(float));
    int64_t tracked;
    ck_assert_msg(checkpoint_read_model(f, m, "", 0, master, stats, &tracked, err, sizeof err) == 0, "%s",
                  err);
    be->to_device(be, m->master, master, np * sizeof(float));
    be->to_device(be, m->running, stats, ns * sizeof(float));
    model_refresh_compute(m, be);
    m->num_batches_tracked = tracked;
    ema_restart(&t.ema, be, m);  // torchvision builds the average from the model as loaded
    free(master), free(stats);

    float *lr = read_tensor(f, "recipe.lr", NULL), *want_norms;
    int64_t *step_tracked = read_tensor(f, "recipe.tracked", NULL);
    char name[256];
    snprintf(name, sizeof name, "recipe.%s.norm", amp ? "amp" : "fp32");
    want_norms = read_tensor(f, name, NULL);
    const ParamInfo *inf_param = &m->params.items[params_find(&m->params, st_meta(f, "inf_param"))];
    void *grads = malloc(np * sizeof(float));
    for (int k = 0; k < steps; k++) {
        t.step = k, t.step_in_epoch = k % spe;
        sgd_set_lr(&t.opt, be, lr[k]);
        ema_begin_step(&t.ema, be, t.step_in_epoch);
        snprintf(name, sizeof name, "recipe.stats.%d.", k);
        float *step_stats = read_stats(f, m, name);
        be->to_device(be, m->running, step_stats, ns * sizeof(float));
        snprintf(name, sizeof name, "recipe.grad.%d.", k);
        float *g = read_params(f, m, name);
        const float scale = amp ? scaler_read(&t.scaler, be).scale : 1.0f;
        for (size_t i = 0; i < np; i++) {
            if (amp)
                ((_Float16 *)grads)[i] = (_Float16)(g[i] * scale);
            else
                ((float *)grads)[i] = g[i];
        }
        if (amp && k == inf_step) ((_Float16 *)grads)[inf_param->offset] = (_Float16)INFINITY;
        be->to_device(be, m->grads, grads, np * dtype_size(m->act_dt));
        scaler_begin_step(&t.scaler, be);
        trainer_apply_gradients(&t);
        m->num_batches_tracked = step_tracked[k];
        ema_end_step(&t.ema, lr_in_warmup(&cfg.train, k), m->num_batches_tracked);
        float norm;
        be->to_host(be, &norm, t.opt.grad_norm, sizeof norm);
        printf("recipe_optim %-5s step %d: norm %.9g, torch %.9g\n", tag, k, norm, want_norms[k]);
        if (isfinite(want_norms[k]))
            ck_assert_msg(fabsf(norm - want_norms[k]) <= 1e-5f * want_norms[k],
                          "%s step %d: norm %.9g, torch %.9g", tag, k, norm, want_norms[k]);
        else
            ck_assert_msg(!isfinite(norm), "%s step %d: norm %g, torch's is not finite", tag, k, norm);
        free(step_stats), free(g);
    }
    ScalerState st = scaler_read(&t.scaler, be);
    ck_assert_int_eq(st.skipped_total, amp ? 1 : 0);

    snprintf(name, sizeof name, "recipe.%s.final.", amp ? "amp" : "fp32");
    float *want = read_params(f, m, name), *got = download(be, m->master, np);
    expect_close(tag, "weights", got, want, np, 1e-5);
    free(want), free(got);
    snprintf(name, sizeof name, "recipe.%s.momentum.", amp ? "amp" : "fp32");
    want = read_params(f, m, name), got = download(be, t.opt.momentum, np);
    expect_close(tag, "momentum", got, want, np, 1e-5);
    free(want), free(got);
    snprintf(name, sizeof name, "recipe.%s.ema.module.", amp ? "amp" : "fp32");
    want = read_params(f, m, name), got = download(be, t.ema.params, np);
    expect_close(tag, "EMA weights", got, want, np, 1e-5);
    free(want), free(got);
    want = read_stats(f, m, name), got = download(be, t.ema.stats, ns);
    expect_close(tag, "EMA BN statistics", got, want, ns, 1e-6);
    free(want), free(got);
    snprintf(name, sizeof name, "recipe.%s.ema.n_averaged", amp ? "amp" : "fp32");
    int64_t *n_averaged = read_tensor(f, name, NULL);
    snprintf(name, sizeof name, "recipe.%s.ema.module.bn1.num_batches_tracked", amp ? "amp" : "fp32");
    int64_t *ema_tracked = read_tensor(f, name, NULL);
    printf("recipe_optim %-5s n_averaged %ld (torch %lld), EMA num_batches_tracked %lld (torch %lld)\n", tag,
           t.ema.n_averaged, (long long)*n_averaged, (long long)t.ema.num_batches_tracked,
           (long long)*ema_tracked);
    ck_assert_int_eq(t.ema.n_averaged, *n_averaged);
    ck_assert_int_eq(t.ema.num_batches_tracked, *ema_tracked);
    free(n_averaged), free(ema_tracked), free(lr), free(step_tracked), free(want_norms), free(grads);
    st_close(f);
    trainer_free(&t);
    comm->destroy(comm);
}

START_TEST(test_cpu_matches_torch) {
    Backend *be = cpu_backend_create();
    run_case(be, "cpu", 0);
    run_case(be, "cpu", 1);
    be->destroy(be);
}
END_TEST

START_TEST(test_cuda_matches_torch) {
    char why[256];
    Backend *be = cuda_backend_create(0, NULL, why, sizeof why);
    ck_assert_msg(be != NULL, "CUDA backend unavailable: %s", why);
    run_case(be, "cuda", 0);
    run_case(be, "cuda", 1);
    be->destroy(be);
}
END_TEST

int main(void) {
    return tu_parity_main("test_recipe_optim_parity", "AMPTRAIN_RECIPE_OPTIM_FILE", "recipe_optim.py",
                          &parity_path, test_cpu_matches_torch, test_cuda_matches_torch, 600);
}
