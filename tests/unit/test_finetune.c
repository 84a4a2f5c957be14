// test_finetune.c - a run that starts from a file's weights (model.init) and --eval, on the CPU backend.
// The files are written here as `safetensors.torch.save_file(model.state_dict(), FILE)` writes them: every
// parameter and BN buffer of the model under torchvision's name and shape, fp32 (num_batches_tracked I64),
// no metadata. model.init loads each bitwise into a fresh run (momentum, scaler, position fresh); a
// classifier for another class count keeps the run's own draw, with one line saying so; a missing, foreign,
// misshapen or non-finite tensor is exit 2 naming it, for the run and for --dry-run, with nothing written;
// a resume does not read model.init. --eval of a run's checkpoint gives that run's last evaluation, writes
// nothing but the metrics record asked for on the command line, and evaluates a file's EMA weights (module.*)
// as it evaluates the same weights in a file of their own.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "core/backend.h"
#include "dist/dist.h"
#include "model/resnext.h"
#include "tests/test_util.h"
#include "train/trainer.h"

#define TINY AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml"
// tiny.yaml's model (10 classes, fc 512 -> 10) on 256 learnable samples, 64 for validation.
#define BASE                                                                                                 \
    TINY " backend.device=cpu data.train_size=256 data.val_size=64 data.prefetch=0 log.progress=never"
#define QUICK BASE " log.metrics= checkpoint.dir="

static char out[1 << 16];

// ---- files in torchvision's format ----------------------------------------------------------------------

// What write_state_dict changes on the way (all optional): `victim` gets `shape` (same element count), is
// left out (drop) or gets `first` as its element 0 (is_first), `extra` is added as a (4) fp32 tensor, and
// every name gets `prefix` in front.
typedef struct Change {
    const char *victim;
    int drop;
    int ndim;
    int64_t shape[4];
    float first;
    int is_first;
    const char *extra;
    const char *prefix;
} Change;

// Values a fresh torchvision model could hold, drawn from seed: BN weights and running variances in
// [0.5, 1.5), every other float in [-0.1, 0.1).
static void draw(float *x, size_t n, uint64_t seed, int positive) {
    tu_fill_uniform(x, n, seed, positive ? 0.5f : -0.1f, positive ? 1.5f : 0.1f);
}

static void add_tensor(SafetensorsWriter *w, const Change *c, const char *name, StDtype dtype, int ndim,
                       const int64_t *shape, void *data) {
    char full[128];
    snprintf(full, sizeof full, "%s%s", c && c->prefix ? c->prefix : "", name);
    if (c && c->victim && !strcmp(name, c->victim)) {
        if (c->drop) return;
        if (c->ndim) ndim = c->ndim, shape = c->shape;
        if (c->is_first) ((float *)data)[0] = c->first;
    }
    st_writer_add_copy(w, full, dtype, ndim, shape, data);
}

// The state_dict of tiny.yaml's model with `classes` outputs into w, drawn from seed, with c's changes.
static void add_state_dict(SafetensorsWriter *w, int classes, uint64_t seed, const Change *c) {
    Config cfg;
    char classes_ov[64];
    snprintf(classes_ov, sizeof classes_ov, "model.num_classes=%d", classes);
    tu_config(&cfg, (const char *[]){classes_ov, NULL});
    Model m;
    model_init_shapes(&m, &cfg.model, DTYPE_F16);
    for (int i = 0; i < m.params.count; i++) {
        const ParamInfo *p = &m.params.items[i];
        float *x = malloc(p->numel * sizeof(float));
        draw(x, p->numel, seed * 1000 + (uint64_t)i, p->kind == PARAM_BN_WEIGHT);
        add_tensor(w, c, p->name, ST_F32, p->ndim, p->shape, x);
        free(x);
    }
    for (int i = 0; i < m.n_bn; i++) {
        const ModelBnLayer *bn = m.bn_list[i];
        float *x = malloc((size_t)bn->c * sizeof(float));
        int64_t shape[1] = {bn->c}, tracked = 7;
        char name[128];
        for (int var = 0; var < 2; var++) {
            snprintf(name, sizeof name, "%s.%s", bn->prefix, var ? "running_var" : "running_mean");
            draw(x, (size_t)bn->c, seed * 1000 + 500 + (uint64_t)(2 * i + var), var);
            add_tensor(w, c, name, ST_F32, 1, shape, x);
        }
        free(x);
        snprintf(name, sizeof name, "%s.num_batches_tracked", bn->prefix);
        add_tensor(w, c, name, ST_I64, 0, NULL, &tracked);
    }
    if (c && c->extra) {
        float x[4] = {0};
        st_writer_add_copy(w, c->extra, ST_F32, 1, (const int64_t[]){4}, x);
    }
    model_free(&m, NULL);
}

