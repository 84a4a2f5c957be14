// image_augment_ops.h - the pixel arithmetic of TrivialAugmentWide's ops and RandomErasing (image_augment.h),
// compiled for the CPU (image_augment.c: image_augment_plan_run) and for the GPU (kernels/cuda/cuda_augment.cu:
// one thread block per image), so both make the same bytes from the same pixels.
//
// The host turns an op and its magnitude into an AugmentPlan once per image (image_augment_plan: Pillow's
// matrices, fixed-point steps and factors, computed in double as Pillow and CPython compute them). The
// functions below then make the image-level tables from histograms, with the host's integer arithmetic
// (augment_scale_tables, augment_luma_mean, augment_channel_lut), and each output pixel from the input image
// and those tables (augment_pixel). Images are (h, w, 3) u8 RGB. The floating-point expressions keep Pillow's
// operand order and types, and both compilations keep them unfused: image_augment.c is built with
// -ffp-contract=off, cuda_augment.cu with -fmad=false (CMakeLists.txt).
#ifndef AMPTRAIN_IMAGE_AUGMENT_OPS_H
#define AMPTRAIN_IMAGE_AUGMENT_OPS_H

#include <math.h>
#include <stdint.h>

#include "core/image_job.h"

#ifdef __CUDACC__
#define AUGMENT_FN static inline __host__ __device__
#else
#define AUGMENT_FN static inline
#endif

// TrivialAugmentWide's ops in torchvision's order (its _augmentation_space dict).
typedef enum AugmentOp {
    AUGMENT_IDENTITY,
    AUGMENT_SHEAR_X,
    AUGMENT_SHEAR_Y,
    AUGMENT_TRANSLATE_X,
    AUGMENT_TRANSLATE_Y,
    AUGMENT_ROTATE,
    AUGMENT_BRIGHTNESS,
    AUGMENT_COLOR,
    AUGMENT_CONTRAST,
    AUGMENT_SHARPNESS,
    AUGMENT_POSTERIZE,
    AUGMENT_SOLARIZE,
    AUGMENT_AUTOCONTRAST,
    AUGMENT_EQUALIZE,
    AUGMENT_OPS
} AugmentOp;

// Resampling of the geometric ops (shears, translations, rotation): torchvision's InterpolationMode
// NEAREST (TrivialAugmentWide's default) or BILINEAR (what torchvision's reference train.py passes, its
// --interpolation), Pillow's non-antialiased filters of Image.transform.
typedef enum AugmentFilter { AUGMENT_NEAREST, AUGMENT_BILINEAR } AugmentFilter;

// How an op's output is made (the Pillow routine it re-does).
typedef enum AugmentPass {
    AUGMENT_PASS_NONE,       // Identity, a rotation by a multiple of 360 degrees: the image as it is
    AUGMENT_PASS_TRANSPOSE,  // Image.rotate's transpose fast paths: 180 degrees, 90 and 270 on a square image
    AUGMENT_PASS_SCALE,      // ImagingScaleAffine: nearest neighbour, a[1] == a[3] == 0
    AUGMENT_PASS_FIXED,      // affine_fixed: nearest neighbour in 16.16 fixed point
    AUGMENT_PASS_BILINEAR,   // ImagingGenericTransform with bilinear_filter32RGB
    AUGMENT_PASS_BLEND,      // ImageEnhance: Image.blend(degenerate, img, alpha)
    AUGMENT_PASS_LUT,        // ImageOps' lookup tables through Image.point, one per channel
} AugmentPass;

// One image's op, ready to run (image_augment_plan).
typedef struct AugmentPlan {
    AugmentPass pass;
    AugmentOp op;      // BLEND: which degenerate image; LUT: which table
    int turn;          // TRANSPOSE: 90, 180 or 270 degrees counter-clockwise
    double a[6];       // SCALE, BILINEAR: Image.transform's AFFINE data, output point -> input point
    int fixed[6];      // FIXED: a[0], a[1], a[3], a[4] in 16.16; [2], [5] the first pixel centre's point
    float alpha;       // BLEND: the enhancement factor as ImagingBlend takes it
    double magnitude;  // LUT: Posterize's bits, Solarize's threshold
} AugmentPlan;

