// image_resample.h - Pillow's antialiased BILINEAR resize (libImaging/Resample.c, ImagingResample) of a
// box of an RGB image, bitwise: a triangle filter whose support grows with the downscale factor,
// separable, horizontal pass then vertical, coefficients in 22-bit fixed point, each pass rounding to
// 8 bits and clipping. The box is cut out first (torchvision's resized_crop: crop, then resize), so no
// tap reads outside it.
#ifndef AMPTRAIN_IMAGE_RESAMPLE_H
#define AMPTRAIN_IMAGE_RESAMPLE_H

#include <stdint.h>

#include "image_decode.h"

// Pillow's Image.resize(box -> (out_w, out_h), BILINEAR) of the region `box` of `in`, but only the output
// window `win` (top, left, height, width within out_w x out_h) is computed and written to out
// (win.height, win.width, 3) u8, mirrored left-right when `mirror` (RandomHorizontalFlip) at no extra
// cost. Each output pixel depends on its own coefficients only, so a window is bitwise the corresponding
// part of Pillow's full output (resize then crop).
void image_resize_bilinear(const DecodedImage *in, CropBox box, int out_w, int out_h, CropBox win, int mirror,
                           uint8_t *out);

#endif
