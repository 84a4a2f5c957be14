// update_rules.h - the update rules both backends run, written once:
//   clip_factor_rule    clip_grad_norm_'s factor from the global gradient norm
//   sgd_decay_of        the weight decay of an element's decay group
//   sgd_update_rule     PyTorch's SGD for one parameter, in its order: unscale, clip, weight decay,
//                       momentum, Nesterov, step (torch.optim.SGD with dampening 0)
//   ema_update_rule     torchvision's ExponentialMovingAverage for one value
//   scaler_update_rule  GradScaler's scale update (torch's _amp_update_scale_)
// Plain C in the CPU backend; __host__ __device__ under nvcc, where every operation is rounded on its own
// (no fused multiply-add), so the CUDA backend matches the CPU bitwise.
#ifndef AMPTRAIN_UPDATE_RULES_H
#define AMPTRAIN_UPDATE_RULES_H

#include <math.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "core/backend.h"
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#define UPDATE_RULE static __host__ __device__ __forceinline__
#else
#define UPDATE_RULE static inline
#endif
#ifdef __CUDA_ARCH__
#define RULE_MUL(a, b) __fmul_rn((a), (b))
#define RULE_ADD(a, b) __fadd_rn((a), (b))
#define RULE_SUB(a, b) __fsub_rn((a), (b))
#define RULE_DIV(a, b) __fdiv_rn((a), (b))
#else
#define RULE_MUL(a, b) ((a) * (b))
#define RULE_ADD(a, b) ((a) + (b))
#define RULE_SUB(a, b) ((a) - (b))
#define RULE_DIV(a, b) ((a) / (b))
#endif

// torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), which torch evaluates as
// (total_norm + 1e-6).reciprocal() * max_norm (a Python number divided by a tensor), clamped to at most 1.
// A norm of +inf (finite gradients whose squares overflow fp32) gives 0. A NaN norm gives 1: only a
// step whose gradients hold inf/NaN has one, and the verdict skips that step before the factor is used.
UPDATE_RULE float clip_factor_rule(float norm, float max_norm) {
    const float f = RULE_MUL(RULE_DIV(1.0f, RULE_ADD(norm, 1e-6f)), max_norm);
    return f < 1.0f ? f : 1.0f;
}

// The weight decay of element i of a flat buffer: its span's group (decay_group NULL: group 0).
UPDATE_RULE float sgd_decay_of(const SgdParams *p, const uint8_t *decay_group, size_t i) {
    return decay_group && decay_group[i / SGD_DECAY_SPAN] ? p->weight_decay[1] : p->weight_decay[0];
}

// grad: the still-scaled gradient; inv_scale = 1 / loss scale, computed once per step as
// GradScaler.unscale_ does (exact for scales 2^k); clip: clip_factor_rule's factor (1: no clipping, and
// then exact); weight_decay: sgd_decay_of's. Updates *master and *mom in place.
UPDATE_RULE void sgd_update_rule(float grad, float inv_scale, float clip, float weight_decay, float lr,
                                 const SgdParams *p, float *master, float *mom) {
    const float g = RULE_ADD(RULE_MUL(RULE_MUL(grad, inv_scale), clip), RULE_MUL(weight_decay, *master));
    const float m = RULE_ADD(RULE_MUL(p->momentum, *mom), g);
    const float step = p->nesterov ? RULE_ADD(g, RULE_MUL(p->momentum, m)) : m;
    *mom = m;
    *master = RULE_SUB(*master, RULE_MUL(lr, step));
}

// AveragedModel.update_parameters with torchvision's ema_avg, for one value: the first update copies,
// the later ones average (c->mode EMA_COPY, EMA_AVERAGE; the caller skips EMA_SKIP).
UPDATE_RULE float ema_update_rule(const EmaControl *c, float avg, float src) {
    return c->mode == EMA_COPY ? src : RULE_ADD(RULE_MUL(c->decay, avg), RULE_MUL(c->weight, src));
}

// After the step's agreed verdict (state->found_inf): a skipped step counts (in all and in a row) and,
// when dynamic, backs the scale off and restarts the growth count; a clean one ends the row of skips and
// counts towards growth, and every `interval` clean
// steps the scale grows, unless that would overflow fp32 (then it stays, as in torch).
UPDATE_RULE void scaler_update_rule(ScalerState *state, float growth, float backoff, int interval,
                                    int dynamic) {
    if (state->found_inf != 0.0f) {
        state->skipped_total++;
        state->skipped_run++;
        if (dynamic) {
            state->scale *= backoff;
            state->growth_count = 0;
        }
        return;
    }
    state->skipped_run = 0;
    if (!dynamic) return;
    state->growth_count++;
    if (state->growth_count == interval) {
        const float grown = state->scale * growth;
        if (isfinite(grown)) state->scale = grown;
        state->growth_count = 0;
    }
}

#undef RULE_MUL
#undef RULE_ADD
#undef RULE_SUB
#undef RULE_DIV

#endif
