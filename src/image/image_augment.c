// image_augment.c - TrivialAugmentWide's ops and RandomErasing with torchvision's arguments and Pillow's
// arithmetic (see image_augment.h).
//
// Each op below names the Pillow routine it re-does. Pillow keeps an RGB pixel in 4 bytes and treats the
// channels alike, so (height, width, 3) bytes give the same values. Floating-point expressions keep
// Pillow's and CPython's operand order and types (float where Pillow computes in float, double where
// CPython does); this file is compiled without FMA contraction (CMakeLists.txt), as both are.
#include "image/image_augment.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

#define DEG_TO_RAD (M_PI / 180.0)  // CPython's math.radians factor
#define RAD_TO_DEG (180.0 / M_PI)  // and math.degrees'

static uint8_t *pixel(uint8_t *img, int width, int x, int y) { return img + ((size_t)y * width + x) * 3; }
static const uint8_t *pixel_in(const uint8_t *img, int width, int x, int y) {
    return img + ((size_t)y * width + x) * 3;
}

// ---- Pillow's geometry (libImaging/Geometry.c) ------------------------------------------------------

static int pil_coord(double v) { return v < 0.0 ? -1 : (int)v; }
static int pil_floor(double v) { return v < 0.0 ? (int)floor(v) : (int)v; }

// ImagingScaleAffine: a[1] == a[3] == 0, nearest neighbour, the source column of each output column
// tabulated once (calloc'd: a column outside the source reads column 0 when it lies between valid ones).
static void affine_scale(const uint8_t *in, uint8_t *out, int w, int h, const double a[6]) {
    int *xintab = xcalloc((size_t)w, sizeof(int));
    double xo = a[2] + a[0] * 0.5, yo = a[5] + a[4] * 0.5;
    int xmin = w, xmax = 0;
    for (int x = 0; x < w; x++) {
        int xin = pil_coord(xo);
        if (xin >= 0 && xin < w) {
            xmax = x + 1;
            if (x < xmin) xmin = x;
            xintab[x] = xin;
        }
        xo += a[0];
    }
    for (int y = 0; y < h; y++) {
        int yi = pil_coord(yo);
        if (yi >= 0 && yi < h)
            for (int x = xmin; x < xmax; x++) memcpy(pixel(out, w, x, y), pixel_in(in, w, xintab[x], yi), 3);
        yo += a[4];
    }
    free(xintab);
}

// check_fixed: the point (x, y) maps inside the range of 16.16 fixed point.
static int fits_fixed(const double a[6], int x, int y) {
    return fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

// affine_fixed: nearest neighbour in 16.16 fixed point, the row's start advanced by (a1, a4) per row and
// the position by (a0, a3) per column; >> on a negative int is an arithmetic shift (floor), as gcc and
// clang compile Pillow's.
static void affine_fixed(const uint8_t *in, uint8_t *out, int w, int h, const double a[6]) {
    AMP_ASSERT(fits_fixed(a, 0, 0) && fits_fixed(a, w, h) && fits_fixed(a, 0, h) && fits_fixed(a, w, 0),
               "augment: a %dx%d image is beyond Pillow's fixed-point affine range", w, h);
#define PIL_FIX(v) pil_floor((v)*65536.0 + 0.5)
    int a0 = PIL_FIX(a[0]), a1 = PIL_FIX(a[1]), a3 = PIL_FIX(a[3]), a4 = PIL_FIX(a[4]);
    int a2 = PIL_FIX(a[2] + a[0] * 0.5 + a[1] * 0.5), a5 = PIL_FIX(a[5] + a[3] * 0.5 + a[4] * 0.5);
#undef PIL_FIX
    for (int y = 0; y < h; y++) {
        int xx = a2, yy = a5;
        for (int x = 0; x < w; x++) {
            int xin = xx >> 16, yin = yy >> 16;
            if (xin >= 0 && xin < w && yin >= 0 && yin < h)
                memcpy(pixel(out, w, x, y), pixel_in(in, w, xin, yin), 3);
            xx += a0;
            yy += a3;
        }
        a2 += a1;
        a5 += a4;
    }
}

static int clamp_index(int v, int n) { return v < 0 ? 0 : v < n ? v : n - 1; }

// ImagingGenericTransform with affine_transform and bilinear_filter32RGB: the pixel centre mapped in double,
// nothing written outside [0, size), the 2x2 neighbourhood with clamped columns and a clamped first row,
// blended in double and truncated.
static void affine_bilinear(const uint8_t *in, uint8_t *out, int w, int h, const double a[6]) {
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            double xin = x + 0.5, yin = y + 0.5;
            double xs = a[0] * xin + a[1] * yin + a[2], ys = a[3] * xin + a[4] * yin + a[5];
            if (xs < 0.0 || xs >= w || ys < 0.0 || ys >= h) continue;
            xs -= 0.5;
            ys -= 0.5;
            int x0 = pil_floor(xs), y0 = pil_floor(ys);
            double dx = xs - x0, dy = ys - y0;
            const uint8_t *top = in + (size_t)clamp_index(y0, h) * w * 3;
            const uint8_t *below = y0 + 1 >= 0 && y0 + 1 < h ? in + (size_t)(y0 + 1) * w * 3 : NULL;
            int xa = clamp_index(x0, w) * 3, xb = clamp_index(x0 + 1, w) * 3;
            uint8_t *o = pixel(out, w, x, y);
            for (int b = 0; b < 3; b++) {
                double v1 = top[xa + b] + (top[xb + b] - top[xa + b]) * dx;
                double v2 = below ? below[xa + b] + (below[xb + b] - below[xa + b]) * dx : v1;
                v1 = v1 + (v2 - v1) * dy;
                o[b] = (uint8_t)v1;
            }
        }
    }
}

