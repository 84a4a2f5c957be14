// test_images.c - the JPEG sources: decode (image_decode.h), torchvision's transforms (image_transform.h),
// the shared image Dataset's replacement of bad samples (image_dataset.h), the ImageFolder source and its
// file-list cache (imagefolder_list.h), the data.mean/std keys, the training and validation sides and the
// per-image augmentation after the crop (TrivialAugmentWide, erasing) through the factory and a run, and
// --bench-data.
//
// Fixtures are JPEGs made here with TurboJPEG's compressor (image_fixtures.h). References are independent
// of the code under test: source pixels (decode), torchvision's RandomResizedCrop algorithm re-implemented
// with another generator (box statistics), the antialiased bilinear resize as its float64 formula (the
// tolerance is +-1: Pillow rounds to 8 bits after each pass and its weights are 22-bit fixed point, the
// formula rounds once), and exact invariants (progressive == baseline, flips mirror, windows of a resize
// equal the resize cut). tests/unit/test_images_pil.c compares with Pillow itself.
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "core/backend.h"
#include "config/config.h"
#include "data/data_rng.h"
#include "data/dataset.h"
#include "data/sources/image_dataset.h"
#include "image/image_augment.h"
#include "data/sources/imagefolder_list.h"
#include "image/image_decode.h"
#include "image/image_decode_region.h"
#include "image/image_transform.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "tests/image_fixtures.h"
#include "tests/test_util.h"
#include "checkpoint/safetensors.h"

// ---- decode ----------------------------------------------------------------------------------------

// Largest and mean |decoded - source| over (h, w, 3) decoded and (h, w, channels) source (gray: the
// source value for every channel).
static void diff_to_source(const DecodedImage *img, const uint8_t *src, int channels, int *max,
                           double *mean) {
    long sum = 0;
    *max = 0;
    size_t n = (size_t)img->width * img->height;
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++) {
            int d = abs((int)img->rgb[3 * i + c] - (int)src[i * channels + (channels == 1 ? 0 : c)]);
            sum += d;
            if (d > *max) *max = d;
        }
    *mean = (double)sum / (double)(n * 3);
}

static DecodedImage decode_ok(const uint8_t *jpeg, size_t len) {
    DecodedImage img = {0};
    char err[256] = "";
    ck_assert_msg(image_decode(jpeg, len, &img, err, sizeof err) == 0, "decode failed: %s", err);
    return img;
}

