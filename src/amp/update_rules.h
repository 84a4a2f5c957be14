// update_rules.h - the two update rules both backends run, written once:
//   sgd_update_rule     PyTorch's SGD for one parameter, in its order: unscale, weight decay, momentum,
//                       Nesterov, step (torch.optim.SGD with dampening 0)
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
#else
#define RULE_MUL(a, b) ((a) * (b))
#define RULE_ADD(a, b) ((a) + (b))
#define RULE_SUB(a, b) ((a) - (b))
#endif

// grad: the still-scaled gradient; inv_scale = 1 / loss scale, computed once per step as
// GradScaler.unscale_ does (exact for scales 2^k). Updates *master and *mom in place.
UPDATE_RULE void sgd_update_rule(float grad, float inv_scale, float lr, const SgdParams *p, float *master,
                                 float *mom) {
    const float g = RULE_ADD(RULE_MUL(grad, inv_scale), RULE_MUL(p->weight_decay, *master));
    const float m = RULE_ADD(RULE_MUL(p->momentum, *mom), g);
    const float step = p->nesterov ? RULE_ADD(g, RULE_MUL(p->momentum, m)) : m;
    *mom = m;
    *master = RULE_SUB(*master, RULE_MUL(lr, step));
}

// After the step's agreed verdict (state->found_inf): a skipped step counts (in all and in a row) and,
// when dynamic, backs the scale off and restarts the growth count; a clean one ends the row of skips and
// counts towards growth, and every `interval` clean
// steps the scale grows, unless that would overflow fp32 (then it stays, as in torch).
UPDATE_RULE void scaler_update_rule(ScalerState *state, float growth, float backoff, int interval, int dynamic) {
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

#endif
