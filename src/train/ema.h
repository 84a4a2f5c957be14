// ema.h - an exponential moving average (EMA) of the weights and batch-norm statistics: torchvision's
// ExponentialMovingAverage (references/classification/utils.py: AveragedModel with
// ema_avg(avg, p) = decay * avg + (1 - decay) * p and use_buffers=True), driven as its train.py drives it:
//
// - decay: adjust = global batch x train.ema_every / train.epochs, alpha = min(1, (1 - train.ema_decay) x
//   adjust), decay = 1 - alpha (train.py: world_size x batch_size x model_ema_steps / epochs; the global
//   batch here is data.batch_size x ranks x train.accum_steps), in double as Python computes it.
// - after the step of index i in its epoch (0-based) with i % ema_every == 0: update_parameters (with
//   n_averaged 0 a copy, else the average; then n_averaged += 1); a step of the learning-rate warm-up then
//   sets n_averaged back to 0, so the average copies the weights until the warm-up ends. Skipped steps
//   (inf/NaN) update it too, as in train.py: the weights they leave are the same.
// - averaged: the fp32 masters and the BN running means and variances, on the device (backend ema_update),
//   and num_batches_tracked on the host: AveragedModel averages that int64 buffer too, in fp32, and copies
//   the result back truncated.
// The host decides each step and writes its EmaControl before it (ema_begin_step), as the learning rate, so
// the update (ema_apply) runs inside a captured graph as well.
#ifndef AMPTRAIN_EMA_H
#define AMPTRAIN_EMA_H

#include <stdint.h>

#include "core/backend.h"
#include "config/config.h"
#include "dist/comm.h"
#include "model/activations.h"
#include "model/resnext.h"
#include "train/evaluate.h"

typedef struct Ema {
    int enabled;                  // train.ema_decay > 0
    int every;                    // train.ema_every
    double decay;                 // torchvision's adjusted decay
    EmaControl *ctl;              // (1) backend memory: what ema_apply does in the step under way
    float *params;                // (padded_numel) fp32: the average of the masters, their layout
    float *stats;                 // (stats_numel) fp32: of the BN running statistics, their layout
    long n_averaged;              // AveragedModel.n_averaged
    int64_t num_batches_tracked;  // the average's BN counter
    int32_t pending;              // the EmaMode written for the step under way
} Ema;

// torchvision's adjusted decay for this run (ema_decay > 0).
double ema_decay_for(const TrainConfig *t, long global_batch);
// The steps the average remembers: its time constant, ema_every / (1 - decay) (an update's weight falls by
// 1/e over that many steps).
double ema_memory_steps(const Ema *e);
// Off (nothing allocated) unless t->ema_decay > 0; else the average starts as a copy of m, n_averaged 0
// (AveragedModel's deepcopy).
void ema_init(Ema *e, Backend *be, const Model *m, const TrainConfig *t, long global_batch);
// The average restarted from m as it is now, n_averaged 0 (a resume from a checkpoint without one).
void ema_restart(Ema *e, Backend *be, const Model *m);
// Before the step of index `index_in_epoch` in its epoch: writes whether and how the step updates the
// average (never inside a graph capture).
void ema_begin_step(Ema *e, Backend *be, int index_in_epoch);
// In the step, after the optimizer: the update ema_begin_step wrote (two backend calls).
void ema_apply(Ema *e, Backend *be, const Model *m);
// After the step: n_averaged and num_batches_tracked as update_parameters leaves them, `tracked` the model's
// counter after the step; in_warmup: the step was one of the learning-rate warm-up.
void ema_end_step(Ema *e, int in_warmup, int64_t tracked);
// Averages the average's BN statistics over ranks, as evaluation and checkpoints do the model's.
void ema_sync_stats(Ema *e, const Model *m, Backend *be, Comm *comm);
// evaluate_run on the average: its weights (cast into m's compute copy under AMP, restored from m's masters
// afterwards) and statistics in place of m's and of ev's view's.
EvalRecord ema_evaluate(Ema *e, Evaluator *ev, Model *m, Activations *act, Backend *be, Comm *comm, int epoch,
                        long step);
void ema_free(Ema *e, Backend *be);

#endif
