// scaler.h - the dynamic loss scaler (PyTorch GradScaler's rule), whose state lives on the device.
//
// The step never asks the host: the backward seed reads S from device memory, the optimizer reads the
// agreed verdict from device memory, and backend->scaler_update moves S and the growth counter in one
// thread. The host only reads the state back asynchronously for logging and checkpoints.
#ifndef AMPTRAIN_SCALER_H
#define AMPTRAIN_SCALER_H

#include "core/backend.h"
#include "config/config.h"

typedef struct LossScaler {
    ScalerState *state;  // device memory: scale, growth_count, found_inf, skipped_total
    float growth, backoff;
    int interval, dynamic;
} LossScaler;

// With AMP off the scale is fixed at 1, and so under bf16 (config_load resolves amp.dynamic false,
// amp.init_scale 1 for amp.dtype bfloat16); the verdict still guards the step.
void scaler_init(LossScaler *s, Backend *be, const AmpConfig *amp);
// Clears found_inf at the start of a step (device-side, no sync).
void scaler_begin_step(LossScaler *s, Backend *be);
// After the step: GradScaler's update on the device.
void scaler_update(LossScaler *s, Backend *be);
// Host view (waits for the device): for checkpoints and tests.
ScalerState scaler_read(LossScaler *s, Backend *be);
void scaler_write(LossScaler *s, Backend *be, const ScalerState *host_state);
void scaler_free(LossScaler *s, Backend *be);

#endif
