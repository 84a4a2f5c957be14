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
//
// The host path draws and applies both in the loader (image_augment_apply). With data.decode: device the loader
// draws them into the ImageJob (image_augment_draw) and the decoder applies them after its resize: the CPU
// backend with image_augment_run, CUDA with the same image_augment_ops.h functions on image_augment_plan_of's
// plans (kernels/cuda/cuda_augment.cu).
#ifndef AMPTRAIN_IMAGE_AUGMENT_H
#define AMPTRAIN_IMAGE_AUGMENT_H

#include <stdint.h>

#include "core/image_job.h"
#include "core/rng.h"
#include "image/image_augment_ops.h"

#define AUGMENT_BINS 31

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

// torchvision's _apply_op(img, op, magnitude, interpolation, fill=None) on a PIL RGB image, in place:
// image_augment_plan, then image_augment_plan_run. img (height, width, 3) u8.
void image_augment_op(uint8_t *img, int width, int height, AugmentOp op, double magnitude,
                      AugmentFilter filter);

// The plan of _apply_op(op, magnitude, interpolation) for a (height, width) image (image_augment_ops.h):
// what both the CPU (image_augment_plan_run) and the CUDA decoder (kernels/cuda/cuda_augment.cu) run.
void image_augment_plan(AugmentOp op, double magnitude, AugmentFilter filter, int width, int height,
                        AugmentPlan *plan);

// plan on img (height, width, 3) u8, in place, with image_augment_ops.h's functions.
void image_augment_plan_run(const AugmentPlan *plan, uint8_t *img, int width, int height);

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

// TrivialAugmentWide's draw (when a->ta_wide), then RandomErasing's (when a->erase_p > 0), from rng in that
// order, for a (side, side) image: *out, all zero when both are off.
void image_augment_draw(const ImageAugment *a, int side, Rng *rng, ImageJobAugment *out);

// The plan of d's op (image_augment_plan of its magnitude) for a (side, side) image.
void image_augment_plan_of(const ImageJobAugment *d, int side, AugmentPlan *plan);

// d on img (side, side, 3) u8, in place: its op, then its box erased.
void image_augment_run(const ImageJobAugment *d, uint8_t *img, int side);

// image_augment_draw, then image_augment_run.
void image_augment_apply(const ImageAugment *a, uint8_t *img, int side, Rng *rng);

#endif
