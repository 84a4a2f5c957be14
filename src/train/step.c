// step.c - one optimizer step (step.h): eager, or captured once and replayed as a graph.
#include "train/step.h"

#include "core/check.h"
#include "data/batch_mix.h"
#include "train/lr_schedule.h"
#include "train/trainer.h"

// The timing marks of a timed step on the compute stream (mark_record slots): the phases lie between them.
enum StepMark { MARK_STEP_START, MARK_GRADS_DONE, MARK_VERDICT_DONE, MARK_STEP_END };

static GradInjection injection_for(const Trainer *t) {
    const DebugConfig *d = &t->cfg->debug;
    GradInjection inj = {0};
    if (d->inject_step == t->step && (d->inject_rank < 0 || d->inject_rank == t->comm->rank)) {
        inj.active = 1;
        inj.value = d->inject_value;
    }
    return inj;
}

// Forward, loss and backward of one micro-batch; on the last one the bucket sums go out as backward
// produces them.
static void micro_step(Trainer *t, const ModelBatch *b, int step_total, int last, int accumulate,
                       GradInjection inj) {
    Backend *be = t->be;
    Model *m = &t->model;
    buckets_begin(&t->buckets, last, inj);
    model_forward(m, &t->act, be, b, 1);
    // Seed S / (samples of the whole step): after the sum over ranks (and micro-steps) the gradient is
    // S x the gradient of the global-batch mean loss.
    model_loss(m, &t->act, be, b, (float)t->cfg->train.label_smoothing, &t->scaler.state->scale,
               1.0f / (float)step_total);
    model_backward(m, &t->act, be, b, accumulate, buckets_on_grad_ready, &t->buckets);
}

// On the reduced gradients: the agreed verdict (local check of the reduced buffer, MAX over ranks, all on
// the device), the clip norm, SGD, the scaler and the EMA.
void trainer_apply_gradients(Trainer *t) {
    Backend *be = t->be;
    Model *m = &t->model;
    float *found_inf = &t->scaler.state->found_inf;
    be->nonfinite_check(be, m->act_dt, m->grads, m->params.padded_numel, found_inf);
    t->grad_comm->allreduce_max_flag(t->grad_comm, found_inf);
    t->grad_comm->wait(t->grad_comm);
    if (t->timed) be->mark_record(be, MARK_VERDICT_DONE);
    sgd_clip_norm(&t->opt, be, m, &t->scaler);
    sgd_step(&t->opt, be, m, &t->scaler);
    scaler_update(&t->scaler, be);
    ema_apply(&t->ema, be, m);
}

// After the gradients: the compute stream waits, device-side, for the sums in flight, then the update.
static void finish_step(Trainer *t) {
    buckets_finish(&t->buckets);  // a rank whose last micro-batch was empty still joins every sum
    t->grad_comm->wait(t->grad_comm);
    trainer_apply_gradients(t);
}

// What the host writes before a step: the learning rate and the EMA's decision.
static void plan_step(Trainer *t) {
    sgd_set_lr(&t->opt, t->be,
               (float)lr_at(&t->cfg->train, t->base_lr, t->step, t->steps_per_epoch, t->total_steps));
    ema_begin_step(&t->ema, t->be, t->step_in_epoch);
}

// The host's bookkeeping after a step.
static void end_step(Trainer *t) {
    ema_end_step(&t->ema, lr_in_warmup(&t->cfg->train, t->step), t->model.num_batches_tracked);
    t->step++;
}

// The whole step of one full micro-batch, the same sequence whether it runs or is being captured.
static void whole_step(Trainer *t, const ModelBatch *b, int step_total) {
    scaler_begin_step(&t->scaler, t->be);
    micro_step(t, b, step_total, 1, 0, (GradInjection){0});
    finish_step(t);
}

// A step can replay the graph when every rank runs the same full step: the global batch is full (the
// seed S / step_total is baked in), one micro-batch, no injection anywhere, no timing marks.
static int graph_eligible(const Trainer *t, const MicroBatch *mb, int n_micro) {
    const Sampler *s = &t->sampler;
    return t->graph.enabled && n_micro == 1 && !t->timed && t->cfg->debug.inject_step != t->step &&
           mb->count == t->act.max_batch && mb->step_total == s->batch * s->world * s->accum;
}

// An eligible step: the first runs as launches (cuDNN's search, workspaces), the second is captured (an op
// log takes the communicator's sums in their place), and from then on the graph is replayed.
static void graph_step(Trainer *t, const ModelBatch *b, int step_total) {
    Backend *be = t->be;
    StepGraph *g = &t->graph;
    if (!g->warm) {
        whole_step(t, b, step_total);
        g->warm = 1;
        return;
    }
    if (!g->exec) {
        be->graph_begin(be);
        struct OpLog *log = be->graph_log ? be->graph_log(be) : NULL;
        if (log) comm_record_into(t->grad_comm, log);
        whole_step(t, b, step_total);
        if (log) comm_record_into(t->grad_comm, NULL);
        g->exec = be->graph_end(be);
    }
    be->graph_launch(be, g->exec);
    g->replayed++;
}

