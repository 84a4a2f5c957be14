// cpu_mix.c - MixUp and CutMix of a normalised batch (batch_mix), torchvision.transforms.v2's arithmetic.
// Built with -ffp-contract=off (CMakeLists.txt): the two products and their sum are rounded one by one,
// as torch's separate mul_ and add_ kernels round them, and as the CUDA kernel's __fmul_rn/__fadd_rn do.
#include <stdlib.h>

#include "kernels/cpu/cpu_ops.h"

void cpu_batch_mix(Backend *be, DType dt, void *x, int n, int h, int w, int c, const BatchMix *mix) {
    (void)be;
    const size_t image = (size_t)h * w * c, count = (size_t)n * image;
    float *in = cpu_floats_load(x, dt, count), *out = cpu_scratch(count);  // (n, h, w, c)
    for (int i = 0; i < n; i++) {
        const float *own = in + (size_t)i * image, *rolled = in + (size_t)((i + n - 1) % n) * image;
        float *dst = out + (size_t)i * image;
        for (int row = 0; row < h; row++)
            for (int col = 0; col < w; col++) {
                const size_t p = ((size_t)row * w + col) * c;
                const int pasted = row >= mix->y1 && row < mix->y2 && col >= mix->x1 && col < mix->x2;
                for (int ch = 0; ch < c; ch++) {
                    const float mixed = rolled[p + ch] * mix->rest + own[p + ch] * mix->lam;
                    dst[p + ch] = mix->blend ? mixed : pasted ? rolled[p + ch] : own[p + ch];
                }
            }
    }
    cpu_floats_store(x, dt, out, count, 0);
    free(in);
    free(out);
}
