// cpu_optim.c - the AMP step on the CPU: overflow check, the gradient norm, fused unscale + clip + SGD,
// GradScaler's update, the weight average.
#include <math.h>

#include "amp/update_rules.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/half.h"

void cpu_nonfinite_check(Backend *be, DType dt, const void *grad, size_t n, float *flag) {
    (void)be;
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) bad = !isfinite(dtype_load(grad, dt, i));
    // Only ever raised here: the caller zeroes the flag once per step and checks several buffers.
    if (bad) *flag = 1.0f;
}

void cpu_grad_norm(Backend *be, DType dt, const void *grad, size_t n, const ScalerState *state, float *norm) {
    (void)be;
    // Each gradient unscaled in fp32 as GradScaler.unscale_ stores it, its square summed in double.
    const float inv_scale = 1.0f / state->scale;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        const float u = dtype_load(grad, dt, i) * inv_scale;
        sum += (double)u * u;
    }
    *norm = (float)sqrt(sum);
}

void cpu_sgd_step(Backend *be, size_t n, DType grad_dt, const void *grad, float *master, float *mom,
                  void *copy, const SgdParams *p, const uint8_t *decay_group, const float *lr,
                  const float *grad_norm, const ScalerState *state) {
    (void)be;
    AMP_ASSERT(!copy || dtype_is_16bit(grad_dt), "sgd_step: a compute copy in %s", dtype_name(grad_dt));
    // A skipped step writes nothing, so master, momentum and the compute copy stay bitwise as they were.
    if (state->found_inf != 0.0f) return;
    const float inv_scale = 1.0f / state->scale;
    const float clip = grad_norm ? clip_factor_rule(*grad_norm, p->max_norm) : 1.0f;
    for (size_t i = 0; i < n; i++) {
        sgd_update_rule(dtype_load(grad, grad_dt, i), inv_scale, clip, sgd_decay_of(p, decay_group, i), *lr,
                        p, &master[i], &mom[i]);
        if (copy) dtype_store(copy, grad_dt, i, master[i]);
    }
}

void cpu_scaler_update(Backend *be, ScalerState *state, float growth, float backoff, int interval,
                       int dynamic) {
    (void)be;
    scaler_update_rule(state, growth, backoff, interval, dynamic);
}

void cpu_ema_update(Backend *be, size_t n, float *avg, const float *src, const EmaControl *ctl) {
    (void)be;
    if (ctl->mode == EMA_SKIP) return;
    for (size_t i = 0; i < n; i++) avg[i] = ema_update_rule(ctl, avg[i], src[i]);
}
