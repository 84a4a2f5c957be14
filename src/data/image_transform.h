// image_transform.h - torchvision's ImageNet transforms on decoded RGB images, on the CPU, with PIL's
// arithmetic (torchvision transforms PIL images with Pillow's resize).
//
//   train: RandomResizedCrop(side, scale (0.08, 1) by default, ratio (3/4, 4/3)) then RandomHorizontalFlip(0.5)
//   val:   Resize(round(side * 256 / 224)) of the shorter side, then CenterCrop(side)
// Resizing is Pillow's antialiased BILINEAR (ImagingResample): a triangle filter whose support grows with
// the downscale factor, separable, horizontal pass then vertical, coefficients in 22-bit fixed point,
// each pass rounding to 8 bits. The results are Pillow's bytes: tests/unit/test_images.c holds them to
// a float64 model of that algorithm (within 1), and tests/unit/test_images_pil.c to Pillow itself (bitwise).
// Normalisation is not here: the device applies Dataset.norm to the bytes (core/pixels.h).
#ifndef AMPTRAIN_IMAGE_TRANSFORM_H
#define AMPTRAIN_IMAGE_TRANSFORM_H

#include <stdint.h>

#include "../core/rng.h"
#include "image_decode.h"

typedef struct CropBox {
    int top, left, height, width;
} CropBox;

// RandomResizedCrop's scale: the range of the crop's area as a fraction of the image's.
typedef struct CropScale {
    double min, max;
} CropScale;
#define CROP_SCALE_TORCHVISION ((CropScale){0.08, 1.0})

// torchvision.transforms.RandomResizedCrop.get_params, scale (min, max), ratio (3/4, 4/3): up to 10 tries
// of (area fraction ~ U(min, max), log aspect ~ U(log 3/4, log 4/3)), w = round(sqrt(area * aspect)),
// h = round(sqrt(area / aspect)) (Python's round: half to even), accepted when 0 < w <= width and
// 0 < h <= height, then top ~ U{0..height-h}, left ~ U{0..width-w}; after 10 misses the centred crop of
// the whole image clamped to the ratio range. Draws from rng in that order.
CropBox image_random_resized_crop_box(int width, int height, CropScale scale, Rng *rng);

// Pillow's Image.resize(box -> (out_w, out_h), BILINEAR) of the region `box` of `in`, but only the output
// window `win` (top, left, height, width within out_w x out_h) is computed and written to out
// (win.height, win.width, 3) u8. Each output pixel depends on its own coefficients only, so a window is
// bitwise the corresponding part of Pillow's full output (resize then crop).
void image_resize_bilinear(const DecodedImage *in, CropBox box, int out_w, int out_h, CropBox win, uint8_t *out);

// RandomResizedCrop (scale) then a flip with probability 1/2 (drawn after the box). out (side, side, 3) u8.
void image_transform_train(const DecodedImage *in, int side, CropScale scale, Rng *rng, uint8_t *out);

// Resize(round(side * 256 / 224)) then CenterCrop(side), torchvision's sizes and offsets. out (side, side, 3) u8.
void image_transform_val(const DecodedImage *in, int side, uint8_t *out);

#endif