// What augment_pixel reads besides the input image, made once per image.
typedef struct AugmentTables {
    const int *cols, *rows;  // SCALE: augment_scale_tables
    uint8_t grey;            // BLEND of Contrast: augment_luma_mean of the input
    const uint8_t *lut;      // LUT: (3, 256), augment_channel_lut per channel
} AugmentTables;

// Pillow's int(v) of a coordinate, -1 for any negative one (COORD), and its FLOOR.
AUGMENT_FN int augment_coord(double v) { return v < 0.0 ? -1 : (int)v; }
AUGMENT_FN int augment_floor(double v) { return v < 0.0 ? (int)floor(v) : (int)v; }

AUGMENT_FN int augment_clamp_index(int v, int n) { return v < 0 ? 0 : v < n ? v : n - 1; }

// convert("L"): ITU-R 601-2 luma in 16-bit fixed point, rounded (Convert.c's L24). p: 3 bytes.
AUGMENT_FN uint8_t augment_luma(const uint8_t *p) {
    return (uint8_t)((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
}

// ImageEnhance.Contrast's grey: int(ImageStat.Stat(convert("L")).mean[0] + 0.5) from the luma histogram
// (256) of an image of `pixels` pixels, the sum accumulated in double level by level as ImageStat does.
AUGMENT_FN uint8_t augment_luma_mean(const uint32_t *hist, long long pixels) {
    double sum = 0.0;
    for (int j = 0; j < 256; j++) sum += (double)(j * (long long)hist[j]);
    return (uint8_t)(int)(sum / (double)pixels + 0.5);
}

// ImagingScaleAffine's tables for an (h, w) image: cols[x] the source column of output column x, rows[y] the
// source row of output row y, -1 where nothing is written. Pillow advances the point by a[0] per column and
// a[4] per row, in double, so the tables are made in that order. Its column table is calloc'd: an invalid
// column between valid ones reads column 0.
AUGMENT_FN void augment_scale_tables(const AugmentPlan *p, int w, int h, int *cols, int *rows) {
    double xo = p->a[2] + p->a[0] * 0.5, yo = p->a[5] + p->a[4] * 0.5;
    int xmin = w, xmax = 0;
    for (int x = 0; x < w; x++) {
        const int xin = augment_coord(xo);
        cols[x] = -1;
        if (xin >= 0 && xin < w) {
            xmax = x + 1;
            if (x < xmin) xmin = x;
            cols[x] = xin;
        }
        xo += p->a[0];
    }
    for (int x = xmin; x < xmax; x++)
        if (cols[x] < 0) cols[x] = 0;
    for (int y = 0; y < h; y++) {
        const int yi = augment_coord(yo);
        rows[y] = yi >= 0 && yi < h ? yi : -1;
        yo += p->a[4];
    }
}

// ImageOps' table for one channel (256 entries) of a LUT plan; hist: that channel's histogram (256), read by
// AutoContrast and Equalize only.
//   Posterize: i & ~(2^(8 - bits) - 1). Solarize: i below the threshold kept, the rest inverted.
//   AutoContrast (cutoff 0): the lowest and highest level present stretched to 0 and 255,
//   int(i * scale + offset) clipped; a channel of one level is left as it is.
//   Equalize: step = (pixels - count of the highest level present) // 255, (step // 2 + pixels below level i)
//   // step, clipped to 255 as Image.point's byte table clips it; identity for one level or step 0.
AUGMENT_FN void augment_channel_lut(const AugmentPlan *p, const uint32_t *hist, uint8_t *lut) {
    if (p->op == AUGMENT_AUTOCONTRAST) {
        int lo = 0, hi = 255;
        while (lo < 255 && !hist[lo]) lo++;
        while (hi > 0 && !hist[hi]) hi--;
        double scale = hi > lo ? 255.0 / (hi - lo) : 0, offset = -lo * scale;
        for (int i = 0; i < 256; i++) {
            int v = hi > lo ? (int)(i * scale + offset) : i;
            lut[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    } else if (p->op == AUGMENT_EQUALIZE) {
        long long total = 0, last = 0, levels = 0;
        for (int i = 0; i < 256; i++)
            if (hist[i]) total += hist[i], last = hist[i], levels++;
        long long step = levels > 1 ? (total - last) / 255 : 0;
        long long n = step / 2;
        for (int i = 0; i < 256; i++) {
            long long v = step ? n / step : i;
            lut[i] = (uint8_t)(v > 255 ? 255 : v);
            n += hist[i];
        }
    } else {
        const int bits = (int)p->magnitude;
        for (int i = 0; i < 256; i++)
            lut[i] = (uint8_t)(p->op == AUGMENT_POSTERIZE ? i & ~((1 << (8 - bits)) - 1)
                                                          : (i < p->magnitude ? i : 255 - i));
    }
}

// ImageFilter.SMOOTH (3x3, 1 1 1 / 1 5 1 / 1 1 1, scale 13) through ImagingFilter3x3's multi-band path, byte
// b of pixel (x, y): float kernel weights (each divided by 13 in float), the row below first, 0.5 added for
// rounding, then clipped and truncated; the border rows and columns copied.
AUGMENT_FN uint8_t augment_smooth_byte(const uint8_t *in, int w, int h, int x, int y, int b) {
    const uint8_t *at = in + ((size_t)y * w + x) * 3 + b;
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1) return *at;
    const float k_edge = 1.0f / 13.0f, k_centre = 5.0f / 13.0f;
    float ss = 0.0f + 0.5f;
    for (int r = 0; r < 3; r++) {
        const uint8_t *q = at + (ptrdiff_t)(1 - r) * w * 3;  // rows y+1, y, y-1
        const float k_mid = r == 1 ? k_centre : k_edge;
        ss += (float)q[-3] * k_edge + (float)q[0] * k_mid + (float)q[3] * k_edge;
    }
    ss = ss < 0.0f ? 0.0f : ss;
    ss = ss > 255.0f ? 255.0f : ss;
    return (uint8_t)ss;
}

// ImagingBlend(degenerate, img, alpha) of one byte: interpolation truncated, extrapolation clipped.
AUGMENT_FN uint8_t augment_blend_byte(uint8_t degenerate, uint8_t v, float alpha) {
    if (alpha == 0.0f) return degenerate;
    if (alpha == 1.0f) return v;
    float out = (int)degenerate + alpha * ((int)v - (int)degenerate);
    return alpha >= 0 && alpha <= 1.0 ? (uint8_t)out : out <= 0.0f ? 0 : out >= 255.0f ? 255 : (uint8_t)out;
}

// Pixel (x, y) of a pass's output (3 bytes at out) from in (h, w, 3) u8, the input image, one function per
// pass; augment_pixel below picks the plan's. The geometric passes write fill 0 where no source pixel maps.

AUGMENT_FN void augment_copy_pixel(const uint8_t *src, uint8_t *out) {
    for (int b = 0; b < 3; b++) out[b] = src ? src[b] : 0;
}

// ROTATE_180: (x, y) <- (w-1-x, h-1-y); ROTATE_90 (counter-clockwise): <- (w-1-y, x); ROTATE_270: <- (y, h-1-x)
AUGMENT_FN void augment_transpose_pixel(const AugmentPlan *p, const uint8_t *in, int w, int h, int x, int y,
                                        uint8_t *out) {
    const int sx = p->turn == 180 ? w - 1 - x : p->turn == 90 ? w - 1 - y : y;
    const int sy = p->turn == 180 ? h - 1 - y : p->turn == 90 ? x : h - 1 - x;
    augment_copy_pixel(in + ((size_t)sy * w + sx) * 3, out);
}

AUGMENT_FN void augment_scale_pixel(const AugmentTables *t, const uint8_t *in, int w, int x, int y,
                                    uint8_t *out) {
    const int in_range = t->cols[x] >= 0 && t->rows[y] >= 0;
    augment_copy_pixel(in_range ? in + ((size_t)t->rows[y] * w + t->cols[x]) * 3 : 0, out);
}

// Pillow advances the row's start by (a1, a4) per row and the point by (a0, a3) per column, in int; >> on a
// negative int is an arithmetic shift (floor), as gcc, clang and nvcc compile it.
AUGMENT_FN void augment_fixed_pixel(const AugmentPlan *p, const uint8_t *in, int w, int h, int x, int y,
                                    uint8_t *out) {
    const int xx = p->fixed[2] + y * p->fixed[1] + x * p->fixed[0];
    const int yy = p->fixed[5] + y * p->fixed[4] + x * p->fixed[3];
    const int xin = xx >> 16, yin = yy >> 16;
    const int in_range = xin >= 0 && xin < w && yin >= 0 && yin < h;
    augment_copy_pixel(in_range ? in + ((size_t)yin * w + xin) * 3 : 0, out);
}

// The pixel centre mapped in double, nothing written outside [0, size), the 2x2 neighbourhood with clamped
// columns and a clamped first row, blended in double and truncated.
AUGMENT_FN void augment_bilinear_pixel(const AugmentPlan *p, const uint8_t *in, int w, int h, int x, int y,
                                       uint8_t *out) {
    const double xin = x + 0.5, yin = y + 0.5;
    double xs = p->a[0] * xin + p->a[1] * yin + p->a[2], ys = p->a[3] * xin + p->a[4] * yin + p->a[5];
    if (xs < 0.0 || xs >= w || ys < 0.0 || ys >= h) {
        augment_copy_pixel(0, out);
        return;
    }
    xs -= 0.5;
    ys -= 0.5;
    const int x0 = augment_floor(xs), y0 = augment_floor(ys);
    const double dx = xs - x0, dy = ys - y0;
    const uint8_t *top = in + (size_t)augment_clamp_index(y0, h) * w * 3;
    const uint8_t *below = y0 + 1 >= 0 && y0 + 1 < h ? in + (size_t)(y0 + 1) * w * 3 : 0;
    const int xa = augment_clamp_index(x0, w) * 3, xb = augment_clamp_index(x0 + 1, w) * 3;
    for (int b = 0; b < 3; b++) {
        double v1 = top[xa + b] + (top[xb + b] - top[xa + b]) * dx;
        double v2 = below ? below[xa + b] + (below[xb + b] - below[xa + b]) * dx : v1;
        v1 = v1 + (v2 - v1) * dy;
        out[b] = (uint8_t)v1;
    }
}

// The degenerate image: Brightness black, Color the luma, Contrast the mean luma, Sharpness SMOOTH.
AUGMENT_FN void augment_blend_pixel(const AugmentPlan *p, const AugmentTables *t, const uint8_t *in, int w,
                                    int h, int x, int y, uint8_t *out) {
    const uint8_t *v = in + ((size_t)y * w + x) * 3;
    const uint8_t flat = p->op == AUGMENT_COLOR ? augment_luma(v) : p->op == AUGMENT_CONTRAST ? t->grey : 0;
    for (int b = 0; b < 3; b++) {
        const uint8_t d = p->op == AUGMENT_SHARPNESS ? augment_smooth_byte(in, w, h, x, y, b) : flat;
        out[b] = augment_blend_byte(d, v[b], p->alpha);
    }
}

AUGMENT_FN void augment_lut_pixel(const AugmentTables *t, const uint8_t *in, int w, int x, int y,
                                  uint8_t *out) {
    const uint8_t *v = in + ((size_t)y * w + x) * 3;
    for (int b = 0; b < 3; b++) out[b] = t->lut[256 * b + v[b]];
}

AUGMENT_FN void augment_pixel(const AugmentPlan *p, const AugmentTables *t, const uint8_t *in, int w, int h,
                              int x, int y, uint8_t *out) {
    switch (p->pass) {
    case AUGMENT_PASS_NONE: augment_copy_pixel(in + ((size_t)y * w + x) * 3, out); break;
    case AUGMENT_PASS_TRANSPOSE: augment_transpose_pixel(p, in, w, h, x, y, out); break;
    case AUGMENT_PASS_SCALE: augment_scale_pixel(t, in, w, x, y, out); break;
    case AUGMENT_PASS_FIXED: augment_fixed_pixel(p, in, w, h, x, y, out); break;
    case AUGMENT_PASS_BILINEAR: augment_bilinear_pixel(p, in, w, h, x, y, out); break;
    case AUGMENT_PASS_BLEND: augment_blend_pixel(p, t, in, w, h, x, y, out); break;
    case AUGMENT_PASS_LUT: augment_lut_pixel(t, in, w, x, y, out); break;
    }
}

// RandomErasing: 1 when pixel (x, y) lies in box.
AUGMENT_FN int augment_erases(ImageRect box, int x, int y) {
    return y >= box.top && y < box.top + box.height && x >= box.left && x < box.left + box.width;
}

#endif
