// image_transform.c - RandomResizedCrop, flip, Resize + CenterCrop with torchvision's sizes and Pillow's
// resampling arithmetic (see image_transform.h). The resampler follows Pillow's libImaging/Resample.c:
// precompute_coeffs, normalize_coeffs_8bpc, ImagingResampleHorizontal_8bpc / Vertical_8bpc.
#include "image_transform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"

#define RRC_RATIO_MIN (3.0 / 4.0)
#define RRC_RATIO_MAX (4.0 / 3.0)
#define RRC_TRIES 10
#define RESAMPLE_BITS 22  // Pillow's PRECISION_BITS (32 - 8 - 2): a sum of 8-bit pixels times weights fits int32

// ---- RandomResizedCrop's box ------------------------------------------------------------------------

// Python's round() on a float: nearest, ties to even (rint in the default rounding mode).
static int round_half_even(double v) { return (int)rint(v); }

CropBox image_random_resized_crop_box(int width, int height, CropScale scale, Rng *rng) {
    double area = (double)width * height;
    double log_lo = log(RRC_RATIO_MIN), log_hi = log(RRC_RATIO_MAX);
    for (int t = 0; t < RRC_TRIES; t++) {
        double target = area * (scale.min + (scale.max - scale.min) * rng_uniform(rng));
        double aspect = exp(log_lo + (log_hi - log_lo) * rng_uniform(rng));
        int w = round_half_even(sqrt(target * aspect));
        int h = round_half_even(sqrt(target / aspect));
        if (w > 0 && w <= width && h > 0 && h <= height) {
            int top = (int)rng_below(rng, (uint32_t)(height - h + 1));
            int left = (int)rng_below(rng, (uint32_t)(width - w + 1));
            return (CropBox){top, left, h, w};
        }
    }
    // torchvision's fallback: the whole image, cut to the nearest allowed aspect, centred.
    double in_ratio = (double)width / height;
    int w = width, h = height;
    if (in_ratio < RRC_RATIO_MIN)
        h = round_half_even(w / RRC_RATIO_MIN);
    else if (in_ratio > RRC_RATIO_MAX)
        w = round_half_even(h * RRC_RATIO_MAX);
    return (CropBox){(height - h) / 2, (width - w) / 2, h, w};
}

// ---- Pillow's resampler -------------------------------------------------------------------------------

typedef struct ResampleTaps {
    int ksize;        // taps reserved per output
    int *bounds;      // (count, 2) int: first input index and number of taps of each output
    int32_t *weights; // (count, ksize) int32: weights in RESAMPLE_BITS fixed point, summing to ~1
} ResampleTaps;

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

// Taps of outputs first .. first+count-1 of a resize from in_size to out_size samples (Pillow's
// precompute_coeffs with box (0, in_size) and the bilinear filter, support 1, then normalize_coeffs_8bpc).
static void taps_make(int in_size, int out_size, int first, int count, ResampleTaps *t) {
    double scale = (double)in_size / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;  // downscaling widens the filter: the antialiasing
    double support = 1.0 * filterscale;
    t->ksize = (int)ceil(support) * 2 + 1;
    t->bounds = xcalloc((size_t)count * 2, sizeof(int));
    t->weights = xcalloc((size_t)count * t->ksize, sizeof(int32_t));
    double *w = xcalloc((size_t)t->ksize, sizeof(double));
    for (int i = 0; i < count; i++) {
        double center = (first + i + 0.5) * scale, sum = 0.0, ss = 1.0 / filterscale;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = in_size;
        int n = hi - lo;
        for (int x = 0; x < n; x++) sum += w[x] = triangle((x + lo - center + 0.5) * ss);
        int32_t *k = t->weights + (size_t)i * t->ksize;
        for (int x = 0; x < n; x++) k[x] = (int32_t)(0.5 + (sum != 0.0 ? w[x] / sum : w[x]) * (1 << RESAMPLE_BITS));
        t->bounds[2 * i] = lo;
        t->bounds[2 * i + 1] = n;
    }
    free(w);
}

static void taps_free(ResampleTaps *t) {
    free(t->bounds);
    free(t->weights);
}

// Pillow's clip8: the rounded fixed-point sum as a byte.
static inline uint8_t clip8(int32_t v) {
    if (v >= (255 << RESAMPLE_BITS)) return 255;
    if (v <= 0) return 0;
    return (uint8_t)(v >> RESAMPLE_BITS);
}

