// test_images_gpu.c - Backend.input_decode on CUDA (nvJPEG, the resampling kernels, the augmentation kernel)
// against the CPU reference (image/image_job_decode.h) on the same ImageJobs. Reports skipped without a GPU or
// when the build has no nvJPEG (CMake's "amptrain: nvJPEG ..." line says which).
//
// Bounds: the decoded pixels are nvJPEG's, not libjpeg-turbo's; amptrain promises decoded pixels equal to
// libjpeg-turbo's (torchvision's CPU decode) within 1 per channel, checked here through a geometry that copies
// a window of the image unchanged (a resize to the same size has one tap of weight 1). Through the training
// and validation transforms the two passes' roundings may each add 1 more: at most 3 per channel, and a mean
// absolute difference under 0.5. TrivialAugmentWide's ops and RandomErasing run on the decoded pixels with the
// CPU's own arithmetic (image/image_augment_ops.h), so they are held bitwise to the CPU's ops applied to the
// GPU's pixels.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "core/backend.h"
#include "data/data_rng.h"
#include "image/image_augment.h"
#include "image/image_transform.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/image_fixtures.h"
#include "tests/test_util.h"

static Backend *cpu, *gpu;

#define SIDE 64
#define FIXTURES 7

typedef struct Fixture {
    const char *what;
    int w, h, channels, subsamp, progressive;
    size_t cut;  // 2: the file is cut in half (its header parses, its data does not decode)
} Fixture;

static const Fixture FIX[FIXTURES] = {
    {"baseline 4:2:0 500x375", 500, 375, 3, TJSAMP_420, 0, 0},
    {"progressive 4:2:2 301x199", 301, 199, 3, TJSAMP_422, 1, 0},
    {"grayscale 97x211", 97, 211, 1, TJSAMP_GRAY, 0, 0},
    {"baseline 4:4:4 256x256", 256, 256, 3, TJSAMP_444, 0, 0},
    {"CMYK 120x90", 120, 90, 4, TJSAMP_444, 0, 0},
    {"odd 4:2:0 65x67", 65, 67, 3, TJSAMP_420, 0, 0},
    {"cut 4:2:0 333x250", 333, 250, 3, TJSAMP_420, 0, 2},
};

static uint8_t *jpeg_bytes[FIXTURES];
static size_t jpeg_len[FIXTURES];

// Made inside the first test that runs (fx_jpeg's assertions must run inside a test to be reported).
static void make_fixtures(void) {
    if (jpeg_bytes[0]) return;
    for (int k = 0; k < FIXTURES; k++) {
        const Fixture *f = &FIX[k];
        uint8_t *src = f->channels == 3 ? fx_noise(f->w, f->h, 90 + (uint64_t)k)
                                        : fx_pattern(f->w, f->h, f->channels, k);
        jpeg_bytes[k] = fx_jpeg(src, f->w, f->h, f->channels, 90, f->subsamp, f->progressive, &jpeg_len[k]);
        if (f->cut) jpeg_len[k] /= f->cut;
        free(src);
    }
}

// Both backends decode the same jobs; returns the largest difference and sets *mean over the jobs both
// decoded, and failed flags (which must agree).
static int decode_both(const ImageJob *jobs, int n, double *mean, uint8_t *failed_cpu) {
    const size_t bytes = (size_t)SIDE * SIDE * 3;
    uint8_t *want = calloc((size_t)n, bytes), *got = calloc((size_t)n, bytes),
            *failed_gpu = calloc((size_t)n, 1);
    void *dev = gpu->alloc(gpu, (size_t)n * bytes);
    cpu->input_decode(cpu, 0, want, n, SIDE, jobs, failed_cpu);
    gpu->input_decode(gpu, 0, dev, n, SIDE, jobs, failed_gpu);
    gpu->input_upload_wait(gpu, 0);
    gpu->to_host(gpu, got, dev, (size_t)n * bytes);
    int worst = 0, disagree = -1;
    double sum = 0;
    size_t counted = 0;
    for (int i = 0; i < n; i++) {
        if (failed_gpu[i] != failed_cpu[i] && disagree < 0) disagree = i;
        if (failed_cpu[i] || failed_gpu[i]) continue;
        int job_worst = 0;
        for (size_t b = 0; b < bytes; b++) {
            const int d = abs((int)got[i * bytes + b] - (int)want[i * bytes + b]);
            job_worst = d > job_worst ? d : job_worst;
            sum += d;
            counted++;
        }
        if (job_worst > 1)
            printf("  job %d (sample %d): largest difference %d\n", i, jobs[i].sample, job_worst);
        worst = job_worst > worst ? job_worst : worst;
    }
    *mean = counted ? sum / (double)counted : 0.0;
    // the pixels' differences are printed before the verdicts are asserted
    if (disagree >= 0)
        printf(
            "job %d: failed %d on the GPU, %d on the CPU (pixels of the jobs both decoded: largest difference %d, "
            "mean %.4f)\n",
            disagree, failed_gpu[disagree], failed_cpu[disagree], worst, *mean);
    ck_assert_msg(disagree < 0, "job %d: failed %d on the GPU, %d on the CPU", disagree,
                  disagree < 0 ? 0 : failed_gpu[disagree], disagree < 0 ? 0 : failed_cpu[disagree]);
    gpu->free(gpu, dev);
    free(want), free(got), free(failed_gpu);
    return worst;
}

