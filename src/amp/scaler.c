#include "amp/scaler.h"

#include <stddef.h>

void scaler_init(LossScaler *s, Backend *be, const AmpConfig *amp) {
    s->state = be->alloc(be, sizeof(ScalerState));
    s->growth = (float)amp->growth_factor;
    s->backoff = (float)amp->backoff_factor;
    s->interval = amp->growth_interval;
    s->dynamic = amp->enabled && amp->dynamic;
    ScalerState initial = {.scale = amp->enabled ? (float)amp->init_scale : 1.0f};
    scaler_write(s, be, &initial);
}

void scaler_begin_step(LossScaler *s, Backend *be) {
    be->zero(be, (char *)s->state + offsetof(ScalerState, found_inf), sizeof(float));
}

void scaler_update(LossScaler *s, Backend *be) {
    be->scaler_update(be, s->state, s->growth, s->backoff, s->interval, s->dynamic);
}

ScalerState scaler_read(LossScaler *s, Backend *be) {
    ScalerState host;
    be->to_host(be, &host, s->state, sizeof host);
    return host;
}

void scaler_write(LossScaler *s, Backend *be, const ScalerState *host_state) {
    be->to_device(be, s->state, host_state, sizeof *host_state);
}

void scaler_free(LossScaler *s, Backend *be) {
    be->free(be, s->state);
    s->state = NULL;
}
