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
// parse, a truncated file (libjpeg's "premature end" warning: PIL refuses these too), a corrupt
// stream, and images of more than IMAGE_MAX_PIXELS, refused from the header before anything is decoded.
// Warnings libjpeg recovers from (extraneous bytes before a marker) keep the image, as PIL does.
// Thread-safe: every call has its own decompressor.
#ifndef AMPTRAIN_IMAGE_DECODE_H
#define AMPTRAIN_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/image_job.h"

#define IMAGE_MAX_PIXELS (64L * 1024 * 1024)  // 64 megapixels: 192 MiB of RGB, 8x a 24 MP photo

// A rectangle of pixels: rows top .. top+height-1, columns left .. left+width-1 (core/image_job.h).
typedef ImageRect CropBox;

typedef struct DecodedImage {
    uint8_t *rgb;        // (height, width, 3) u8 RGB, malloc'd; grayscale/CMYK become RGB like PIL convert("RGB")
    int width, height;
} DecodedImage;

// 1 when this build has libjpeg-turbo (CMake found pkg-config's libturbojpeg), else 0.
int image_decode_available(void);

// 0 and *out filled, or 1 with one line in err (not a JPEG, truncated, corrupt, too large: more than
// IMAGE_MAX_PIXELS = 64 megapixels is refused before decoding). *out is untouched on failure.
int image_decode(const uint8_t *data, size_t size, DecodedImage *out, char *err, size_t err_cap);

// The image's size from its header, with image_decode's checks (not a JPEG, a header that does not parse,
// more than IMAGE_MAX_PIXELS): 0, or 1 with one line in err. Decodes nothing.
int image_decode_size(const uint8_t *data, size_t size, int *width, int *height, char *err, size_t err_cap);

// Frees img->rgb and clears the struct (a cleared struct may be freed again).
void image_free(DecodedImage *img);

#endif