// Image.transform(size, AFFINE, a, filter, fillcolor=0) -> ImagingTransformAffine: out (h, w, 3).
static void pil_affine(const uint8_t *in, uint8_t *out, int w, int h, const double a[6],
                       AugmentFilter filter) {
    memset(out, 0, (size_t)w * h * 3);
    if (filter == AUGMENT_BILINEAR)
        affine_bilinear(in, out, w, h, a);
    else if (a[1] == 0 && a[3] == 0)
        affine_scale(in, out, w, h, a);
    else
        affine_fixed(in, out, w, h, a);
}

// CPython's round(v, 15): the decimal rounded correctly to 15 places, read back.
static double py_round15(double v) {
    char text[64];
    snprintf(text, sizeof text, "%.15f", v);
    return strtod(text, NULL);
}

// Image.rotate(degrees, filter, expand=False, center=None, fillcolor=0): out (h, w, 3).
static void pil_rotate(const uint8_t *in, uint8_t *out, int w, int h, double degrees, AugmentFilter filter) {
    double angle = fmod(degrees, 360.0);  // Python's %: the sign of the divisor, +0 for 0
    angle = angle != 0 ? (angle < 0 ? angle + 360.0 : angle) : 0.0;
    size_t n = (size_t)w * h * 3;
    // The transpose fast paths (no centre or translation given)
    if (angle == 0) {
        memcpy(out, in, n);
        return;
    }
    if (angle == 180 || ((angle == 90 || angle == 270) && w == h)) {
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                // ROTATE_180: (x, y) -> (w-1-x, h-1-y); ROTATE_90 (counter-clockwise): -> (y, w-1-x);
                // ROTATE_270: -> (h-1-y, x)
                int ox = angle == 180 ? w - 1 - x : angle == 90 ? y : h - 1 - y;
                int oy = angle == 180 ? h - 1 - y : angle == 90 ? w - 1 - x : x;
                memcpy(pixel(out, w, ox, oy), pixel_in(in, w, x, y), 3);
            }
        return;
    }
    double r = -(angle * DEG_TO_RAD);
    double a[6] = {py_round15(cos(r)), py_round15(sin(r)), 0.0, py_round15(-sin(r)), py_round15(cos(r)), 0.0};
    double cx = w / 2.0, cy = h / 2.0;
    double tx = a[0] * -cx + a[1] * -cy + a[2], ty = a[3] * -cx + a[4] * -cy + a[5];
    a[2] = tx + cx;
    a[5] = ty + cy;
    pil_affine(in, out, w, h, a, filter);
}

// torchvision's _get_inverse_affine_matrix(center, angle, translate, scale=1, shear), degrees.
static void tv_inverse_affine(double cx, double cy, double angle, double tx, double ty, double shear_x,
                              double shear_y, double m[6]) {
    double rot = angle * DEG_TO_RAD, sx = shear_x * DEG_TO_RAD, sy = shear_y * DEG_TO_RAD;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d, m[1] = -b, m[3] = -c, m[4] = a;
    m[2] = 0.0 + (m[0] * (-cx - tx) + m[1] * (-cy - ty));
    m[5] = 0.0 + (m[3] * (-cx - tx) + m[4] * (-cy - ty));
    m[2] += cx;
    m[5] += cy;
}

// ---- Pillow's enhancements (ImageEnhance: Image.blend(degenerate, image, factor)) -------------------------

