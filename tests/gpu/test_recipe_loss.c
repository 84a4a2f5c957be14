// test_recipe_loss.c - label smoothing, MixUp and CutMix against PyTorch and torchvision on the same draws.
//
// tests/parity/recipe_loss.py (device machine, torch) writes random logits with torch's cross-entropy loss
// and gradient (float64) for hard and MixUp targets with and without label_smoothing, and a normalised batch
// with torchvision.transforms.v2.MixUp / CutMix's outputs for fixed lambdas and box centres;
// AMPTRAIN_RECIPE_LOSS_FILE names that file. Each backend (the CPU; CUDA where there is a GPU) then runs:
//   softmax_xent, fp32 and fp16 logits     vs torch float64 on the same values: loss and gradient 1e-5 (fp32),
//                                          the gradient 1e-2 in fp16 (its one rounding to fp16)
//   batch_mix_cutmix's box and lambda      vs torchvision's, through its output: the pixels pasted and the
//   and batch_mix on the fp32 batch           soft targets (exact up to 1e-6: the same fp32 operations)
//   batch_mix on the batch rounded to fp16 vs torchvision's fp32 output rounded to fp16: within 1.5 x 2^-10 x
//                                          the largest of the two inputs and the output (half an fp16 step
//                                          each for the inputs' rounding, ours and torchvision's)
// Without the file (CI) the suite reports skipped; without a GPU it runs the CPU and says so (a failure with
// AMPTRAIN_REQUIRE_GPU=1).
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors.h"
#include "core/backend.h"
#include "data/batch_mix.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/test_util.h"

static const char *parity_path;

typedef struct Tensor {
    void *data;  // host
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
} Tensor;

static Tensor tensor_read(SafetensorsFile *f, const char *name, StDtype dt) {
    Tensor t;
    t.data = tu_st_read(f, name, dt, &t.numel, t.shape);
    return t;
}

static Tensor tensor_f32(SafetensorsFile *f, const char *fmt, int k, const char *tag) {
    char name[128];
    snprintf(name, sizeof name, fmt, k, tag);
    return tensor_read(f, name, ST_F32);
}

// Host data (bytes) in backend memory.
static void *upload(Backend *be, const void *host, size_t bytes) {
    void *dev = be->alloc(be, bytes);
    be->to_device(be, dev, host, bytes);
    return dev;
}

// fp32 values as dt in backend memory.
static void *upload_as(Backend *be, const float *v, size_t n, DType dt) {
    void *f32 = upload(be, v, n * sizeof(float)), *dst = be->alloc(be, n * dtype_size(dt));
    be->cast(be, dst, dt, f32, DTYPE_F32, n);
    be->free(be, f32);
    return dst;
}

