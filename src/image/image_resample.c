// image_resample.c - Pillow's resampler (see image_resample.h), following libImaging/Resample.c:
// precompute_coeffs, normalize_coeffs_8bpc, ImagingResampleHorizontal_8bpc / Vertical_8bpc.
//
// The integer sums are Pillow's; only their evaluation is wider. A pixel's three channels (and one byte
// past them, never stored) are summed as one 4-lane int32 vector in the horizontal pass, and 4 bytes of
// a row at a time in the vertical pass (GCC/Clang vector extensions; SSE4.1's byte widening and
// saturating packs where the build allows). Integer addition is associative, so the bytes are Pillow's.
#include "image/image_resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

#ifdef __SSE4_1__
#include <smmintrin.h>
#endif

#define RESAMPLE_HALF (1 << (RESAMPLE_BITS - 1))  // rounds the fixed-point sum to nearest

typedef int32_t i32x4 __attribute__((vector_size(16)));

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

void image_resample_taps(int in_size, int out_size, int first, int count, int reverse, ResampleTaps *t) {
    double scale = (double)in_size / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;  // downscaling widens the filter: the antialiasing
    double support = 1.0 * filterscale;
    t->ksize = (int)ceil(support) * 2 + 1;
    t->bounds = xcalloc((size_t)count * 2, sizeof(int));
    t->weights = xcalloc((size_t)count * t->ksize, sizeof(int32_t));
    double *w = xcalloc((size_t)t->ksize, sizeof(double));
    for (int i = 0; i < count; i++) {
        double center = (first + i + 0.5) * scale, sum = 0.0, ss = 1.0 / filterscale;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = in_size;
        int n = hi - lo, at = reverse ? count - 1 - i : i;
        for (int x = 0; x < n; x++) sum += w[x] = triangle((x + lo - center + 0.5) * ss);
        int32_t *k = t->weights + (size_t)at * t->ksize;
        for (int x = 0; x < n; x++)
            k[x] = (int32_t)(0.5 + (sum != 0.0 ? w[x] / sum : w[x]) * (1 << RESAMPLE_BITS));
        t->bounds[2 * at] = lo;
        t->bounds[2 * at + 1] = n;
    }
    free(w);
}

void image_resample_taps_free(ResampleTaps *t) {
    free(t->bounds);
    free(t->weights);
}

// 4 bytes at p widened to int32 lanes.
static inline i32x4 widen4(const uint8_t *p) {
#ifdef __SSE4_1__
    int32_t b;
    memcpy(&b, p, 4);
    return (i32x4)_mm_cvtepu8_epi32(_mm_cvtsi32_si128(b));
#else
    return (i32x4){p[0], p[1], p[2], p[3]};
#endif
}

// Pillow's clip8 on 4 lanes: each rounded fixed-point sum as a byte (<= 0 -> 0, >= 255.0 -> 255), stored
// at dst[0..3].
static inline void clip8x4_store(i32x4 v, uint8_t *dst) {
    v >>= RESAMPLE_BITS;  // arithmetic: negative sums stay negative; then clamp to 0 .. 255
#ifdef __SSE4_1__
    __m128i w = _mm_packus_epi32((__m128i)v, (__m128i)v);   // saturates to 0 .. 65535
    int32_t b = _mm_cvtsi128_si32(_mm_packus_epi16(w, w));  // saturates to 0 .. 255
    memcpy(dst, &b, 4);
#else
    for (int c = 0; c < 4; c++) dst[c] = (uint8_t)(v[c] < 0 ? 0 : v[c] > 255 ? 255 : v[c]);
#endif
}

// Horizontal pass of one row: src (in_w, 3) u8 plus one readable byte after it -> dst (count, 3) u8 plus
// one byte after it that is overwritten (the next row's first, or padding).
static void resample_row(const uint8_t *src, const ResampleTaps *t, int count, uint8_t *dst) {
    for (int x = 0; x < count; x++, dst += 3) {
        const int32_t *k = t->weights + (size_t)x * t->ksize;
        const uint8_t *p = src + (size_t)t->bounds[2 * x] * 3;
        i32x4 sum = {RESAMPLE_HALF, RESAMPLE_HALF, RESAMPLE_HALF, RESAMPLE_HALF};
        for (int j = 0; j < t->bounds[2 * x + 1]; j++, p += 3) sum += widen4(p) * k[j];
        clip8x4_store(sum, dst);
    }
}

// Vertical pass of one output row: the n rows at col (stride bytes apart, each len bytes, readable 3
// bytes past len) weighted by k -> dst (len) u8.
static void resample_column(const uint8_t *col, size_t stride, const int32_t *k, int n, size_t len,
                            uint8_t *dst) {
    for (size_t c = 0; c < len; c += 4) {
        i32x4 sum = {RESAMPLE_HALF, RESAMPLE_HALF, RESAMPLE_HALF, RESAMPLE_HALF};
        for (int j = 0; j < n; j++) sum += widen4(col + (size_t)j * stride + c) * k[j];
        uint8_t px[4];
        clip8x4_store(sum, px);
        memcpy(dst + c, px, len - c < 4 ? len - c : 4);
    }
}

void image_resize_bilinear(const DecodedImage *in, CropBox box, int out_w, int out_h, CropBox win, int mirror,
                           uint8_t *out) {
    AMP_ASSERT(box.top >= 0 && box.left >= 0 && box.height > 0 && box.width > 0 &&
                   box.top + box.height <= in->height && box.left + box.width <= in->width,
               "resize: box (%d, %d, %d, %d) outside the %dx%d image", box.top, box.left, box.height,
               box.width, in->width, in->height);
    AMP_ASSERT(win.top >= 0 && win.left >= 0 && win.top + win.height <= out_h &&
                   win.left + win.width <= out_w,
               "resize: window outside the %dx%d output", out_w, out_h);
    ResampleTaps th, tv;
    image_resample_taps(box.width, out_w, win.left, win.width, mirror, &th);
    image_resample_taps(box.height, out_h, win.top, win.height, 0, &tv);
    // Rows of the box the window's vertical taps read: the horizontal pass makes only those.
    int row0 = tv.bounds[0], row1 = tv.bounds[2 * (win.height - 1)] + tv.bounds[2 * (win.height - 1) + 1];
    size_t tmp_stride = (size_t)win.width * 3;
    uint8_t *tmp =
        malloc((size_t)(row1 - row0) * tmp_stride + 4);  // (row1 - row0, win.width, 3) u8 + 4 spare
    AMP_ASSERT(tmp, "resize: out of memory");
    // The last pixel of the image has no byte after it: a row that reads it goes through a padded copy.
    size_t stride = (size_t)in->width * 3, box_bytes = (size_t)box.width * 3;
    uint8_t *last_row = xcalloc(box_bytes + 1, 1);
    for (int y = row0; y < row1; y++) {
        const uint8_t *src = in->rgb + (size_t)(box.top + y) * stride + (size_t)box.left * 3;
        if (box.top + y == in->height - 1 && box.left + box.width == in->width)
            src = memcpy(last_row, src, box_bytes);
        resample_row(src, &th, win.width, tmp + (size_t)(y - row0) * tmp_stride);
    }
    for (int y = 0; y < win.height; y++) {
        const uint8_t *col = tmp + (size_t)(tv.bounds[2 * y] - row0) * tmp_stride;
        resample_column(col, tmp_stride, tv.weights + (size_t)y * tv.ksize, tv.bounds[2 * y + 1], tmp_stride,
                        out + (size_t)y * tmp_stride);
    }
    free(last_row);
    free(tmp);
    image_resample_taps_free(&th);
    image_resample_taps_free(&tv);
}