static ImageJob job_of(int k, ImageGeometry g) {
    return (ImageJob){jpeg_bytes[k], jpeg_len[k], k, FIX[k].w, FIX[k].h, g, {0}};
}

// A window of the image copied unchanged: the decoders' pixels side by side.
START_TEST(decoded_pixels_within_one) {
    make_fixtures();
    ImageJob jobs[FIXTURES];
    for (int k = 0; k < FIXTURES; k++) {
        const Fixture *f = &FIX[k];
        ImageGeometry g = {{0, 0, f->h, f->w},
                           f->w,
                           f->h,
                           {(f->h - SIDE) / 2, (f->w - SIDE) / 3, SIDE, SIDE},
                           0};
        jobs[k] = job_of(k, g);
    }
    uint8_t failed[FIXTURES];
    double mean;
    const int worst = decode_both(jobs, FIXTURES, &mean, failed);
    for (int k = 0; k < FIXTURES; k++)
        ck_assert_msg(failed[k] == (FIX[k].cut != 0), "%s: failed %d", FIX[k].what, failed[k]);
    printf("decoded pixels, nvJPEG vs libjpeg-turbo: largest difference %d, mean %.4f\n", worst, mean);
    ck_assert_msg(worst <= 1, "decoded pixels differ by %d (mean %.4f)", worst, mean);
}
END_TEST

// The training transform (RandomResizedCrop boxes and flips from several draws) and the validation transform,
// in one batch.
START_TEST(transforms_match_the_cpu) {
    make_fixtures();
    enum { DRAWS = 6 };
    ImageJob jobs[FIXTURES * (DRAWS + 1)];
    int n = 0;
    for (int k = 0; k < FIXTURES; k++) {
        for (uint32_t d = 0; d < DRAWS; d++) {
            Rng rng;
            data_rng_seed(&rng, 3, DATA_STREAM_AUGMENT, d, (uint32_t)k);
            TrainCrop crop = image_train_crop_draw(FIX[k].w, FIX[k].h, CROP_SCALE_TORCHVISION, &rng);
            jobs[n++] = job_of(k, image_train_geometry(crop, SIDE));
        }
        jobs[n++] = job_of(k, image_val_geometry(FIX[k].w, FIX[k].h, image_val_resize(SIDE), SIDE));
    }
    uint8_t failed[FIXTURES * (DRAWS + 1)];
    double mean;
    const int worst = decode_both(jobs, n, &mean, failed);
    int failures = 0;
    for (int i = 0; i < n; i++) failures += failed[i];
    ck_assert_int_eq(failures, DRAWS + 1);  // the cut file's jobs, and only those
    printf("transforms, GPU vs CPU: largest difference %d, mean %.4f over %d jobs\n", worst, mean,
           n - failures);
    ck_assert_msg(worst <= 3 && mean < 0.5, "transformed pixels differ by up to %d (mean %.4f)", worst, mean);
}
END_TEST

// Every op of TrivialAugmentWide at bins 0, 7, 13, 20 and 30 (Rotate's 20 is 90 degrees: the transpose path)
// of both signs where it is signed, with both filters where it resamples, every other one with an erasing box,
// and a box alone. Returns how many, into augs.
static int augment_cases(ImageJobAugment *augs) {
    static const int bins[] = {0, 7, 13, 20, 30};
    const uint8_t fill[3] = {124, 116, 104};
    Rng rng;
    data_rng_seed(&rng, 5, DATA_STREAM_AUGMENT, 0, 0);
    int n = 0;
    for (int op = 0; op <= AUGMENT_OPS; op++) {
        const int identity_box = op == AUGMENT_OPS;  // the last case: Identity with a box
        const int magnitudes = op != AUGMENT_IDENTITY && op != AUGMENT_AUTOCONTRAST &&
                               op != AUGMENT_EQUALIZE && !identity_box;
        const int signs = op >= AUGMENT_SHEAR_X && op <= AUGMENT_SHARPNESS ? 2 : 1;
        const int filters = op >= AUGMENT_SHEAR_X && op <= AUGMENT_ROTATE ? 2 : 1;
        for (int b = 0; b < (magnitudes ? 5 : 1); b++)
            for (int negative = 0; negative < signs; negative++)
                for (int filter = 0; filter < filters; filter++) {
                    ImageJobAugment *a = &augs[n];
                    memset(a, 0, sizeof *a);
                    a->op = identity_box ? AUGMENT_IDENTITY : op;
                    a->bin = magnitudes ? bins[b] : -1;
                    a->negative = negative, a->filter = filter;
                    if (n % 2 == 1 || identity_box) {
                        ck_assert(image_random_erase_draw(SIDE, SIDE, 1.0, &rng, &a->erase_box));
                        a->erase = 1;
                        memcpy(a->erase_fill, fill, 3);
                    }
                    n++;
                }
    }
    return n;
}

