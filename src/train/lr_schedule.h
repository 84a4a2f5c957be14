// lr_schedule.h - the learning rate at each optimizer step: constant, step or cosine, each with an
// optional linear warm-up, and the optional linear scaling rule (lr x global batch / 256).
#ifndef AMPTRAIN_LR_SCHEDULE_H
#define AMPTRAIN_LR_SCHEDULE_H

#include "config/config.h"

// The base lr after `train.lr_scaling` (global_batch = ranks * per-rank batch * accum_steps).
double lr_base(const TrainConfig *t, long global_batch);

// lr for optimizer step `step` (0-based) of `total_steps`, with `steps_per_epoch` steps per epoch:
//   warm-up  step < warmup_steps: base * (step + 1) / warmup_steps
//   constant base
//   step     base * step_gamma ^ floor(epoch / step_every)
//   cosine   min_lr + (base - min_lr) * (1 + cos(pi * t)) / 2, t = (step - warmup) / (total - warmup)
double lr_at(const TrainConfig *t, double base, long step, long steps_per_epoch, long total_steps);

// 1 when optimizer step `step` (0-based) is one of the warm-up's.
int lr_in_warmup(const TrainConfig *t, long step);

#endif
