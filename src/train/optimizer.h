// optimizer.h - SGD with momentum, weight decay and optional Nesterov (torch.optim.SGD semantics,
// dampening 0), as one fused pass over the flat parameter buffers.
//
// The step reads each gradient (fp16 under AMP), unscales it by 1/S, updates the fp32 master and the
// fp32 momentum and writes the fp16 compute copy; when the agreed verdict (scaler state) says inf/NaN,
// nothing is written. Zero-initialised momentum equals torch's "buf = grad" on the first step.
#ifndef AMPTRAIN_OPTIMIZER_H
#define AMPTRAIN_OPTIMIZER_H

#include "amp/scaler.h"
#include "core/backend.h"
#include "config/config.h"
#include "model/resnext.h"

typedef struct Sgd {
    float *momentum;  // (padded_numel) fp32, same layout as the masters
    float *lr;        // (1) fp32 in backend memory: the step reads it there, so a replayed graph follows
                      // the schedule the host writes with sgd_set_lr
    SgdParams params;
} Sgd;

void sgd_init(Sgd *opt, Backend *be, const Model *m, const TrainConfig *t);
// Writes this step's learning rate, ordered on the compute stream before the step's work (never inside a
// graph capture).
void sgd_set_lr(Sgd *opt, Backend *be, float lr);
void sgd_step(Sgd *opt, Backend *be, Model *m, const LossScaler *scaler);
void sgd_free(Sgd *opt, Backend *be);

#endif
