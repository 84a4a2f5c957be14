// test_torch_parity.c - amptrain against PyTorch on the same torchvision ResNeXt-50 32x4d weights and batch.
//
// tests/parity/export_torchvision.py (device machine, torch) writes the weights, one batch, and PyTorch's
// logits, loss and gradients in fp64, fp32 and under fp16 and bf16 autocast; AMPTRAIN_PARITY_FILE names
// that file.
//   CPU backend fp32   vs torch fp64   (the reference is trusted through this)
//   CUDA backend fp32  vs torch fp64   (TF32 off)
//   CUDA backend AMP   vs torch fp64   (amp.dtype float16, the loss scaled as torch's GradScaler scales it)
//   CPU and CUDA bf16  vs torch fp64   (amp.dtype bfloat16, unscaled as torch.autocast(bfloat16) runs)
// Each is held to the exact (fp64) answer no looser than 3x what torch itself reaches in the same
// precision on the same batch (printed next to ours): at initialisation, with 4 samples, early
// batch-norm gradients are sums that nearly cancel, so fp32 is off by ~1e-2 there and 16-bit activations
// by far more; comparing AMP with torch AMP directly would compare two kinds of rounding noise.
// and a checkpoint written from the loaded weights, which tests/parity/check_checkpoint.py then loads
// into torchvision. Without the file (CI) or without a GPU for the CUDA cases, the suite reports skipped.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "config/config.h"
#include "dist/dist.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_diag.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "train/trainer.h"

static const char *parity_path;
static int batch;

typedef struct Tolerance {
    double logits, loss, grads, cosine;  // relative errors, and the minimum cosine of the gradient vector
} Tolerance;

// The per-tensor direction check: a tensor whose gradient torch (in the same precision) gets within this
// cosine of fp64's is well determined on the exported batch; ours may make at most PARITY_TENSOR_ANGLES
// times torch's angle with fp64 there. On 4 samples the whole vector's direction is dominated by the
// early layers, where both precisions' roundings are amplified (torch bf16's cosine is about 0.13 on an
// H200), so the whole-vector bound alone says little for bf16; the classifier and the late blocks are
// where a wrong rounding point would show.
#define PARITY_TENSOR_MIN_COSINE 0.9
#define PARITY_TENSOR_ANGLES 2.0

static double cosine_of(const float *a, const float *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t k = 0; k < n; k++)
        ab += (double)a[k] * b[k], aa += (double)a[k] * a[k], bb += (double)b[k] * b[k];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