START_TEST(decode_rgb_round_trip) {
    // (w, h, subsampling, quality, largest and mean error allowed): 4:4:4 at quality 100 keeps a smooth
    // pattern within a few levels; 4:2:0 at 90 halves the chroma resolution, so the bound is looser.
    const struct {
        int w, h, subsamp, quality, max_err;
        double mean_err;
    } cases[] = {
        {64, 48, TJSAMP_444, 100, 4, 0.8},   {37, 23, TJSAMP_444, 100, 4, 0.8},
        {1, 1, TJSAMP_444, 100, 4, 1.0},     {37, 23, TJSAMP_420, 90, 24, 4.0},
        {500, 375, TJSAMP_420, 90, 24, 3.0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint8_t *src = fx_pattern(cases[k].w, cases[k].h, 3, (int)k);
        size_t len;
        uint8_t *jpeg = fx_jpeg(src, cases[k].w, cases[k].h, 3, cases[k].quality, cases[k].subsamp, 0, &len);
        DecodedImage img = decode_ok(jpeg, len);
        ck_assert_int_eq(img.width, cases[k].w);
        ck_assert_int_eq(img.height, cases[k].h);
        int max;
        double mean;
        diff_to_source(&img, src, 3, &max, &mean);
        ck_assert_msg(max <= cases[k].max_err && mean <= cases[k].mean_err, "case %zu: max %d, mean %.3f", k,
                      max, mean);
        image_free(&img);
        free(jpeg);
        free(src);
    }
}
END_TEST

START_TEST(decode_grayscale_becomes_three_equal_channels) {
    uint8_t *src = fx_pattern(37, 23, 1, 3);
    size_t len;
    uint8_t *jpeg = fx_jpeg(src, 37, 23, 1, 100, TJSAMP_GRAY, 0, &len);
    DecodedImage img = decode_ok(jpeg, len);
    for (size_t i = 0; i < 37 * 23; i++) {
        ck_assert_int_eq(img.rgb[3 * i], img.rgb[3 * i + 1]);
        ck_assert_int_eq(img.rgb[3 * i], img.rgb[3 * i + 2]);
    }
    int max;
    double mean;
    diff_to_source(&img, src, 1, &max, &mean);
    ck_assert_msg(max <= 2 && mean <= 0.6, "max %d, mean %.3f", max, mean);
    image_free(&img);
    free(jpeg);
    free(src);
}
END_TEST

// A progressive JPEG stores the same quantised coefficients as the baseline one in more scans, so the
// decoded pixels are bitwise the same: an exact check that every scan was decoded.
START_TEST(decode_progressive_equals_baseline) {
    const struct {
        int w, h, channels, subsamp;
    } cases[] = {{64, 48, 3, TJSAMP_420},
                 {37, 23, 3, TJSAMP_444},
                 {37, 23, 1, TJSAMP_GRAY},
                 {301, 199, 3, TJSAMP_422}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint8_t *src = fx_pattern(cases[k].w, cases[k].h, cases[k].channels, 5);
        size_t len_b, len_p;
        uint8_t *base =
            fx_jpeg(src, cases[k].w, cases[k].h, cases[k].channels, 85, cases[k].subsamp, 0, &len_b);
        uint8_t *prog =
            fx_jpeg(src, cases[k].w, cases[k].h, cases[k].channels, 85, cases[k].subsamp, 1, &len_p);
        ck_assert(memcmp(base, prog, len_b < len_p ? len_b : len_p) != 0);  // really two encodings
        DecodedImage a = decode_ok(base, len_b), b = decode_ok(prog, len_p);
        ck_assert_int_eq(a.width, b.width);
        ck_assert_int_eq(a.height, b.height);
        ck_assert_mem_eq(a.rgb, b.rgb, (size_t)a.width * a.height * 3);
        image_free(&a);
        image_free(&b);
        free(base);
        free(prog);
        free(src);
    }
}
END_TEST

// CMYK as Adobe/libjpeg store it (inverted): r = c * k / 255 per PIL's convert("RGB") (and torchvision).
START_TEST(decode_cmyk_converts_like_pil) {
    uint8_t *src = fx_pattern(40, 30, 4, 7);
    size_t len;
    uint8_t *jpeg = fx_jpeg(src, 40, 30, 4, 100, TJSAMP_444, 0, &len);
    DecodedImage img = decode_ok(jpeg, len);
    int max = 0;
    for (size_t i = 0; i < 40 * 30; i++)
        for (int c = 0; c < 3; c++) {
            double want = src[4 * i + c] * src[4 * i + 3] / 255.0;
            int d = (int)fabs(img.rgb[3 * i + c] - want);
            if (d > max) max = d;
        }
    ck_assert_msg(max <= 4, "largest error %d", max);
    image_free(&img);
    free(jpeg);
    free(src);
}
END_TEST

// Refused by image_decode, and by image_decode_region for a 1x1 box in the top-left corner when the
// header passes image_decode_size (where the region decoder starts): a file cut below the box is found.
static void assert_refused(const uint8_t *bytes, size_t len, const char *why_contains) {
    DecodedImage img = {.rgb = (uint8_t *)"untouched", .width = -7};
    char err[256] = "";
    ck_assert_int_eq(image_decode(bytes, len, &img, err, sizeof err), 1);
    ck_assert_msg(strstr(err, why_contains), "'%s' lacks '%s'", err, why_contains);
    ck_assert_int_eq(img.width, -7);
    int w, h;
    if (image_decode_size(bytes, len, &w, &h, err, sizeof err) != 0) return;
    CropBox held;
    ck_assert_int_eq(image_decode_region(bytes, len, (CropBox){0, 0, 1, 1}, &img, &held, err, sizeof err), 1);
    ck_assert_msg(strstr(err, why_contains), "region: '%s' lacks '%s'", err, why_contains);
    ck_assert_int_eq(img.width, -7);
}

// The SOF marker's height and width fields (FF C0..C2, length, precision, height, width) set to w x h.
static void set_jpeg_size(uint8_t *jpeg, size_t len, int w, int h) {
    for (size_t i = 2; i + 9 < len; i++) {
        if (jpeg[i] == 0xFF && jpeg[i + 1] >= 0xC0 && jpeg[i + 1] <= 0xC2) {
            jpeg[i + 5] = (uint8_t)(h >> 8), jpeg[i + 6] = (uint8_t)h;
            jpeg[i + 7] = (uint8_t)(w >> 8), jpeg[i + 8] = (uint8_t)w;
            return;
        }
    }
    ck_abort_msg("no SOF marker");
}

START_TEST(decode_refuses_bad_input) {
    uint8_t *src = fx_pattern(64, 48, 3, 1);
    size_t len, plen;
    uint8_t *jpeg = fx_jpeg(src, 64, 48, 3, 90, TJSAMP_420, 0, &len);
    uint8_t *prog = fx_jpeg(src, 64, 48, 3, 90, TJSAMP_420, 1, &plen);
    assert_refused(jpeg, 0, "empty");
    const char text[] = "this is a text file named photo.jpg\n";
    assert_refused((const uint8_t *)text, sizeof text - 1, "not a JPEG");
    assert_refused(jpeg, len / 2, "truncated");
    assert_refused(prog, plen / 2, "truncated");
    assert_refused(jpeg, 300, "");  // cut inside the headers
    uint8_t garbage[512];
    memcpy(garbage, jpeg, 2);  // FF D8, then noise
    for (size_t i = 2; i < sizeof garbage; i++) garbage[i] = (uint8_t)(i * 37 + 11);
    assert_refused(garbage, sizeof garbage, "");
    // Two stray bytes before the end marker: libjpeg warns and recovers, and so does PIL: same pixels.
    uint8_t *stray = malloc(len + 2);
    memcpy(stray, jpeg, len - 2);
    stray[len - 2] = 0x00, stray[len - 1] = 0x00, stray[len] = 0xFF, stray[len + 1] = 0xD9;
    DecodedImage a = decode_ok(jpeg, len), b = decode_ok(stray, len + 2), c;
    ck_assert_mem_eq(a.rgb, b.rgb, 64 * 48 * 3);
    CropBox held;
    char err[256];
    int rc = image_decode_region(stray, len + 2, (CropBox){0, 0, 48, 64}, &c, &held, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_mem_eq(a.rgb, c.rgb, 64 * 48 * 3);
    image_free(&a);
    image_free(&b);
    image_free(&c);
    free(stray);
    // 20000 x 20000 = 400 MP in the header of a 1.4 KB file: refused before any pixel buffer is made.
    set_jpeg_size(jpeg, len, 20000, 20000);
    assert_refused(jpeg, len, "pixels per byte");
    free(jpeg);
    free(prog);
    free(src);
}
END_TEST

// SOI, the DQT and DHT segments of jpeg, EOI: a stream of tables only (JPEG's "abbreviated table
// specification"), which has no frame and so no size. *n: its length.
static uint8_t *tables_only(const uint8_t *jpeg, size_t len, size_t *n) {
    uint8_t *t = malloc(len);
    int dqt = 0, dht = 0;
    *n = 0;
    t[(*n)++] = 0xFF, t[(*n)++] = 0xD8;
    for (size_t i = 2; i + 4 <= len && jpeg[i] == 0xFF && jpeg[i + 1] != 0xDA;) {
        size_t seg = 2 + ((size_t)jpeg[i + 2] << 8 | jpeg[i + 3]);
        if (jpeg[i + 1] == 0xDB || jpeg[i + 1] == 0xC4) {
            memcpy(t + *n, jpeg + i, seg);
            *n += seg;
            dqt += jpeg[i + 1] == 0xDB, dht += jpeg[i + 1] == 0xC4;
        }
        i += seg;
    }
    ck_assert_msg(dqt > 0 && dht > 0, "no tables found (%d DQT, %d DHT)", dqt, dht);
    t[(*n)++] = 0xFF, t[(*n)++] = 0xD9;
    return t;
}

// A tables-only stream parses as a header (TurboJPEG then sets no size): refused by name, with no size
// read from it; so is a frame the file is far too small to hold, and one past the absolute ceiling.
START_TEST(decode_refuses_frameless_and_bomb_headers) {
    uint8_t *src = fx_pattern(128, 96, 3, 3);
    size_t len, n;
    uint8_t *jpeg = fx_jpeg(src, 128, 96, 3, 90, TJSAMP_420, 0, &len);
    uint8_t *tables = tables_only(jpeg, len, &n);
    assert_refused(tables, n, "no frame header");
    int w = -1, h = -1;
    char err[256] = "";
    ck_assert_int_eq(image_decode_size(tables, n, &w, &h, err, sizeof err), 1);
    ck_assert_msg(strstr(err, "no frame header"), "%s", err);
    // An 8192 x 8192 frame (192 MiB of RGB) claimed by a file of a few KB: 2^26 pixels need at least
    // 2^26 / 512 = 131072 bytes even as one grey level.
    ck_assert_int_lt(len, 8192);
    set_jpeg_size(jpeg, len, 8192, 8192);
    assert_refused(jpeg, len, "pixels per byte");
    ck_assert_int_eq(image_decode_size(jpeg, len, &w, &h, err, sizeof err), 1);
    // The bounds themselves: IMAGE_MAX_PIXELS_PER_BYTE per byte and IMAGE_MAX_PIXELS in all, inclusive.
    ck_assert_int_eq(image_decode_check_size(1024, 1024, 1024, err, sizeof err), 0);
    ck_assert_int_eq(image_decode_check_size(1025, 1024, 1024, err, sizeof err), 1);
    ck_assert_msg(strstr(err, "1025 x 1024 pixels claimed by a file of 1024 bytes"), "%s", err);
    ck_assert_int_eq(image_decode_check_size(32768, 32768, (size_t)1 << 30, err, sizeof err), 0);
    ck_assert_int_eq(image_decode_check_size(32768, 32769, (size_t)1 << 30, err, sizeof err), 1);
    ck_assert_msg(strstr(err, "more than the 1073741824 any image may have"), "%s", err);
    free(tables);
    free(jpeg);
    free(src);
}
END_TEST

// The most compressible files libjpeg-turbo writes (one grey level, quality 1; grayscale and 4:2:0;
// baseline with the standard Huffman tables, progressive with the optimised ones and EOB runs) hold at
// most half IMAGE_MAX_PIXELS_PER_BYTE pixels per byte, and decode; so do the fixtures' smooth patterns.
START_TEST(decode_keeps_the_most_compressible_jpegs) {
    const int side = 1024;
    uint8_t *grey = malloc((size_t)side * side * 3);
    memset(grey, 128, (size_t)side * side * 3);
    uint8_t *pattern = fx_pattern(side, side, 3, 5);
    const struct {
        const uint8_t *pixels;
        int channels, quality, subsamp, progressive;
    } cases[] = {{grey, 1, 1, TJSAMP_GRAY, 0},   {grey, 1, 1, TJSAMP_GRAY, 1},
                 {grey, 3, 1, TJSAMP_420, 0},    {grey, 3, 1, TJSAMP_420, 1},
                 {pattern, 3, 1, TJSAMP_420, 1}, {pattern, 3, 75, TJSAMP_420, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t len;
        uint8_t *jpeg = fx_jpeg(cases[k].pixels, side, side, cases[k].channels, cases[k].quality,
                                cases[k].subsamp, cases[k].progressive, &len);
        double per_byte = (double)side * side / (double)len;
        ck_assert_msg(per_byte <= IMAGE_MAX_PIXELS_PER_BYTE / 2, "case %zu: %.0f pixels per byte", k,
                      per_byte);
        DecodedImage img = decode_ok(jpeg, len);
        ck_assert_int_eq(img.width, side);
        image_free(&img);
        free(jpeg);
    }
    free(pattern);
    free(grey);
}
END_TEST

// ---- region decode: bitwise the full decode's pixels -----------------------------------------------------

// Decodes the region `want` of jpeg and holds every pixel of want to the full decode `full`, bitwise;
// 1 when the region held is smaller than the whole image (the cropped path ran), else 0.
static int region_matches_full(const uint8_t *jpeg, size_t len, const DecodedImage *full, CropBox want,
                               const char *what) {
    DecodedImage part = {0};
    CropBox held;
    char err[256] = "";
    ck_assert_msg(image_decode_region(jpeg, len, want, &part, &held, err, sizeof err) == 0, "%s: %s", what,
                  err);
    ck_assert(held.width == part.width && held.height == part.height);
    ck_assert_msg(held.top <= want.top && held.left <= want.left &&
                      held.top + held.height >= want.top + want.height &&
                      held.left + held.width >= want.left + want.width,
                  "%s: held (%d, %d, %d, %d) lacks want (%d, %d, %d, %d)", what, held.top, held.left,
                  held.height, held.width, want.top, want.left, want.height, want.width);
    for (int y = want.top; y < want.top + want.height; y++) {
        const uint8_t *got = part.rgb + ((size_t)(y - held.top) * part.width + (want.left - held.left)) * 3;
        const uint8_t *ref = full->rgb + ((size_t)y * full->width + want.left) * 3;
        if (memcmp(got, ref, (size_t)want.width * 3) == 0) continue;
        int x = 0;
        while (memcmp(got + 3 * x, ref + 3 * x, 3) == 0) x++;
        ck_abort_msg(
            "%s: box (%d, %d, %d, %d), held (%d, %d, %d, %d): pixel (%d, %d) differs from the full decode",
            what, want.top, want.left, want.height, want.width, held.top, held.left, held.height, held.width,
            y, want.left + x);
    }
    int cropped = (long)held.width * held.height < (long)full->width * full->height;
    image_free(&part);
    return cropped;
}

// Every subsampling libjpeg upsamples (fancy upsampling reads neighbours across the region's borders),
// grayscale, progressive files, odd sizes; noise so that neighbours differ. Boxes: RandomResizedCrop's,
// plus the whole image, 1x1 corners and strips along the edges.
START_TEST(decode_region_equals_full_decode) {
    const struct {
        int w, h, channels, subsamp, progressive;
    } cases[] = {
        {500, 375, 3, TJSAMP_420, 0}, {500, 375, 3, TJSAMP_420, 1},  {333, 250, 3, TJSAMP_422, 0},
        {333, 250, 3, TJSAMP_444, 0}, {301, 199, 3, TJSAMP_440, 0},  {301, 199, 3, TJSAMP_411, 0},
        {301, 199, 3, TJSAMP_444, 1}, {257, 193, 1, TJSAMP_GRAY, 0}, {257, 193, 1, TJSAMP_GRAY, 1},
        {17, 9, 3, TJSAMP_420, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int W = cases[k].w, H = cases[k].h, cropped = 0, boxes = 0;
        uint8_t *src = fx_noise(W, H, 40 + k);
        if (cases[k].channels == 1)
            for (size_t i = 0; i < (size_t)W * H; i++) src[i] = src[3 * i];
        size_t len;
        uint8_t *jpeg =
            fx_jpeg(src, W, H, cases[k].channels, 90, cases[k].subsamp, cases[k].progressive, &len);
        DecodedImage full = decode_ok(jpeg, len);
        char what[64];
        snprintf(what, sizeof what, "%dx%d case %zu", W, H, k);
        const CropBox edges[] = {
            {0, 0, H, W},     {0, 0, 1, 1},     {H - 1, W - 1, 1, 1}, {0, W - 1, 1, 1},
            {H - 1, 0, 1, 1}, {0, W - 3, H, 3}, {H - 2, 0, 2, W},     {H / 3, W / 3, 1, W / 3 + 1}};
        for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++, boxes++)
            cropped += region_matches_full(jpeg, len, &full, edges[e], what);
        for (uint32_t n = 0; n < 150; n++, boxes++) {
            Rng rng;
            data_rng_seed(&rng, 17, DATA_STREAM_AUGMENT, (uint32_t)k, n);
            CropBox box = image_random_resized_crop_box(W, H, CROP_SCALE_TORCHVISION, &rng);
            cropped += region_matches_full(jpeg, len, &full, box, what);
        }
        // not vacuous: most boxes decode less than the image (all but the whole-image ones on large files)
        if (W > 100) ck_assert_msg(cropped > boxes / 2, "%s: %d of %d boxes cropped", what, cropped, boxes);
        image_free(&full);
        free(jpeg);
        free(src);
    }
}
END_TEST

// ---- RandomResizedCrop's box: torchvision's algorithm, re-implemented with another generator ---------

static double ref_uniform(uint64_t *s) {  // splitmix64 -> [0, 1)
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

// torchvision.transforms.RandomResizedCrop.get_params (v0.15), line by line.
static CropBox ref_rrc(int width, int height, uint64_t *s) {
    double area = (double)height * width, lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    for (int t = 0; t < 10; t++) {
        double target_area = area * (0.08 + (1.0 - 0.08) * ref_uniform(s));
        double aspect_ratio = exp(lr0 + (lr1 - lr0) * ref_uniform(s));
        int w = (int)nearbyint(sqrt(target_area * aspect_ratio));
        int h = (int)nearbyint(sqrt(target_area / aspect_ratio));
        if (0 < w && w <= width && 0 < h && h <= height) {
            int i = (int)(ref_uniform(s) * (height - h + 1));
            int j = (int)(ref_uniform(s) * (width - w + 1));
            return (CropBox){i, j, h, w};
        }
    }
    double in_ratio = (double)width / height;
    int w, h;
    if (in_ratio < 3.0 / 4.0) {
        w = width;
        h = (int)nearbyint(w / (3.0 / 4.0));
    } else if (in_ratio > 4.0 / 3.0) {
        h = height;
        w = (int)nearbyint(h * (4.0 / 3.0));
    } else {
        w = width;
        h = height;
    }
    return (CropBox){(height - h) / 2, (width - w) / 2, h, w};
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Two-sample Kolmogorov-Smirnov statistic (sorts both arrays).
static double ks_statistic(double *a, double *b, int n) {
    qsort(a, (size_t)n, sizeof *a, cmp_double);
    qsort(b, (size_t)n, sizeof *b, cmp_double);
    double d = 0;
    for (int i = 0, j = 0; i < n && j < n;) {
        double v = a[i] < b[j] ? a[i] : b[j];
        while (i < n && a[i] <= v) i++;
        while (j < n && b[j] <= v) j++;
        double gap = fabs((double)i / n - (double)j / n);
        if (gap > d) d = gap;
    }
    return d;
}

#define RRC_DRAWS 20000

START_TEST(rrc_boxes_match_torchvision_distribution) {
    // 20000 draws each: a KS statistic above 0.025 has probability about 1e-5 for equal distributions.
    const int sizes[][2] = {{500, 375}, {375, 500}, {64, 64}, {37, 23}, {1000, 300}};
    double *stat[2][4];
    for (int k = 0; k < 2; k++)
        for (int q = 0; q < 4; q++) stat[k][q] = malloc(RRC_DRAWS * sizeof(double));
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        int W = sizes[z][0], H = sizes[z][1];
        uint64_t ref_state = 1234 + z;
        double mean_area[2] = {0, 0};
        for (int n = 0; n < RRC_DRAWS; n++) {
            Rng rng;
            data_rng_seed(&rng, 42, DATA_STREAM_AUGMENT, (uint32_t)z, (uint32_t)n);
            CropBox box[2] = {image_random_resized_crop_box(W, H, CROP_SCALE_TORCHVISION, &rng),
                              ref_rrc(W, H, &ref_state)};
            for (int k = 0; k < 2; k++) {
                CropBox b = box[k];
                ck_assert(b.top >= 0 && b.left >= 0 && b.height > 0 && b.width > 0);
                ck_assert(b.top + b.height <= H && b.left + b.width <= W);
                stat[k][0][n] = (double)b.width * b.height / ((double)W * H);
                stat[k][1][n] = log((double)b.width / b.height);
                stat[k][2][n] = (b.left + b.width / 2.0) / W;
                stat[k][3][n] = (b.top + b.height / 2.0) / H;
                mean_area[k] += stat[k][0][n] / RRC_DRAWS;
            }
        }
        ck_assert_msg(fabs(mean_area[0] - mean_area[1]) < 0.01, "%dx%d: mean area %.4f vs %.4f", W, H,
                      mean_area[0], mean_area[1]);
        const char *what[] = {"area fraction", "log aspect", "centre x", "centre y"};
        for (int q = 0; q < 4; q++) {
            double d = ks_statistic(stat[0][q], stat[1][q], RRC_DRAWS);
            ck_assert_msg(d < 0.025, "%dx%d: %s: KS %.4f", W, H, what[q], d);
        }
    }
    for (int k = 0; k < 2; k++)
        for (int q = 0; q < 4; q++) free(stat[k][q]);
}
END_TEST

// No try can fit in a 1000x10 image (the smallest area, 800 px, needs h >= 24), so every box is the
// fallback: the full height, width round(10 * 4/3) = 13, centred.
START_TEST(rrc_fallback_is_torchvision_centre_crop) {
    for (uint32_t n = 0; n < 50; n++) {
        Rng rng;
        data_rng_seed(&rng, 7, DATA_STREAM_AUGMENT, 0, n);
        CropBox wide = image_random_resized_crop_box(1000, 10, CROP_SCALE_TORCHVISION, &rng);
        ck_assert(wide.top == 0 && wide.left == 493 && wide.height == 10 && wide.width == 13);
        CropBox tall = image_random_resized_crop_box(10, 1000, CROP_SCALE_TORCHVISION, &rng);
        ck_assert(tall.top == 493 && tall.left == 0 && tall.height == 13 && tall.width == 10);
    }
}
END_TEST

// RandomResizedCrop(scale=(0.5, 1)): every accepted box covers half the image or more (the fallback on
// this 4:3 image is the whole image), and some cover much less than the whole; scale (1, 1) leaves only
// boxes of the whole area: the whole image, or one of its aspect-clamped rounding neighbours.
START_TEST(rrc_scale_bounds_the_area) {
    const int W = 320, H = 240;
    int small = 0;
    for (uint32_t n = 0; n < 4000; n++) {
        Rng rng;
        data_rng_seed(&rng, 11, DATA_STREAM_AUGMENT, 0, n);
        CropBox b = image_random_resized_crop_box(W, H, (CropScale){0.5, 1.0}, &rng);
        double fraction = (double)b.width * b.height / (W * H);
        ck_assert_msg(fraction >= 0.5 - 0.01, "box %dx%d covers %.3f of the image", b.width, b.height,
                      fraction);
        ck_assert(b.top >= 0 && b.left >= 0 && b.top + b.height <= H && b.left + b.width <= W);
        small += fraction < 0.7;
        CropBox whole = image_random_resized_crop_box(W, H, (CropScale){1.0, 1.0}, &rng);
        ck_assert_msg((double)whole.width * whole.height >= 0.99 * W * H, "scale (1, 1) gave %dx%d",
                      whole.width, whole.height);
    }
    ck_assert_int_gt(small, 400);  // not vacuous: about 40% of U(0.5, 1) lies below 0.7
}
END_TEST

// ---- resize: the float64 formula of the antialiased bilinear filter ------------------------------------

// Weight of input sample i for output o of an in -> out resize: a triangle of half-width
// max(1, in/out) input pixels centred on the output pixel's centre, normalised to sum 1.
static void ref_weights(int in, int out, int o, double *w) {
    double scale = (double)in / out, fs = scale > 1 ? scale : 1, centre = (o + 0.5) * scale, sum = 0;
    for (int i = 0; i < in; i++) {
        double x = fabs(i + 0.5 - centre) / fs;
        w[i] = x < 1 ? 1 - x : 0;
        sum += w[i];
    }
    for (int i = 0; i < in; i++) w[i] /= sum;
}

// The pixel (oy, ox) of the region box of img resized to out_w x out_h, rounded once; rgb[3].
static void ref_pixel(const DecodedImage *img, CropBox box, int out_w, int out_h, int oy, int ox, double *wx,
                      double *wy, double *rgb) {
    ref_weights(box.width, out_w, ox, wx);
    ref_weights(box.height, out_h, oy, wy);
    for (int c = 0; c < 3; c++) rgb[c] = 0;
    for (int y = 0; y < box.height; y++) {
        if (wy[y] == 0) continue;
        for (int x = 0; x < box.width; x++) {
            if (wx[x] == 0) continue;
            const uint8_t *p = img->rgb + ((size_t)(box.top + y) * img->width + box.left + x) * 3;
            for (int c = 0; c < 3; c++) rgb[c] += wy[y] * wx[x] * p[c];
        }
    }
}

// Largest |out - formula| over out (win.height, win.width, 3), the window win of the resize of box.
static int ref_max_diff(const DecodedImage *img, CropBox box, int out_w, int out_h, CropBox win,
                        const uint8_t *out, int mirrored) {
    double *wx = malloc((size_t)box.width * sizeof(double)),
           *wy = malloc((size_t)box.height * sizeof(double));
    int max = 0;
    for (int y = 0; y < win.height; y++)
        for (int x = 0; x < win.width; x++) {
            double rgb[3];
            ref_pixel(img, box, out_w, out_h, win.top + y, win.left + x, wx, wy, rgb);
            int ox = mirrored ? win.width - 1 - x : x;
            for (int c = 0; c < 3; c++) {
                int d = abs((int)out[((size_t)y * win.width + ox) * 3 + c] - (int)lrint(rgb[c]));
                if (d > max) max = d;
            }
        }
    free(wx);
    free(wy);
    return max;
}

static DecodedImage image_of(uint8_t *rgb, int w, int h) {
    return (DecodedImage){.rgb = rgb, .width = w, .height = h};
}

START_TEST(val_transform_matches_formula_within_one) {
    // (w, h, side) and torchvision's numbers: Resize(s = round(side*256/224)) gives the shorter side s and
    // the longer int(s * long / short); CenterCrop offsets int(round((size - side) / 2)), half to even.
    const struct {
        int w, h, side, out_w, out_h, top, left;
    } cases[] = {
        {500, 375, 224, 341, 256, 16, 58},  // (341 - 224) / 2 = 58.5 -> 58
        {375, 500, 224, 256, 341, 58, 16}, {300, 300, 224, 256, 256, 16, 16},
        {37, 23, 32, 59, 37, 2, 14},  // upsampling: s = round(36.57) = 37, int(37*37/23) = 59; 2.5 -> 2, 13.5 -> 14
        {640, 480, 64, 97, 73, 4, 16},  // s = round(73.14) = 73, long int(73*640/480) = 97
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int W = cases[k].w, H = cases[k].h, side = cases[k].side;
        // The expected numbers, from the rules above in this test's own arithmetic.
        int s = (int)nearbyint(side * 256.0 / 224.0);
        int out_w = W <= H ? s : (int)((double)s * W / H), out_h = W <= H ? (int)((double)s * H / W) : s;
        CropBox win = {(int)nearbyint((out_h - side) / 2.0), (int)nearbyint((out_w - side) / 2.0), side,
                       side};
        ck_assert_int_eq(out_w, cases[k].out_w);
        ck_assert_int_eq(out_h, cases[k].out_h);
        ck_assert_int_eq(win.top, cases[k].top);
        ck_assert_int_eq(win.left, cases[k].left);
        for (int pattern = 0; pattern < 2; pattern++) {
            uint8_t *rgb = pattern ? fx_noise(W, H, k) : fx_pattern(W, H, 3, (int)k);
            DecodedImage img = image_of(rgb, W, H);
            uint8_t *out = malloc((size_t)side * side * 3);
            image_transform_val(&img, image_val_resize(side), side, out);
            int d = ref_max_diff(&img, (CropBox){0, 0, H, W}, out_w, out_h, win, out, 0);
            ck_assert_msg(d <= 1, "%dx%d -> %d (%s): off by %d", W, H, side, pattern ? "noise" : "pattern",
                          d);
            free(out);
            free(rgb);
        }
    }
}
END_TEST

// Train = the crop box's resize, then a mirror with probability 1/2: checked bitwise against the resize
// alone (drawn from a copy of the same rng), and the resize against the formula.
START_TEST(train_transform_is_crop_resize_and_exact_flip) {
    const int W = 120, H = 90, side = 48;
    uint8_t *rgb = fx_noise(W, H, 99);
    DecodedImage img = image_of(rgb, W, H);
    uint8_t *out = malloc((size_t)side * side * 3), *plain = malloc((size_t)side * side * 3);
    int flips = 0;
    for (uint32_t n = 0; n < 60; n++) {
        Rng rng, copy;
        data_rng_seed(&rng, 3, DATA_STREAM_AUGMENT, 1, n);
        copy = rng;
        image_transform_train(&img, side, CROP_SCALE_TORCHVISION, &rng, out);
        CropBox box = image_random_resized_crop_box(W, H, CROP_SCALE_TORCHVISION, &copy);
        int flip = rng_uniform(&copy) < 0.5f;
        flips += flip;
        CropBox all = {0, 0, side, side};
        image_resize_bilinear(&img, box, side, side, all, 0, plain);
        for (int y = 0; y < side; y++)
            for (int x = 0; x < side; x++)
                ck_assert_mem_eq(out + ((size_t)y * side + x) * 3,
                                 plain + ((size_t)y * side + (flip ? side - 1 - x : x)) * 3, 3);
        if (n < 10) ck_assert_int_le(ref_max_diff(&img, box, side, side, all, out, flip), 1);
    }
    ck_assert(flips > 10 && flips < 50);  // both branches ran
    free(out);
    free(plain);
    free(rgb);
}
END_TEST

START_TEST(resize_window_equals_full_resize_cut) {
    const int W = 77, H = 51, OW = 40, OH = 66;
    uint8_t *rgb = fx_noise(W, H, 5);
    DecodedImage img = image_of(rgb, W, H);
    CropBox box = {3, 5, 40, 60};
    uint8_t *full = malloc((size_t)OW * OH * 3), *part = malloc((size_t)OW * OH * 3);
    image_resize_bilinear(&img, box, OW, OH, (CropBox){0, 0, OH, OW}, 0, full);
    CropBox win = {13, 7, 30, 21};
    image_resize_bilinear(&img, box, OW, OH, win, 0, part);
    for (int y = 0; y < win.height; y++)
        ck_assert_mem_eq(part + (size_t)y * win.width * 3, full + ((size_t)(win.top + y) * OW + win.left) * 3,
                         (size_t)win.width * 3);
    free(full);
    free(part);
    free(rgb);
}
END_TEST

// ---- ImageFolder ----------------------------------------------------------------------------------------

static void mkdirs(const char *path) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    mkdir(buf, 0755);
}

static void rm_rf(const char *path) {
    char cmd[600], out[64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    tu_run_shell(cmd, out, sizeof out);
}

static const PixelNorm imagenet = {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};

static int open_folder(const char *root, int train, int max_classes, Dataset **ds, char *err, size_t cap) {
    return dataset_imagefolder_open(root, NULL, train, 0, 32, max_classes, 42, imagenet, ds, err, cap);
}

// The grey level of a solid fixture: sample k of the expected order has level 20 + 10 k.
static int level_of(const uint8_t *img) { return img[(16 * 32 + 16) * 3]; }

// Classes C, a, b (byte order: upper case first); in a, os.walk's folders sorted by path: a, a/s, a/s-t,
// a/s/deeper, and files sorted by name within each ("10.jpg" before "2.jpg").
static const char *const order_files[] = {"C/x.JPEG",    "a/10.jpg",         "a/2.jpg", "a/s/0.jpeg",
                                          "a/s-t/1.jpg", "a/s/deeper/9.Jpg", "b/1.jpg"};
static const int order_labels[] = {0, 1, 1, 1, 1, 1, 2};

static void make_ordered_folder(const char *root) {
    rm_rf(root);
    char path[512];
    const char *splits[] = {"train", "val"};
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 7; k++) {
            snprintf(path, sizeof path, "%s/%s/%s", root, splits[s], order_files[k]);
            *strrchr(path, '/') = '\0';
            mkdirs(path);
            snprintf(path, sizeof path, "%s/%s/%s", root, splits[s], order_files[k]);
            uint8_t v = (uint8_t)(20 + 10 * k);
            fx_write_solid(path, 40, 30, v, v, v);
        }
    snprintf(path, sizeof path, "%s/train/b/notes.txt", root);  // not a JPEG name: left out
    tu_write_file(path, "not an image\n");
    snprintf(path, sizeof path, "%s/train/b/picture.png", root);
    tu_write_file(path, "not decoded either\n");
}

START_TEST(imagefolder_order_is_torchvision_order) {
    make_ordered_folder("folder_order");
    for (int train = 1; train >= 0; train--) {
        Dataset *ds;
        char err[512] = "";
        ck_assert_msg(open_folder("folder_order", train, 10, &ds, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(ds->size, 7);
        ck_assert_int_eq(ds->classes, 3);
        ck_assert_int_eq(ds->side, 32);
        ck_assert_float_eq(ds->norm.std[2], 0.225f);
        uint8_t img[32 * 32 * 3];
        for (int k = 0; k < 7; k++) {
            int32_t label = -1;
            dataset_get(ds, k, img, &label, NULL);
            ck_assert_msg(label == order_labels[k], "sample %d (%s): label %d", k, order_files[k], label);
            ck_assert_msg(abs(level_of(img) - (20 + 10 * k)) <= 2,
                          "sample %d should be %s (level %d), got %d", k, order_files[k], 20 + 10 * k,
                          level_of(img));
        }
        ck_assert_int_eq(image_dataset_skipped(ds), 0);
        dataset_close(ds);
    }
}
END_TEST

typedef struct GetJob {
    const Dataset *ds;
    int32_t labels[12];
    uint8_t levels[12];
} GetJob;

static void *get_all(void *arg) {
    GetJob *j = arg;
    uint8_t img[32 * 32 * 3];
    for (int i = j->ds->size - 1; i >= 0; i--) {
        dataset_get(j->ds, i, img, &j->labels[i], NULL);
        j->levels[i] = (uint8_t)level_of(img);
    }
    return NULL;
}

// Samples 1 (truncated) and 2 (0 bytes) are replaced by 3, sample 5 (text named .jpg) by 0 (wrapping
// around), each time, from any thread, and every replacement is counted.
START_TEST(imagefolder_replaces_bad_samples_deterministically) {
    const char *root = "folder_bad";
    rm_rf(root);
    char path[512];
    snprintf(path, sizeof path, "%s/train/a", root);
    mkdirs(path);
    snprintf(path, sizeof path, "%s/train/b", root);
    mkdirs(path);
    fx_write_solid("folder_bad/train/a/0.jpg", 40, 30, 50, 50, 50);
    uint8_t *src = fx_pattern(40, 30, 3, 0);
    size_t len;
    uint8_t *jpeg = fx_jpeg(src, 40, 30, 3, 90, TJSAMP_420, 0, &len);
    fx_write("folder_bad/train/a/1.jpg", jpeg, len / 2);
    fx_write("folder_bad/train/a/2.jpg", jpeg, 0);
    fx_write_solid("folder_bad/train/b/3.jpg", 40, 30, 150, 150, 150);
    fx_write_solid("folder_bad/train/b/4.jpg", 40, 30, 200, 200, 200);
    tu_write_file("folder_bad/train/b/5.jpg", "hello, I am text\n");
    free(jpeg);
    free(src);
    Dataset *ds;
    char err[512] = "";
    ck_assert_msg(open_folder(root, 1, 2, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ds->size, 6);
    const int want_label[] = {0, 1, 1, 1, 1, 0}, want_level[] = {50, 150, 150, 150, 200, 50};
    GetJob jobs[4];
    pthread_t threads[4];
    for (int t = 0; t < 4; t++) {
        jobs[t].ds = ds;
        ck_assert_int_eq(pthread_create(&threads[t], NULL, get_all, &jobs[t]), 0);
    }
    for (int t = 0; t < 4; t++) pthread_join(threads[t], NULL);
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 6; i++) {
            ck_assert_int_eq(jobs[t].labels[i], want_label[i]);
            ck_assert_int_le(abs(jobs[t].levels[i] - want_level[i]), 2);
        }
    ck_assert_int_eq(image_dataset_skipped(ds), 4 * 3);  // samples 1, 2 and 5 in each of 4 threads
    dataset_close(ds);
}
END_TEST

// A training sample decodes only its crop's region (image_decode_region): the bytes must be those of the
// whole image's decode through image_transform_train with the same rng, also for the sample that replaces
// a truncated one (whose failed decode must leave the rng as it was).
START_TEST(imagefolder_train_crop_equals_full_decode_transform) {
    const char *root = "folder_crop";
    rm_rf(root);
    mkdirs("folder_crop/train/a");
    const struct {
        int w, h, subsamp, progressive;
        size_t cut;
    } files[] = {{500, 375, TJSAMP_420, 0, 0}, {333, 250, TJSAMP_420, 0, 2}, {301, 199, TJSAMP_422, 1, 0}};
    uint8_t *jpeg[3];
    size_t len[3];
    char path[512];
    for (int k = 0; k < 3; k++) {
        uint8_t *src = fx_noise(files[k].w, files[k].h, 70 + (uint64_t)k);
        jpeg[k] =
            fx_jpeg(src, files[k].w, files[k].h, 3, 90, files[k].subsamp, files[k].progressive, &len[k]);
        snprintf(path, sizeof path, "%s/train/a/%d.jpg", root, k);
        fx_write(path, jpeg[k], files[k].cut ? len[k] / files[k].cut : len[k]);  // 1.jpg is cut in half
        free(src);
    }
    Dataset *ds;
    char err[512] = "";
    const int side = 64, decoded_as[] = {0, 2, 2};
    ck_assert_msg(dataset_imagefolder_open(root, NULL, 1, 1, side, 10, 42, imagenet, &ds, err, sizeof err) ==
                      0,
                  "%s", err);
    uint8_t got[64 * 64 * 3], want[64 * 64 * 3];
    for (uint32_t n = 0; n < 40; n++) {
        int k = (int)(n % 3);
        Rng rng, copy;
        data_rng_seed(&rng, 5, DATA_STREAM_AUGMENT, 0, n);
        copy = rng;
        int32_t label;
        dataset_get(ds, k, got, &label, &rng);
        DecodedImage full = decode_ok(jpeg[decoded_as[k]], len[decoded_as[k]]);
        image_transform_train(&full, side, CROP_SCALE_TORCHVISION, &copy, want);
        ck_assert_msg(memcmp(got, want, sizeof got) == 0,
                      "sample %d, draw %u: differs from the full decode's", k, n);
        ck_assert_mem_eq(&rng, &copy, sizeof rng);  // the same numbers drawn
        image_free(&full);
    }
    ck_assert_int_gt(image_dataset_skipped(ds), 0);  // not vacuous: 1.jpg was replaced
    dataset_close(ds);
    for (int k = 0; k < 3; k++) free(jpeg[k]);
}
END_TEST

// folder_sides: train/ and val/ of classes a and b, patterned JPEGs of several sizes; returns the files'
// bytes, train first (jpeg[k], len[k], k < 6 train, 6..9 val, in torchvision's order).
static void make_sides_folder(uint8_t *jpeg[10], size_t len[10]) {
    rm_rf("folder_sides");
    const char *dirs[] = {"folder_sides/train/a", "folder_sides/train/b", "folder_sides/val/a",
                          "folder_sides/val/b"};
    for (int d = 0; d < 4; d++) mkdirs(dirs[d]);
    char path[512];
    for (int k = 0; k < 10; k++) {
        int w = 90 + 13 * k, h = 140 - 9 * k, train = k < 6, j = train ? k : k - 6, per = train ? 3 : 2;
        uint8_t *src = fx_pattern(w, h, 3, 30 + k);
        jpeg[k] = fx_jpeg(src, w, h, 3, 92, TJSAMP_420, 0, &len[k]);
        snprintf(path, sizeof path, "folder_sides/%s/%c/%d.jpg", train ? "train" : "val", j < per ? 'a' : 'b',
                 j);
        fx_write(path, jpeg[k], len[k]);
        free(src);
    }
}

// data.train_crop, data.val_resize and data.val_crop through the factory: validation images are
// Resize(val_resize) + CenterCrop(val_crop) of the decoded file; training samples with data.auto_augment and
// data.random_erase are the file's RandomResizedCrop at train_crop, then the op and box drawn after it from
// the same stream (erased with the bytes nearest ImageNet's mean).
START_TEST(image_sides_and_augmentation_through_the_factory) {
    uint8_t *jpeg[10];
    size_t len[10];
    make_sides_folder(jpeg, len);
    Config cfg;
    const char *ov[] = {
        "data.source=imagefolder", "data.path=folder_sides",    "data.train_crop=32",    "data.val_resize=48",
        "data.val_crop=40",        "data.auto_augment=ta_wide", "data.random_erase=0.7", NULL};
    tu_config(&cfg, ov);
    Dataset *train = NULL, *val = NULL;
    char err[512] = "";
    ck_assert_msg(dataset_open_train(&cfg.data, &cfg.model, 9, NULL, &train, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_msg(dataset_open_val(&cfg.data, &cfg.model, 9, NULL, &val, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(train->side, 32);
    ck_assert_int_eq(val->side, 40);
    const uint8_t mean_bytes[3] = {124, 116, 104};
    ck_assert_mem_eq(train->extra.erase_fill, mean_bytes, 3);
    uint8_t got[40 * 40 * 3], want[40 * 40 * 3];
    int32_t label;
    for (int k = 0; k < 4; k++) {
        dataset_get(val, k, got, &label, NULL);
        DecodedImage full = decode_ok(jpeg[6 + k], len[6 + k]);
        image_transform_val(&full, 48, 40, want);
        ck_assert_msg(memcmp(got, want, sizeof want) == 0, "validation sample %d", k);
        image_free(&full);
    }
    int erased = 0;
    for (uint32_t n = 0; n < 24; n++) {
        int k = (int)(n % 6);
        Rng rng, copy;
        data_rng_sample(&rng, 9, (int)n, 0, (uint32_t)k);
        copy = rng;
        dataset_get(train, k, got, &label, &rng);
        DecodedImage full = decode_ok(jpeg[k], len[k]);
        image_transform_train(&full, 32, CROP_SCALE_TORCHVISION, &copy, want);
        AugmentDraw d = image_ta_wide_draw(&copy);
        image_augment_op(want, 32, 32, d.op, image_ta_wide_magnitude(d), AUGMENT_NEAREST);
        ImageRect box;
        if (image_random_erase_draw(32, 32, 0.7, &copy, &box))
            image_erase(want, 32, box, mean_bytes), erased++;
        ck_assert_msg(memcmp(got, want, 32 * 32 * 3) == 0, "training sample %d, epoch %u (%s)", k, n,
                      image_augment_op_name(d.op));
        ck_assert_mem_eq(&rng, &copy, sizeof rng);
        image_free(&full);
    }
    ck_assert_int_gt(erased, 6);
    dataset_close(train);
    dataset_close(val);
    for (int k = 0; k < 10; k++) free(jpeg[k]);
}
END_TEST

// A run trains at data.train_crop 32 and evaluates at data.val_crop 40 (resized to 48) with TrivialAugmentWide
// (bilinear) and erasing, on both loaders' paths; --dry-run names both sides.
START_TEST(run_trains_and_evaluates_at_their_own_sides) {
    uint8_t *jpeg[10];
    size_t len[10];
    make_sides_folder(jpeg, len);
    for (int k = 0; k < 10; k++) free(jpeg[k]);
    char out[16384];
    const char *run = AMPTRAIN_SOURCE_DIR
        "/configs/tiny.yaml backend.device=cpu data.source=imagefolder "
        "data.path=folder_sides data.batch_size=3 data.workers=2 data.train_crop=32 data.val_resize=48 "
        "data.val_crop=40 data.auto_augment=ta_wide data.auto_augment_interpolation=bilinear "
        "data.random_erase=0.5 train.epochs=2 log.metrics= log.progress=never checkpoint.dir= 2>&1";
    ck_assert_msg(tu_run_cli(run, out, sizeof out) == 0, "%s", out);
    const char *eval = strstr(out, "eval  epoch 2");
    ck_assert_msg(eval && strstr(eval, "(4 samples)"), "%s", out);
    char dry[1024];
    snprintf(dry, sizeof dry, "%s --dry-run", run);
    ck_assert_msg(tu_run_cli(dry, out, sizeof out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "32x32 input (evaluation 40x40)"), "%s", out);
}
END_TEST

// folder_jobs: 7 training samples in classes a and b - five JPEGs of several sizes, subsamplings, a progressive
// and a grayscale one, 1.jpg cut in half (its header parses, its data does not decode) - a 0-byte 5.jpg and a
// text file 6.jpg.
static void make_jobs_folder(void) {
    const char *root = "folder_jobs";
    rm_rf(root);
    mkdirs("folder_jobs/train/a");
    mkdirs("folder_jobs/train/b");
    const struct {
        int w, h, channels, subsamp, progressive;
        size_t cut;
    } files[] = {{500, 375, 3, TJSAMP_420, 0, 0},
                 {333, 250, 3, TJSAMP_420, 0, 2},
                 {301, 199, 3, TJSAMP_422, 1, 0},
                 {97, 211, 1, TJSAMP_GRAY, 0, 0},
                 {256, 256, 3, TJSAMP_444, 0, 0}};
    char path[512];
    for (int k = 0; k < 5; k++) {
        uint8_t *src = fx_pattern(files[k].w, files[k].h, files[k].channels, k);
        size_t len;
        uint8_t *jpeg = fx_jpeg(src, files[k].w, files[k].h, files[k].channels, 90, files[k].subsamp,
                                files[k].progressive, &len);
        snprintf(path, sizeof path, "%s/train/%c/%d.jpg", root, k % 2 ? 'b' : 'a', k);
        fx_write(path, jpeg, files[k].cut ? len / files[k].cut : len);  // 1.jpg is cut in half
        free(jpeg), free(src);
    }
    fx_write("folder_jobs/train/a/5.jpg", "", 0);
    tu_write_file("folder_jobs/train/b/6.jpg", "hello, I am text\n");
}

// What the datasets of a test apply after the crop and flip: nothing, or TrivialAugmentWide (each filter) and
// erasing with probability 1/2 and ImageNet's fill.
typedef struct ExtraCase {
    int augment, ta_wide;
    AugmentFilter filter;
    double erase_p;
} ExtraCase;

static void set_extra(Dataset *ds, ExtraCase c) {
    ds->extra = (ImageAugment){c.ta_wide, c.filter, c.erase_p, {124, 116, 104}};
}

// A backend that decodes (input_decode) gets ImageJobs instead of pixels: the CPU backend's reference decoder
// must give bitwise the pixels and labels of the loader's host path, for training crops and flips (without
// and with TrivialAugmentWide and erasing, whose draws the jobs carry) and the validation transform, over
// several epochs, with the same replacements: a 0-byte file and a text file are replaced when the job is made
// (their headers do not parse), a file cut in half only when its job fails to decode (its header parses; the
// 0-byte file's replacement is that file, so that chain crosses both stages), and both paths count the same
// replacements.
START_TEST(decode_jobs_equal_host_path) {
    const char *root = "folder_jobs";
    make_jobs_folder();
    Backend *cpu = cpu_backend_create();
    const int side = 48, epochs = 6;
    const size_t bytes = (size_t)side * side * 3;
    const ExtraCase cases[] = {{1, 1, AUGMENT_NEAREST, 0.5},
                               {1, 1, AUGMENT_BILINEAR, 0.5},
                               {1, 0, 0, 0},
                               {0, 0, 0, 0}};
    int ops = 0, boxes = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int augment = cases[c].augment;
        Dataset *host, *dev;
        char err[512] = "";
        ck_assert_msg(dataset_imagefolder_open(root, NULL, 1, augment, side, 10, 42, imagenet, &host, err,
                                               sizeof err) == 0,
                      "%s", err);
        ck_assert_msg(dataset_imagefolder_open(root, NULL, 1, augment, side, 10, 42, imagenet, &dev, err,
                                               sizeof err) == 0,
                      "%s", err);
        set_extra(host, cases[c]), set_extra(dev, cases[c]);
        const int n = host->size;
        ck_assert_int_eq(n, 7);
        int32_t indices[7], want_labels[7], got_labels[7];
        uint8_t want[7 * 48 * 48 * 3], got[7 * 48 * 48 * 3], failed[7];
        ImageJob jobs[7];
        int failures = 0;
        for (int epoch = 0; epoch < epochs; epoch++) {
            for (int k = 0; k < n; k++) indices[k] = (k * 3 + epoch) % n;
            dataset_get_batch(host, indices, n, epoch, want, want_labels);
            dataset_get_job_batch(dev, indices, n, epoch, jobs, got_labels);
            memset(failed, 7, sizeof failed);
            cpu->input_decode(cpu, 0, got, n, side, jobs, failed);
            for (int k = 0; k < n; k++) {
                ck_assert_int_le(failed[k], 1);
                if (failed[k])
                    dataset_replace_failed(dev, indices[k], &jobs[k], epoch, "the test's decoder refused it",
                                           got + k * bytes, &got_labels[k]);
                failures += failed[k];
                ops += jobs[k].augment.op != AUGMENT_IDENTITY;
                boxes += jobs[k].augment.erase;
                if (!cases[c].ta_wide) ck_assert_int_eq(jobs[k].augment.op, AUGMENT_IDENTITY);
                free((void *)jobs[k].bytes);
            }
            ck_assert_mem_eq(got_labels, want_labels, sizeof want_labels);
            ck_assert_msg(memcmp(got, want, (size_t)n * bytes) == 0, "case %zu epoch %d: pixels differ", c,
                          epoch);
        }
        // not vacuous: each epoch the cut 1.jpg fails to decode as itself and as the replacement of the
        // 0-byte 5.jpg before it
        ck_assert_int_eq(failures, 2 * epochs);
        ck_assert_int_eq(image_dataset_skipped(dev), image_dataset_skipped(host));
        ck_assert_int_eq(image_dataset_skipped(host), 3 * epochs);  // 1.jpg, 5.jpg and 6.jpg in each epoch
        dataset_close(host), dataset_close(dev);
    }
    // the jobs carried ops and boxes: of 2 x 42 draws, 13/14 an op and 1/2 a box on average
    ck_assert_int_gt(ops, 60);
    ck_assert_int_gt(boxes, 25);
    cpu->destroy(cpu);
}
END_TEST

// The loader's job mode (threaded, chunks handed out across workers, a partial last step) hands out the
// samples of its pixel mode, TrivialAugmentWide and erasing included: each batch's jobs, decoded by the CPU
// backend with the failed ones replaced, equal the synchronous pixel loader's batch, with the same indices and
// labels, over two epochs.
START_TEST(loader_jobs_decode_to_loader_pixels) {
    make_jobs_folder();
    const int side = 40, batch = 3;
    const size_t bytes = (size_t)side * side * 3;
    Dataset *pixels_ds, *jobs_ds;
    char err[512] = "";
    ck_assert_msg(dataset_imagefolder_open("folder_jobs", NULL, 1, 1, side, 10, 7, imagenet, &pixels_ds, err,
                                           sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(dataset_imagefolder_open("folder_jobs", NULL, 1, 1, side, 10, 7, imagenet, &jobs_ds, err,
                                           sizeof err) == 0,
                  "%s", err);
    const ExtraCase extra = {1, 1, AUGMENT_BILINEAR, 0.5};
    set_extra(pixels_ds, extra), set_extra(jobs_ds, extra);
    Sampler s;
    sampler_init(&s, pixels_ds->size, batch, 1, 0, 1, 0, 7);  // 7 samples: 3 steps an epoch, the last partial
    Loader *pixels = loader_create(pixels_ds, &s, LOADER_PIXELS, 0, 1, 0, 0, 2, NULL);
    Loader *jobs = loader_create(jobs_ds, &s, LOADER_JOBS, 2, 3, 0, 0, 2, NULL);
    Backend *cpu = cpu_backend_create();
    uint8_t decoded[3 * 40 * 40 * 3], failed[3];
    int32_t labels[3];
    int batches = 0, failures = 0;
    const Batch *p, *j;
    while ((p = loader_next(pixels, NULL)) != NULL) {
        j = loader_next(jobs, NULL);
        ck_assert_ptr_nonnull(j);
        ck_assert_ptr_null(j->images);
        ck_assert_ptr_nonnull(j->jobs);
        ck_assert_int_eq(j->count, p->count);
        ck_assert_int_eq(j->epoch, p->epoch);
        ck_assert_mem_eq(j->indices, p->indices, (size_t)p->count * sizeof(int32_t));
        memcpy(labels, j->labels, sizeof labels);
        cpu->input_decode(cpu, 0, decoded, j->count, side, j->jobs, failed);
        for (int k = 0; k < j->count; k++)
            if (failed[k]) {
                failures++;
                dataset_replace_failed(jobs_ds, j->indices[k], &j->jobs[k], j->epoch, "refused",
                                       decoded + k * bytes, &labels[k]);
            }
        ck_assert_mem_eq(labels, p->labels, (size_t)p->count * sizeof(int32_t));
        ck_assert_msg(memcmp(decoded, p->images, (size_t)p->count * bytes) == 0, "batch %d: pixels differ",
                      batches);
        for (int k = j->count; k < batch; k++)
            ck_assert_ptr_null(j->jobs[k].bytes);  // the unused rows are empty
        batches++;
    }
    ck_assert_ptr_null(loader_next(jobs, NULL));
    ck_assert_int_eq(batches, 2 * 3);
    ck_assert_int_eq(failures, 2 * 2);  // the cut 1.jpg as itself and as 5.jpg's replacement, each epoch
    loader_destroy(pixels), loader_destroy(jobs);
    cpu->destroy(cpu);
    sampler_free(&s);
    dataset_close(pixels_ds), dataset_close(jobs_ds);
}
END_TEST

// data.decode=device on the CPU backend (its reference decoder, fed the loader's jobs, the refused ones replaced
// in the input slot) trains bitwise as data.decode=host does, with TrivialAugmentWide and erasing, on a folder
// whose files fail at both stages; the
// device run names the file its decoder refused; --bench-data times that decoder. data.decode=device is refused
// for data that is not JPEGs.
START_TEST(device_decode_trains_like_host_decode) {
    make_jobs_folder();
    rm_rf("decode_runs");
    char out[16384], cmd[1024];
    const char *run = AMPTRAIN_SOURCE_DIR
        "/configs/tiny.yaml backend.device=cpu data.source=imagefolder "
        "data.path=folder_jobs data.batch_size=3 data.prefetch=2 data.workers=2 model.image_size=40 "
        "data.auto_augment=ta_wide data.random_erase=0.5 train.steps=6 log.metrics= log.progress=never "
        "checkpoint.every=0";
    const char *modes[] = {"host", "device"};
    for (int m = 0; m < 2; m++) {
        snprintf(cmd, sizeof cmd, "%s data.decode=%s checkpoint.dir=decode_runs/%s 2>&1", run, modes[m],
                 modes[m]);
        ck_assert_msg(tu_run_cli(cmd, out, sizeof out) == 0, "%s", out);
        if (m == 1)
            ck_assert_msg(strstr(out, "decoded by the cpu backend") && strstr(out, "1.jpg"), "%s", out);
    }
    ck_assert(
        tu_checkpoints_equal("decode_runs/host/last.safetensors", "decode_runs/device/last.safetensors"));
    // --bench-data times the backend's decoder and counts what it refused (the cut 1.jpg, met every epoch)
    ck_assert_msg(tu_run_cli(AMPTRAIN_SOURCE_DIR
                             "/configs/tiny.yaml backend.device=cpu data.source=imagefolder "
                             "data.path=folder_jobs data.batch_size=3 data.workers=2 model.image_size=40 "
                             "data.decode=device --bench-data --bench-steps 6 2>&1",
                             out, sizeof out) == 0,
                  "%s", out);
    const char *json = strstr(out, "{\"bench\":\"data\"");
    ck_assert_msg(json && strstr(json, "\"decode\":\"cpu\"") && strstr(json, "\"batches\":6,"), "%s", out);
    ck_assert_int_ge(atol(strstr(json, "\"device_refused\":") + strlen("\"device_refused\":")), 2);
    ck_assert_int_eq(tu_run_cli(AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml data.decode=device --dry-run 2>&1",
                                out, sizeof out),
                     2);
    ck_assert_msg(strstr(out, "data.decode") && strstr(out, "learnable"), "%s", out);
}
END_TEST

static void assert_open_fails(const char *root, int train, int max_classes, const char *contains) {
    Dataset *ds = (Dataset *)1;
    char err[512] = "";
    ck_assert_int_eq(open_folder(root, train, max_classes, &ds, err, sizeof err), 2);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(err, contains) != NULL, "'%s' lacks '%s'", err, contains);
    ck_assert_msg(!strchr(err, '\n'), "one line: '%s'", err);
}

START_TEST(imagefolder_refuses_bad_layouts) {
    assert_open_fails("no_such_root", 1, 10, "no_such_root");
    rm_rf("empty_root");
    mkdirs("empty_root/train");
    assert_open_fails("empty_root", 1, 10, "no class folders");
    rm_rf("root_no_train");
    mkdirs("root_no_train");
    assert_open_fails("root_no_train", 1, 10, "root_no_train/train");
    make_ordered_folder("root_extra");
    mkdirs("root_extra/train/d");
    assert_open_fails("root_extra", 1, 10, "d is only in root_extra/train");
    mkdirs("root_extra/val/d");  // a class folder without images
    assert_open_fails("root_extra", 1, 10, "root_extra/train/d has no .jpg/.jpeg images");
    fx_write_solid("root_extra/train/d/1.jpg", 8, 8, 1, 2, 3);
    fx_write_solid("root_extra/val/d/1.jpg", 8, 8, 1, 2, 3);
    assert_open_fails("root_extra", 1, 3, "4 class folders, more than model.num_classes 3");
    mkdirs("root_extra/val/e");
    fx_write_solid("root_extra/val/e/1.jpg", 8, 8, 1, 2, 3);
    assert_open_fails("root_extra", 1, 10, "e is only in root_extra/val");
    assert_open_fails("root_extra", 0, 10, "e is only in root_extra/val");
    // No val/ at all: a training split, and no validation split.
    rm_rf("root_extra/val");
    Dataset *ds = NULL;
    char err[512] = "";
    ck_assert_int_eq(open_folder("root_extra", 0, 10, &ds, err, sizeof err), 0);
    ck_assert_ptr_null(ds);
    ck_assert_int_eq(open_folder("root_extra", 1, 10, &ds, err, sizeof err), 0);
    ck_assert_int_eq(ds->classes, 4);
    dataset_close(ds);
}
END_TEST

// ---- config and the CLI ---------------------------------------------------------------------------------

// ---- the file-list cache (imagefolder_list.h) ------------------------------------------------------------

// The one cache file of `split` in dir (the test's own cache folder holds one root); its bytes and length.
static uint8_t *read_cache(const char *dir, const char *split, size_t *len) {
    char cmd[256], path[512] = "";
    snprintf(cmd, sizeof cmd, "ls %s/imagefolder-*-%s.list | tr -d '\\n'", dir, split);
    ck_assert_msg(tu_run_shell(cmd, path, sizeof path) == 0, "no %s cache in %s: %s", split, dir, path);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    uint8_t *bytes = malloc(*len + 1);
    ck_assert_uint_eq(fread(bytes, 1, *len, f), *len);
    fclose(f);
    return bytes;
}

static void write_cache(const char *dir, const char *split, const uint8_t *bytes, size_t len) {
    char cmd[256], path[512] = "";
    snprintf(cmd, sizeof cmd, "ls %s/imagefolder-*-%s.list | tr -d '\\n'", dir, split);
    ck_assert_int_eq(tu_run_shell(cmd, path, sizeof path), 0);
    fx_write(path, bytes, len);
}

static Dataset *open_cached(const char *root, const char *cache_dir, int train) {
    Dataset *ds;
    char err[512] = "";
    ck_assert_msg(
        dataset_imagefolder_open(root, cache_dir, train, 0, 32, 10, 42, imagenet, &ds, err, sizeof err) == 0,
        "%s", err);
    return ds;
}

// Every sample of ds: level and label as the expected files/levels say, none replaced.
static void assert_samples(Dataset *ds, const int *levels, const int *labels, int n) {
    ck_assert_int_eq(ds->size, n);
    uint8_t img[32 * 32 * 3];
    for (int k = 0; k < n; k++) {
        int32_t label = -1;
        dataset_get(ds, k, img, &label, NULL);
        ck_assert_msg(label == labels[k] && abs(level_of(img) - levels[k]) <= 2,
                      "sample %d: label %d level %d, want %d and %d", k, label, level_of(img), labels[k],
                      levels[k]);
    }
    ck_assert_int_eq(image_dataset_skipped(ds), 0);
}

START_TEST(imagefolder_list_cache_is_read_back_and_rebuilt) {
    const char *root = "folder_cache", *cache = "cache_lists";
    make_ordered_folder(root);
    rm_rf(cache);
    mkdir(cache, 0755);
    const long t0 = 1700000000;  // 2023: far outside the settling window
    fx_set_folder_mtimes(root, t0);
    int levels[8], labels[8];
    for (int k = 0; k < 7; k++) levels[k] = 20 + 10 * k, labels[k] = order_labels[k];

    // 1. The first open walks the tree and saves the list.
    Dataset *ds = open_cached(root, cache, 1);
    assert_samples(ds, levels, labels, 7);
    dataset_close(ds);
    size_t len;
    uint8_t *first = read_cache(cache, "train", &len);

    // 2. The second open reads it: a.jpg renamed to .png with its folder's mtime put back is invisible
    //    to the cache (a walk would leave the .png out: 6 samples), so sample 2 (a/2.jpg) is now a
    //    missing file, replaced by sample 3.
    ck_assert_int_eq(rename("folder_cache/train/a/2.jpg", "folder_cache/train/a/2.png"), 0);
    fx_set_folder_mtimes(root, t0);
    ds = open_cached(root, cache, 1);
    ck_assert_int_eq(ds->size, 7);
    uint8_t img[32 * 32 * 3];
    int32_t label;
    dataset_get(ds, 2, img, &label, NULL);
    ck_assert_int_eq(image_dataset_skipped(ds), 1);
    ck_assert_int_le(abs(level_of(img) - levels[3]), 2);
    dataset_close(ds);

    // 3. A changed folder (its mtime moved) makes the cache stale: the walk sees the rename, and a new
    //    file; the new list is saved.
    uint8_t v = 200;
    fx_write_solid("folder_cache/train/a/11.jpg", 40, 30, v, v, v);
    fx_set_folder_mtimes(root, t0 + 60);
    // a/10.jpg, a/11.jpg (new), then a/s/0.jpeg ...; a/2.png is left out.
    int levels3[7] = {20, 30, 200, 50, 60, 70, 80}, labels3[7] = {0, 1, 1, 1, 1, 1, 2};
    ds = open_cached(root, cache, 1);
    assert_samples(ds, levels3, labels3, 7);
    dataset_close(ds);
    size_t len3;
    uint8_t *third = read_cache(cache, "train", &len3);
    ck_assert_msg(len3 != len || memcmp(first, third, len) != 0, "the stale cache was not rewritten");

    // 4. A corrupt cache (one byte changed, or cut short) is rebuilt by a walk, into the same bytes.
    for (int cut = 0; cut < 2; cut++) {
        uint8_t *bad = malloc(len3);
        memcpy(bad, third, len3);
        bad[len3 / 2] ^= 0x20;
        write_cache(cache, "train", bad, cut ? len3 / 2 : len3);
        free(bad);
        ds = open_cached(root, cache, 1);
        assert_samples(ds, levels3, labels3, 7);
        dataset_close(ds);
        size_t again_len;
        uint8_t *again = read_cache(cache, "train", &again_len);
        ck_assert_msg(again_len == len3 && memcmp(again, third, len3) == 0,
                      "corrupt cache (cut %d) not rebuilt", cut);
        free(again);
    }

    // 5. A folder changed within the settling window is walked but not cached: the file stays as it was.
    fx_write_solid("folder_cache/train/b/2.jpg", 40, 30, 90, 90, 90);
    ds = open_cached(root, cache, 1);
    ck_assert_int_eq(ds->size, 8);
    dataset_close(ds);
    size_t len5;
    uint8_t *fifth = read_cache(cache, "train", &len5);
    ck_assert_msg(len5 == len3 && memcmp(fifth, third, len3) == 0,
                  "a list with an unsettled folder was cached");

    // 6. The validation split has its own cache; no cache folder: nothing is written anywhere.
    ds = open_cached(root, cache, 0);
    ck_assert_int_eq(ds->size, 7);
    dataset_close(ds);
    size_t len_val;
    free(read_cache(cache, "val", &len_val));
    ds = open_cached(root, "cache_missing", 1);
    ck_assert_int_eq(ds->size, 8);
    dataset_close(ds);
    ck_assert(!tu_file_exists("cache_missing"));
    free(first), free(third), free(fifth);
}
END_TEST

// ---- untrusted trees: edited caches, FIFOs, link loops, decompression bombs -----------------------------

// A cache rewritten with image_list_save (so its checksum holds) from the true list and class folders
// with one thing changed by edit; the next open must not trust it: it walks, gets the true samples, and
// saves the true list again (the same bytes as before the edit).
typedef void (*ListEdit)(ImageList *l, NameList *classes, const char *outside);

static void assert_edited_cache_rebuilt(const char *root, const char *cache, ListEdit edit,
                                        const char *outside, const int *levels, const int *labels, int n) {
    size_t len;
    uint8_t *good = read_cache(cache, "train", &len);
    char train[512], split_abs[PATH_MAX], path[512] = "", cmd[256], why[1024] = "";
    snprintf(train, sizeof train, "%s/train", root);
    ck_assert_ptr_nonnull(realpath(train, split_abs));
    snprintf(cmd, sizeof cmd, "ls %s/imagefolder-*-train.list | tr -d '\\n'", cache);
    ck_assert_int_eq(tu_run_shell(cmd, path, sizeof path), 0);
    NameList classes = {0};
    names_add(&classes, "C"), names_add(&classes, "a"), names_add(&classes, "b");
    ImageList l;
    ck_assert_msg(image_list_load(path, split_abs, &classes, &l, why, sizeof why) == 0, "%s", why);
    NameList saved = {0};
    for (int c = 0; c < classes.count; c++) names_add(&saved, classes.items[c]);
    edit(&l, &saved, outside);
    ck_assert_msg(image_list_save(path, split_abs, &saved, &l, why, sizeof why) == 0, "%s", why);
    ImageList edited;
    ck_assert_int_eq(image_list_load(path, split_abs, &classes, &edited, why, sizeof why), 1);
    image_list_free(&l);
    names_free(&saved);
    names_free(&classes);
    Dataset *ds = open_cached(root, cache, 1);
    assert_samples(ds, levels, labels, n);
    dataset_close(ds);
    size_t again_len;
    uint8_t *again = read_cache(cache, "train", &again_len);
    ck_assert_msg(again_len == len && memcmp(again, good, len) == 0, "the edited cache was not rebuilt (%s)",
                  why);
    free(again);
    free(good);
}

static void set_file(ImageList *l, int i, const char *rel) {
    free(l->files.items[i]);
    l->files.items[i] = strdup(rel);
}

static void edit_dotdot(ImageList *l, NameList *classes, const char *outside) {
    (void)classes;
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "C/../../../%s", outside);  // from <root>/train to the scratch folder
    set_file(l, 0, rel);
}

static void edit_absolute(ImageList *l, NameList *classes, const char *outside) {
    (void)classes;
    char abs_path[PATH_MAX];
    ck_assert_ptr_nonnull(realpath(outside, abs_path));
    set_file(l, 0, abs_path);
}

static void edit_swap_labels(ImageList *l, NameList *classes, const char *outside) {
    (void)classes, (void)outside;
    int32_t t = l->labels[0];  // C/x.JPEG is class 0, b/1.jpg class 2
    l->labels[0] = l->labels[6], l->labels[6] = t;
}

static void edit_untracked_folder(ImageList *l, NameList *classes, const char *outside) {
    (void)classes, (void)outside;
    set_file(l, 1, "a/elsewhere/10.jpg");
}

// With that folder's true mtime, so that only the entry's place can give it away.
static void edit_folder_outside(ImageList *l, NameList *classes, const char *outside) {
    (void)classes, (void)outside;
    struct stat st;
    ck_assert_int_eq(stat(".", &st), 0);  // <root>/train/../..: the scratch folder
    free(l->dirs.items[0]);
    l->dirs.items[0] = strdup("../..");
    l->mtimes[0] = st.st_mtim;
}

// A class folder that train/ does not hold, every entry still true.
static void edit_extra_class(ImageList *l, NameList *classes, const char *outside) {
    (void)l, (void)outside;
    names_add(classes, "d");
}

// The checksum only finds damage: a cache edited to read a file outside data.path (through "..", or an
// absolute path), to swap two labels, to list a file in a folder whose mtime it does not track, to track
// a folder outside the class folders, or to list other class folders than train/ holds, is walked again
// and rebuilt, with one log line.
START_TEST(imagefolder_list_cache_edited_to_point_outside_is_rebuilt) {
    const char *root = "folder_forged", *cache = "cache_forged", *outside = "forged_secret.jpg";
    make_ordered_folder(root);
    rm_rf(cache);
    mkdir(cache, 0755);
    fx_write_solid(outside, 40, 30, 250, 250, 250);
    fx_set_folder_mtimes(root, 1700000000);
    int levels[7], labels[7];
    for (int k = 0; k < 7; k++) levels[k] = 20 + 10 * k, labels[k] = order_labels[k];
    dataset_close(open_cached(root, cache, 1));
    const ListEdit edits[] = {edit_dotdot,           edit_absolute,       edit_swap_labels,
                              edit_untracked_folder, edit_folder_outside, edit_extra_class};
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++)
        assert_edited_cache_rebuilt(root, cache, edits[e], outside, levels, labels, 7);
}
END_TEST

// A .jpg that is a FIFO would block the loader thread that opens it for ever: the scan refuses it at
// open, naming it; a FIFO under another name is left out like any other file. One that takes an image's
// place after the scan is opened without blocking, refused by its type and replaced.
START_TEST(imagefolder_refuses_fifos_without_blocking) {
    make_ordered_folder("folder_fifo");
    ck_assert_int_eq(mkfifo("folder_fifo/train/b/pipe.jpg", 0644), 0);
    assert_open_fails("folder_fifo", 1, 10, "folder_fifo/train/b/pipe.jpg is not a regular file (a FIFO)");
    ck_assert_int_eq(rename("folder_fifo/train/b/pipe.jpg", "folder_fifo/train/b/pipe.txt"), 0);
    Dataset *ds;
    char err[512] = "";
    ck_assert_msg(open_folder("folder_fifo", 1, 10, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ds->size, 7);
    ck_assert_int_eq(unlink("folder_fifo/train/a/2.jpg"), 0);
    ck_assert_int_eq(mkfifo("folder_fifo/train/a/2.jpg", 0644), 0);
    uint8_t img[32 * 32 * 3];
    int32_t label;
    dataset_get(ds, 2, img, &label, NULL);
    ck_assert_int_eq(image_dataset_skipped(ds), 1);
    ck_assert_int_le(abs(level_of(img) - (20 + 10 * 3)), 2);  // sample 3 in its place
    dataset_close(ds);
}
END_TEST

// Links to a folder above (the class folder, the split folder, data.path itself) would be walked again
// and again (os.walk(followlinks=True) goes on until the path is too long): each is passed over, and the
// samples are those of the tree without them. A link to a folder beside it is no loop and is walked.
START_TEST(imagefolder_skips_folder_link_loops) {
    make_ordered_folder("folder_loop");
    ck_assert_int_eq(symlink("..", "folder_loop/train/a/s/back"), 0);   // to a
    ck_assert_int_eq(symlink("..", "folder_loop/train/b/split"), 0);    // to train
    ck_assert_int_eq(symlink("../..", "folder_loop/train/C/root"), 0);  // to folder_loop
    ck_assert_int_eq(symlink(".", "folder_loop/val/b/self"), 0);
    for (int train = 1; train >= 0; train--) {
        Dataset *ds;
        char err[512] = "";
        ck_assert_msg(open_folder("folder_loop", train, 10, &ds, err, sizeof err) == 0, "%s", err);
        int levels[7];
        for (int k = 0; k < 7; k++) levels[k] = 20 + 10 * k;
        assert_samples(ds, levels, order_labels, 7);
        dataset_close(ds);
    }
    ck_assert_int_eq(symlink("../C", "folder_loop/train/b/c_again"), 0);
    Dataset *ds;
    char err[512] = "";
    ck_assert_msg(open_folder("folder_loop", 1, 10, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ds->size, 8);  // C/x.JPEG a second time, as b/c_again/x.JPEG
    dataset_close(ds);
}
END_TEST

// data.max_image_pixels: a sample whose header claims more pixels is replaced like an unreadable one
// before any pixel buffer is made for it, by `get` and by the decode jobs alike.
START_TEST(imagefolder_replaces_images_over_max_pixels) {
    rm_rf("folder_pixels");
    mkdirs("folder_pixels/train/a");
    fx_write_solid("folder_pixels/train/a/0_big.jpg", 64, 48, 60, 60, 60);       // 3072 pixels
    fx_write_solid("folder_pixels/train/a/1_small.jpg", 16, 12, 160, 160, 160);  // 192
    Dataset *ds;
    char err[512] = "";
    ck_assert_msg(open_folder("folder_pixels", 1, 10, &ds, err, sizeof err) == 0, "%s", err);
    uint8_t img[32 * 32 * 3];
    int32_t label;
    dataset_get(ds, 0, img, &label, NULL);
    ck_assert_int_le(abs(level_of(img) - 60), 2);
    image_dataset_set_max_pixels(ds, 3072);
    dataset_get(ds, 0, img, &label, NULL);
    ck_assert_int_le(abs(level_of(img) - 60), 2);
    ck_assert_int_eq(image_dataset_skipped(ds), 0);
    image_dataset_set_max_pixels(ds, 3071);
    dataset_get(ds, 0, img, &label, NULL);
    ck_assert_int_le(abs(level_of(img) - 160), 2);
    ck_assert_int_eq(image_dataset_skipped(ds), 1);
    ImageJob job;
    Rng rng;
    data_rng_seed(&rng, 1, DATA_STREAM_AUGMENT, 0, 0);
    image_dataset_job(ds, 0, &rng, &job, &label);
    ck_assert_int_eq(job.sample, 1);
    ck_assert_int_eq(job.width, 16);
    free((void *)job.bytes);
    ck_assert_int_eq(image_dataset_skipped(ds), 2);
    dataset_close(ds);
}
END_TEST

static int load(Config *cfg, const char *const *overrides, int n, char *message, size_t cap) {
    FILE *sink = fmemopen(message, cap, "w");
    int rc = config_load(cfg, NULL, n, (char **)overrides, sink);
    fclose(sink);
    return rc;
}

// A fresh run opens its data before it makes checkpoint.dir: the walked list waits, is written once the
// folder exists (dataset_save_cache), and the next open reads it.
START_TEST(imagefolder_list_cache_waits_for_its_folder) {
    const char *root = "folder_fresh", *cache = "fresh_run/ck";
    const long t0 = 1700000000;
    make_ordered_folder(root);
    fx_set_folder_mtimes(root, t0);
    rm_rf("fresh_run");

    // 1. Opened while the folder is missing: walked, nothing made; saving then still makes nothing.
    Dataset *ds = open_cached(root, cache, 1);
    dataset_save_cache(ds, cache);
    dataset_close(ds);
    ck_assert(!tu_file_exists("fresh_run"));

    // 2. The run makes the folder after the open; the list walked before is written there then.
    ds = open_cached(root, cache, 1);
    mkdirs("fresh_run/ck/");
    dataset_save_cache(ds, cache);
    dataset_close(ds);
    size_t len;
    free(read_cache(cache, "train", &len));

    // 3. The next open reads it: a/2.jpg renamed to .png with the folder's mtime put back is still listed
    //    (a walk would find 6 samples), and a list read from the cache is not written again.
    ck_assert_int_eq(rename("folder_fresh/train/a/2.jpg", "folder_fresh/train/a/2.png"), 0);
    fx_set_folder_mtimes(root, t0);
    ds = open_cached(root, cache, 1);
    ck_assert_int_eq(ds->size, 7);
    char list[512], out[64];
    ck_assert_int_eq(tu_run_shell("rm fresh_run/ck/imagefolder-*-train.list", out, sizeof out), 0);
    dataset_save_cache(ds, cache);
    dataset_close(ds);
    snprintf(list, sizeof list, "ls %s | wc -l", cache);
    ck_assert_int_eq(tu_run_shell(list, out, sizeof out), 0);
    ck_assert_int_eq(atoi(out), 0);
}
END_TEST

// The same through the CLI: a short run on a checkpoint.dir that does not exist leaves the lists there and
// the next run (starting over in that folder) reads them; --dry-run makes no folder and no list.
START_TEST(fresh_checkpoint_dir_gets_the_list_cache) {
    make_ordered_folder("folder_cli");
    fx_set_folder_mtimes("folder_cli", 1700000000);
    rm_rf("cli_run");
    char out[16384];
    const char *run = AMPTRAIN_SOURCE_DIR
        "/configs/tiny.yaml backend.device=cpu data.source=imagefolder "
        "data.path=folder_cli data.batch_size=4 data.prefetch=0 train.steps=1 log.metrics= "
        "log.progress=never checkpoint.dir=cli_run/ck";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --dry-run 2>&1", run);
    ck_assert_int_eq(tu_run_cli(cmd, out, sizeof out), 0);
    ck_assert_msg(!tu_file_exists("cli_run"), "--dry-run left cli_run: %s", out);
    snprintf(cmd, sizeof cmd, "%s 2>&1", run);
    ck_assert_msg(tu_run_cli(cmd, out, sizeof out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "folder_cli/train cached in cli_run/ck/imagefolder-") &&
                      strstr(out, "folder_cli/val cached in cli_run/ck/imagefolder-"),
                  "%s", out);
    size_t len;
    free(read_cache("cli_run/ck", "train", &len));
    free(read_cache("cli_run/ck", "val", &len));
    snprintf(cmd, sizeof cmd, "%s checkpoint.overwrite=true 2>&1", run);  // the folder holds the first run
    ck_assert_msg(tu_run_cli(cmd, out, sizeof out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "file list of folder_cli/train read from cli_run/ck/imagefolder-"), "%s", out);
}
END_TEST

START_TEST(config_image_keys) {
    Config cfg;
    char msg[512] = "";
    ck_assert_int_eq(load(&cfg, NULL, 0, msg, sizeof msg), 0);
    ck_assert(cfg.data.mean[0] == 0.485 && cfg.data.mean[2] == 0.406 && cfg.data.std[1] == 0.224);
    const char *good[] = {"data.source=imagefolder", "data.path=x", "data.mean=[0.5, 0.25, 0]",
                          "data.std=[1, 2, 0.5]"};
    ck_assert_msg(load(&cfg, good, 4, msg, sizeof msg) == 0, "%s", msg);
    ck_assert(cfg.data.mean[1] == 0.25 && cfg.data.std[1] == 2.0 && !strcmp(cfg.data.source, "imagefolder"));
    // Each: up to three overrides (the crop keys need a source that crops) and what the one line says.
    const struct {
        const char *set[3], *says;
    } bad[] = {
        {{"data.mean=[0.5, 0.5]"}, "data.mean: expected a list of 3 numbers"},
        {{"data.mean=[0.5, 0.5, 2]"}, "data.mean[2]: must be in [0, 1]"},
        {{"data.std=[0.5, 0, 0.5]"}, "data.std[1]: must be > 0"},
        {{"data.std=0.5"}, "data.std: expected a list of 3 numbers"},
        {{"data.source=imagefolder"}, "data.source: imagefolder needs data.path"},
        {{"data.source=webdataset"}, "data.source: webdataset needs data.path"},
        {{"data.crop_scale_min=0"}, "data.crop_scale_min: must be in (0, 1]"},
        {{"data.crop_scale_max=1.5"}, "data.crop_scale_max: must be in (0, 1]"},
        {{"data.source=imagefolder", "data.path=x", "data.crop_scale_max=0.05"},
         "data.crop_scale_max: crop_scale_min 0.08 exceeds crop_scale_max 0.05"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int n = 0;
        while (n < 3 && bad[k].set[n]) n++;
        msg[0] = '\0';
        ck_assert_int_eq(load(&cfg, bad[k].set, n, msg, sizeof msg), 2);
        ck_assert_msg(strstr(msg, bad[k].says), "%s: '%s'", bad[k].set[n - 1], msg);
    }
}
END_TEST

// --bench-data over a folder with a bad file read in several epochs: one JSON line, and the file is
// named once.
START_TEST(bench_data_cli_reports_and_names_bad_file_once) {
    make_ordered_folder("folder_bench");
    tu_write_file("folder_bench/train/b/broken.jpg", "text\n");
    char out[16384];
    int rc = tu_run_cli("--bench-data " AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml data.source=imagefolder "
                        "data.path=folder_bench data.batch_size=4 data.workers=2 --bench-steps 12 2>&1",
                        out, sizeof out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    const char *json = strstr(out, "{\"bench\":\"data\"");
    ck_assert_msg(json != NULL, "%s", out);
    ck_assert_msg(strstr(json, "\"threads\":2,") && strstr(json, "\"batches\":12,") &&
                      strstr(json, "\"img_per_s\":") && strstr(json, "\"decode_img_per_s_per_core\":"),
                  "%s", json);
    const char *first = strstr(out, "broken.jpg");
    ck_assert_msg(first && !strstr(first + 1, "broken.jpg"), "named once: %s", out);
    long skipped = atol(strstr(json, "\"skipped\":") + strlen("\"skipped\":"));
    ck_assert_int_ge(skipped, 4);  // 8 samples, 13 batches of 4: the bad one is met at least 4 times
    rc = tu_run_cli(AMPTRAIN_SOURCE_DIR "/configs/tiny.yaml data.source=imagefolder data.path=no_such_folder "
                                        "--bench-data 2>&1",
                    out, sizeof out);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(out, "no_such_folder"), "%s", out);
}
END_TEST

// A validation split where no file decodes is found at start-up (exit 2, nothing trained or written),
// not after the first epoch; so is such a training split.
START_TEST(undecodable_split_refused_at_start) {
    make_ordered_folder("folder_badval");
    char path[512], out[16384];
    for (int k = 0; k < 7; k++) {
        snprintf(path, sizeof path, "folder_badval/val/%s", order_files[k]);
        tu_write_file(path, "not a JPEG\n");
    }
    const char *run = AMPTRAIN_SOURCE_DIR
        "/configs/tiny.yaml backend.device=cpu data.source=imagefolder "
        "data.path=folder_badval data.batch_size=4 "
        "log.metrics=badval_run/m.jsonl checkpoint.dir=badval_run log.progress=never";
    int rc = tu_run_cli(run, out, sizeof out);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "none of the 7 samples of the validation split can be read or decoded"), "%s",
                  out);
    ck_assert_ptr_null(strstr(out, "step 1/"));
    ck_assert(!tu_file_exists("badval_run"));
    for (int k = 0; k < 7; k++) {
        snprintf(path, sizeof path, "folder_badval/train/%s", order_files[k]);
        tu_write_file(path, "");
    }
    rc = tu_run_cli(run, out, sizeof out);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "none of the 7 samples of the training split"), "%s", out);
}
END_TEST

static Suite *images_suite(void) {
    Suite *s = suite_create("images");
    TCase *decode = tcase_create("decode");
    tcase_set_timeout(decode,
                      120);  // Check's default 4 s: the region sweep took longer under ASan on a busy host
    tcase_add_test(decode, decode_rgb_round_trip);
    tcase_add_test(decode, decode_grayscale_becomes_three_equal_channels);
    tcase_add_test(decode, decode_progressive_equals_baseline);
    tcase_add_test(decode, decode_cmyk_converts_like_pil);
    tcase_add_test(decode, decode_refuses_bad_input);
    tcase_add_test(decode, decode_refuses_frameless_and_bomb_headers);
    tcase_add_test(decode, decode_keeps_the_most_compressible_jpegs);
    tcase_add_test(decode, decode_region_equals_full_decode);
    suite_add_tcase(s, decode);
    TCase *transform = tcase_create("transform");
    tcase_set_timeout(transform, 120);
    tcase_add_test(transform, rrc_boxes_match_torchvision_distribution);
    tcase_add_test(transform, rrc_fallback_is_torchvision_centre_crop);
    tcase_add_test(transform, rrc_scale_bounds_the_area);
    tcase_add_test(transform, val_transform_matches_formula_within_one);
    tcase_add_test(transform, train_transform_is_crop_resize_and_exact_flip);
    tcase_add_test(transform, resize_window_equals_full_resize_cut);
    suite_add_tcase(s, transform);
    TCase *folder = tcase_create("imagefolder");
    tcase_set_timeout(folder, 120);
    tcase_add_test(folder, imagefolder_order_is_torchvision_order);
    tcase_add_test(folder, imagefolder_replaces_bad_samples_deterministically);
    tcase_add_test(folder, imagefolder_train_crop_equals_full_decode_transform);
    tcase_add_test(folder, decode_jobs_equal_host_path);
    tcase_add_test(folder, loader_jobs_decode_to_loader_pixels);
    tcase_add_test(folder, device_decode_trains_like_host_decode);
    tcase_add_test(folder, imagefolder_refuses_bad_layouts);
    tcase_add_test(folder, image_sides_and_augmentation_through_the_factory);
    tcase_add_test(folder, run_trains_and_evaluates_at_their_own_sides);
    tcase_add_test(folder, imagefolder_refuses_fifos_without_blocking);
    tcase_add_test(folder, imagefolder_skips_folder_link_loops);
    tcase_add_test(folder, imagefolder_replaces_images_over_max_pixels);
    tcase_add_test(folder, imagefolder_list_cache_is_read_back_and_rebuilt);
    tcase_add_test(folder, imagefolder_list_cache_edited_to_point_outside_is_rebuilt);
    tcase_add_test(folder, imagefolder_list_cache_waits_for_its_folder);
    tcase_add_test(folder, fresh_checkpoint_dir_gets_the_list_cache);
    tcase_add_test(folder, config_image_keys);
    tcase_add_test(folder, bench_data_cli_reports_and_names_bad_file_once);
    tcase_add_test(folder, undecodable_split_refused_at_start);
    suite_add_tcase(s, folder);
    return s;
}

int main(void) { return tu_run_suite(images_suite(), 1); }
