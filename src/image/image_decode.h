// image_decode.h - one JPEG in memory to (height, width, 3) uint8 RGB on the CPU, with libjpeg-turbo's
// TurboJPEG API; the pixels PIL's Image.open(f).convert("RGB") and torchvision.io.decode_jpeg give.
//
// The decoder is libjpeg-turbo with its defaults (accurate integer IDCT, fancy upsampling), the same
// library and settings PIL and torchvision's CPU decode_jpeg use, so the pixels agree with theirs.
// Grayscale JPEGs are replicated to three channels (PIL's L -> RGB). CMYK and YCCK JPEGs are read as
// Adobe-inverted CMYK (what Photoshop and libjpeg write) and converted with PIL's CMYK -> RGB rule.
// Progressive JPEGs decode like baseline ones (at most 500 scans: more is an attack, not a photo).
//
// Refused, with one line in err: no libjpeg-turbo in this build, not a JPEG, a header that does not
// parse, a stream of tables only (no frame header, so no image), a truncated file (libjpeg's "premature
// end" warning: PIL refuses these too), a corrupt stream, and, from the header before anything is
// decoded, an image whose size the file cannot hold (image_decode_check_size).
// Warnings libjpeg recovers from (extraneous bytes before a marker) keep the image, as PIL does.
// Thread-safe: every call has its own decompressor.
#ifndef AMPTRAIN_IMAGE_DECODE_H
#define AMPTRAIN_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/image_job.h"

// IMAGE_MAX_PIXELS (core/image_job.h) is the most pixels any decode makes (3 GiB of RGB): the ceiling of
// data.max_image_pixels, whose default, IMAGE_DEFAULT_MAX_PIXELS, is Pillow's decompression-bomb limit
// (Image.MAX_IMAGE_PIXELS). The datasets hold each image to the configured limit (image_dataset.h); the
// ceiling is what the decoder itself allows.

// The most pixels a JPEG file may claim per byte of its size. A Huffman-coded scan of the luma (or
// only) component spends at least one bit on each 8x8 block's DC coefficient (the shortest Huffman
// code is one bit; a baseline scan also ends each block with an EOB code), so a decodable file holds at
// most 64 pixels per bit, 512 per byte, however uniform the picture; twice that is allowed. A header
// claiming more (an 8192x8192 frame in 3 KB) is a forged or cut file that would cost its full pixel
// buffer before the decoder found the data missing. Files beyond the bound that do decode are
// arithmetic-coded or progressive files without a first luma DC scan, which no camera or common encoder
// writes.
#define IMAGE_MAX_PIXELS_PER_BYTE 1024

// A rectangle of pixels: rows top .. top+height-1, columns left .. left+width-1 (core/image_job.h).
typedef ImageRect CropBox;

typedef struct DecodedImage {
    uint8_t *rgb;  // (height, width, 3) u8 RGB, malloc'd; grayscale/CMYK become RGB like PIL convert("RGB")
    int width, height;
} DecodedImage;

// 1 when this build has libjpeg-turbo (CMake found pkg-config's libturbojpeg), else 0.
int image_decode_available(void);

// 0 and *out filled, or 1 with one line in err (not a JPEG, no frame, truncated, corrupt, a size
// image_decode_check_size refuses, before decoding). *out is untouched on failure.
int image_decode(const uint8_t *data, size_t size, DecodedImage *out, char *err, size_t err_cap);

// The image's size from its header, with image_decode's checks (not a JPEG, a header that does not parse,
// no frame, a size image_decode_check_size refuses): 0, or 1 with one line in err. Decodes nothing.
int image_decode_size(const uint8_t *data, size_t size, int *width, int *height, char *err, size_t err_cap);

// A frame of width x height from a file of `bytes` bytes: 0 when at most IMAGE_MAX_PIXELS and at most
// IMAGE_MAX_PIXELS_PER_BYTE per byte, else 1 with one line in err.
int image_decode_check_size(int width, int height, size_t bytes, char *err, size_t err_cap);

// Frees img->rgb and clears the struct (a cleared struct may be freed again).
void image_free(DecodedImage *img);

#endif