// The largest |got - want| / (2^-10 max(|x|, |x_rolled|, |want|, 2^-14)) over a batch (n, image): in fp16 steps.
static double fp16_steps(const float *got, const float *want, const float *x, int n, size_t image) {
    double m = 0;
    for (int i = 0; i < n; i++)
        for (size_t p = 0; p < image; p++) {
            const size_t at = (size_t)i * image + p;
            const double mag = fmax(fmax(fabs(x[at]), fabs(x[(size_t)((i + n - 1) % n) * image + p])),
                                    fmax(fabs(want[at]), 0x1p-14));
            m = fmax(m, fabs((double)got[at] - want[at]) / (0x1p-10 * mag));
        }
    return m;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

// ---- cross-entropy ---------------------------------------------------------------------------------------------

static void check_xent(Backend *be, SafetensorsFile *f) {
    Tensor logits = tensor_read(f, "xent.logits", ST_F32), labels = tensor_read(f, "xent.labels", ST_I32);
    Tensor cases = tensor_read(f, "xent.cases", ST_F32);
    const int n = (int)logits.shape[0], classes = (int)logits.shape[1];
    const float *cv = cases.data;
    int32_t *labels_dev = upload(be, labels.data, (size_t)n * sizeof(int32_t));
    BatchMix *mix_dev = be->alloc(be, sizeof(BatchMix));
    float *loss_dev = be->alloc(be, sizeof(float));
    for (int k = 0; k < (int)cases.shape[0]; k++) {
        const float smoothing = cv[2 * k];
        const double lam = cv[2 * k + 1];
        if (lam >= 0) {
            const BatchMix m = batch_mix_mixup(lam);
            be->to_device(be, mix_dev, &m, sizeof m);
        }
        for (int f16 = 0; f16 < 2; f16++) {
            const DType dt = f16 ? DTYPE_F16 : DTYPE_F32;
            Tensor want_loss = tensor_f32(f, "xent.%d.%s.loss", k, f16 ? "fp16" : "fp32");
            Tensor want_grad = tensor_f32(f, "xent.%d.%s.grad", k, f16 ? "fp16" : "fp32");
            void *z = upload_as(be, logits.data, logits.numel, dt),
                 *dz = be->alloc(be, logits.numel * dtype_size(dt));
            be->softmax_xent(be, n, classes, dt, z, labels_dev, lam >= 0 ? mix_dev : NULL, smoothing,
                             loss_dev, dz, NULL, 1.0f / n);
            float loss;
            be->to_host(be, &loss, loss_dev, sizeof loss);
            float *grad = tu_backend_floats(be, dz, dt, logits.numel);
            const float want = *(const float *)want_loss.data;
            const double loss_err = fabs(loss - want) / fabs(want);
            const double grad_err = tu_rel_error(grad, want_grad.data, logits.numel);
            printf(
                "  %s xent case %d (smoothing %g, %s) %s: loss %.6f torch %.6f (rel %.1e), gradient rel %.1e\n",
                be->name, k, smoothing, lam >= 0 ? "mixed" : "hard", dtype_name(dt), loss, want, loss_err,
                grad_err);
            ck_assert_msg(loss_err < 1e-5, "%s case %d %s: loss %.7f, torch's %.7f", be->name, k,
                          dtype_name(dt), loss, want);
            ck_assert_msg(grad_err < (f16 ? 1e-2 : 1e-5), "%s case %d %s: gradient %.2e from torch's",
                          be->name, k, dtype_name(dt), grad_err);
            be->free(be, z), be->free(be, dz);
            free(grad), free(want_loss.data), free(want_grad.data);
        }
    }
    be->free(be, labels_dev), be->free(be, mix_dev), be->free(be, loss_dev);
    free(logits.data), free(labels.data), free(cases.data);
}

// ---- MixUp and CutMix ------------------------------------------------------------------------------------------

static void check_mix(Backend *be, SafetensorsFile *f) {
    Tensor images = tensor_read(f, "mix.images", ST_F32), labels = tensor_read(f, "mix.labels", ST_I32);
    Tensor cases = tensor_read(f, "mix.cases", ST_F32);
    const int n = (int)images.shape[0], h = (int)images.shape[1], w = (int)images.shape[2],
              c = (int)images.shape[3];
    const int32_t *lab = labels.data;
    const float *cv = cases.data;
    BatchMix *mix_dev = be->alloc(be, sizeof(BatchMix));
    for (int k = 0; k < (int)cases.shape[0]; k++) {
        const int cutmix = cv[4 * k] != 0;
        const double lam = cv[4 * k + 1];
        const BatchMix m = cutmix ? batch_mix_cutmix(lam, (int)cv[4 * k + 2], (int)cv[4 * k + 3], h, w)
                                  : batch_mix_mixup(lam);
        be->to_device(be, mix_dev, &m, sizeof m);
        Tensor want = tensor_f32(f, "mix.%d.%s", k, "images"),
               want16 = tensor_f32(f, "mix.%d.%s", k, "images_fp16");
        Tensor targets = tensor_f32(f, "mix.%d.%s", k, "targets");
        for (int f16 = 0; f16 < 2; f16++) {
            const DType dt = f16 ? DTYPE_F16 : DTYPE_F32;
            void *x = upload_as(be, images.data, images.numel, dt);
            be->batch_mix(be, dt, x, n, h, w, c, mix_dev);
            float *got = tu_backend_floats(be, x, dt, images.numel);
            const double diff = f16 ? fp16_steps(got, want16.data, images.data, n, (size_t)h * w * c)
                                    : max_abs_diff(got, want.data, images.numel);
            printf("  %s %s case %d (lambda %g -> %g, box x [%d, %d) y [%d, %d)) %s: max difference %.2e%s\n",
                   be->name, cutmix ? "CutMix" : "MixUp", k, lam, m.lam, m.x1, m.x2, m.y1, m.y2,
                   dtype_name(dt), diff, f16 ? " fp16 steps" : "");
            ck_assert_msg(diff <= (f16 ? 1.5 : 1e-6),
                          "%s case %d %s: the mixed batch is %.2e%s from torchvision's", be->name, k,
                          dtype_name(dt), diff, f16 ? " fp16 steps" : "");
            be->free(be, x);
            free(got);
        }
        // The soft targets amptrain's loss uses (backend_ops.def softmax_xent), as torchvision's _mixup_label
        // computes them: rolled one-hot x rest + one-hot x lam, in fp32.
        const int classes = (int)targets.shape[1];
        float *t = calloc((size_t)n * classes, sizeof(float));
        for (int i = 0; i < n; i++) {
            t[i * classes + lab[(i + n - 1) % n]] = m.rest;
            t[i * classes + lab[i]] += m.lam;
        }
        const double tdiff = max_abs_diff(t, targets.data, (size_t)n * classes);
        ck_assert_msg(tdiff <= 1e-7, "case %d: targets %.2e from torchvision's (lambda %g)", k, tdiff, m.lam);
        free(t), free(want.data), free(want16.data), free(targets.data);
    }
    be->free(be, mix_dev);
    free(images.data), free(labels.data), free(cases.data);
}

static void run_backend(Backend *be) {
    char err[512];
    SafetensorsFile *f = st_open(parity_path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    check_xent(be, f);
    check_mix(be, f);
    st_close(f);
}

START_TEST(test_cpu_matches_torch) {
    Backend *be = cpu_backend_create();
    run_backend(be);
    be->destroy(be);
}
END_TEST

START_TEST(test_cuda_matches_torch) {
    char why[256];
    Backend *be = cuda_backend_create(0, NULL, why, sizeof why);
    ck_assert_msg(be != NULL, "CUDA backend unavailable: %s", why);
    run_backend(be);
    be->destroy(be);
}
END_TEST

int main(void) {
    return tu_parity_main("test_recipe_loss", "AMPTRAIN_RECIPE_LOSS_FILE", "recipe_loss.py", &parity_path,
                          test_cpu_matches_torch, test_cuda_matches_torch, 300);
}
