// test_images_pil.c - amptrain's decode and resizes against Pillow itself (what torchvision's PIL path
// runs): tests/unit/pil_reference.py reads the same JPEGs and amptrain's outputs and reports the largest
// difference per job. Decoded pixels must agree within +-1 (amptrain's bound against decode_jpeg; the same
// libjpeg-turbo gives 0), the Resize+CenterCrop and RandomResizedCrop resizes exactly (Pillow's
// arithmetic, re-done). Where that python has torchvision (the GPU machine's: AMPTRAIN_PIL_PYTHON picks the
// interpreter, /usr/bin/python3 by default), decoded pixels are also held within +-1 of
// torchvision.io.decode_jpeg's, the reference torchvision users train on. TrivialAugmentWide's 14 ops (image_augment.h) are
// held bitwise to the PIL calls torchvision's _apply_op makes, at several bins of both signs and with both
// filters, on square and non-square, flat and narrow-histogram images, and on random draws; where torchvision
// is installed, also to its own _apply_op and its magnitude table. Without python3 and Pillow the suite exits
// 77, which ctest reports as Skipped.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "data/data_rng.h"
#include "image/image_augment.h"
#include "image/image_decode.h"
#include "image/image_transform.h"
#include "tests/image_fixtures.h"
#include "tests/test_util.h"

// The python that runs pil_reference.py.
static const char *python(void) {
    const char *p = getenv("AMPTRAIN_PIL_PYTHON");
    return p && p[0] ? p : "/usr/bin/python3";
}

typedef struct Fixture {
    const char *name;
    int w, h, channels, subsamp, quality, progressive;
} Fixture;

static const Fixture fixtures[] = {
    {"photo", 500, 375, 3, TJSAMP_420, 90, 0},
    {"portrait", 375, 500, 3, TJSAMP_422, 85, 0},
    {"gray", 37, 23, 1, TJSAMP_GRAY, 90, 0},
    {"progressive", 301, 199, 3, TJSAMP_420, 90, 1},
    {"odd", 37, 23, 3, TJSAMP_444, 95, 0},
    {"cmyk", 40, 30, 4, TJSAMP_444, 95, 0},
    {"gray_progressive", 64, 48, 1, TJSAMP_GRAY, 80, 1},
};

static void write_raw(const char *path, const uint8_t *bytes, size_t n) { fx_write(path, bytes, n); }

// Runs pil_reference.py on pil_manifest.txt (jobs lines) and checks its "LINE DIFF [TORCHVISION_DIFF]" per
// job, in manifest order: decodes within 1 of Pillow and of torchvision, everything else bitwise.
static void check_manifest(int jobs, const char *torchvision_what) {
    char cmd[512];
    static char report[1 << 16];
    snprintf(cmd, sizeof cmd, "%s %s/tests/unit/pil_reference.py pil_manifest.txt 2>&1", python(),
             AMPTRAIN_SOURCE_DIR);
    ck_assert_msg(tu_run_shell(cmd, report, sizeof report) == 0, "%s", report);
    FILE *m = fopen("pil_manifest.txt", "r");
    const char *at = report;
    char line[1024], row[256];
    int against_torchvision = 0, worst_torchvision = 0;
    for (int j = 1; j <= jobs; j++) {
        ck_assert_ptr_nonnull(fgets(line, sizeof line, m));
        const char *end = strchr(at, '\n');
        ck_assert_msg(end && (size_t)(end - at) < sizeof row, "bad report at job %d: %s", j, report);
        memcpy(row, at, (size_t)(end - at));
        row[end - at] = '\0';
        at = end + 1;
        int n, diff, tv;
        const int fields = sscanf(row, "%d %d %d", &n, &diff, &tv);
        ck_assert_msg(fields >= 2 && n == j, "bad report at job %d: %s", j, row);
        int allowed = strncmp(line, "decode", 6) == 0 ? 1 : 0;
        ck_assert_msg(diff <= allowed, "differs from Pillow by %d (allowed %d): %s", diff, allowed, line);
        if (fields == 3) {
            ck_assert_msg(tv <= allowed, "differs from torchvision by %d (allowed %d): %s", tv, allowed,
                          line);
            against_torchvision++;
            worst_torchvision = tv > worst_torchvision ? tv : worst_torchvision;
        }
    }
    fclose(m);
    if (against_torchvision)
        printf("%s: %d jobs, largest difference %d\n", torchvision_what, against_torchvision,
               worst_torchvision);
    else
        printf("torchvision is not installed for %s: %s not compared\n", python(), torchvision_what);
}

