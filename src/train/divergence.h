// divergence.h - when a run has diverged, so that it stops (exit 4) instead of ending "successfully" on
// weights that no longer train: amp.max_consecutive_skips steps in a row skipped for inf/NaN gradients,
// a loss scale fallen below amp.min_scale, or weights, momentum or BN running statistics that are no
// longer finite (BN statistics move in every forward, skipped steps included).
//
// The state check runs on the device (nonfinite_check into one flag) and travels back with the log
// record's read-back; only a flag that is set costs a host copy, to name the first bad tensor.
#ifndef AMPTRAIN_DIVERGENCE_H
#define AMPTRAIN_DIVERGENCE_H

#include <stddef.h>

#include "amp/scaler.h"
#include "config/config.h"
#include "core/backend.h"
#include "dist/agree.h"
#include "model/resnext.h"
#include "train/optimizer.h"

#define DIVERGENCE_REASON_MAX AGREE_MESSAGE_MAX

typedef struct Divergence {
    float *flag;                         // device, 1 float: 1 when the checked state held inf/NaN
    char reason[DIVERGENCE_REASON_MAX];  // "" while the run is healthy; the first reason found
} Divergence;

void divergence_init(Divergence *d, Backend *be);
void divergence_free(Divergence *d, Backend *be);
// Enqueues the check of master weights, momentum and BN running statistics into d->flag (no sync).
void divergence_check_state_async(Divergence *d, const Model *m, const Sgd *opt, Backend *be);
// Judges a state check (flag: its read-back value) and the scaler state read back at `step`; keeps the
// first reason. With the flag set, copies the state to the host to name the first non-finite tensor in
// torchvision's names (momentum as amptrain.momentum.<param>). Returns 1 when the run has diverged.
int divergence_judge(Divergence *d, const AmpConfig *amp, float flag, const ScalerState *st, const Model *m,
                     const Sgd *opt, Backend *be, long step);
// The state check now (waits for the device): 1 when it is not finite, with the reason kept.
int divergence_check_state(Divergence *d, const Model *m, const Sgd *opt, Backend *be, long step);

#endif