static void write_state_dict(const char *path, int classes, uint64_t seed, const Change *c) {
    SafetensorsWriter *w = st_writer_open(path);
    add_state_dict(w, classes, seed, c);
    char err[512];
    ck_assert_msg(st_writer_commit(w, err, sizeof err) == 0, "%s", err);
}

// ---- a run in this process ------------------------------------------------------------------------------

static Backend *be;
static Comm *comm;

// A trainer of tiny.yaml's model from model.init=init ("": a fresh draw) in cfg, on the CPU backend.
static void trainer_from(Trainer *t, Config *cfg, const char *init) {
    char init_ov[128];
    snprintf(init_ov, sizeof init_ov, "model.init=%s", init);
    tu_config(cfg, (const char *[]){"backend.device=cpu", "data.train_size=256", "data.val_size=0",
                                    "data.prefetch=0", "log.metrics=", "checkpoint.dir=", init_ov, NULL});
    if (!be) be = cpu_backend_create(), comm = comm_single_create();
    ck_assert_int_eq(trainer_init(t, cfg, be, comm, comm), 0);
}

// Parameter i of the run in torchvision's layout (malloc'd).
static float *param_torch(const Trainer *t, int i) {
    const ParamInfo *p = &t->model.params.items[i];
    float *ours = malloc(p->numel * sizeof(float)), *torch = malloc(p->numel * sizeof(float));
    be->to_host(be, ours, t->model.master + p->offset, p->numel * sizeof(float));
    params_to_torch_layout(p, ours, torch);
    free(ours);
    return torch;
}