// amp_dt: the autocast dtype (DTYPE_F32: AMP off).
static void run_case(Backend *be, DType amp_dt, const char *tag, Tolerance tol, const char *checkpoint_out) {
    char batch_ov[64], train_ov[64];
    snprintf(batch_ov, sizeof batch_ov, "data.batch_size=%d", batch);
    snprintf(train_ov, sizeof train_ov, "data.train_size=%d", batch);
    const char *amp_ov = amp_dt == DTYPE_F16    ? "amp.dtype=float16"
                         : amp_dt == DTYPE_BF16 ? "amp.dtype=bfloat16"
                                                : "amp.enabled=false";
    const char *ov[] = {"model.arch=resnext50_32x4d",
                        "model.num_classes=1000",
                        "model.image_size=224",
                        "data.source=synthetic",
                        "data.val_size=0",
                        "data.prefetch=0",
                        "log.metrics=",
                        "checkpoint.dir=",
                        batch_ov,
                        train_ov,
                        amp_ov};
    Config cfg;
    ck_assert_int_eq(config_load(&cfg, NULL, (int)(sizeof ov / sizeof ov[0]), (char **)ov, stderr), 0);
    Comm *comm = comm_single_create();
    Trainer t;
    ck_assert_int_eq(trainer_init(&t, &cfg, be, comm, comm), 0);
    Model *m = &t.model;

    char err[1024];
    SafetensorsFile *f = st_open(parity_path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    float *master = calloc(m->params.padded_numel, sizeof(float)),
          *stats = calloc(m->stats_numel, sizeof(float));
    int64_t tracked;
    ck_assert_msg(checkpoint_read_model(f, m, "", 0, master, stats, &tracked, err, sizeof err) == 0, "%s",
                  err);
    be->to_device(be, m->master, master, m->params.padded_numel * sizeof(float));
    be->to_device(be, m->running, stats, m->stats_numel * sizeof(float));
    model_refresh_compute(m, be);
    size_t n_input;
    float *input = tu_st_read(f, "parity.input", ST_F32, &n_input, NULL);
    int32_t *labels = tu_st_read(f, "parity.labels", ST_I32, NULL, NULL);
    // torch's input is already normalised fp32: the batch passes it as is (identity affine)
    float *input_dev = be->alloc(be, n_input * sizeof(float));
    be->to_device(be, input_dev, input, n_input * sizeof(float));
    be->to_device(be, t.act.labels, labels, (size_t)batch * sizeof(int32_t));
    ModelBatch mb = {.images = input_dev,
                     .images_dt = DTYPE_F32,
                     .affine = pixel_affine_identity(),
                     .labels = t.act.labels,
                     .n = batch};

    // fp16 AMP: the backward is seeded with the same loss scale as torch's (GradScaler-style), and the
    // gradients are divided by it again below. bf16 seeds with its scaler's fixed 1.
    float scale = 1.0f;
    if (amp_dt == DTYPE_F16) {
        float *s = tu_st_read(f, "parity.amp.scale", ST_F32, NULL, NULL);
        scale = s[0];
        free(s);
        ScalerState st = {.scale = scale};
        scaler_write(&t.scaler, be, &st);
    }
    model_forward(m, &t.act, be, &mb, 1);
    model_loss(m, &t.act, be, &mb, 0.0f, amp_dt != DTYPE_F32 ? &t.scaler.state->scale : NULL,
               1.0f / (float)batch);
    model_backward(m, &t.act, be, &mb, 0, NULL, NULL);

    char name[256];
    const char *ref_tag = "fp64";
    snprintf(name, sizeof name, "parity.%s.logits", ref_tag);
    size_t n_logits;
    float *want_logits = tu_st_read(f, name, ST_F32, &n_logits, NULL);
    float *got_logits = tu_backend_floats(be, t.act.logits, m->act_dt, n_logits);
    snprintf(name, sizeof name, "parity.%s.loss", ref_tag);
    float *want_loss = tu_st_read(f, name, ST_F32, NULL, NULL), got_loss;
    be->to_host(be, &got_loss, t.act.loss, sizeof got_loss);
    double logits_err = tu_rel_error(got_logits, want_logits, n_logits);
    double loss_err = fabs(got_loss - want_loss[0]) / fabs(want_loss[0]);

    // Gradients: the whole vector (our layout converted back to torch's per tensor), and the worst tensor.
    float *grads = tu_backend_floats(be, m->grads, m->act_dt, m->params.padded_numel);
    for (size_t k = 0; k < m->params.padded_numel; k++) grads[k] /= scale;
    double sums[3] = {0};  // diff^2, ref^2, got.ref
    double got2 = 0, worst = 0;
    const char *worst_name = "";
    // torch's gradients in the same precision, for the per-tensor direction check
    const char *torch_tag = amp_dt == DTYPE_F16 ? "amp" : amp_dt == DTYPE_BF16 ? "bf16" : "fp32";
    int determined = 0;
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        snprintf(name, sizeof name, "parity.%s.grad.%s", ref_tag, p->name);
        float *want = tu_st_read(f, name, ST_F32, NULL, NULL), *got = malloc(p->numel * sizeof(float));
        snprintf(name, sizeof name, "parity.%s.grad.%s", torch_tag, p->name);
        float *theirs = tu_st_read(f, name, ST_F32, NULL, NULL);
        params_to_torch_layout(p, grads + p->offset, got);
        double e = tu_rel_error(got, want, p->numel);
        if (e > worst) worst = e, worst_name = p->name;
        const double torch_cos = cosine_of(theirs, want, p->numel);
        if (torch_cos >= PARITY_TENSOR_MIN_COSINE) {
            const double ours = cosine_of(got, want, p->numel),
                         bound = cos(fmin(PARITY_TENSOR_ANGLES * acos(fmin(torch_cos, 1.0)), M_PI / 2));
            ck_assert_msg(ours >= bound, "%s %s: gradient cosine with fp64 %.6f, torch's %.6f, bound %.6f",
                          tag, p->name, ours, torch_cos, bound);
            determined++;
        }
        free(theirs);
        for (size_t k = 0; k < p->numel; k++) {
            double d = (double)got[k] - want[k];
            sums[0] += d * d, sums[1] += (double)want[k] * want[k], sums[2] += (double)got[k] * want[k];
            got2 += (double)got[k] * got[k];
        }
        free(want), free(got);
    }
    double grads_err = sqrt(sums[0] / sums[1]), cosine = sums[2] / sqrt(got2 * sums[1]);
    printf(
        "parity %-10s logits %.2e  loss %.6f vs torch %.6f (%.2e)  grads %.2e  cosine %.6f  worst %s %.2e  "
        "%d tensors direction-checked\n",
        tag, logits_err, got_loss, want_loss[0], loss_err, grads_err, cosine, worst_name, worst, determined);
    fflush(stdout);
    // at least the classifier's weight and bias are well determined in every precision
    ck_assert_msg(determined >= 2, "%s: only %d tensors with torch's cosine >= %.2f", tag, determined,
                  PARITY_TENSOR_MIN_COSINE);
    ck_assert_msg(logits_err < tol.logits, "%s logits %g", tag, logits_err);
    ck_assert_msg(loss_err < tol.loss, "%s loss %g", tag, loss_err);
    ck_assert_msg(grads_err < tol.grads, "%s grads %g", tag, grads_err);
    ck_assert_msg(cosine > tol.cosine, "%s cosine %g", tag, cosine);

    if (checkpoint_out) ck_assert_msg(checkpoint_save(&t, checkpoint_out, err, sizeof err) == 0, "%s", err);
    be->free(be, input_dev);
    free(master), free(stats), free(input), free(labels), free(want_logits), free(got_logits),
        free(want_loss), free(grads);
    st_close(f);
    trainer_free(&t);
    comm->destroy(comm);
}

