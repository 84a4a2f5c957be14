// batch_mix.c - MixUp and CutMix draws (batch_mix.h).
#include "data/batch_mix.h"

#include <math.h>

#include "core/check.h"
#include "data/data_rng.h"

BatchMix batch_mix_mixup(double lam) {
    return (BatchMix){.lam = (float)lam, .rest = (float)(1.0 - lam), .blend = 1};
}

BatchMix batch_mix_cutmix(double lam, int r_x, int r_y, int h, int w) {
    const double r = 0.5 * sqrt(1.0 - lam);
    const int half_w = (int)(r * w), half_h = (int)(r * h);
    const int x1 = r_x - half_w > 0 ? r_x - half_w : 0, y1 = r_y - half_h > 0 ? r_y - half_h : 0;
    const int x2 = r_x + half_w < w ? r_x + half_w : w, y2 = r_y + half_h < h ? r_y + half_h : h;
    // Python's int / int: the exact ratio rounded once, as this division of two exact doubles is.
    const double corrected = 1.0 - (double)((long)(x2 - x1) * (y2 - y1)) / ((double)w * h);
    return (BatchMix){.lam = (float)corrected,
                      .rest = (float)(1.0 - corrected),
                      .blend = 0,
                      .x1 = x1,
                      .y1 = y1,
                      .x2 = x2,
                      .y2 = y2};
}

// Uniform in (0, 1), 53 bits: log() of it is finite.
static double uniform_open(Rng *r) { return ((double)(rng_next_u64(r) >> 11) + 0.5) * 0x1p-53; }

// log of a Gamma(a, 1) sample: Marsaglia and Tsang's method (ACM TOMS 26(3), 2000), with their boost
// Gamma(a) = Gamma(a + 1) x U^(1/a) for a < 1, kept in logs because U^(1/a) underflows for small a.
static double log_gamma_draw(Rng *r, double a) {
    double boost = 0.0;
    if (a < 1.0) {
        boost = log(uniform_open(r)) / a;
        a += 1.0;
    }
    const double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        const double x = rng_normal(r), v = 1.0 + c * x;
        if (v <= 0.0) continue;
        const double v3 = v * v * v;
        if (log(uniform_open(r)) < 0.5 * x * x + d - d * v3 + d * log(v3)) return log(d * v3) + boost;
    }
}

double batch_mix_beta(Rng *r, double alpha) {
    // X / (X + Y) for X, Y ~ Gamma(alpha): 1 / (1 + Y / X), from the logs.
    const double lx = log_gamma_draw(r, alpha), ly = log_gamma_draw(r, alpha);
    return 1.0 / (1.0 + exp(ly - lx));
}

BatchMix batch_mix_draw(double mixup_alpha, double cutmix_alpha, uint64_t seed, long step, int micro,
                        int rank, int h, int w) {
    AMP_ASSERT(mixup_alpha > 0 || cutmix_alpha > 0, "batch_mix_draw: neither MixUp nor CutMix is on");
    AMP_ASSERT(micro >= 0 && micro < (1 << BATCH_MIX_MICRO_BITS) && rank >= 0 &&
                   rank < (1 << (32 - BATCH_MIX_MICRO_BITS)),
               "batch_mix_draw: micro-batch %d or rank %d out of range", micro, rank);
    Rng r;
    const uint32_t rank_micro = ((uint32_t)rank << BATCH_MIX_MICRO_BITS) | (uint32_t)micro;
    data_rng_seed(&r, seed, DATA_STREAM_MIX, (uint32_t)step, rank_micro);
    int cutmix = cutmix_alpha > 0;
    if (mixup_alpha > 0 && cutmix_alpha > 0) cutmix = rng_below(&r, 2) == 1;
    const double lam = batch_mix_beta(&r, cutmix ? cutmix_alpha : mixup_alpha);
    if (!cutmix) return batch_mix_mixup(lam);
    const int r_x = (int)rng_below(&r, (uint32_t)w), r_y = (int)rng_below(&r, (uint32_t)h);
    return batch_mix_cutmix(lam, r_x, r_y, h, w);
}
