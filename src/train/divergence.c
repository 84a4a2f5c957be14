#include "train/divergence.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/checkpoint.h"
#include "core/check.h"

void divergence_init(Divergence *d, Backend *be) {
    d->flag = be->alloc(be, sizeof(float));
    d->reason[0] = '\0';
}

void divergence_free(Divergence *d, Backend *be) {
    if (d->flag) be->free(be, d->flag);
    d->flag = NULL;
}

void divergence_check_state_async(Divergence *d, const Model *m, const Sgd *opt, Backend *be) {
    be->zero(be, d->flag, sizeof(float));
    be->nonfinite_check(be, DTYPE_F32, m->master, m->params.padded_numel, d->flag);
    be->nonfinite_check(be, DTYPE_F32, opt->momentum, m->params.padded_numel, d->flag);
    be->nonfinite_check(be, DTYPE_F32, m->running, m->stats_numel, d->flag);
}

// The index of the first non-finite element of x (n fp32), or -1.
static long first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (long)i;
    return -1;
}

// Names the first non-finite tensor: weights, then BN statistics, then momentum (host copies).
static void name_nonfinite(char *out, size_t cap, const Model *m, const Sgd *opt, Backend *be) {
    size_t np = m->params.padded_numel;
    float *master = xcalloc(np, sizeof(float)), *momentum = xcalloc(np, sizeof(float));
    float *stats = xcalloc(m->stats_numel ? m->stats_numel : 1, sizeof(float));
    be->to_host(be, master, m->master, np * sizeof(float));
    be->to_host(be, momentum, opt->momentum, np * sizeof(float));
    be->to_host(be, stats, m->running, m->stats_numel * sizeof(float));
    snprintf(out, cap, "a tensor");
    int found = 0;
    for (int i = 0; i < m->params.count && !found; i++) {
        const ParamInfo *p = &m->params.items[i];
        if (first_nonfinite(master + p->offset, p->numel) >= 0) snprintf(out, cap, "%s", p->name), found = 1;
    }
    for (int i = 0; i < m->n_bn && !found; i++) {
        const ModelBnLayer *bn = m->bn_list[i];
        if (first_nonfinite(stats + bn->stats_offset, bn->c) >= 0)
            snprintf(out, cap, "%s.running_mean", bn->prefix), found = 1;
        else if (first_nonfinite(stats + bn->stats_offset + bn->c, bn->c) >= 0)
            snprintf(out, cap, "%s.running_var", bn->prefix), found = 1;
    }
    for (int i = 0; i < m->params.count && !found; i++) {
        const ParamInfo *p = &m->params.items[i];
        if (first_nonfinite(momentum + p->offset, p->numel) >= 0)
            snprintf(out, cap, CHECKPOINT_MOMENTUM_PREFIX "%s", p->name), found = 1;
    }
    free(master), free(momentum), free(stats);
}

int divergence_judge(Divergence *d, const AmpConfig *amp, float flag, const ScalerState *st, const Model *m,
                     const Sgd *opt, Backend *be, long step) {
    if (d->reason[0]) return 1;
    if (flag != 0) {
        char name[PARAM_NAME_MAX + 32];
        name_nonfinite(name, sizeof name, m, opt, be);
        snprintf(d->reason, sizeof d->reason, "%s holds inf/NaN at step %ld", name, step);
    } else if (st && amp->max_consecutive_skips > 0 && st->skipped_run >= amp->max_consecutive_skips) {
        snprintf(d->reason, sizeof d->reason,
                 "%d steps in a row skipped for inf/NaN gradients by step %ld "
                 "(amp.max_consecutive_skips %d)",
                 st->skipped_run, step, amp->max_consecutive_skips);
    } else if (st && amp->enabled && amp->dynamic && st->scale < amp->min_scale) {
        snprintf(d->reason, sizeof d->reason,
                 "the loss scale fell to %g, below amp.min_scale %g, by step %ld", st->scale, amp->min_scale,
                 step);
    }
    return d->reason[0] != '\0';
}

int divergence_check_state(Divergence *d, const Model *m, const Sgd *opt, Backend *be, long step) {
    divergence_check_state_async(d, m, opt, be);
    float flag;
    be->to_host(be, &flag, d->flag, sizeof flag);
    if (flag == 0) return 0;
    if (!d->reason[0]) divergence_judge(d, NULL, flag, NULL, m, opt, be, step);
    return 1;
}
