// image_fixtures.h - JPEG fixtures for the image tests, made with TurboJPEG's compressor (tjCompress2) in
// the test's scratch folder: smooth test patterns, grayscale, CMYK, progressive, odd sizes, and the
// broken files (truncated, 0 bytes, text named .jpg, a header claiming 20000x20000 pixels).
#ifndef AMPTRAIN_IMAGE_FIXTURES_H
#define AMPTRAIN_IMAGE_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

// pixels (h, w, channels) u8: a smooth pattern (sines and ramps) that JPEG keeps within a few levels;
// channels 1 (gray), 3 (RGB) or 4 (CMYK). seed shifts the phases so images differ.
uint8_t *fx_pattern(int w, int h, int channels, int seed);

// pixels (h, w, 3) u8: uniform noise (the hardest input for a resampler).
uint8_t *fx_noise(int w, int h, uint64_t seed);

// JPEG bytes of pixels (channels 1: gray; 3: RGB; 4: CMYK), quality 1..100, subsampling a TJSAMP_*,
// progressive 0/1; *len set; free() the result.
uint8_t *fx_jpeg(const uint8_t *pixels, int w, int h, int channels, int quality, int subsamp, int progressive,
                 size_t *len);

// Writes n bytes to path (the folders above it must exist).
void fx_write(const char *path, const void *bytes, size_t n);

// A solid-colour RGB JPEG (quality 95) written to path: r, g, b.
void fx_write_solid(const char *path, int w, int h, uint8_t r, uint8_t g, uint8_t b);

// Sets the modification time of root and every folder under it to `seconds` since the epoch (the
// file-list cache trusts only folders older than its settling window; a test can also put a time back).
void fx_set_folder_mtimes(const char *root, long seconds);

#endif
