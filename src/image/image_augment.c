// image_augment.c - TrivialAugmentWide's ops and RandomErasing with torchvision's arguments and Pillow's
// arithmetic (see image_augment.h).
//
// Here the draws, torchvision's arguments and each op's plan (the Pillow routine it re-does, its matrix or
// factor); the pixels are made by image_augment_ops.h's functions, which the CUDA decoder runs too. Pillow
// keeps an RGB pixel in 4 bytes and treats the channels alike, so (height, width, 3) bytes give the same
// values. Floating-point expressions keep Pillow's and CPython's operand order and types (float where Pillow
// computes in float, double where CPython does); this file is compiled without FMA contraction
// (CMakeLists.txt), as both are.
#include "image/image_augment.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

#define DEG_TO_RAD (M_PI / 180.0)  // CPython's math.radians factor
#define RAD_TO_DEG (180.0 / M_PI)  // and math.degrees'

static uint8_t *pixel(uint8_t *img, int width, int x, int y) { return img + ((size_t)y * width + x) * 3; }

// ---- Pillow's geometry (libImaging/Geometry.c), planned ---------------------------------------------

// check_fixed: the point (x, y) maps inside the range of 16.16 fixed point.
static int fits_fixed(const double a[6], int x, int y) {
    return fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

// Image.transform(size, AFFINE, a, filter, fillcolor=0) -> ImagingTransformAffine: the bilinear filter, the
// integer-scale path (no rotation or shear term) or nearest neighbour in 16.16 fixed point.
static void plan_affine(AugmentPlan *p, int w, int h, const double a[6], AugmentFilter filter) {
    memcpy(p->a, a, sizeof p->a);
    if (filter == AUGMENT_BILINEAR) {
        p->pass = AUGMENT_PASS_BILINEAR;
    } else if (a[1] == 0 && a[3] == 0) {
        p->pass = AUGMENT_PASS_SCALE;
    } else {
        AMP_ASSERT(fits_fixed(a, 0, 0) && fits_fixed(a, w, h) && fits_fixed(a, 0, h) && fits_fixed(a, w, 0),
                   "augment: a %dx%d image is beyond Pillow's fixed-point affine range", w, h);
#define PIL_FIX(v) augment_floor((v)*65536.0 + 0.5)
        p->pass = AUGMENT_PASS_FIXED;
        p->fixed[0] = PIL_FIX(a[0]), p->fixed[1] = PIL_FIX(a[1]);
        p->fixed[3] = PIL_FIX(a[3]), p->fixed[4] = PIL_FIX(a[4]);
        p->fixed[2] = PIL_FIX(a[2] + a[0] * 0.5 + a[1] * 0.5);
        p->fixed[5] = PIL_FIX(a[5] + a[3] * 0.5 + a[4] * 0.5);
#undef PIL_FIX
    }
}

// CPython's round(v, 15): the decimal rounded correctly to 15 places, read back.
static double py_round15(double v) {
    char text[64];
    snprintf(text, sizeof text, "%.15f", v);
    return strtod(text, NULL);
}

// Image.rotate(degrees, filter, expand=False, center=None, fillcolor=0).
static void plan_rotate(AugmentPlan *p, int w, int h, double degrees, AugmentFilter filter) {
    double angle = fmod(degrees, 360.0);  // Python's %: the sign of the divisor, +0 for 0
    angle = angle != 0 ? (angle < 0 ? angle + 360.0 : angle) : 0.0;
    // The transpose fast paths (no centre or translation given)
    if (angle == 0) {
        p->pass = AUGMENT_PASS_NONE;
        return;
    }
    if (angle == 180 || ((angle == 90 || angle == 270) && w == h)) {
        p->pass = AUGMENT_PASS_TRANSPOSE;
        p->turn = (int)angle;
        return;
    }
    double r = -(angle * DEG_TO_RAD);
    double a[6] = {py_round15(cos(r)), py_round15(sin(r)), 0.0, py_round15(-sin(r)), py_round15(cos(r)), 0.0};
    double cx = w / 2.0, cy = h / 2.0;
    double tx = a[0] * -cx + a[1] * -cy + a[2], ty = a[3] * -cx + a[4] * -cy + a[5];
    a[2] = tx + cx;
    a[5] = ty + cy;
    plan_affine(p, w, h, a, filter);
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

void image_augment_plan(AugmentOp op, double magnitude, AugmentFilter filter, int width, int height,
                        AugmentPlan *plan) {
    AMP_ASSERT(op >= 0 && op < AUGMENT_OPS, "augment: op %d", (int)op);
    AMP_ASSERT(width > 0 && height > 0 && (long long)width * height <= INT32_MAX, "augment: a %dx%d image",
               width, height);  // its histograms count in uint32
    memset(plan, 0, sizeof *plan);
    plan->op = op;
    if (op == AUGMENT_IDENTITY) {
        plan->pass = AUGMENT_PASS_NONE;
    } else if (op >= AUGMENT_POSTERIZE) {
        AMP_ASSERT(op != AUGMENT_POSTERIZE || (magnitude >= 0 && magnitude < 9),
                   "augment: posterize to %g bits", magnitude);
        plan->pass = AUGMENT_PASS_LUT;
        plan->magnitude = magnitude;
    } else if (op >= AUGMENT_BRIGHTNESS) {
        plan->pass = AUGMENT_PASS_BLEND;
        plan->alpha = (float)(1.0 + magnitude);  // Image.blend's float alpha
    } else if (op == AUGMENT_ROTATE) {
        plan_rotate(plan, width, height, magnitude, filter);
    } else {
        // F.affine: the shears about the corner (center [0, 0]), the translations about the centre
        double m[6], shear = atan(magnitude) * RAD_TO_DEG;
        double cx = width * 0.5, cy = height * 0.5, shift = (double)(int)magnitude;
        if (op == AUGMENT_SHEAR_X) tv_inverse_affine(0, 0, 0.0, 0, 0, shear, 0.0, m);
        if (op == AUGMENT_SHEAR_Y) tv_inverse_affine(0, 0, 0.0, 0, 0, 0.0, shear, m);
        if (op == AUGMENT_TRANSLATE_X) tv_inverse_affine(cx, cy, 0.0, shift, 0, 0.0, 0.0, m);
        if (op == AUGMENT_TRANSLATE_Y) tv_inverse_affine(cx, cy, 0.0, 0, shift, 0.0, 0.0, m);
        plan_affine(plan, width, height, m, filter);
    }
}

// The tables first, then every output pixel. A pass that reads other pixels than the one it writes (the
// geometric ones, Sharpness's 3x3 filter) reads a copy of the input; the others read each pixel before they
// write it, in place.
void image_augment_plan_run(const AugmentPlan *plan, uint8_t *img, int width, int height) {
    if (plan->pass == AUGMENT_PASS_NONE) return;
    const size_t pixels = (size_t)width * height;
    const int neighbours = plan->pass != AUGMENT_PASS_LUT &&
                           (plan->pass != AUGMENT_PASS_BLEND || plan->op == AUGMENT_SHARPNESS);
    uint8_t *copy = neighbours ? xcalloc(pixels * 3, 1) : NULL;
    if (copy) memcpy(copy, img, pixels * 3);
    const uint8_t *in = copy ? copy : img;
    uint32_t hist[3][256] = {{0}};
    uint8_t lut[3][256];
    int *cols = NULL;
    AugmentTables t = {0};
    if (plan->pass == AUGMENT_PASS_SCALE) {
        cols = xcalloc((size_t)width + height, sizeof(int));
        augment_scale_tables(plan, width, height, cols, cols + width);
        t.cols = cols, t.rows = cols + width;
    } else if (plan->pass == AUGMENT_PASS_BLEND && plan->op == AUGMENT_CONTRAST) {
        for (size_t i = 0; i < pixels; i++) hist[0][augment_luma(in + 3 * i)]++;
        t.grey = augment_luma_mean(hist[0], (long long)pixels);
    } else if (plan->pass == AUGMENT_PASS_LUT) {
        if (plan->op == AUGMENT_AUTOCONTRAST || plan->op == AUGMENT_EQUALIZE)
            for (size_t i = 0; i < pixels; i++)
                for (int b = 0; b < 3; b++) hist[b][in[3 * i + b]]++;
        for (int b = 0; b < 3; b++) augment_channel_lut(plan, hist[b], lut[b]);
        t.lut = &lut[0][0];
    }
    // The plan copied: the output's byte stores may alias anything reached through a pointer, a local does
    // not escape, so its fields stay in registers across the pixels.
    const AugmentPlan local = *plan;
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++)
            augment_pixel(&local, &t, in, width, height, x, y, pixel(img, width, x, y));
    free(cols);
    free(copy);
}

void image_augment_op(uint8_t *img, int width, int height, AugmentOp op, double magnitude,
                      AugmentFilter filter) {
    AugmentPlan plan;
    image_augment_plan(op, magnitude, filter, width, height, &plan);
    image_augment_plan_run(&plan, img, width, height);
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
        for (int x = 0; x < width; x++)
            if (augment_erases(box, x, y)) memcpy(pixel(img, width, x, y), fill, 3);
}

uint8_t image_erase_byte(double mean) {
    long b = lround(255.0 * mean);
    return (uint8_t)(b < 0 ? 0 : b > 255 ? 255 : b);
}

void image_augment_draw(const ImageAugment *a, int side, Rng *rng, ImageJobAugment *out) {
    memset(out, 0, sizeof *out);
    if (a->ta_wide) {
        AugmentDraw d = image_ta_wide_draw(rng);
        out->op = d.op, out->bin = d.bin, out->negative = d.negative, out->filter = a->filter;
    }
    if (a->erase_p > 0 && image_random_erase_draw(side, side, a->erase_p, rng, &out->erase_box)) {
        out->erase = 1;
        memcpy(out->erase_fill, a->erase_fill, 3);
    }
}

void image_augment_plan_of(const ImageJobAugment *d, int side, AugmentPlan *plan) {
    AMP_ASSERT(d->op >= 0 && d->op < AUGMENT_OPS &&
                   (d->filter == AUGMENT_NEAREST || d->filter == AUGMENT_BILINEAR),
               "augment: op %d, filter %d", d->op, d->filter);
    const ImageRect b = d->erase_box;
    AMP_ASSERT(!d->erase || (b.top >= 0 && b.left >= 0 && b.height >= 0 && b.width >= 0 &&
                             b.top + b.height <= side && b.left + b.width <= side),
               "augment: erasing box (%d, %d) %dx%d outside a %dx%d image", b.top, b.left, b.height, b.width,
               side, side);
    const AugmentDraw draw = {(AugmentOp)d->op, d->bin, d->negative};
    image_augment_plan(draw.op, image_ta_wide_magnitude(draw), (AugmentFilter)d->filter, side, side, plan);
}

void image_augment_run(const ImageJobAugment *d, uint8_t *img, int side) {
    AugmentPlan plan;
    image_augment_plan_of(d, side, &plan);
    image_augment_plan_run(&plan, img, side, side);
    if (d->erase) image_erase(img, side, d->erase_box, d->erase_fill);
}

void image_augment_apply(const ImageAugment *a, uint8_t *img, int side, Rng *rng) {
    ImageJobAugment d;
    image_augment_draw(a, side, rng, &d);
    image_augment_run(&d, img, side);
}
