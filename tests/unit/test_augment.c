// test_augment.c - src/image/image_augment.c apart from Pillow (test_images_pil.c holds its pixels to Pillow):
// TrivialAugmentWide's draws (every op and bin reached, uniformly; signs only where torchvision flips them),
// its magnitude table against the decimal ends of torchvision's ranges, RandomErasing's boxes against its
// bounds and probability, the erasing byte, that one stream key always gives the same image, and that a
// decode job's draws (image_augment_draw) are the host path's.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_rng.h"
#include "image/image_augment.h"
#include "tests/test_util.h"

enum { DRAWS = 200000 };

// Counts over DRAWS draws, each from the stream of its own (epoch, index) key, as the loader draws them.
START_TEST(test_draws_reach_every_op_and_bin_uniformly) {
    static long ops[AUGMENT_OPS], bins[AUGMENT_OPS][AUGMENT_BINS], negative[AUGMENT_OPS];
    for (uint32_t n = 0; n < DRAWS; n++) {
        Rng rng;
        data_rng_sample(&rng, 3, (int)(n % 7), 0, n / 7);
        AugmentDraw d = image_ta_wide_draw(&rng);
        ck_assert(d.op >= 0 && d.op < AUGMENT_OPS);
        ops[d.op]++;
        int with_bins = d.op != AUGMENT_IDENTITY && d.op != AUGMENT_AUTOCONTRAST && d.op != AUGMENT_EQUALIZE;
        ck_assert_int_eq(d.bin >= 0, with_bins);
        if (with_bins) bins[d.op][d.bin]++;
        negative[d.op] += d.negative;
    }
    // each op 1/14 of the draws, each bin 1/31 of its op's: within 5 standard deviations of the binomial
    double p = 1.0 / AUGMENT_OPS, sd = sqrt(DRAWS * p * (1 - p));
    for (int op = 0; op < AUGMENT_OPS; op++) {
        ck_assert_msg(fabs(ops[op] - DRAWS * p) < 5 * sd, "%s drawn %ld times of %d",
                      image_augment_op_name(op), ops[op], DRAWS);
        int is_signed = op >= AUGMENT_SHEAR_X && op <= AUGMENT_SHARPNESS;
        if (is_signed)
            ck_assert_msg(fabs(negative[op] - ops[op] / 2.0) < 5 * sqrt(ops[op] / 4.0),
                          "%s negative %ld of %ld", image_augment_op_name(op), negative[op], ops[op]);
        else
            ck_assert_int_eq(negative[op], 0);
        if (op == AUGMENT_IDENTITY || op == AUGMENT_AUTOCONTRAST || op == AUGMENT_EQUALIZE) continue;
        double q = 1.0 / AUGMENT_BINS, bin_sd = sqrt(ops[op] * q * (1 - q));
        for (int b = 0; b < AUGMENT_BINS; b++)
            ck_assert_msg(bins[op][b] > 0 && fabs(bins[op][b] - ops[op] * q) < 5 * bin_sd,
                          "%s bin %d drawn %ld times", image_augment_op_name(op), b, bins[op][b]);
    }
    // a key gives its draw again; the neighbouring keys (epoch, index, repetition) give other streams
    Rng a, b;
    data_rng_sample(&a, 3, 2, 0, 11);
    data_rng_sample(&b, 3, 2, 0, 11);
    for (int i = 0; i < 100; i++) {
        AugmentDraw x = image_ta_wide_draw(&a), y = image_ta_wide_draw(&b);
        ck_assert(x.op == y.op && x.bin == y.bin && x.negative == y.negative);
    }
    uint64_t first[4];
    int keys[4][3] = {{2, 0, 11}, {3, 0, 11}, {2, 1, 11}, {2, 0, 12}};
    for (int k = 0; k < 4; k++) {
        data_rng_sample(&a, 3, keys[k][0], keys[k][1], (uint32_t)keys[k][2]);
        first[k] = rng_next_u64(&a);
        for (int j = 0; j < k; j++) ck_assert(first[j] != first[k]);
    }
}
END_TEST