// This step's MixUp/CutMix draws, one per micro-batch, written where batch_mix and softmax_xent read them:
// ordered on the compute stream before the step's work, like the learning rate (never inside a capture).
static void mix_upload(Trainer *t, int n_micro) {
    const DataConfig *d = &t->cfg->data;
    const int side = t->model.cfg.image_size;
    for (int k = 0; k < n_micro; k++)
        t->mix_host[k] = batch_mix_draw(d->mixup_alpha, d->cutmix_alpha, (uint64_t)t->cfg->train.seed,
                                        t->step, k, t->comm->rank, side, side);
    t->be->upload_async(t->be, t->mix, t->mix_host, (size_t)n_micro * sizeof(BatchMix));
}

// Micro-batch k of the step as the model takes it: staged, with its draw when mixing is on.
static ModelBatch stage_micro(Trainer *t, const MicroBatch *mb, int k) {
    ModelBatch b = input_stage(&t->input, &t->act, mb);
    b.mix = t->mix ? t->mix + k : NULL;
    return b;
}

// Whether a step of several micro-batches is voided: on every rank when any rank's feed gave none for one
// of them (missing: its wait ended by the run's stop). Each rank asks once per step, at its first missing
// micro-batch or before its last micro-step, whose gradient sums a rank that gave up would never join.
static int step_voided(Trainer *t, int missing) {
    float flag = (float)missing;
    if (t->comm->size > 1) t->comm->allreduce_max_flag(t->comm, &flag);
    return flag != 0;
}

int trainer_step(Trainer *t, MicroBatchFn next, void *ctx, int n_micro) {
    Backend *be = t->be;
    Model *m = &t->model;
    // the mix draws and running_kept are sized for train.accum_steps
    AMP_ASSERT(n_micro >= 1 && n_micro <= t->cfg->train.accum_steps,
               "a step of %d micro-batches, %d configured", n_micro, t->cfg->train.accum_steps);
    plan_step(t);
    if (t->mix) mix_upload(t, n_micro);
    const MicroBatch *first = next(ctx, 0);
    AMP_ASSERT(first, "a step without its first micro-batch");
    if (graph_eligible(t, first, n_micro)) {
        ModelBatch b = stage_micro(t, first, 0);
        graph_step(t, &b, first->step_total);
        m->num_batches_tracked++;
        end_step(t);
        return 1;
    }
    int wrote_grads = 0;
    if (t->timed) be->mark_record(be, MARK_STEP_START);
    scaler_begin_step(&t->scaler, be);
    // A voided step leaves the state a checkpoint holds as it was: the micro-steps' forward passes moved
    // the BN running statistics and their count, and only those.
    const int64_t tracked = m->num_batches_tracked;
    const size_t stats_bytes = m->stats_numel * sizeof(float);
    if (n_micro > 1) be->copy(be, t->running_kept, m->running, stats_bytes);
    for (int k = 0; k < n_micro; k++) {
        const MicroBatch *mb = k == 0 ? first : next(ctx, k);
        if (n_micro > 1 && (!mb || k == n_micro - 1) && step_voided(t, !mb)) {
            be->copy(be, m->running, t->running_kept, stats_bytes);
            m->num_batches_tracked = tracked;
            return 0;
        }
        if (mb->count == 0) {
            buckets_begin(&t->buckets, k == n_micro - 1, injection_for(t));
            continue;
        }
        ModelBatch b = stage_micro(t, mb, k);
        micro_step(t, &b, mb->step_total, k == n_micro - 1, wrote_grads, injection_for(t));
        m->num_batches_tracked++;
        wrote_grads = 1;
    }
    if (t->timed) be->mark_record(be, MARK_GRADS_DONE);
    if (!wrote_grads) be->zero(be, m->grads, m->params.padded_numel * dtype_size(m->act_dt));
    finish_step(t);
    if (t->timed) be->mark_record(be, MARK_STEP_END);
    end_step(t);
    return 1;
}

StepPhases trainer_step_phases(Trainer *t) {
    Backend *be = t->be;
    return (StepPhases){.compute_ms = be->mark_elapsed_ms(be, MARK_STEP_START, MARK_GRADS_DONE),
                        .exposed_comm_ms = be->mark_elapsed_ms(be, MARK_GRADS_DONE, MARK_VERDICT_DONE),
                        .optimizer_ms = be->mark_elapsed_ms(be, MARK_VERDICT_DONE, MARK_STEP_END)};
}

static const MicroBatch *array_micro(void *ctx, int k) { return (const MicroBatch *)ctx + k; }

void trainer_step_array(Trainer *t, const MicroBatch *micro, int n_micro) {
    trainer_step(t, array_micro, (void *)micro, n_micro);
}
