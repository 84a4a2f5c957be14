// image_augment.h - torchvision's TrivialAugmentWide and RandomErasing on (height, width, 3) u8 RGB images.
//
// TrivialAugmentWide (torchvision.transforms.TrivialAugmentWide) runs, as torchvision's ImageNet training
// transform does, on the PIL image after RandomResizedCrop and the flip: one op drawn uniformly from 14, a
// magnitude bin uniformly from 31 (for the ops that have magnitudes), the sign flipped with probability
// 1/2 (for the signed ops), then the op with torchvision's functional.py arguments and Pillow's arithmetic
// (ImageEnhance's blends, ImageOps' lookup tables, Image.transform's AFFINE resampling, Image.rotate's
// matrix and its transpose fast paths), with fill 0. The bytes are Pillow's: tests/unit/test_images_pil.c
// compares every op at several magnitudes, negative ones included, with Pillow itself.
//
// RandomErasing (torchvision.transforms.RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0))
// runs in torchvision on the normalised tensor; here it runs on the bytes, before the device normalises
// them, and writes the byte per channel that normalises closest to 0 (image_erase_byte).
#ifndef AMPTRAIN_IMAGE_AUGMENT_H
#define AMPTRAIN_IMAGE_AUGMENT_H

#include <stdint.h>

#include "core/image_job.h"
#include "core/rng.h"

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

#define AUGMENT_BINS 31

// Resampling of the geometric ops (shears, translations, rotation): torchvision's InterpolationMode
// NEAREST (TrivialAugmentWide's default) or BILINEAR (what torchvision's reference train.py passes, its
// --interpolation), Pillow's non-antialiased filters of Image.transform.
typedef enum AugmentFilter { AUGMENT_NEAREST, AUGMENT_BILINEAR } AugmentFilter;

// One draw of TrivialAugmentWide.
typedef struct AugmentDraw {
    AugmentOp op;
    int bin;       // 0..AUGMENT_BINS-1, or -1 for an op without magnitudes (Identity, AutoContrast, Equalize)
    int negative;  // 1: the magnitude's sign flipped (signed ops only)
} AugmentDraw;

// torchvision's name of op ("ShearX", ...).
const char *image_augment_op_name(AugmentOp op);

// The op (rng_below(14)), then the bin (rng_below(31)) when the op has magnitudes, then the sign
// (rng_below(2), 1 flips) when it is signed: torchvision's draws, in its order.
AugmentDraw image_ta_wide_draw(Rng *rng);

// The magnitude torchvision passes to _apply_op for d: its bin of the float32 table (torch.linspace's
// float32 values: ShearX/ShearY and the four enhancements 0..0.99, TranslateX/Y 0..32, Rotate 0..135,
// Solarize 255..0; Posterize 8 - round(bin / 5)), negated when d.negative and the op is signed; 0 without
// magnitudes.
double image_ta_wide_magnitude(AugmentDraw d);

// torchvision's _apply_op(img, op, magnitude, interpolation, fill=None) on a PIL RGB image, in place.
// img (height, width, 3) u8.
void image_augment_op(uint8_t *img, int width, int height, AugmentOp op, double magnitude,
                      AugmentFilter filter);

// RandomErasing's draws: the coin (rng_uniform < p); then up to 10 tries of area fraction
// ~ U(0.02, 0.33) and log-aspect ~ U(log 0.3, log 3.3), h = round(sqrt(area * aspect)),
// w = round(sqrt(area / aspect)) (Python's round), accepted when h < height and w < width, then top
// ~ U{0..height-h}, left ~ U{0..width-w}. Returns 1 with *box set when a box is erased, 0 otherwise
// (the coin, or 10 misses: torchvision then returns the image unchanged).
int image_random_erase_draw(int width, int height, double p, Rng *rng, ImageRect *box);

// box of img (height, width, 3) u8 set to fill (one byte per channel).
void image_erase(uint8_t *img, int width, ImageRect box, const uint8_t fill[3]);

// The byte whose normalised value (byte / 255 - mean) / std is closest to 0: round(255 * mean), so an
// erased pixel normalises to at most 0.5 / (255 * std) from torchvision's exact 0.
uint8_t image_erase_byte(double mean);

// What a training sample gets after its crop and flip.
typedef struct ImageAugment {
    int ta_wide;            // 1: TrivialAugmentWide
    AugmentFilter filter;   // its geometric ops' resampling
    double erase_p;         // RandomErasing's probability (0: off)
    uint8_t erase_fill[3];  // image_erase_byte of the dataset's mean, per channel
} ImageAugment;

// TrivialAugmentWide (when a->ta_wide), then RandomErasing (when a->erase_p > 0), drawing from rng in
// that order. img (side, side, 3) u8.
void image_augment_apply(const ImageAugment *a, uint8_t *img, int side, Rng *rng);

#endif
