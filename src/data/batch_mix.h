// batch_mix.h - the draws of MixUp and CutMix (data.mixup_alpha, data.cutmix_alpha) with the rules of
// torchvision.transforms.v2.MixUp / CutMix; the device applies them (backend_ops.def batch_mix, softmax_xent).
//
// Each rank mixes its own micro-batch with itself rolled by one, as torchvision's reference train.py does
// in each process's collate: the global result depends on the rank count, as torch DDP's does. A draw is a
// pure function of (seed, step, micro-batch, rank) (data/data_rng.h DATA_STREAM_MIX), so a resumed run and
// a replayed graph see the same draws, and nothing about it is kept between steps.
#ifndef AMPTRAIN_BATCH_MIX_H
#define AMPTRAIN_BATCH_MIX_H

#include <stdint.h>

#include "core/backend.h"
#include "core/rng.h"

#define BATCH_MIX_MICRO_BITS 10  // micro-batches of a step: train.accum_steps <= 2^10

// MixUp with lambda: every value blended, x * lam + x_rolled * (1 - lam).
BatchMix batch_mix_mixup(double lam);
// CutMix's box for lambda and its centre (r_x in [0, w), r_y in [0, h)), torchvision's rule: half-sides
// int(0.5 sqrt(1 - lam) x side), the box clipped to the image, lambda corrected to 1 - box area / (h w).
BatchMix batch_mix_cutmix(double lam, int r_x, int r_y, int h, int w);
// One sample of Beta(alpha, alpha), alpha > 0.
double batch_mix_beta(Rng *r, double alpha);
// The draw of micro-batch `micro` of optimizer step `step` on rank `rank`, images h x w, at least one alpha
// above 0. With both, MixUp or CutMix with probability 1/2 each (torchvision's RandomChoice); then lambda ~
// Beta(alpha, alpha) of the one chosen; for CutMix then r_x, r_y uniform, as torchvision draws them.
BatchMix batch_mix_draw(double mixup_alpha, double cutmix_alpha, uint64_t seed, long step, int micro,
                        int rank, int h, int w);

#endif