void image_resize_bilinear(const DecodedImage *in, CropBox box, int out_w, int out_h, CropBox win, uint8_t *out) {
    AMP_ASSERT(box.top >= 0 && box.left >= 0 && box.height > 0 && box.width > 0 &&
               box.top + box.height <= in->height && box.left + box.width <= in->width,
               "resize: box (%d, %d, %d, %d) outside the %dx%d image", box.top, box.left, box.height, box.width,
               in->width, in->height);
    AMP_ASSERT(win.top >= 0 && win.left >= 0 && win.top + win.height <= out_h && win.left + win.width <= out_w,
               "resize: window outside the %dx%d output", out_w, out_h);
    ResampleTaps th, tv;
    taps_make(box.width, out_w, win.left, win.width, &th);
    taps_make(box.height, out_h, win.top, win.height, &tv);
    // Rows of the box the window's vertical taps read: the horizontal pass makes only those.
    int row0 = tv.bounds[0], row1 = tv.bounds[2 * (win.height - 1)] + tv.bounds[2 * (win.height - 1) + 1];
    uint8_t *tmp = xcalloc((size_t)(row1 - row0) * win.width * 3, 1);  // (row1 - row0, win.width, 3) u8
    size_t stride = (size_t)in->width * 3;
    for (int y = row0; y < row1; y++) {
        const uint8_t *src = in->rgb + (size_t)(box.top + y) * stride + (size_t)box.left * 3;
        uint8_t *dst = tmp + (size_t)(y - row0) * win.width * 3;
        for (int x = 0; x < win.width; x++) {
            const int32_t *k = th.weights + (size_t)x * th.ksize;
            const uint8_t *p = src + (size_t)th.bounds[2 * x] * 3;
            int32_t s0 = 1 << (RESAMPLE_BITS - 1), s1 = s0, s2 = s0;
            for (int j = 0; j < th.bounds[2 * x + 1]; j++, p += 3) {
                s0 += p[0] * k[j];
                s1 += p[1] * k[j];
                s2 += p[2] * k[j];
            }
            dst[3 * x] = clip8(s0), dst[3 * x + 1] = clip8(s1), dst[3 * x + 2] = clip8(s2);
        }
    }
    size_t tmp_stride = (size_t)win.width * 3;
    for (int y = 0; y < win.height; y++) {
        const int32_t *k = tv.weights + (size_t)y * tv.ksize;
        const uint8_t *col = tmp + (size_t)(tv.bounds[2 * y] - row0) * tmp_stride;
        int n = tv.bounds[2 * y + 1];
        uint8_t *dst = out + (size_t)y * tmp_stride;
        for (size_t c = 0; c < tmp_stride; c++) {
            int32_t s = 1 << (RESAMPLE_BITS - 1);
            for (int j = 0; j < n; j++) s += col[(size_t)j * tmp_stride + c] * k[j];
            dst[c] = clip8(s);
        }
    }
    free(tmp);
    taps_free(&th);
    taps_free(&tv);
}

// ---- the two pipelines ----------------------------------------------------------------------------------

// img (side, side, 3) u8 mirrored left-right in place.
static void flip_horizontal(uint8_t *img, int side) {
    for (int y = 0; y < side; y++) {
        uint8_t *row = img + (size_t)y * side * 3;
        for (int a = 0, b = side - 1; a < b; a++, b--) {
            for (int ch = 0; ch < 3; ch++) {
                uint8_t t = row[3 * a + ch];
                row[3 * a + ch] = row[3 * b + ch];
                row[3 * b + ch] = t;
            }
        }
    }
}

void image_transform_train(const DecodedImage *in, int side, CropScale scale, Rng *rng, uint8_t *out) {
    CropBox box = image_random_resized_crop_box(in->width, in->height, scale, rng);
    image_resize_bilinear(in, box, side, side, (CropBox){0, 0, side, side}, out);
    if (rng_uniform(rng) < 0.5f) flip_horizontal(out, side);
}

void image_transform_val(const DecodedImage *in, int side, uint8_t *out) {
    // torchvision's Resize(s): the shorter side becomes s, the longer int(s * long / short).
    int s = round_half_even(side * 256.0 / 224.0);
    int w_short = in->width <= in->height;
    int shorter = w_short ? in->width : in->height, longer = w_short ? in->height : in->width;
    int s_long = (int)((double)s * longer / shorter);
    int out_w = w_short ? s : s_long, out_h = w_short ? s_long : s;
    // CenterCrop: offsets int(round((size - side) / 2.0)).
    CropBox win = {round_half_even((out_h - side) / 2.0), round_half_even((out_w - side) / 2.0), side, side};
    image_resize_bilinear(in, (CropBox){0, 0, in->height, in->width}, out_w, out_h, win, out);
}
