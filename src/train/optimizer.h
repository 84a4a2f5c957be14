// optimizer.h - SGD with momentum, weight decay in two groups and optional Nesterov (torch.optim.SGD
// semantics, dampening 0), after optional clipping of the global gradient norm
// (torch.nn.utils.clip_grad_norm_), as one fused pass over the flat parameter buffers.
//
// The step reads each gradient (fp16 under AMP), unscales it by 1/S, scales it by the clip factor,
// updates the fp32 master and the fp32 momentum and writes the fp16 compute copy; when the agreed
// verdict (scaler state) says inf/NaN, nothing is written. Zero-initialised momentum equals torch's
// "buf = grad" on the first step.
//
// Weight-decay groups, torchvision's set_weight_decay (references/classification/utils.py) with
// norm_classes its default (batch norm among them) and no custom keys: the parameters of normalisation
// layers (every BN weight and bias) decay with train.norm_weight_decay, every other parameter (convolution
// weights, fc.weight and fc.bias) with train.weight_decay.
#ifndef AMPTRAIN_OPTIMIZER_H
#define AMPTRAIN_OPTIMIZER_H

#include "amp/scaler.h"
#include "core/backend.h"
#include "config/config.h"
#include "model/resnext.h"

enum { SGD_GROUP_OTHER = 0, SGD_GROUP_NORM = 1 };

typedef struct Sgd {
    float *momentum;       // (padded_numel) fp32, same layout as the masters
    float *lr;             // (1) fp32 in backend memory: the step reads it there, so a replayed graph follows
                           // the schedule the host writes with sgd_set_lr
    uint8_t *decay_group;  // (padded_numel / SGD_DECAY_SPAN) u8 in backend memory: each span's group
    float *grad_norm;  // (1) fp32 in backend memory: this step's unscaled gradient norm; NULL: no clipping
    SgdParams params;
} Sgd;

// The decay group of a parameter kind (SGD_GROUP_*).
int sgd_group_of(ParamKind kind);
void sgd_init(Sgd *opt, Backend *be, const Model *m, const TrainConfig *t);
// Writes this step's learning rate, ordered on the compute stream before the step's work (never inside a
// graph capture).
void sgd_set_lr(Sgd *opt, Backend *be, float lr);
// With clipping on: the norm of the summed gradients into opt->grad_norm, for sgd_step (nothing otherwise).
void sgd_clip_norm(Sgd *opt, Backend *be, Model *m, const LossScaler *scaler);
void sgd_step(Sgd *opt, Backend *be, Model *m, const LossScaler *scaler);
void sgd_free(Sgd *opt, Backend *be);

#endif