// TrivialAugmentWide and RandomErasing on the GPU against the CPU's on the GPU's own decoded pixels: each job is
// decoded twice in one batch, without its augmentation and with it, and image_augment_run on the first must
// give the second bitwise (the decoders' rounding plays no part). A baseline file (the hardware engines where
// the GPU has them), a progressive one (libjpeg-turbo, uploaded), and grayscale and CMYK patterns (narrow
// histograms for AutoContrast and Equalize), each under several crops.
START_TEST(augmentation_matches_the_cpu_on_the_gpus_pixels) {
    make_fixtures();
    enum { MOST_CASES = 160 };
    static const int fixtures[] = {0, 1, 2, 4};
    ImageJobAugment augs[MOST_CASES];
    const int cases = augment_cases(augs);
    ck_assert_int_le(cases, MOST_CASES);
    const size_t bytes = (size_t)SIDE * SIDE * 3;
    ImageJob *jobs = calloc(2 * (size_t)cases, sizeof *jobs);
    uint8_t *got = calloc(2 * (size_t)cases, bytes), *want = malloc(bytes),
            *failed = calloc(2 * (size_t)cases, 1);
    void *dev = gpu->alloc(gpu, 2 * (size_t)cases * bytes);
    int differ = 0, changed = 0;
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
        const int k = fixtures[f];
        for (int i = 0; i < cases; i++) {
            Rng rng;
            data_rng_seed(&rng, 7, DATA_STREAM_AUGMENT, (uint32_t)i, (uint32_t)k);
            TrainCrop crop = image_train_crop_draw(FIX[k].w, FIX[k].h, CROP_SCALE_TORCHVISION, &rng);
            jobs[i] = job_of(k, image_train_geometry(crop, SIDE));
            jobs[cases + i] = jobs[i];
            jobs[cases + i].augment = augs[i];
        }
        gpu->input_decode(gpu, 0, dev, 2 * cases, SIDE, jobs, failed);
        gpu->input_upload_wait(gpu, 0);
        gpu->to_host(gpu, got, dev, 2 * (size_t)cases * bytes);
        for (int i = 0; i < 2 * cases; i++) ck_assert_msg(!failed[i], "%s: job %d failed", FIX[k].what, i);
        for (int i = 0; i < cases; i++) {
            const ImageJobAugment *a = &augs[i];
            const uint8_t *plain = got + (size_t)i * bytes, *augmented = got + (size_t)(cases + i) * bytes;
            memcpy(want, plain, bytes);
            image_augment_run(a, want, SIDE);
            changed += memcmp(augmented, plain, bytes) != 0;
            if (memcmp(augmented, want, bytes) == 0) continue;
            int bytes_off = 0, worst = 0;
            for (size_t b = 0; b < bytes; b++) {
                const int d = abs((int)augmented[b] - (int)want[b]);
                bytes_off += d != 0;
                worst = d > worst ? d : worst;
            }
            if (differ++ < 20)
                printf("%s: %s bin %d%s %s%s: %d bytes differ, by up to %d\n", FIX[k].what,
                       image_augment_op_name((AugmentOp)a->op), a->bin, a->negative ? " negative" : "",
                       a->filter ? "bilinear" : "nearest", a->erase ? " + erasing" : "", bytes_off, worst);
        }
    }
    printf(
        "augmentation, GPU vs CPU on the GPU's pixels: %d of %d jobs differ, %d changed by their augmentation\n",
        differ, cases * 4, changed);
    ck_assert_int_eq(differ, 0);
    // not vacuous: all but the few cases that leave an image as it is (Identity without a box, bin 0 of the
    // shears, translations, rotation and enhancements without a box) change it
    ck_assert_int_gt(changed, cases * 4 * 3 / 4);
    gpu->free(gpu, dev);
    free(jobs), free(got), free(want), free(failed);
}
END_TEST

int main(void) {
    char why[256];
    gpu = cuda_backend_create(0, NULL, why, sizeof why);
    if (!gpu) return tu_skip_gpu("test_images_gpu", why);
    if (!gpu->input_decode) {
        gpu->destroy(gpu);
        return tu_skip("test_images_gpu",
                       "this build has no nvJPEG (CMake found none), so no input_decode on CUDA");
    }
    cpu = cpu_backend_create();
    Suite *s = suite_create("images_gpu");
    TCase *tc = tcase_create("input_decode");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, decoded_pixels_within_one);
    tcase_add_test(tc, transforms_match_the_cpu);
    tcase_add_test(tc, augmentation_matches_the_cpu_on_the_gpus_pixels);
    suite_add_tcase(s, tc);
    const int rc = tu_run_suite(s, 0);  // no fork: a CUDA context does not survive one
    for (int k = 0; k < FIXTURES; k++) free(jpeg_bytes[k]);
    cpu->destroy(cpu), gpu->destroy(gpu);
    return rc;
}