// fp32 against fp32: summation orders differ (cuDNN algorithms, batch-norm reductions), nothing else.
static Tolerance FP32;  // from the file: 3x torch fp32's own error against fp64, at least a small floor
// AMP against AMP: both round activations to fp16, at different places; 4 samples make batch-norm
// gradients cancel-prone, which amplifies that rounding (see test_training.c).
static Tolerance AMP;  // the same from torch AMP's error
// bf16 against bf16 alike, from torch bf16 autocast's error.
static Tolerance BF16;

// The CUDA backend with a 1x1 convolution's batch norm taking its statistics from the convolution's epilogue
// wherever an engine takes the shape (cudnn_conv_bn.cu; fp16 on an H200), so the AMP case checks that path.
static Backend *gpu_or_skip(void) {
    char why[256];
    Backend *be = cuda_backend_create(0, NULL, why, sizeof why);
    ck_assert_msg(be != NULL, "CUDA backend unavailable: %s", why);
    cuda_backend_set_conv_bn(be, 1);
    return be;
}

// The cases, the CPU's first (main runs the CUDA ones only where a GPU is usable).
static const struct {
    const char *tag;
    int cuda;
    DType amp_dt;
    const Tolerance *tol;
    const char *checkpoint_out;  // NULL: none
} parity_cases[] = {
    {"cpu-fp32", 0, DTYPE_F32, &FP32, "parity_cpu.safetensors"},
    {"cpu-bf16", 0, DTYPE_BF16, &BF16, NULL},
    {"cuda-fp32", 1, DTYPE_F32, &FP32, NULL},
    {"cuda-amp", 1, DTYPE_F16, &AMP, "parity_cuda.safetensors"},
    {"cuda-bf16", 1, DTYPE_BF16, &BF16, NULL},
};
#define CPU_CASES 2
#define PARITY_CASES (int)(sizeof parity_cases / sizeof parity_cases[0])

START_TEST(test_matches_torch) {
    Backend *be = parity_cases[_i].cuda ? gpu_or_skip() : cpu_backend_create();
    run_case(be, parity_cases[_i].amp_dt, parity_cases[_i].tag, *parity_cases[_i].tol,
             parity_cases[_i].checkpoint_out);
    be->destroy(be);
}
END_TEST

