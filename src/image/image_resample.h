// image_resample.h - Pillow's antialiased BILINEAR resize (libImaging/Resample.c, ImagingResample) of a
// box of an RGB image, bitwise: a triangle filter whose support grows with the downscale factor,
// separable, horizontal pass then vertical, coefficients in 22-bit fixed point, each pass rounding to
// 8 bits and clipping. The box is cut out first (torchvision's resized_crop: crop, then resize), so no
// tap reads outside it.
#ifndef AMPTRAIN_IMAGE_RESAMPLE_H
#define AMPTRAIN_IMAGE_RESAMPLE_H

#include <stdint.h>

#include "image/image_decode.h"

#define RESAMPLE_BITS                                                                                        \
    22  // Pillow's PRECISION_BITS (32 - 8 - 2): a sum of 8-bit pixels times weights fits int32

// One pass's taps: output i reads bounds[2i + 1] inputs from bounds[2i] on, weighted by weights[i * ksize ..]
// (RESAMPLE_BITS fixed point, summing to about 1); a pixel is sum + 2^(RESAMPLE_BITS-1) shifted right by
// RESAMPLE_BITS and clamped to 0..255, after each pass.
typedef struct ResampleTaps {
    int ksize;         // taps reserved per output
    int *bounds;       // (count, 2) int: first input index and number of taps of each output
    int32_t *weights;  // (count, ksize) int32
} ResampleTaps;

// The taps of outputs first .. first+count-1 of a resize from in_size to out_size samples (Pillow's
// precompute_coeffs with box (0, in_size) and the bilinear filter, support 1, then normalize_coeffs_8bpc),
// stored last output first when `reverse` (the mirror). Shared with a device resampler, so that its bytes
// are these.
void image_resample_taps(int in_size, int out_size, int first, int count, int reverse, ResampleTaps *t);
void image_resample_taps_free(ResampleTaps *t);

// Pillow's Image.resize(box -> (out_w, out_h), BILINEAR) of the region `box` of `in`, but only the output
// window `win` (top, left, height, width within out_w x out_h) is computed and written to out
// (win.height, win.width, 3) u8, mirrored left-right when `mirror` (RandomHorizontalFlip) at no extra
// cost. Each output pixel depends on its own coefficients only, so a window is bitwise the corresponding
// part of Pillow's full output (resize then crop).
void image_resize_bilinear(const DecodedImage *in, CropBox box, int out_w, int out_h, CropBox win, int mirror,
                           uint8_t *out);

#endif