// torchvision's ranges: linspace(0, 0.99), (0, 32), (0, 135), (255, 0) over 31 bins in float32, and
// Posterize 8 - round(bin / 5); negated only for the signed ops.
START_TEST(test_magnitudes_are_torchvisions_table) {
    for (int bin = 0; bin < AUGMENT_BINS; bin++) {
        double enhance = image_ta_wide_magnitude((AugmentDraw){AUGMENT_BRIGHTNESS, bin, 0});
        ck_assert_msg(fabs(enhance - 0.99 * bin / 30) <= 1.2e-7, "bin %d: %.9g", bin, enhance);
        ck_assert(enhance == (double)(float)enhance);
        ck_assert(image_ta_wide_magnitude((AugmentDraw){AUGMENT_SHEAR_Y, bin, 1}) == -enhance);
        double shift = image_ta_wide_magnitude((AugmentDraw){AUGMENT_TRANSLATE_X, bin, 0});
        ck_assert_msg(fabs(shift - 32.0 * bin / 30) <= 4e-6, "bin %d: %.9g", bin, shift);
        ck_assert((int)shift == 32 * bin / 30);  // the translation torchvision applies: int(magnitude)
        ck_assert(image_ta_wide_magnitude((AugmentDraw){AUGMENT_ROTATE, bin, 0}) == 4.5 * bin);
        ck_assert(image_ta_wide_magnitude((AugmentDraw){AUGMENT_ROTATE, bin, 1}) == -4.5 * bin);
        ck_assert(image_ta_wide_magnitude((AugmentDraw){AUGMENT_SOLARIZE, bin, 0}) == 255 - 8.5 * bin);
        ck_assert(image_ta_wide_magnitude((AugmentDraw){AUGMENT_SOLARIZE, bin, 1}) == 255 - 8.5 * bin);
        static const int bits[AUGMENT_BINS] = {8, 8, 8, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 5, 5, 5,
                                               5, 5, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2};
        ck_assert(image_ta_wide_magnitude((AugmentDraw){AUGMENT_POSTERIZE, bin, 0}) == bits[bin]);
    }
    ck_assert(image_ta_wide_magnitude((AugmentDraw){AUGMENT_CONTRAST, 30, 0}) == (double)0.99f);
    ck_assert(image_ta_wide_magnitude((AugmentDraw){AUGMENT_EQUALIZE, -1, 0}) == 0);
    ck_assert(image_ta_wide_magnitude((AugmentDraw){AUGMENT_IDENTITY, -1, 0}) == 0);
}
END_TEST

// Boxes inside the image with torchvision's area and aspect ranges (up to the rounding of h and w), the coin
// at p, nothing for p = 0; the erasing byte the one nearest 255 * mean.
START_TEST(test_erasing_boxes_and_bytes) {
    const int side = 64;
    int hits = 0;
    const int tries = 20000;
    for (int n = 0; n < tries; n++) {
        Rng rng;
        data_rng_sample(&rng, 8, 0, 0, (uint32_t)n);
        ImageRect box;
        if (!image_random_erase_draw(side, side, 0.3, &rng, &box)) continue;
        hits++;
        ck_assert(box.top >= 0 && box.left >= 0 && box.top + box.height <= side &&
                  box.left + box.width <= side);
        ck_assert(box.height < side && box.width < side);
        // h and w are the area's and aspect's sqrt-products rounded: each within 0.5 of them
        double h = box.height, w = box.width;
        ck_assert(h >= 1 && w >= 1);
        ck_assert_msg((h + 0.5) * (w + 0.5) >= 0.02 * side * side &&
                          (h - 0.5) * (w - 0.5) <= 0.33 * side * side,
                      "box %gx%g", h, w);
        ck_assert_msg((h + 0.5) / (w - 0.5) >= 0.3 && (h - 0.5) / (w + 0.5) <= 3.3, "box %gx%g", h, w);
    }
    ck_assert_msg(fabs(hits - 0.3 * tries) < 5 * sqrt(tries * 0.3 * 0.7), "%d of %d erased", hits, tries);
    Rng rng;
    data_rng_sample(&rng, 8, 0, 0, 1);
    ImageRect box;
    for (int n = 0; n < 1000; n++) ck_assert(!image_random_erase_draw(side, side, 0.0, &rng, &box));
    uint8_t img[4 * 5 * 3];
    memset(img, 9, sizeof img);
    const uint8_t fill[3] = {1, 2, 3};
    image_erase(img, 5, (ImageRect){1, 2, 2, 3}, fill);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 5; x++)
            for (int c = 0; c < 3; c++)
                ck_assert_int_eq(img[(y * 5 + x) * 3 + c], y >= 1 && y < 3 && x >= 2 ? c + 1 : 9);
    ck_assert_int_eq(image_erase_byte(0.485), 124);
    ck_assert_int_eq(image_erase_byte(0.456), 116);
    ck_assert_int_eq(image_erase_byte(0.406), 104);
    ck_assert_int_eq(image_erase_byte(0.0), 0);
    ck_assert_int_eq(image_erase_byte(1.0), 255);
    for (int k = 0; k <= 1000; k++) {
        double mean = k / 1000.0;
        int b = image_erase_byte(mean);
        for (int other = 0; other < 256; other++) ck_assert(fabs(b - 255 * mean) <= fabs(other - 255 * mean));
    }
}
END_TEST