// The file's tensor `name` (fp32, n elements) equals `x` bit for bit.
static void assert_file_tensor(SafetensorsFile *f, const char *name, const float *x, size_t n) {
    const StTensor *t = st_find(f, name);
    ck_assert_msg(t && t->numel == n, "%s: not in the file with %zu elements", name, n);
    float *want = malloc(n * sizeof(float));
    char err[512];
    ck_assert_msg(st_read(f, name, ST_F32, t->ndim, t->shape, want, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(memcmp(want, x, n * sizeof(float)) == 0, "%s differs from the file", name);
    free(want);
}

// Every parameter of t is path's tensor bitwise; with `drawn`, fc.weight and fc.bias are drawn's instead.
static void assert_params_from(const char *path, const Trainer *t, const Trainer *drawn) {
    char err[512];
    SafetensorsFile *f = st_open(path, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    const Model *m = &t->model;
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        float *x = param_torch(t, i);
        if (drawn && (i == m->fc_weight || i == m->fc_bias)) {
            float *own = param_torch(drawn, i);
            ck_assert_msg(memcmp(x, own, p->numel * sizeof(float)) == 0, "%s is not the run's own draw",
                          p->name);
            free(own);
        } else {
            assert_file_tensor(f, p->name, x, p->numel);
        }
        free(x);
    }
    st_close(f);
}

// ---- model.init -------------------------------------------------------------------------------------------

START_TEST(init_loads_every_tensor_bitwise) {
    write_state_dict("tv10.safetensors", 10, 1, NULL);
    static Config cfg;
    Trainer t;
    trainer_from(&t, &cfg, "tv10.safetensors");
    assert_params_from("tv10.safetensors", &t, NULL);
    char err[512];
    SafetensorsFile *f = st_open("tv10.safetensors", err, sizeof err);
    ck_assert_msg(f, "%s", err);
    const Model *m = &t.model;
    float *stats = malloc(m->stats_numel * sizeof(float));
    be->to_host(be, stats, m->running, m->stats_numel * sizeof(float));
    for (int i = 0; i < m->n_bn; i++) {
        const ModelBnLayer *bn = m->bn_list[i];
        char name[128];
        snprintf(name, sizeof name, "%s.running_mean", bn->prefix);
        assert_file_tensor(f, name, stats + bn->stats_offset, (size_t)bn->c);
        snprintf(name, sizeof name, "%s.running_var", bn->prefix);
        assert_file_tensor(f, name, stats + bn->stats_offset + bn->c, (size_t)bn->c);
    }
    free(stats);
    st_close(f);
    ck_assert_int_eq(m->num_batches_tracked, 7);
    // what the file does not hold starts fresh: momentum, the scaler, the position
    float *momentum = malloc(m->params.padded_numel * sizeof(float));
    be->to_host(be, momentum, t.opt.momentum, m->params.padded_numel * sizeof(float));
    for (size_t i = 0; i < m->params.padded_numel; i++) ck_assert_float_eq(momentum[i], 0.0f);
    free(momentum);
    ck_assert_float_eq(scaler_read(&t.scaler, be).scale, 65536.0f);
    ck_assert_int_eq(t.step, 0);
    trainer_free(&t);
}
END_TEST

// A file for 7 classes into a model of 10: fc.weight and fc.bias are the run's own draw (as a run without
// model.init draws them), everything else the file's; the run says so in one line and trains.
START_TEST(init_of_other_classes_keeps_the_classifier) {
    write_state_dict("tv7.safetensors", 7, 1, NULL);
    static Config fresh_cfg, init_cfg;
    Trainer fresh, init;
    trainer_from(&fresh, &fresh_cfg, "");
    trainer_from(&init, &init_cfg, "tv7.safetensors");
    assert_params_from("tv7.safetensors", &init, &fresh);
    trainer_free(&fresh);
    trainer_free(&init);
    // 53 parameters and 17 BN layers' 3 buffers, less the classifier's two
    int rc = tu_run_cli(QUICK " train.steps=2 model.init=tv7.safetensors", out, sizeof out);
    ck_assert_msg(rc == 0 &&
                      strstr(out, "model.init: 102 tensors from tv7.safetensors; fc.weight, fc.bias left at "
                                  "their initial values (the file has 7 classes, this model 10)\n") &&
                      strstr(out, "summary: 2 steps"),
                  "exit %d:\n%s", rc, out);
    rc = tu_run_cli(QUICK " train.steps=2 model.init=tv7.safetensors model.num_classes=7", out, sizeof out);
    ck_assert_msg(
        rc == 0 && strstr(out, "model.init: 104 tensors from tv7.safetensors, every tensor of the model\n"),
        "exit %d:\n%s", rc, out);
}
END_TEST

static const struct {
    Change change;
    const char *expect;
} bad_inits[] = {
    {{.victim = "layer2.0.conv2.weight", .ndim = 4, .shape = {32, 8, 9, 1}},
     "model.init: bad.safetensors: tensor 'layer2.0.conv2.weight' is F32 [32, 8, 9, 1], expected F32 [32, 8, 3, 3]"},
    {{.victim = "fc.weight", .ndim = 2, .shape = {20, 256}},
     "model.init: bad.safetensors: tensor 'fc.weight' is F32 [20, 256], expected F32 [10, 512]"},
    {{.victim = "fc.bias", .ndim = 1, .shape = {5}}, "tensor 'fc.bias' is F32 [5], expected F32 [10]"},
    {{.victim = "layer1.0.bn1.bias", .drop = 1},
     "model.init: bad.safetensors: no tensor 'layer1.0.bn1.bias'"},
    {{.victim = "bn1.running_var", .drop = 1}, "no tensor 'bn1.running_var'"},
    {{.victim = "layer4.0.bn3.num_batches_tracked", .drop = 1},
     "no tensor 'layer4.0.bn3.num_batches_tracked'"},
    {{.extra = "layer4.1.conv1.weight"},
     "tensor 'layer4.1.conv1.weight' is no part of this model (model.arch custom, layers [1, 1, 1, 1])"},
    {{.extra = "layer1.0.bn9.running_mean"}, "tensor 'layer1.0.bn9.running_mean' is no part of this model"},
    {{.victim = "layer3.0.conv1.weight", .is_first = 1, .first = NAN},
     "tensor 'layer3.0.conv1.weight' holds NaN at element 0: refusing to load non-finite values"},
    {{.victim = "layer1.0.bn2.running_var", .is_first = 1, .first = -1},
     "tensor 'layer1.0.bn2.running_var' holds the negative variance -1 at element 0"},
};

// Exit 2 with the line, for the run and for --dry-run, and nothing written.
START_TEST(bad_init_is_refused) {
    write_state_dict("bad.safetensors", 10, 3, &bad_inits[_i].change);
    tu_run_shell("rm -rf bad_run", NULL, 0);
    for (int dry = 0; dry < 2; dry++) {
        char args[512];
        snprintf(args, sizeof args,
                 BASE " log.metrics=bad_run/m.jsonl checkpoint.dir=bad_run model.init=bad.safetensors%s",
                 dry ? " --dry-run" : "");
        int rc = tu_run_cli(args, out, sizeof out);
        ck_assert_msg(rc == 2 && strstr(out, bad_inits[_i].expect), "exit %d, want '%s' in:\n%s", rc,
                      bad_inits[_i].expect, out);
        ck_assert_msg(!strstr(out, "step 1/") && !strstr(out, "parameters"), "went on:\n%s", out);
        ck_assert_msg(!tu_file_exists("bad_run"), "bad_run was made:\n%s", out);
    }
}
END_TEST

// A resume takes everything from its checkpoint: model.init is not read (a file that is not there is no
// error), and says so; checkpoint.resume auto with nothing to resume is a fresh start, which reads it.
START_TEST(resume_wins_over_init) {
    tu_run_shell("rm -rf res_run auto_run", NULL, 0);
    ck_assert_int_eq(tu_run_cli(QUICK " train.steps=2 checkpoint.dir=res_run", out, sizeof out), 0);
    int rc = tu_run_cli(
        QUICK " train.steps=3 checkpoint.dir=res_run checkpoint.resume=auto model.init=absent.safetensors",
        out, sizeof out);
    ck_assert_msg(rc == 0 &&
                      strstr(out, "model.init absent.safetensors not read: the weights are the resumed "
                                  "checkpoint's") &&
                      strstr(out, "summary: 3 steps"),
                  "exit %d:\n%s", rc, out);
    write_state_dict("tv10.safetensors", 10, 1, NULL);
    rc = tu_run_cli(
        QUICK " train.steps=2 checkpoint.dir=auto_run checkpoint.resume=auto model.init=tv10.safetensors",
        out, sizeof out);
    ck_assert_msg(rc == 0 && strstr(out, "model.init: 104 tensors from tv10.safetensors"), "exit %d:\n%s", rc,
                  out);
}
END_TEST

// An output that is model.init's file would replace it: refused on a fresh start.
START_TEST(init_is_no_output) {
    tu_run_shell("rm -rf own && mkdir own", NULL, 0);
    write_state_dict("own/last.safetensors", 10, 1, NULL);
    int rc = tu_run_cli(QUICK " train.steps=2 checkpoint.dir=own checkpoint.overwrite=true "
                              "model.init=own/last.safetensors",
                        out, sizeof out);
    ck_assert_msg(rc == 2 && strstr(out, "is the same file as model.init 'own/last.safetensors'"),
                  "exit %d:\n%s", rc, out);
}
END_TEST

// ---- --eval -----------------------------------------------------------------------------------------------

// The text of `"key":value` in the last line of `text` holding `marker` ("" when absent).
static void last_field(const char *text, const char *marker, const char *key, char *value, size_t cap) {
    const char *line = NULL;
    for (const char *s = strstr(text, marker); s; s = strstr(s + 1, marker)) line = s;
    value[0] = '\0';
    if (!line) return;
    const char *end = strchr(line, '\n');
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *at = strstr(line, quoted);
    if (!at || (end && at > end)) return;
    at += strlen(quoted);
    size_t n = strcspn(at, ",}\n");
    snprintf(value, cap, "%.*s", (int)(n < cap ? n : cap - 1), at);
}

// The evaluation record's loss, top1, top5 and samples in one string.
static void eval_result(const char *jsonl, const char *marker, char *result, size_t cap) {
    char *text = tu_read_file(jsonl, NULL);
    ck_assert_msg(text != NULL, "no %s", jsonl);
    char loss[32], top1[32], top5[32], samples[32];
    last_field(text, marker, "loss", loss, sizeof loss);
    last_field(text, marker, "top1", top1, sizeof top1);
    last_field(text, marker, "top5", top5, sizeof top5);
    last_field(text, marker, "samples", samples, sizeof samples);
    ck_assert_msg(loss[0] && top1[0] && samples[0], "no evaluation with %s in %s:\n%s", marker, jsonl, text);
    snprintf(result, cap, "loss %s top1 %s top5 %s samples %s", loss, top1, top5, samples);
    free(text);
}

// The checkpoint of a one-epoch run, evaluated alone, gives the run's own last evaluation (the same
// weights and BN statistics, the same batches), and --eval writes nothing else: no checkpoint, no run
// folder, not the config's log.metrics (tiny.yaml's runs/tiny/metrics.jsonl).
START_TEST(eval_of_a_checkpoint_is_the_runs_last_evaluation) {
    tu_run_shell("rm -rf ev_run ev_out runs", NULL, 0);
    ck_assert_int_eq(tu_run_cli(QUICK
                                " train.epochs=1 checkpoint.dir=ev_run log.metrics=ev_run/metrics.jsonl",
                                out, sizeof out),
                     0);
    char before[4096], after[4096];
    tu_run_shell("ls -lA --time-style=full-iso ev_run", before, sizeof before);
    int rc = tu_run_cli(BASE
                        " --eval checkpoint.resume=ev_run/last.safetensors log.metrics=ev_out/eval.jsonl",
                        out, sizeof out);
    ck_assert_msg(rc == 0 && strstr(out, "eval  ev_run/last.safetensors  epoch 1  step 8  loss "),
                  "exit %d:\n%s", rc, out);
    char trained[256], evaluated[256];
    eval_result("ev_run/metrics.jsonl", "\"eval\":true", trained, sizeof trained);
    eval_result("ev_out/eval.jsonl", "\"file\":\"ev_run/last.safetensors\",\"weights\":\"model\"", evaluated,
                sizeof evaluated);
    ck_assert_str_eq(evaluated, trained);
    tu_run_shell("ls -lA --time-style=full-iso ev_run", after, sizeof after);
    ck_assert_str_eq(after, before);
    // without log.metrics on the command line: the line alone; checkpoint.resume auto finds last (model.init
    // not read), or else evaluates model.init
    rc = tu_run_cli(BASE " --eval checkpoint.dir=ev_run checkpoint.resume=auto model.init=absent.safetensors",
                    out, sizeof out);
    ck_assert_msg(rc == 0 && strstr(out, "eval  ev_run/last.safetensors  epoch 1") &&
                      strstr(out,
                             "model.init absent.safetensors not read: --eval evaluates checkpoint.resume "
                             "ev_run/last.safetensors"),
                  "exit %d:\n%s", rc, out);
    rc = tu_run_cli(BASE
                    " --eval checkpoint.dir=no_run checkpoint.resume=auto model.init=ev_run/last.safetensors",
                    out, sizeof out);
    ck_assert_msg(rc == 0 && strstr(out, "eval  ev_run/last.safetensors  epoch 1"), "exit %d:\n%s", rc, out);
    ck_assert_msg(!tu_file_exists("no_run"), "--eval made checkpoint.dir:\n%s", out);
    ck_assert_msg(!tu_file_exists("runs"), "--eval wrote the config's outputs:\n%s", out);
    // a second --eval appends its record
    ck_assert_int_eq(tu_run_cli(BASE
                                " --eval model.init=ev_run/last.safetensors log.metrics=ev_out/eval.jsonl",
                                out, sizeof out),
                     0);
    char *text = tu_read_file("ev_out/eval.jsonl", NULL);
    int records = 0;
    for (const char *s = strstr(text, "\"eval\":true"); s; s = strstr(s + 1, "\"eval\":true")) records++;
    ck_assert_msg(records == 2, "%s", text);
    free(text);
}
END_TEST

// A file with EMA weights as AveragedModel's state_dict names them (module.*, n_averaged): --eval reports
// the model's and the EMA weights', each as --eval reports the same weights in a file of their own.
START_TEST(eval_reports_ema_weights) {
    write_state_dict("ema_a.safetensors", 10, 4, NULL);
    write_state_dict("ema_b.safetensors", 10, 5, NULL);
    SafetensorsWriter *w = st_writer_open("ema_ab.safetensors");
    add_state_dict(w, 10, 4, NULL);
    add_state_dict(w, 10, 5, &(Change){.prefix = "module."});
    int64_t n_averaged = 12;
    st_writer_add_copy(w, "n_averaged", ST_I64, 0, NULL, &n_averaged);
    char err[512];
    ck_assert_msg(st_writer_commit(w, err, sizeof err) == 0, "%s", err);
    tu_run_shell("rm -f ema.jsonl", NULL, 0);
    const char *files[] = {"ema_a", "ema_b", "ema_ab"};
    for (int i = 0; i < 3; i++) {
        char args[512];
        snprintf(args, sizeof args, BASE " --eval model.init=%s.safetensors log.metrics=ema.jsonl", files[i]);
        int rc = tu_run_cli(args, out, sizeof out);
        ck_assert_msg(rc == 0, "%s: exit %d:\n%s", files[i], rc, out);
    }
    ck_assert_msg(strstr(out, "eval  ema_ab.safetensors  epoch 0  step 0  loss ") &&
                      strstr(out, "eval  ema_ab.safetensors (EMA weights)  epoch 0  step 0  loss "),
                  "%s", out);
    char a[256], b[256], model[256], ema[256];
    eval_result("ema.jsonl", "\"file\":\"ema_a.safetensors\",\"weights\":\"model\"", a, sizeof a);
    eval_result("ema.jsonl", "\"file\":\"ema_b.safetensors\",\"weights\":\"model\"", b, sizeof b);
    eval_result("ema.jsonl", "\"file\":\"ema_ab.safetensors\",\"weights\":\"model\"", model, sizeof model);
    eval_result("ema.jsonl", "\"file\":\"ema_ab.safetensors\",\"weights\":\"ema\"", ema, sizeof ema);
    ck_assert_str_eq(model, a);
    ck_assert_str_eq(ema, b);
    ck_assert_str_ne(a, b);
}
END_TEST

static const struct {
    const char *args, *expect;
} bad_evals[] = {
    {" --eval", "--eval needs the weights to evaluate: checkpoint.resume=FILE or model.init=FILE"},
    {" --eval model.init=tv10.safetensors data.val_size=0",
     "--eval: the config has no validation split (data.source learnable with data.val_size 0)"},
    {" --eval model.init=tv10.safetensors model.num_classes=7",
     "--eval: tv10.safetensors: tensor 'fc.weight' classifies 10 classes, this model 7: set model.num_classes=10"},
    {" --eval checkpoint.resume=absent.safetensors", "--eval: absent.safetensors: cannot open"},
    {" --eval checkpoint.dir=empty_dir checkpoint.resume=auto",
     "--eval needs the weights to evaluate: checkpoint.resume auto found no checkpoint in empty_dir, and model.init is "
     "not set"},
    {" --eval --dry-run model.init=tv10.safetensors",
     "--eval evaluates a file; it does not go with --dry-run"},
};

START_TEST(bad_eval_is_refused) {
    write_state_dict("tv10.safetensors", 10, 1, NULL);
    char args[512];
    snprintf(args, sizeof args, QUICK "%s", bad_evals[_i].args);
    int rc = tu_run_cli(args, out, sizeof out);
    ck_assert_msg(rc == 2 && strstr(out, bad_evals[_i].expect), "exit %d, want '%s' in:\n%s", rc,
                  bad_evals[_i].expect, out);
    ck_assert_msg(!strstr(out, "eval  "), "evaluated:\n%s", out);
}
END_TEST

static Suite *finetune_suite(void) {
    Suite *s = suite_create("finetune");
    TCase *tc = tcase_create("init_and_eval");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, init_loads_every_tensor_bitwise);
    tcase_add_test(tc, init_of_other_classes_keeps_the_classifier);
    tcase_add_loop_test(tc, bad_init_is_refused, 0, (int)(sizeof bad_inits / sizeof bad_inits[0]));
    tcase_add_test(tc, resume_wins_over_init);
    tcase_add_test(tc, init_is_no_output);
    tcase_add_test(tc, eval_of_a_checkpoint_is_the_runs_last_evaluation);
    tcase_add_test(tc, eval_reports_ema_weights);
    tcase_add_loop_test(tc, bad_eval_is_refused, 0, (int)(sizeof bad_evals / sizeof bad_evals[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(finetune_suite(), 1); }
