// image_decode.c - TurboJPEG decode to RGB (see image_decode.h). Built without libjpeg-turbo, every call
// fails with a message naming the missing package, and image_decode_available() says so up front.
#include "image/image_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AMPTRAIN_HAVE_TURBOJPEG
#include <turbojpeg.h>

int image_decode_available(void) { return 1; }

// PIL's MULDIV255: round(a * b / 255) in integers (libImaging/ImagingUtils.h).
static inline int muldiv255(int a, int b) {
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

// cmyk (n, 4) u8 as stored in an Adobe CMYK JPEG, i.e. inverted -> rgb (n, 3) u8. PIL reads such a file
// with rawmode "CMYK;I" (c' = 255 - c) and converts with cmyk2rgb: r = 255 - k' - round(c' (255 - k') / 255).
static void cmyk_to_rgb(const uint8_t *cmyk, size_t n, uint8_t *rgb) {
    for (size_t i = 0; i < n; i++) {
        int nk = cmyk[4 * i + 3];  // 255 - k' with k' = 255 - stored k
        for (int ch = 0; ch < 3; ch++)
            rgb[3 * i + ch] = (uint8_t)(nk - muldiv255(255 - cmyk[4 * i + ch], nk));
    }
}

// Decompresses into out (height, width, channels of format); 0, or 1 with err filled. A warning is an
// error only when it means the data ended early (libjpeg pads the rest with grey; PIL raises instead).
// The first pass stops at any warning, because TurboJPEG 2.1 loses the end-of-data warning of some
// truncated progressive files when it is left to run on; a recoverable warning (extraneous bytes before
// a marker) then gets a second pass that decodes through it, as PIL does.
static int decompress(tjhandle tj, const uint8_t *data, size_t size, uint8_t *out, int width, int height,
                      int format, char *err, size_t err_cap) {
    int flags = TJFLAG_LIMITSCANS | TJFLAG_STOPONWARNING;
    for (int pass = 0; pass < 2; pass++, flags &= ~TJFLAG_STOPONWARNING) {
        if (tjDecompress2(tj, data, (unsigned long)size, out, width, 0, height, format, flags) == 0) return 0;
        const char *why = tjGetErrorStr2(tj);
        if (tjGetErrorCode(tj) != TJERR_WARNING || strstr(why, "Premature end")) {
            snprintf(err, err_cap, "corrupt or truncated JPEG: %s", why);
            return 1;
        }
    }
    return 0;  // the second pass warned again, and decoded to the end
}

// The checks every decode starts with: not empty, a start-of-image marker, a header TurboJPEG reads
// that has a frame, a size image_decode_check_size allows. 0 with the header's numbers, or 1 with err.
static int header_read(tjhandle tj, const uint8_t *data, size_t size, int *width, int *height,
                       int *colorspace, char *err, size_t err_cap) {
    int subsamp;
    if (size == 0) {
        snprintf(err, err_cap, "empty file (0 bytes)");
        return 1;
    }
    if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) {
        snprintf(err, err_cap, "not a JPEG (no start-of-image marker FF D8 in the first bytes)");
        return 1;
    }
    // A stream of tables only (DQT/DHT, no SOF) is a valid header to TurboJPEG, which then returns
    // without setting the outputs: zero means no frame was read.
    *width = *height = 0;
    if (tjDecompressHeader3(tj, data, (unsigned long)size, width, height, &subsamp, colorspace) != 0) {
        snprintf(err, err_cap, "not a readable JPEG header: %s", tjGetErrorStr2(tj));
        return 1;
    }
    if (*width == 0 || *height == 0) {
        snprintf(err, err_cap, "no frame header (a JPEG of tables only, without an image)");
        return 1;
    }
    return image_decode_check_size(*width, *height, size, err, err_cap);
}

static tjhandle decompressor_make(char *err, size_t err_cap) {
    tjhandle tj = tjInitDecompress();
    if (!tj) snprintf(err, err_cap, "libjpeg-turbo: cannot make a decompressor: %s", tjGetErrorStr2(NULL));
    return tj;
}

int image_decode_size(const uint8_t *data, size_t size, int *width, int *height, char *err, size_t err_cap) {
    tjhandle tj = decompressor_make(err, err_cap);
    if (!tj) return 1;
    int colorspace, rc = header_read(tj, data, size, width, height, &colorspace, err, err_cap);
    tjDestroy(tj);
    return rc;
}

int image_decode(const uint8_t *data, size_t size, DecodedImage *out, char *err, size_t err_cap) {
    tjhandle tj = decompressor_make(err, err_cap);
    if (!tj) return 1;
    int width, height, colorspace, rc = 1;
    uint8_t *rgb = NULL, *cmyk = NULL;
    if (header_read(tj, data, size, &width, &height, &colorspace, err, err_cap) == 0) {
        size_t pixels = (size_t)width * height;
        rgb = malloc(pixels * 3);
        int is_cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
        if (is_cmyk) cmyk = malloc(pixels * 4);
        if (!rgb || (is_cmyk && !cmyk)) {
            snprintf(err, err_cap, "%d x %d pixels: out of memory", width, height);
        } else if (is_cmyk) {
            rc = decompress(tj, data, size, cmyk, width, height, TJPF_CMYK, err, err_cap);
            if (rc == 0) cmyk_to_rgb(cmyk, pixels, rgb);
        } else {
            rc = decompress(tj, data, size, rgb, width, height, TJPF_RGB, err, err_cap);
        }
    }
    tjDestroy(tj);
    free(cmyk);
    if (rc != 0) {
        free(rgb);
        return 1;
    }
    *out = (DecodedImage){.rgb = rgb, .width = width, .height = height};
    return 0;
}

#else

int image_decode_available(void) { return 0; }

#define NO_TURBOJPEG "this amptrain was built without libjpeg-turbo (Debian: libturbojpeg0-dev)"

int image_decode_size(const uint8_t *data, size_t size, int *width, int *height, char *err, size_t err_cap) {
    (void)data, (void)size, (void)width, (void)height;
    snprintf(err, err_cap, NO_TURBOJPEG);
    return 1;
}

int image_decode(const uint8_t *data, size_t size, DecodedImage *out, char *err, size_t err_cap) {
    (void)data, (void)size, (void)out;
    snprintf(err, err_cap, NO_TURBOJPEG);
    return 1;
}

#endif

int image_decode_check_size(int width, int height, size_t bytes, char *err, size_t err_cap) {
    double pixels = (double)width * height;
    if (width > 0 && height > 0 && pixels <= IMAGE_MAX_PIXELS &&
        pixels <= (double)bytes * IMAGE_MAX_PIXELS_PER_BYTE)
        return 0;
    if (width <= 0 || height <= 0)
        snprintf(err, err_cap, "a frame of %d x %d pixels", width, height);
    else if (pixels > IMAGE_MAX_PIXELS)
        snprintf(err, err_cap, "%d x %d = %.0f pixels, more than the %ld any image may have", width, height,
                 pixels, IMAGE_MAX_PIXELS);
    else
        snprintf(err, err_cap,
                 "%d x %d pixels claimed by a file of %zu bytes: more than the %d pixels per byte a "
                 "JPEG can hold (a forged or cut header)",
                 width, height, bytes, IMAGE_MAX_PIXELS_PER_BYTE);
    return 1;
}

void image_free(DecodedImage *img) {
    free(img->rgb);
    *img = (DecodedImage){0};
}
