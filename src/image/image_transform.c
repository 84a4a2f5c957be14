// image_transform.c - RandomResizedCrop, flip, Resize + CenterCrop with torchvision's sizes, resized by
// Pillow's resampler (image_resample.h); see image_transform.h.
#include "image/image_transform.h"

#include <math.h>

#define RRC_RATIO_MIN (3.0 / 4.0)
#define RRC_RATIO_MAX (4.0 / 3.0)
#define RRC_TRIES 10

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

// ---- the two pipelines ----------------------------------------------------------------------------------

TrainCrop image_train_crop_draw(int width, int height, CropScale scale, Rng *rng) {
    CropBox box = image_random_resized_crop_box(width, height, scale, rng);
    return (TrainCrop){box, rng_uniform(rng) < 0.5f};
}

ImageGeometry image_train_geometry(TrainCrop crop, int side) {
    return (ImageGeometry){crop.box, side, side, (CropBox){0, 0, side, side}, crop.flip};
}

int image_val_resize(int side) { return round_half_even(side * 256.0 / 224.0); }

ImageGeometry image_val_geometry(int width, int height, int resize, int side) {
    // torchvision's Resize(s): the shorter side becomes s, the longer int(s * long / short).
    int s = resize;
    int w_short = width <= height;
    int shorter = w_short ? width : height, longer = w_short ? height : width;
    int s_long = (int)((double)s * longer / shorter);
    int out_w = w_short ? s : s_long, out_h = w_short ? s_long : s;
    // CenterCrop: offsets int(round((size - side) / 2.0)).
    CropBox win = {round_half_even((out_h - side) / 2.0), round_half_even((out_w - side) / 2.0), side, side};
    return (ImageGeometry){(CropBox){0, 0, height, width}, out_w, out_h, win, 0};
}

void image_geometry_apply(const DecodedImage *in, ImageRect held, ImageGeometry g, uint8_t *out) {
    CropBox box = {g.box.top - held.top, g.box.left - held.left, g.box.height, g.box.width};
    image_resize_bilinear(in, box, g.out_w, g.out_h, g.win, g.mirror, out);
}

static CropBox whole(const DecodedImage *in) { return (CropBox){0, 0, in->height, in->width}; }

void image_transform_train(const DecodedImage *in, int side, CropScale scale, Rng *rng, uint8_t *out) {
    TrainCrop crop = image_train_crop_draw(in->width, in->height, scale, rng);
    image_geometry_apply(in, whole(in), image_train_geometry(crop, side), out);
}

void image_transform_val(const DecodedImage *in, int resize, int side, uint8_t *out) {
    image_geometry_apply(in, whole(in), image_val_geometry(in->width, in->height, resize, side), out);
}