// One "ta" job: op at (bin, negative) of TrivialAugmentWide's table (bin -1: no magnitude) on img (h, w, 3),
// written as NAME.rgb; ours as NAME_K.rgb.
static int ta_job(FILE *manifest, const char *name, const uint8_t *img, int w, int h, AugmentDraw d,
                  AugmentFilter filter, int k) {
    size_t bytes = (size_t)w * h * 3;
    uint8_t *out = malloc(bytes);
    memcpy(out, img, bytes);
    double magnitude = image_ta_wide_magnitude(d);
    image_augment_op(out, w, h, d.op, magnitude, filter);
    char raw[128], path[128];
    snprintf(raw, sizeof raw, "%s.rgb", name);
    snprintf(path, sizeof path, "%s_%d.rgb", name, k);
    write_raw(path, out, bytes);
    fprintf(manifest, "ta %s %d %d %.17g %s %s %d %d %s\n", image_augment_op_name(d.op), d.bin, d.negative,
            magnitude, filter == AUGMENT_NEAREST ? "nearest" : "bilinear", raw, w, h, path);
    free(out);
    return 1;
}

static int is_geometric(AugmentOp op) { return op >= AUGMENT_SHEAR_X && op <= AUGMENT_ROTATE; }

// Every op at the ends and the middle of its table, both signs, both filters for the geometric ones.
static int ta_sweep(FILE *manifest, const char *name, const uint8_t *img, int w, int h) {
    static const int bins[] = {0, 1, 7, 15, 16, 20, 30};
    int jobs = 0, k = 0;
    for (int op = 0; op < AUGMENT_OPS; op++) {
        AugmentDraw probe = {(AugmentOp)op, 0, 0};
        int with_bins = op != AUGMENT_IDENTITY && op != AUGMENT_AUTOCONTRAST && op != AUGMENT_EQUALIZE;
        int is_signed = with_bins && image_ta_wide_magnitude((AugmentDraw){(AugmentOp)op, 30, 1}) < 0;
        for (size_t b = 0; b < (with_bins ? sizeof bins / sizeof bins[0] : 1); b++)
            for (int neg = 0; neg <= is_signed; neg++)
                for (int f = 0; f <= is_geometric((AugmentOp)op); f++) {
                    probe.bin = with_bins ? bins[b] : -1;
                    probe.negative = neg;
                    jobs += ta_job(manifest, name, img, w, h, probe, (AugmentFilter)f, k++);
                }
    }
    return jobs;
}

// (h, w, 3) of the photo fixture's decoded pixels, its top-left corner resized to w x h.
static uint8_t *photo_crop(const DecodedImage *photo, int w, int h) {
    uint8_t *o = malloc((size_t)w * h * 3);
    image_resize_bilinear(photo, (CropBox){20, 30, 2 * h, 2 * w}, w, h, (CropBox){0, 0, h, w}, 0, o);
    return o;
}

START_TEST(decode_and_resize_match_pillow) {
    FILE *manifest = fopen("pil_manifest.txt", "w");
    ck_assert_ptr_nonnull(manifest);
    int jobs = 0;
    char path[256], raw[256], out[256];
    for (size_t k = 0; k < sizeof fixtures / sizeof fixtures[0]; k++) {
        const Fixture *f = &fixtures[k];
        uint8_t *src = f->channels == 3 && f->w > 100 ? fx_noise(f->w, f->h, k)
                                                      : fx_pattern(f->w, f->h, f->channels, (int)k);
        size_t len;
        uint8_t *jpeg = fx_jpeg(src, f->w, f->h, f->channels, f->quality, f->subsamp, f->progressive, &len);
        snprintf(path, sizeof path, "pil_%s.jpg", f->name);
        fx_write(path, jpeg, len);
        DecodedImage img;
        char err[256];
        ck_assert_msg(image_decode(jpeg, len, &img, err, sizeof err) == 0, "%s: %s", f->name, err);
        snprintf(raw, sizeof raw, "pil_%s.rgb", f->name);
        write_raw(raw, img.rgb, (size_t)img.width * img.height * 3);
        fprintf(manifest, "decode %s %s %d %d\n", path, raw, img.width, img.height);
        jobs++;
        // torchvision's default Resize for 224 and 32, and its V2 recipes' 232 for 224
        const int sides[] = {224, 32, 224}, resizes[] = {image_val_resize(224), image_val_resize(32), 232};
        for (int s = 0; s < 3; s++) {
            uint8_t *o = malloc((size_t)sides[s] * sides[s] * 3);
            image_transform_val(&img, resizes[s], sides[s], o);
            snprintf(out, sizeof out, "pil_%s_val%d_%d.rgb", f->name, resizes[s], sides[s]);
            write_raw(out, o, (size_t)sides[s] * sides[s] * 3);
            fprintf(manifest, "val %s %d %d %d %d %s\n", raw, img.width, img.height, resizes[s], sides[s],
                    out);
            jobs++;
            free(o);
        }
        for (uint32_t n = 0; n < 4; n++) {
            Rng rng;
            data_rng_seed(&rng, 11, DATA_STREAM_AUGMENT, 0, n + 4 * (uint32_t)k);
            CropBox box = image_random_resized_crop_box(img.width, img.height, CROP_SCALE_TORCHVISION, &rng);
            int side = n % 2 ? 224 : 48;
            uint8_t *o = malloc((size_t)side * side * 3);
            image_resize_bilinear(&img, box, side, side, (CropBox){0, 0, side, side}, 0, o);
            snprintf(out, sizeof out, "pil_%s_crop%u.rgb", f->name, n);
            write_raw(out, o, (size_t)side * side * 3);
            fprintf(manifest, "crop %s %d %d %d %d %d %d %d %s\n", raw, img.width, img.height, box.top,
                    box.left, box.height, box.width, side, out);
            jobs++;
            free(o);
        }
        image_free(&img);
        free(jpeg);
        free(src);
    }
    fclose(manifest);
    check_manifest(jobs, "decoded pixels vs torchvision.io.decode_jpeg");
}
END_TEST

