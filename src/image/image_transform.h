// image_transform.h - torchvision's ImageNet transforms on decoded RGB images, on the CPU, with PIL's
// arithmetic (torchvision transforms PIL images with Pillow's resize).
//
//   train: RandomResizedCrop(side, scale (0.08, 1) by default, ratio (3/4, 4/3)) then RandomHorizontalFlip(0.5)
//   val:   Resize(resize) of the shorter side, then CenterCrop(side); torchvision's resize is
//          round(side * 256 / 224) (image_val_resize), its V2 recipes' e.g. 232 for 224
// Resizing is Pillow's antialiased BILINEAR (image_resample.h). The results are Pillow's bytes:
// tests/unit/test_images.c holds them to a float64 model of that algorithm (within 1), and
// tests/unit/test_images_pil.c to Pillow itself (bitwise).
// Normalisation is not here: the device applies Dataset.norm to the bytes (core/pixels.h).
#ifndef AMPTRAIN_IMAGE_TRANSFORM_H
#define AMPTRAIN_IMAGE_TRANSFORM_H

#include <stdint.h>

#include "core/rng.h"
#include "image/image_decode.h"
#include "image/image_resample.h"

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

// RandomResizedCrop's box and RandomHorizontalFlip's coin for one image.
typedef struct TrainCrop {
    CropBox box;  // in the whole image's pixels
    int flip;     // 1: mirror left-right
} TrainCrop;

// The box (image_random_resized_crop_box), then the flip with probability 1/2; needs only the image's size,
// so a decoder can be told which pixels it must produce.
TrainCrop image_train_crop_draw(int width, int height, CropScale scale, Rng *rng);

// The two transforms as geometry (core/image_job.h): what a decoder of the encoded image must make.
ImageGeometry image_train_geometry(TrainCrop crop, int side);
ImageGeometry image_val_geometry(int width, int height, int resize, int side);

// round(side * 256 / 224), Python's round: torchvision's usual Resize before CenterCrop(side).
int image_val_resize(int side);

// g applied to `in`, whose pixels are the rectangle `held` of the whole image ({0, 0, height, width} when
// it is all of it; g.box must lie inside held). out (g.win.height, g.win.width, 3) u8.
void image_geometry_apply(const DecodedImage *in, ImageRect held, ImageGeometry g, uint8_t *out);

// image_train_crop_draw, then its geometry (image_train_geometry) applied to the whole image. out (side, side, 3) u8.
void image_transform_train(const DecodedImage *in, int side, CropScale scale, Rng *rng, uint8_t *out);

// Resize(resize) then CenterCrop(side), torchvision's sizes and offsets (resize >= side). out (side, side, 3) u8.
void image_transform_val(const DecodedImage *in, int resize, int side, uint8_t *out);

#endif
