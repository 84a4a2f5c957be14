#include "train/ema.h"

#include <math.h>
#include <string.h>

double ema_decay_for(const TrainConfig *t, long global_batch) {
    double adjust = (double)global_batch * t->ema_every / t->epochs;
    double alpha = 1.0 - t->ema_decay;
    alpha = alpha * adjust < 1.0 ? alpha * adjust : 1.0;
    return 1.0 - alpha;
}

double ema_memory_steps(const Ema *e) { return e->decay < 1.0 ? e->every / (1.0 - e->decay) : INFINITY; }

void ema_init(Ema *e, Backend *be, const Model *m, const TrainConfig *t, long global_batch) {
    memset(e, 0, sizeof *e);
    if (!(t->ema_decay > 0)) return;
    e->enabled = 1;
    e->every = t->ema_every;
    e->decay = ema_decay_for(t, global_batch);
    e->ctl = be->alloc(be, sizeof(EmaControl));
    e->params = be->alloc(be, m->params.padded_numel * sizeof(float));
    e->stats = be->alloc(be, (m->stats_numel ? m->stats_numel : 1) * sizeof(float));
    ema_restart(e, be, m);
}

void ema_restart(Ema *e, Backend *be, const Model *m) {
    if (!e->enabled) return;
    be->copy(be, e->params, m->master, m->params.padded_numel * sizeof(float));
    be->copy(be, e->stats, m->running, m->stats_numel * sizeof(float));
    e->n_averaged = 0;
    e->num_batches_tracked = m->num_batches_tracked;
}

void ema_begin_step(Ema *e, Backend *be, int index_in_epoch) {
    if (!e->enabled) return;
    e->pending = index_in_epoch % e->every != 0 ? EMA_SKIP : e->n_averaged == 0 ? EMA_COPY : EMA_AVERAGE;
    // ema_avg's Python scalars as torch multiplies them into fp32 tensors: decay, and 1 - decay taken in
    // double first.
    EmaControl ctl = {.mode = e->pending, .decay = (float)e->decay, .weight = (float)(1.0 - e->decay)};
    be->upload_async(be, e->ctl, &ctl, sizeof ctl);
}

void ema_apply(Ema *e, Backend *be, const Model *m) {
    if (!e->enabled) return;
    be->ema_update(be, m->params.padded_numel, e->params, m->master, e->ctl);
    be->ema_update(be, m->stats_numel, e->stats, m->running, e->ctl);
}

void ema_end_step(Ema *e, int in_warmup, int64_t tracked) {
    if (!e->enabled || e->pending == EMA_SKIP) return;
    if (e->pending == EMA_COPY) {
        e->num_batches_tracked = tracked;
    } else {
        // decay * avg + (1 - decay) * model on int64 tensors: each product in fp32, their fp32 sum, copied
        // back into the int64 buffer (truncated).
        const float a = (float)e->decay * (float)e->num_batches_tracked;
        const float b = (float)(1.0 - e->decay) * (float)tracked;
        e->num_batches_tracked = (int64_t)(a + b);
    }
    e->n_averaged = in_warmup ? 0 : e->n_averaged + 1;
    e->pending = EMA_SKIP;
}

void ema_sync_stats(Ema *e, const Model *m, Backend *be, Comm *comm) {
    if (e->enabled) evaluate_average_over_ranks(e->stats, m->stats_numel, be, comm);
}

// m's weights and statistics replaced by the average's (its compute copy too where it is the masters).
static void point_at_average(Model *m, const Ema *e) {
    m->master = e->params;
    m->running = e->stats;
    if (!m->amp) m->compute = e->params;
}

static void point_back(Model *m, const Model *raw) {
    m->master = raw->master;
    m->running = raw->running;
    m->compute = raw->compute;
}

EvalRecord ema_evaluate(Ema *e, Evaluator *ev, Model *m, Activations *act, Backend *be, Comm *comm, int epoch,
                        long step) {
    const Model raw = *m, raw_view = ev->view;
    if (m->amp) be->cast(be, m->compute, m->act_dt, e->params, DTYPE_F32, m->params.padded_numel);
    point_at_average(m, e);
    if (ev->own_side) point_at_average(&ev->view, e);
    EvalRecord r = evaluate_run(ev, m, act, be, comm, epoch, step);
    point_back(m, &raw);
    if (ev->own_side) point_back(&ev->view, &raw_view);
    model_refresh_compute(m, be);
    return r;
}

void ema_free(Ema *e, Backend *be) {
    if (!e->enabled) return;
    be->free(be, e->ctl);
    be->free(be, e->params);
    be->free(be, e->stats);
    memset(e, 0, sizeof *e);
}