START_TEST(trivial_augment_matches_pillow) {
    // a photo's pixels (square and not), a narrow histogram (AutoContrast stretches it; Equalize's lookup
    // table reaches past 255 and is clipped), a flat image (one level: both leave it), noise
    size_t len;
    uint8_t *src = fx_noise(500, 375, 3);
    uint8_t *jpeg = fx_jpeg(src, 500, 375, 3, 90, TJSAMP_420, 0, &len);
    DecodedImage photo;
    char err[256];
    ck_assert_msg(image_decode(jpeg, len, &photo, err, sizeof err) == 0, "%s", err);
    struct {
        const char *name;
        int w, h;
        uint8_t *img;
    } images[] = {{"ta_square", 64, 64, photo_crop(&photo, 64, 64)},
                  {"ta_wide", 45, 29, photo_crop(&photo, 45, 29)},
                  {"ta_narrow", 40, 40, fx_pattern(40, 40, 3, 5)},
                  {"ta_flat", 16, 12, malloc(16 * 12 * 3)},
                  {"ta_noise", 33, 33, fx_noise(33, 33, 9)}};
    for (size_t i = 0; i < 40 * 40 * 3; i++) images[2].img[i] = (uint8_t)(100 + images[2].img[i] / 12);
    memset(images[3].img, 77, 16 * 12 * 3);
    FILE *manifest = fopen("pil_manifest.txt", "w");
    ck_assert_ptr_nonnull(manifest);
    int jobs = 0;
    char raw[128];
    for (size_t i = 0; i < sizeof images / sizeof images[0]; i++) {
        snprintf(raw, sizeof raw, "%s.rgb", images[i].name);
        write_raw(raw, images[i].img, (size_t)images[i].w * images[i].h * 3);
        jobs += ta_sweep(manifest, images[i].name, images[i].img, images[i].w, images[i].h);
    }
    // training-sized draws, as the loader makes them
    uint8_t *full = photo_crop(&photo, 112, 112);
    write_raw("ta_draws.rgb", full, 112 * 112 * 3);
    for (uint32_t n = 0; n < 48; n++) {
        Rng rng;
        data_rng_seed(&rng, 5, DATA_STREAM_AUGMENT, 1, n);
        jobs += ta_job(manifest, "ta_draws", full, 112, 112, image_ta_wide_draw(&rng), (AugmentFilter)(n % 2),
                       (int)n);
    }
    fclose(manifest);
    check_manifest(jobs, "TrivialAugmentWide vs torchvision's _apply_op and magnitudes");
    for (size_t i = 0; i < sizeof images / sizeof images[0]; i++) free(images[i].img);
    free(full);
    image_free(&photo);
    free(jpeg);
    free(src);
}
END_TEST

int main(void) {
    char out[256], cmd[512];
    snprintf(cmd, sizeof cmd, "%s -c 'import PIL' 2>&1", python());
    if (tu_run_shell(cmd, out, sizeof out) != 0)
        return tu_skip("test_images_pil", "%s with Pillow (PIL) is not available", python());
    Suite *s = suite_create("images_pil");
    TCase *tc = tcase_create("pillow");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, decode_and_resize_match_pillow);
    tcase_add_test(tc, trivial_augment_matches_pillow);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 1);
}
