#include "train/optimizer.h"

void sgd_init(Sgd *opt, Backend *be, const Model *m, const TrainConfig *t) {
    size_t bytes = m->params.padded_numel * sizeof(float);
    opt->momentum = be->alloc(be, bytes);
    be->zero(be, opt->momentum, bytes);
    opt->lr = be->alloc(be, sizeof(float));
    sgd_set_lr(opt, be, (float)t->lr);
    opt->params = (SgdParams){.momentum = (float)t->momentum, .weight_decay = (float)t->weight_decay,
                              .nesterov = t->nesterov};
}

void sgd_set_lr(Sgd *opt, Backend *be, float lr) { be->upload_async(be, opt->lr, &lr, sizeof lr); }

void sgd_step(Sgd *opt, Backend *be, Model *m, const LossScaler *scaler) {
    be->sgd_step(be, m->params.padded_numel, m->act_dt, m->grads, m->master, opt->momentum,
                 m->amp ? m->compute : NULL, &opt->params, opt->lr, scaler->state);
}

void sgd_free(Sgd *opt, Backend *be) {
    be->free(be, opt->momentum);
    be->free(be, opt->lr);
    opt->momentum = NULL;
    opt->lr = NULL;
}
