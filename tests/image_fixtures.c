// image_fixtures.c - see image_fixtures.h.
#include "tests/image_fixtures.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "tests/test_util.h"

uint8_t *fx_pattern(int w, int h, int channels, int seed) {
    uint8_t *p = malloc((size_t)w * h * channels);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < channels; c++) {
                double v = 128 + 90 * sin((x + 3.0 * seed) / (6.0 + c) + y / (9.0 + 2 * c)) +
                           20 * cos((y - 2.0 * seed) / 13.0 - c);
                p[((size_t)y * w + x) * channels + c] = (uint8_t)lrint(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

uint8_t *fx_noise(int w, int h, uint64_t seed) {
    uint8_t *p = malloc((size_t)w * h * 3);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < (size_t)w * h * 3; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;  // xorshift64
        p[i] = (uint8_t)(s >> 56);
    }
    return p;
}

uint8_t *fx_jpeg(const uint8_t *pixels, int w, int h, int channels, int quality, int subsamp, int progressive,
                 size_t *len) {
    tjhandle tj = tjInitCompress();
    ck_assert_ptr_nonnull(tj);
    int format = channels == 1 ? TJPF_GRAY : channels == 3 ? TJPF_RGB : TJPF_CMYK;
    unsigned char *jpeg = NULL;
    unsigned long size = 0;
    int rc = tjCompress2(tj, pixels, w, 0, h, format, &jpeg, &size, channels == 1 ? TJSAMP_GRAY : subsamp,
                         quality, progressive ? TJFLAG_PROGRESSIVE : 0);
    ck_assert_msg(rc == 0, "tjCompress2: %s", tjGetErrorStr2(tj));
    tjDestroy(tj);
    uint8_t *out = malloc(size);
    memcpy(out, jpeg, size);
    tjFree(jpeg);
    *len = size;
    return out;
}

void fx_write(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

void fx_write_solid(const char *path, int w, int h, uint8_t r, uint8_t g, uint8_t b) {
    uint8_t *p = malloc((size_t)w * h * 3);
    for (size_t i = 0; i < (size_t)w * h; i++) p[3 * i] = r, p[3 * i + 1] = g, p[3 * i + 2] = b;
    size_t len;
    uint8_t *jpeg = fx_jpeg(p, w, h, 3, 95, TJSAMP_444, 0, &len);
    fx_write(path, jpeg, len);
    free(jpeg);
    free(p);
}

void fx_set_folder_mtimes(const char *root, long seconds) {
    char cmd[600], out[256];
    snprintf(cmd, sizeof cmd, "find '%s' -type d -exec touch -m -d @%ld {} + 2>&1", root, seconds);
    ck_assert_msg(tu_run_shell(cmd, out, sizeof out) == 0, "%s: %s", cmd, out);
}
