#include "optimizer.h"

void sgd_init(Sgd *opt, Backend *be, const Model *m, const TrainConfig *t) {
    size_t bytes = m->params.padded_numel * sizeof(float);
    opt->momentum = be->alloc(be, bytes);
    be->zero(be, opt->momentum, bytes);
    opt->params = (SgdParams){.lr = (float)t->lr, .momentum = (float)t->momentum,
                              .weight_decay = (float)t->weight_decay, .nesterov = t->nesterov};
}

void sgd_step(Sgd *opt, Backend *be, Model *m, const LossScaler *scaler, float lr) {
    opt->params.lr = lr;
    be->sgd_step(be, m->params.padded_numel, m->act_dt, m->grads, m->master, opt->momentum,
                 m->amp ? m->compute : NULL, &opt->params, scaler->state);
}

void sgd_free(Sgd *opt, Backend *be) {
    be->free(be, opt->momentum);
    opt->momentum = NULL;
}