// image_augment_apply: a function of the stream alone; with both parts off the image and the stream are
// left alone.
START_TEST(test_apply_is_a_function_of_the_stream) {
    enum { SIDE = 24, BYTES = SIDE * SIDE * 3 };
    uint8_t base[BYTES], a[BYTES], b[BYTES];
    for (int i = 0; i < BYTES; i++) base[i] = (uint8_t)(i * 37 + i / 7);
    ImageAugment on = {1, AUGMENT_NEAREST, 0.5, {10, 20, 30}}, off = {0, AUGMENT_NEAREST, 0, {0, 0, 0}};
    int differs = 0;
    for (uint32_t n = 0; n < 64; n++) {
        Rng r1, r2;
        data_rng_sample(&r1, 1, 0, 0, n);
        data_rng_sample(&r2, 1, 0, 0, n);
        memcpy(a, base, BYTES), memcpy(b, base, BYTES);
        image_augment_apply(&on, a, SIDE, &r1);
        image_augment_apply(&on, b, SIDE, &r2);
        ck_assert_mem_eq(a, b, BYTES);
        ck_assert(rng_next_u64(&r1) == rng_next_u64(&r2));
        differs += memcmp(a, base, BYTES) != 0;
        Rng untouched = r1;
        image_augment_apply(&off, b, SIDE, &r1);
        ck_assert_mem_eq(a, b, BYTES);
        ck_assert(rng_next_u64(&r1) == rng_next_u64(&untouched));
    }
    ck_assert_int_gt(differs, 48);
}
END_TEST

// image_augment_draw (what a device decode job carries) draws what image_ta_wide_draw then
// image_random_erase_draw draw from the same stream, leaves the stream where they leave it, and, applied with
// image_augment_run, gives image_augment_op then image_erase on the same draws; with both parts off it draws
// nothing and is all zero.
START_TEST(test_job_draws_are_the_host_draws) {
    enum { SIDE = 20, BYTES = SIDE * SIDE * 3 };
    uint8_t base[BYTES], got[BYTES], want[BYTES];
    for (int i = 0; i < BYTES; i++) base[i] = (uint8_t)(i * 53 + i / 11);
    const ImageAugment on = {1, AUGMENT_BILINEAR, 0.5, {7, 8, 9}}, off = {0, AUGMENT_NEAREST, 0, {1, 2, 3}};
    int boxes = 0;
    for (uint32_t n = 0; n < 200; n++) {
        Rng r1, r2;
        data_rng_sample(&r1, 3, 1, 0, n);
        r2 = r1;
        ImageJobAugment d;
        image_augment_draw(&on, SIDE, &r1, &d);
        const AugmentDraw ta = image_ta_wide_draw(&r2);
        ImageRect box;
        const int erase = image_random_erase_draw(SIDE, SIDE, 0.5, &r2, &box);
        ck_assert(rng_next_u64(&r1) == rng_next_u64(&r2));
        ck_assert(d.op == (int)ta.op && d.bin == ta.bin && d.negative == ta.negative);
        ck_assert_int_eq(d.filter, AUGMENT_BILINEAR);
        ck_assert_int_eq(d.erase, erase);
        if (erase) {
            ck_assert_mem_eq(&d.erase_box, &box, sizeof box);
            ck_assert_mem_eq(d.erase_fill, on.erase_fill, 3);
        }
        boxes += erase;
        memcpy(got, base, BYTES), memcpy(want, base, BYTES);
        image_augment_run(&d, got, SIDE);
        image_augment_op(want, SIDE, SIDE, ta.op, image_ta_wide_magnitude(ta), AUGMENT_BILINEAR);
        if (erase) image_erase(want, SIDE, box, on.erase_fill);
        ck_assert_mem_eq(got, want, BYTES);
        Rng untouched = r1;
        image_augment_draw(&off, SIDE, &r1, &d);
        ck_assert(rng_next_u64(&r1) == rng_next_u64(&untouched));
        static const ImageJobAugment zero;  // static: its padding is zero too
        ck_assert_mem_eq(&d, &zero, sizeof d);
    }
    ck_assert_int_gt(boxes, 60);
}
END_TEST

int main(void) {
    Suite *s = suite_create("augment");
    TCase *tc = tcase_create("augment");
    tcase_set_timeout(tc, 120);  // the draw statistics take seconds, more under the sanitizers
    tcase_add_test(tc, test_draws_reach_every_op_and_bin_uniformly);
    tcase_add_test(tc, test_magnitudes_are_torchvisions_table);
    tcase_add_test(tc, test_erasing_boxes_and_bytes);
    tcase_add_test(tc, test_apply_is_a_function_of_the_stream);
    tcase_add_test(tc, test_job_draws_are_the_host_draws);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 1);
}