int main(void) {
    // The GPU first: on the device machine (AMPTRAIN_REQUIRE_GPU=1) a missing GPU fails the suite, even
    // though its CPU case could run.
    char why[256];
    Backend *probe = cuda_backend_create(0, NULL, why, sizeof why);
    if (!probe && tu_gpu_required()) return tu_skip_gpu("test_torch_parity", why);
    int have_gpu = probe != NULL;
    if (probe) probe->destroy(probe);
    parity_path = getenv("AMPTRAIN_PARITY_FILE");
    if (!parity_path)
        return tu_skip("test_torch_parity",
                       "AMPTRAIN_PARITY_FILE is not set (dev/device_suite.sh parity makes it "
                       "with tests/parity/export_torchvision.py on a machine with torch)");
    char err[512];
    SafetensorsFile *f = st_open(parity_path, err, sizeof err);
    if (!f) {
        printf("test_torch_parity: %s\n", err);
        return 1;
    }
    const StTensor *labels = st_find(f, "parity.labels"), *e32 = st_find(f, "parity.torch_fp32_error"),
                   *e16 = st_find(f, "parity.torch_amp_error"), *eb16 = st_find(f, "parity.torch_bf16_error");
    float err32[4], err16[4], errb16[4];
    const int64_t four[1] = {4};  // logits, loss and gradient errors, then the gradient cosine
    if (!labels || !e32 || !e16 || !eb16 ||
        st_read(f, e32->name, ST_F32, 1, four, err32, err, sizeof err) != 0 ||
        st_read(f, e16->name, ST_F32, 1, four, err16, err, sizeof err) != 0 ||
        st_read(f, eb16->name, ST_F32, 1, four, errb16, err, sizeof err) != 0) {
        printf("test_torch_parity: %s lacks parity.labels or torch's error figures (re-export it)\n",
               parity_path);
        return 1;
    }
    batch = (int)labels->shape[0];
    FP32 = (Tolerance){.logits = fmax(3 * err32[0], 1e-5),
                       .loss = fmax(3 * err32[1], 1e-6),
                       .grads = fmax(3 * err32[2], 1e-4),
                       .cosine = 0.999};
    // The AMP loss: fp32 softmax over fp16 logits, which both sides get 2e-2 wrong; held to fp16's 1e-3
    // at least (an H200 run: ours 6.8e-4, torch's 1.1e-4).
    // The AMP gradient's direction: torch AMP's gradient vector makes the angle acos(err16[3]) with the
    // exact (fp64) one; ours may make at most 1.5x that angle (capped at 90 degrees). Not 3x as the other
    // bounds: on the exported batch torch's angle is about 45 degrees (cosine 0.71 on an H200), and 3x
    // that is past 90, a bound of cosine 0 that no gradient can fail; 1.5x asks cosine >= 0.39 there
    // (ours: 0.718). The relative-error bound alone admits any angle up to asin(.grads) (sin of the angle
    // <= the relative error), which its 1e-2 floor and 3x margin make loose; the angle is the part of the
    // error that changes where SGD goes.
    AMP = (Tolerance){.logits = fmax(3 * err16[0], 1e-3),
                      .loss = fmax(3 * err16[1], 1e-3),
                      .grads = fmax(3 * err16[2], 1e-2),
                      .cosine = cos(fmin(1.5 * acos(fmin(err16[3], 1.0)), M_PI / 2))};
    // bf16 by the same rules, the floors 8x fp16's: bf16 keeps 8 significant bits to fp16's 11, so each
    // rounding of an activation, weight or gradient is 8x coarser (the logits and the loss 8e-3, the
    // gradients 8e-2). Where torch bf16's own error is above the floor, 3x it is the bound, as for fp16:
    // both sides round the same tensors to bf16 (the convolutions' and the classifier's inputs, weights and
    // outputs) at the same points of the network, and differ in where each kernel's fp32 sums round. No loss
    // scale on either side: torch.autocast(bfloat16) runs without a GradScaler, amptrain's scale stays 1.
    BF16 = (Tolerance){.logits = fmax(3 * errb16[0], 8e-3),
                       .loss = fmax(3 * errb16[1], 8e-3),
                       .grads = fmax(3 * errb16[2], 8e-2),
                       .cosine = cos(fmin(1.5 * acos(fmin(errb16[3], 1.0)), M_PI / 2))};
    printf(
        "torch vs fp64 on this batch: fp32 logits %.2e loss %.2e gradients %.2e cosine %.6f; AMP logits %.2e "
        "loss %.2e gradients %.2e cosine %.6f (ours must exceed %.6f); bf16 logits %.2e loss %.2e gradients "
        "%.2e cosine %.6f (ours must exceed %.6f)\n",
        err32[0], err32[1], err32[2], err32[3], err16[0], err16[1], err16[2], err16[3], AMP.cosine, errb16[0],
        errb16[1], errb16[2], errb16[3], BF16.cosine);
    st_close(f);
    Suite *s = suite_create("torch_parity");
    TCase *tc = tcase_create("parity");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_matches_torch, 0, have_gpu ? PARITY_CASES : CPU_CASES);
    if (!have_gpu) printf("test_torch_parity: CUDA cases skipped: %s\n", why);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 0);
}
