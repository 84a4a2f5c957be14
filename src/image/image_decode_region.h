// image_decode_region.h - decode only the part of a JPEG that a crop reads, bitwise the pixels a full
// image_decode gives there.
//
// RandomResizedCrop keeps about half of an image's pixels on average, and the decoder's inverse DCT,
// upsampling and colour conversion cost per pixel. Here libjpeg (the library under TurboJPEG) still
// entropy-decodes the whole stream, so a truncated file is refused as image_decode refuses it (and
// warnings libjpeg recovers from keep the image), but makes pixels only for the rows and columns
// around the crop: jpeg_crop_scanline for the columns (widened to iMCU boundaries) and
// jpeg_skip_scanlines for the rows.
// Both are exact only away from the region's borders: libjpeg treats a cropped border as an image edge
// (fancy upsampling reads one chroma sample, 2 pixels, across it), and the rows just after a skip lack
// their upsampling context. A margin of REGION_MARGIN pixels around the crop keeps both away from the
// pixels handed back (the test finds 2 enough; without a margin it fails).
// tests/unit/test_images.c compares this with image_decode on random boxes of 4:2:0, 4:2:2, 4:4:0,
// 4:1:1, 4:4:4, grayscale and progressive files, bitwise.
//
// Without libjpeg in the build (Debian: libjpeg62-turbo-dev), and for CMYK/YCCK files, it decodes the
// whole image with image_decode.
#ifndef AMPTRAIN_IMAGE_DECODE_REGION_H
#define AMPTRAIN_IMAGE_DECODE_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "image/image_decode.h"

#define REGION_MARGIN 8  // pixels kept on each side of the crop: 4 times what the test finds needed

// want: a box inside the image (its size from image_decode_size). 0 with *out (held->height,
// held->width, 3) u8 RGB, the pixels of the rectangle *held of the image, which contains want; or 1 with
// one line in err and *out untouched. Refuses what image_decode refuses.
int image_decode_region(const uint8_t *data, size_t size, CropBox want, DecodedImage *out, CropBox *held,
                        char *err, size_t err_cap);

#endif