// ImagingBlend(degenerate, img, (float)factor) into img: interpolation truncated, extrapolation clipped.
static void pil_blend(const uint8_t *degenerate, uint8_t *img, size_t n, double factor) {
    float alpha = (float)factor;
    if (alpha == 0.0f) {
        memcpy(img, degenerate, n);
        return;
    }
    if (alpha == 1.0f) return;
    int between = alpha >= 0 && alpha <= 1.0;
    for (size_t i = 0; i < n; i++) {
        float v = (int)degenerate[i] + alpha * ((int)img[i] - (int)degenerate[i]);
        img[i] = between ? (uint8_t)v : v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
    }
}

// convert("L"): ITU-R 601-2 luma in 16-bit fixed point, rounded (Convert.c's L24).
static uint8_t luma(const uint8_t *p) {
    return (uint8_t)((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
}

// ImageEnhance.Contrast's grey: int(ImageStat.Stat(convert("L")).mean[0] + 0.5), the sum accumulated in
// double as ImageStat does.
static uint8_t luma_mean(const uint8_t *img, size_t pixels) {
    long hist[256] = {0};
    for (size_t i = 0; i < pixels; i++) hist[luma(img + 3 * i)]++;
    double sum = 0.0;
    for (int j = 0; j < 256; j++) sum += (double)(j * hist[j]);
    return (uint8_t)(int)(sum / (double)pixels + 0.5);
}

// ImageFilter.SMOOTH (3x3, 1 1 1 / 1 5 1 / 1 1 1, scale 13) through ImagingFilter3x3's multi-band path:
// float kernel weights (each divided by 13 in float), the row below first, 0.5 added for rounding, then
// clipped and truncated; the border rows and columns copied.
static void pil_smooth(const uint8_t *in, uint8_t *out, int w, int h) {
    const float k_edge = 1.0f / 13.0f, k_centre = 5.0f / 13.0f;
    const float kernel[9] = {k_edge, k_edge, k_edge, k_edge, k_centre, k_edge, k_edge, k_edge, k_edge};
    const float offset = 0.0f + 0.5f;
    memcpy(out, in, (size_t)w * h * 3);
    for (int y = 1; y < h - 1; y++) {
        const uint8_t *rows[3] = {pixel_in(in, w, 0, y + 1), pixel_in(in, w, 0, y),
                                  pixel_in(in, w, 0, y - 1)};
        for (int x = 1; x < w - 1; x++)
            for (int b = 0; b < 3; b++) {
                float ss = offset;
                for (int r = 0; r < 3; r++) {
                    const float *k = kernel + 3 * r;
                    const uint8_t *p = rows[r] + 3 * x + b;
                    ss += (float)p[-3] * k[0] + (float)p[0] * k[1] + (float)p[3] * k[2];
                }
                ss = ss < 0.0f ? 0.0f : ss;
                ss = ss > 255.0f ? 255.0f : ss;
                pixel(out, w, x, y)[b] = (uint8_t)ss;
            }
    }
}

// The degenerate image of an enhancement, (h, w, 3).
static void degenerate_of(AugmentOp op, const uint8_t *img, uint8_t *out, int w, int h) {
    size_t pixels = (size_t)w * h;
    switch (op) {
    case AUGMENT_BRIGHTNESS: memset(out, 0, pixels * 3); break;
    case AUGMENT_COLOR:
        for (size_t i = 0; i < pixels; i++) memset(out + 3 * i, luma(img + 3 * i), 3);
        break;
    case AUGMENT_CONTRAST: memset(out, luma_mean(img, pixels), pixels * 3); break;
    default: pil_smooth(img, out, w, h); break;
    }
}

// ---- Pillow's lookup tables (ImageOps, applied per channel by Image.point) -------------------------------

static void apply_luts(uint8_t *img, size_t pixels, const uint8_t lut[3][256]) {
    for (size_t i = 0; i < pixels; i++)
        for (int b = 0; b < 3; b++) img[3 * i + b] = lut[b][img[3 * i + b]];
}

static void channel_histograms(const uint8_t *img, size_t pixels, long hist[3][256]) {
    memset(hist, 0, 3 * 256 * sizeof(long));
    for (size_t i = 0; i < pixels; i++)
        for (int b = 0; b < 3; b++) hist[b][img[3 * i + b]]++;
}

// ImageOps.autocontrast(img) (cutoff 0): each channel's lowest and highest level stretched to 0 and 255,
// lut = int(i * scale + offset) clipped; a channel of one level is left as it is.
static void autocontrast_luts(const long hist[3][256], uint8_t lut[3][256]) {
    for (int b = 0; b < 3; b++) {
        int lo = 0, hi = 255;
        while (lo < 255 && !hist[b][lo]) lo++;
        while (hi > 0 && !hist[b][hi]) hi--;
        double scale = hi > lo ? 255.0 / (hi - lo) : 0, offset = -lo * scale;
        for (int i = 0; i < 256; i++) {
            int v = hi > lo ? (int)(i * scale + offset) : i;
            lut[b][i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

// ImageOps.equalize(img): step = (pixels - count of the highest level present) // 255, lut[i] = (step // 2 +
// pixels below level i) // step, clipped to 255 as Image.point's byte table clips it; identity for a channel
// with one level or step 0.
static void equalize_luts(const long hist[3][256], uint8_t lut[3][256]) {
    for (int b = 0; b < 3; b++) {
        long total = 0, last = 0, levels = 0;
        for (int i = 0; i < 256; i++)
            if (hist[b][i]) total += hist[b][i], last = hist[b][i], levels++;
        long step = levels > 1 ? (total - last) / 255 : 0;
        long n = step / 2;
        for (int i = 0; i < 256; i++) {
            long v = step ? n / step : i;
            lut[b][i] = (uint8_t)(v > 255 ? 255 : v);
            n += hist[b][i];
        }
    }
}

static void lut_op(uint8_t *img, size_t pixels, AugmentOp op, double magnitude) {
    uint8_t lut[3][256];
    long hist[3][256];
    if (op == AUGMENT_AUTOCONTRAST || op == AUGMENT_EQUALIZE) {
        channel_histograms(img, pixels, hist);
        (op == AUGMENT_AUTOCONTRAST ? autocontrast_luts : equalize_luts)(hist, lut);
    } else {
        int bits = (int)magnitude;  // ImageOps.posterize: i & ~(2^(8-bits) - 1)
        AMP_ASSERT(op != AUGMENT_POSTERIZE || (bits >= 0 && bits <= 8), "augment: posterize to %d bits",
                   bits);
        for (int i = 0; i < 256; i++)
            lut[0][i] = (uint8_t)(op == AUGMENT_POSTERIZE
                                      ? i & ~((1 << (8 - bits)) - 1)
                                      : (i < magnitude ? i : 255 - i));  // ImageOps.solarize
        memcpy(lut[1], lut[0], 256);
        memcpy(lut[2], lut[0], 256);
    }
    apply_luts(img, pixels, lut);
}

// ---- TrivialAugmentWide ---------------------------------------------------------------------------------

static const char *const op_names[AUGMENT_OPS] = {
    "Identity", "ShearX",   "ShearY",    "TranslateX", "TranslateY", "Rotate",       "Brightness",
    "Color",    "Contrast", "Sharpness", "Posterize",  "Solarize",   "AutoContrast", "Equalize"};

const char *image_augment_op_name(AugmentOp op) { return op >= 0 && op < AUGMENT_OPS ? op_names[op] : "?"; }

static int has_magnitudes(AugmentOp op) {
    return op != AUGMENT_IDENTITY && op != AUGMENT_AUTOCONTRAST && op != AUGMENT_EQUALIZE;
}

static int is_signed(AugmentOp op) { return op >= AUGMENT_SHEAR_X && op <= AUGMENT_SHARPNESS; }

AugmentDraw image_ta_wide_draw(Rng *rng) {
    AugmentDraw d = {(AugmentOp)rng_below(rng, AUGMENT_OPS), -1, 0};
    if (has_magnitudes(d.op)) d.bin = (int)rng_below(rng, AUGMENT_BINS);
    if (is_signed(d.op)) d.negative = (int)rng_below(rng, 2);
    return d;
}

// torch.linspace(start, end, 31) in float32 as ATen's CPU kernel computes it: step = (end - start) / 30,
// the first half start + step * i, the second end - step * (30 - i).
static float linspace31(float start, float end, int i) {
    const int steps = AUGMENT_BINS, halfway = AUGMENT_BINS / 2;
    float step = (end - start) / (float)(steps - 1);
    return i < halfway ? start + step * (float)i : end - step * (float)(steps - i - 1);
}

double image_ta_wide_magnitude(AugmentDraw d) {
    if (!has_magnitudes(d.op)) return 0.0;
    AMP_ASSERT(d.bin >= 0 && d.bin < AUGMENT_BINS, "augment: bin %d outside 0..%d", d.bin, AUGMENT_BINS - 1);
    float m;
    switch (d.op) {
    case AUGMENT_TRANSLATE_X:
    case AUGMENT_TRANSLATE_Y: m = linspace31(0.0f, 32.0f, d.bin); break;
    case AUGMENT_ROTATE: m = linspace31(0.0f, 135.0f, d.bin); break;
    case AUGMENT_SOLARIZE: m = linspace31(255.0f, 0.0f, d.bin); break;
    // 8 - (arange(31) / 5.0).round(): float32 quotients, never a tie
    case AUGMENT_POSTERIZE: m = (float)(8 - (int)rintf((float)d.bin / 5.0f)); break;
    default: m = linspace31(0.0f, 0.99f, d.bin); break;
    }
    double magnitude = m;
    return d.negative && is_signed(d.op) ? magnitude * -1.0 : magnitude;
}

void image_augment_op(uint8_t *img, int width, int height, AugmentOp op, double magnitude,
                      AugmentFilter filter) {
    AMP_ASSERT(op >= 0 && op < AUGMENT_OPS, "augment: op %d", (int)op);
    size_t pixels = (size_t)width * height;
    if (op == AUGMENT_IDENTITY) return;
    if (op >= AUGMENT_POSTERIZE) {
        lut_op(img, pixels, op, magnitude);
        return;
    }
    uint8_t *other = xcalloc(pixels * 3, 1);
    if (op >= AUGMENT_BRIGHTNESS) {
        degenerate_of(op, img, other, width, height);
        pil_blend(other, img, pixels * 3, 1.0 + magnitude);
        free(other);
        return;
    }
    if (op == AUGMENT_ROTATE) {
        pil_rotate(img, other, width, height, magnitude, filter);
    } else {
        // F.affine: the shears about the corner (center [0, 0]), the translations about the centre
        double m[6], shear = atan(magnitude) * RAD_TO_DEG;
        double cx = width * 0.5, cy = height * 0.5, shift = (double)(int)magnitude;
        if (op == AUGMENT_SHEAR_X) tv_inverse_affine(0, 0, 0.0, 0, 0, shear, 0.0, m);
        if (op == AUGMENT_SHEAR_Y) tv_inverse_affine(0, 0, 0.0, 0, 0, 0.0, shear, m);
        if (op == AUGMENT_TRANSLATE_X) tv_inverse_affine(cx, cy, 0.0, shift, 0, 0.0, 0.0, m);
        if (op == AUGMENT_TRANSLATE_Y) tv_inverse_affine(cx, cy, 0.0, 0, shift, 0.0, 0.0, m);
        pil_affine(img, other, width, height, m, filter);
    }
    memcpy(img, other, pixels * 3);
    free(other);
}

// ---- RandomErasing --------------------------------------------------------------------------------------

#define ERASE_SCALE_MIN 0.02
#define ERASE_SCALE_MAX 0.33
#define ERASE_RATIO_MIN 0.3
#define ERASE_RATIO_MAX 3.3
#define ERASE_TRIES 10

int image_random_erase_draw(int width, int height, double p, Rng *rng, ImageRect *box) {
    if (!(rng_uniform(rng) < p)) return 0;
    double area = (double)width * height, log_lo = log(ERASE_RATIO_MIN), log_hi = log(ERASE_RATIO_MAX);
    for (int t = 0; t < ERASE_TRIES; t++) {
        double erase_area = area * (ERASE_SCALE_MIN + (ERASE_SCALE_MAX - ERASE_SCALE_MIN) * rng_uniform(rng));
        double aspect = exp(log_lo + (log_hi - log_lo) * rng_uniform(rng));
        int h = (int)rint(sqrt(erase_area * aspect)),
            w = (int)rint(sqrt(erase_area / aspect));  // ties to even
        if (!(h < height && w < width)) continue;
        int top = (int)rng_below(rng, (uint32_t)(height - h + 1));
        int left = (int)rng_below(rng, (uint32_t)(width - w + 1));
        *box = (ImageRect){top, left, h, w};
        return 1;
    }
    return 0;
}

void image_erase(uint8_t *img, int width, ImageRect box, const uint8_t fill[3]) {
    for (int y = box.top; y < box.top + box.height; y++)
        for (int x = box.left; x < box.left + box.width; x++) memcpy(pixel(img, width, x, y), fill, 3);
}

uint8_t image_erase_byte(double mean) {
    long b = lround(255.0 * mean);
    return (uint8_t)(b < 0 ? 0 : b > 255 ? 255 : b);
}

void image_augment_apply(const ImageAugment *a, uint8_t *img, int side, Rng *rng) {
    if (a->ta_wide) {
        AugmentDraw d = image_ta_wide_draw(rng);
        image_augment_op(img, side, side, d.op, image_ta_wide_magnitude(d), a->filter);
    }
    ImageRect box;
    if (a->erase_p > 0 && image_random_erase_draw(side, side, a->erase_p, rng, &box))
        image_erase(img, side, box, a->erase_fill);
}
