#include "train/optimizer.h"

#include <stdlib.h>

#include "core/check.h"

_Static_assert(PARAM_ALIGN % SGD_DECAY_SPAN == 0, "every decay span must lie inside one parameter tensor");

int sgd_group_of(ParamKind kind) {
    return kind == PARAM_BN_WEIGHT || kind == PARAM_BN_BIAS ? SGD_GROUP_NORM : SGD_GROUP_OTHER;
}

// Each span of the flat layout gets its tensor's group; the alignment gaps follow their tensor (they are
// zero in every buffer, and stay zero under any decay).
static uint8_t *decay_groups_upload(Backend *be, const ParamRegistry *reg) {
    size_t spans = reg->padded_numel / SGD_DECAY_SPAN;
    uint8_t *host = xcalloc(spans ? spans : 1, 1);
    for (int i = 0; i < reg->count; i++) {
        const ParamInfo *p = &reg->items[i];
        size_t first = p->offset / SGD_DECAY_SPAN,
               end = (p->offset + p->numel + SGD_DECAY_SPAN - 1) / SGD_DECAY_SPAN;
        for (size_t s = first; s < end; s++) host[s] = (uint8_t)sgd_group_of(p->kind);
    }
    uint8_t *dev = be->alloc(be, spans ? spans : 1);
    be->to_device(be, dev, host, spans);
    free(host);
    return dev;
}

void sgd_init(Sgd *opt, Backend *be, const Model *m, const TrainConfig *t) {
    size_t bytes = m->params.padded_numel * sizeof(float);
    opt->momentum = be->alloc(be, bytes);
    be->zero(be, opt->momentum, bytes);
    opt->lr = be->alloc(be, sizeof(float));
    sgd_set_lr(opt, be, (float)t->lr);
    opt->decay_group = decay_groups_upload(be, &m->params);
    opt->grad_norm = NULL;
    if (t->clip_grad_norm > 0) {
        opt->grad_norm = be->alloc(be, sizeof(float));
        be->zero(be, opt->grad_norm, sizeof(float));
    }
    opt->params = (SgdParams){
        .momentum = (float)t->momentum,
        .weight_decay =
            {[SGD_GROUP_OTHER] = (float)t->weight_decay, [SGD_GROUP_NORM] = (float)t->norm_weight_decay},
        .nesterov = t->nesterov,
        .max_norm = (float)t->clip_grad_norm};
}

void sgd_set_lr(Sgd *opt, Backend *be, float lr) { be->upload_async(be, opt->lr, &lr, sizeof lr); }

void sgd_clip_norm(Sgd *opt, Backend *be, Model *m, const LossScaler *scaler) {
    if (opt->grad_norm)
        be->grad_norm(be, m->act_dt, m->grads, m->params.padded_numel, scaler->state, opt->grad_norm);
}

void sgd_step(Sgd *opt, Backend *be, Model *m, const LossScaler *scaler) {
    be->sgd_step(be, m->params.padded_numel, m->act_dt, m->grads, m->master, opt->momentum,
                 m->amp ? m->compute : NULL, &opt->params, opt->decay_group, opt->lr, opt->grad_norm,
                 scaler->state);
}

void sgd_free(Sgd *opt, Backend *be) {
    be->free(be, opt->momentum);
    be->free(be, opt->lr);
    be->free(be, opt->decay_group);
    if (opt->grad_norm) be->free(be, opt->grad_norm);
    opt->momentum = NULL;
    opt->lr = NULL;
    opt->decay_group = NULL;
    opt->grad_norm = NULL;
}
