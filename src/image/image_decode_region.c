// image_decode_region.c - the rows and columns of a JPEG a crop reads, with libjpeg's scanline cropping
// and skipping (see image_decode_region.h).
#include "image/image_decode_region.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"

#ifdef AMPTRAIN_HAVE_LIBJPEG
#include <jpeglib.h>
#include <setjmp.h>

#include <jerror.h>

#define REGION_MAX_SCANS 500  // TurboJPEG's TJFLAG_LIMITSCANS, which image_decode sets

// libjpeg's errors end the decode through a jump; its warnings are kept except "Premature end of JPEG
// file" (the data ran out: libjpeg pads with grey, PIL and image_decode refuse), which is an error here.
typedef struct RegionErrors {
    struct jpeg_error_mgr mgr;  // first: libjpeg's pointer to it is a pointer to this
    jmp_buf jump;
    char what[JMSG_LENGTH_MAX];
} RegionErrors;

static void region_error_exit(j_common_ptr cinfo) {
    RegionErrors *e = (RegionErrors *)cinfo->err;
    e->mgr.format_message(cinfo, e->what);
    longjmp(e->jump, 1);
}

static void region_emit_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) region_error_exit(cinfo);
}

static void region_progress(j_common_ptr cinfo) {
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->input_scan_number > REGION_MAX_SCANS) {
        RegionErrors *e = (RegionErrors *)cinfo->err;
        snprintf(e->what, sizeof e->what, "Progressive JPEG image has more than %d scans", REGION_MAX_SCANS);
        longjmp(e->jump, 1);
    }
}

static int clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// Decodes rows y0 .. y1-1 and columns *x0 .. *x0 + *width - 1 (widened by libjpeg) into a new
// (y1 - y0, *width, 3) u8 buffer, set through *rgb as soon as it exists so the caller frees it after a jump.
static void region_decompress(j_decompress_ptr d, int y0, int y1, JDIMENSION *x0, JDIMENSION *width,
                              uint8_t *volatile *rgb) {
    d->out_color_space = JCS_EXT_RGB;  // grayscale is replicated to three channels, as in image_decode
    jpeg_start_decompress(d);
    jpeg_crop_scanline(d, x0, width);
    if (y0 > 0) jpeg_skip_scanlines(d, (JDIMENSION)y0);
    size_t row_bytes = (size_t)*width * 3;
    *rgb = malloc((size_t)(y1 - y0) * row_bytes);
    if (!*rgb) ERREXIT(d, JERR_OUT_OF_MEMORY);
    while (d->output_scanline < (JDIMENSION)y1) {
        JSAMPROW row = *rgb + (size_t)(d->output_scanline - y0) * row_bytes;
        jpeg_read_scanlines(d, &row, 1);
    }
    // The rest is still entropy-decoded (skipping does that), so truncation below the crop is found.
    if (d->output_scanline < d->output_height) jpeg_skip_scanlines(d, d->output_height - d->output_scanline);
    jpeg_finish_decompress(d);
}

int image_decode_region(const uint8_t *data, size_t size, CropBox want, DecodedImage *out, CropBox *held,
                        char *err, size_t err_cap) {
    struct jpeg_decompress_struct d;
    struct jpeg_progress_mgr progress = {.progress_monitor = region_progress};
    RegionErrors errors;
    d.err = jpeg_std_error(&errors.mgr);
    errors.mgr.error_exit = region_error_exit;
    errors.mgr.emit_message = region_emit_message;
    uint8_t *volatile rgb = NULL;  // volatile: read after the jump
    if (setjmp(errors.jump)) {
        jpeg_destroy_decompress(&d);
        free(rgb);
        snprintf(err, err_cap, "corrupt or truncated JPEG: %s", errors.what);
        return 1;
    }
    jpeg_create_decompress(&d);
    d.progress = &progress;
    jpeg_mem_src(&d, data, (unsigned long)size);
    jpeg_read_header(&d, TRUE);
    int width = (int)d.image_width, height = (int)d.image_height;
    int cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
    if (image_decode_check_size(width, height, size, err, err_cap) != 0) {
        jpeg_destroy_decompress(&d);
        return 1;
    }
    if (cmyk) {
        jpeg_destroy_decompress(&d);
        *held = (CropBox){0, 0, height, width};
        return image_decode(data, size, out, err, err_cap);  // CMYK's own conversion
    }
    AMP_ASSERT(want.top >= 0 && want.left >= 0 && want.height > 0 && want.width > 0 &&
                   want.top + want.height <= height && want.left + want.width <= width,
               "decode region: box (%d, %d, %d, %d) outside the %dx%d image", want.top, want.left,
               want.height, want.width, width, height);
    int y0 = clamp(want.top - REGION_MARGIN, 0, height),
        y1 = clamp(want.top + want.height + REGION_MARGIN, 0, height);
    int x_end = clamp(want.left + want.width + REGION_MARGIN, 0, width);
    JDIMENSION x0 = (JDIMENSION)clamp(want.left - REGION_MARGIN, 0, width), cols = (JDIMENSION)x_end - x0;
    region_decompress(&d, y0, y1, &x0, &cols, &rgb);
    jpeg_destroy_decompress(&d);
    *held = (CropBox){y0, (int)x0, y1 - y0, (int)cols};
    *out = (DecodedImage){.rgb = rgb, .width = (int)cols, .height = y1 - y0};
    return 0;
}

#else

int image_decode_region(const uint8_t *data, size_t size, CropBox want, DecodedImage *out, CropBox *held,
                        char *err, size_t err_cap) {
    (void)want;
    if (image_decode(data, size, out, err, err_cap) != 0) return 1;
    *held = (CropBox){0, 0, out->height, out->width};
    return 0;
}

#endif
