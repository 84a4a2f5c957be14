#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "dist/agree.h"
#include "data/loader.h"
#include "train/decode_feed.h"
#include "train/lr_schedule.h"
#include "train/outputs.h"

// ---- set-up ---------------------------------------------------------------------------------------

static long total_steps_of(const Config *cfg, int steps_per_epoch) {
    long by_epochs = (long)cfg->train.epochs * steps_per_epoch;
    return cfg->train.steps > 0 && cfg->train.steps < by_epochs ? cfg->train.steps : by_epochs;
}

// Every step must be trainable. With data.drop_last an epoch shorter than one global batch has no step.
// Batch norm in training needs two values per channel, and a 1x1 last stage has one per image: the
// partial last step of an epoch must not hand any rank exactly one image. Refused at start-up, with
// what to change, rather than at the end of the first epoch.
static int check_epoch_split(const Trainer *t, char *err, size_t cap) {
    const Sampler *s = &t->sampler;
    long global = (long)s->batch * s->world * s->accum;
    if (t->steps_per_epoch == 0 && s->repeats > 1) {
        snprintf(err, cap, "data.repeated_aug: an epoch of repeated augmentation reads floor(%d / 256) x 256 = %d "
                 "samples (torchvision's RASampler), %s", s->size, s->epoch_size,
                 s->epoch_size ? "less than one global batch" : "none: the dataset needs at least 256 samples");
        return 2;
    }
    if (t->steps_per_epoch == 0) {
        snprintf(err, cap, "data.drop_last: an epoch of %d samples is shorter than one global batch "
                 "(data.batch_size %d x %d ranks x train.accum_steps %d = %ld), so no step would run",
                 s->epoch_size, s->batch, s->world, s->accum, global);
        return 2;
    }
    if (t->model.final_hw > 1) return 0;
    if (s->batch == 1) {
        snprintf(err, cap, "data.batch_size 1: batch norm in training needs two values per channel and the last "
                 "stage is 1x1 at model.image_size %d; use data.batch_size 2 or more", t->model.cfg.image_size);
        return 2;
    }
    if (t->total_steps < t->steps_per_epoch) return 0;  // the run ends before the epoch's last step
    int last = t->steps_per_epoch - 1;
    for (int m = 0; m < s->accum; m++)
        for (int r = 0; r < s->world; r++)
            if (sampler_block_count(s, last, m, r) == 1) {
                snprintf(err, cap, "an epoch of %d samples with data.batch_size %d x %d ranks x train.accum_steps "
                         "%d ends in a step that gives rank %d one image, and batch norm in training needs two "
                         "values per channel (the last stage is 1x1 at model.image_size %d): set "
                         "data.drop_last: true (each epoch then skips its last %ld samples), or change data.batch_size",
                         s->epoch_size, s->batch, s->world, s->accum, r, t->model.cfg.image_size,
                         s->epoch_size - (long)last * global);
                return 2;
            }
    return 0;
}

int trainer_init(Trainer *t, const Config *cfg, Backend *be, Comm *comm, Comm *grad_comm) {
    memset(t, 0, sizeof *t);
    t->init_start = clock_seconds();
    t->cfg = cfg, t->be = be, t->comm = comm, t->grad_comm = grad_comm;
    // Each stage ends in an agreement (dist/agree.h): a rank that failed, and every other, return here.
    char err[AGREE_MESSAGE_MAX] = "";
    int rc = dataset_open_train(&cfg->data, &cfg->model, cfg->train.seed, cfg->checkpoint.dir, &t->train_set, err, sizeof err);
    if (rc == 0) rc = dataset_open_val(&cfg->data, &cfg->model, cfg->train.seed, cfg->checkpoint.dir, &t->val_set, err, sizeof err);
    if (rc == 0 && (t->device_decode = dataset_decode_on_device(&cfg->data, be, err, sizeof err)) < 0) rc = 2;
    if ((rc = agree_startup(comm, rc ? 2 : 0, err)) != 0) return rc;
    if (t->device_decode)
        log_info("training JPEGs decoded by the %s backend (data.decode %s)", be->name, cfg->data.decode);
    sampler_init(&t->sampler, t->train_set->size, cfg->data.batch_size, comm->size, comm->rank,
                 cfg->train.accum_steps, cfg->data.drop_last, cfg->train.seed);
    sampler_set_repeats(&t->sampler, cfg->data.repeated_aug);
    t->steps_per_epoch = sampler_steps_per_epoch(&t->sampler);
    t->total_steps = total_steps_of(cfg, t->steps_per_epoch);
    t->base_lr = lr_base(&cfg->train, cfg->data.batch_size * comm->size * cfg->train.accum_steps);

    ModelConfig at_train_side = cfg->model;
    at_train_side.image_size = t->train_set->side;
    model_init_shapes(&t->model, &at_train_side, cfg->amp.enabled);
    if ((rc = agree_startup(comm, check_epoch_split(t, err, sizeof err), err)) != 0) return rc;
    // auto: graphs where the backend captures natively (CUDA); on: also the CPU's op-log emulation
    // (cpu_graph.c), which runs the same path for the tests.
    int native = be->graph_begin != NULL && be->graph_log == NULL;
    t->graphs = be->graph_begin != NULL &&
                (!strcmp(cfg->train.cuda_graph, "on") || (!strcmp(cfg->train.cuda_graph, "auto") && native));
    t->choices_s = model_alloc_and_prepare(&t->model, be, (uint64_t)cfg->train.seed, cfg->data.batch_size);
    t->build_s = clock_seconds() - t->init_start - t->choices_s;  // the weights' draw beside the choices too
    t->eval_at_own_side = t->val_set && t->val_set->side != t->train_set->side;
    if (t->eval_at_own_side) {
        model_view_at_side(&t->eval_model, &t->model, t->val_set->side);
        t->act.reserve_bytes = activations_arena_bytes(&t->eval_model, cfg->data.batch_size);
    }
    activations_alloc(&t->act, &t->model, be, cfg->data.batch_size);
    if (t->eval_at_own_side) activations_share(&t->eval_act, &t->eval_model, cfg->data.batch_size, &t->act);
    t->affine = pixel_affine_of(&t->train_set->norm);
    size_t image_bytes = (size_t)cfg->data.batch_size * dataset_image_bytes(t->train_set);
    for (int s = 0; s < BACKEND_INPUT_SLOTS; s++) {
        t->input_slot[s] = be->alloc(be, image_bytes);
        t->input_slot_labels[s] = be->alloc(be, (size_t)cfg->data.batch_size * sizeof(int32_t));
    }
    if (t->device_decode) t->decode_failed = xcalloc((size_t)cfg->data.batch_size, 1);
    scaler_init(&t->scaler, be, &cfg->amp);
    sgd_init(&t->opt, be, &t->model, &cfg->train);
    buckets_init(&t->buckets, &t->model, be, grad_comm, cfg->dist.first_bucket_mb, cfg->dist.bucket_mb);
    t->readback = be->host_alloc(be, sizeof(float) + sizeof(ScalerState));

    if (cfg->checkpoint.resume[0]) {
        rc = checkpoint_load(t, cfg->checkpoint.resume, err, sizeof err) != 0 ? 2 : 0;
        if ((rc = agree_startup(comm, rc, err)) != 0 || (rc = checkpoint_agree_resumed(t)) != 0) return rc;
        log_info("resumed from %s at epoch %d, step %ld", cfg->checkpoint.resume, t->epoch, t->step);
        // The run ends with train.epochs: steps counted at another global batch may leave fewer to go
        // than train.epochs x steps_per_epoch - step.
        long left = (long)(cfg->train.epochs - t->epoch) * t->steps_per_epoch - t->step_in_epoch;
        if (t->total_steps > t->step + left) t->total_steps = t->step + (left > 0 ? left : 0);
    }
    rc = comm->rank == 0 ? outputs_prepare(cfg, 0, err, sizeof err) : 0;
    if (rc == 0)
        rc = metrics_open(&t->metrics, &cfg->log, comm->rank, comm->size, t->total_steps, cfg->checkpoint.resume[0] != 0,
                          err, sizeof err);
    if ((rc = agree_startup(comm, rc, err)) != 0) return rc;
    // The data was opened before checkpoint.dir existed on a fresh run: its file lists are cached now.
    dataset_save_cache(t->train_set, cfg->checkpoint.dir);
    dataset_save_cache(t->val_set, cfg->checkpoint.dir);
    return 0;
}

void trainer_free(Trainer *t) {
    metrics_close(&t->metrics);
    if (t->graph) t->be->graph_destroy(t->be, t->graph);
    for (int s = 0; s < BACKEND_INPUT_SLOTS; s++) {
        if (t->input_slot[s]) t->be->free(t->be, t->input_slot[s]), t->be->free(t->be, t->input_slot_labels[s]);
        if (t->repair_images[s]) t->be->host_free(t->be, t->repair_images[s]);
        if (t->repair_labels[s]) t->be->host_free(t->be, t->repair_labels[s]);
    }
    free(t->decode_failed);
    if (t->eval_at_own_side) activations_free(&t->eval_act, t->be), model_view_free(&t->eval_model);
    if (t->act.arena) activations_free(&t->act, t->be);
    if (t->readback) t->be->host_free(t->be, t->readback);
    buckets_free(&t->buckets);
    sgd_free(&t->opt, t->be);
    scaler_free(&t->scaler, t->be);
    model_free(&t->model, t->be);
    sampler_free(&t->sampler);
    if (t->train_set) dataset_close(t->train_set);
    if (t->val_set) dataset_close(t->val_set);
    memset(t, 0, sizeof *t);
}

// ---- the step -------------------------------------------------------------------------------------


void trainer_upload(Trainer *t, int slot, const uint8_t *images, const int32_t *labels, int count) {
    Backend *be = t->be;
    size_t image_bytes = (size_t)count * dataset_image_bytes(t->train_set);
    be->input_upload(be, slot, t->input_slot[slot], images, image_bytes);
    be->input_upload(be, slot, t->input_slot_labels[slot], labels, (size_t)count * sizeof(int32_t));
}

void trainer_decode(Trainer *t, int slot, const ImageJob *jobs, const int32_t *indices, const int32_t *labels,
                    int count, int epoch) {
    Backend *be = t->be;
    const size_t bytes = dataset_image_bytes(t->train_set);
    be->input_decode(be, slot, t->input_slot[slot], count, t->train_set->side, jobs, t->decode_failed);
    for (int k = 0; k < count; k++) {
        if (!t->decode_failed[k]) continue;
        if (!t->repair_images[slot]) {  // the first failure of this slot: its buffers
            t->repair_images[slot] = be->host_alloc(be, (size_t)t->cfg->data.batch_size * bytes);
            t->repair_labels[slot] = be->host_alloc(be, (size_t)t->cfg->data.batch_size * sizeof(int32_t));
        }
        if (labels != t->repair_labels[slot]) {
            memcpy(t->repair_labels[slot], labels, (size_t)count * sizeof(int32_t));
            labels = t->repair_labels[slot];
        }
        uint8_t *row = t->repair_images[slot] + (size_t)k * bytes;
        dataset_replace_failed(t->train_set, indices[k], &jobs[k], epoch, "the device decoder refused it", row,
                               &t->repair_labels[slot][k]);
        be->input_upload(be, slot, t->input_slot[slot] + (size_t)k * bytes, row, bytes);
    }
    be->input_upload(be, slot, t->input_slot_labels[slot], labels, (size_t)count * sizeof(int32_t));
}

// Puts micro-batch mb where the step reads it and says so as a ModelBatch. Raw bytes end up in the
// static act.images / act.labels (the graph's fixed addresses): from an input slot (the compute stream
// takes the slot from the copy stream, copies, and hands it back) or from resident backend memory.
// fp32 images (tests) are read where they are.
static ModelBatch stage_batch(Trainer *t, const MicroBatch *mb) {
    Backend *be = t->be;
    ModelBatch b = {.images = t->act.images, .images_dt = DTYPE_U8, .affine = t->affine, .labels = t->act.labels,
                    .n = mb->count};
    size_t image_bytes = (size_t)mb->count * dataset_image_bytes(t->train_set);
    size_t label_bytes = (size_t)mb->count * sizeof(int32_t);
    if (mb->host_images || mb->uploaded) {
        int slot = mb->uploaded ? mb->slot : 0;
        if (!mb->uploaded) trainer_upload(t, slot, mb->host_images, mb->host_labels, mb->count);
        be->input_acquire(be, slot);
        be->copy(be, t->act.images, t->input_slot[slot], image_bytes);
        be->copy(be, t->act.labels, t->input_slot_labels[slot], label_bytes);
        be->input_release(be, slot);
        if (!mb->uploaded) be->input_upload_wait(be, slot);  // the caller may reuse its buffer on return
    } else if (mb->device_dt == DTYPE_F32) {
        b.images = mb->device_images, b.images_dt = DTYPE_F32, b.affine = pixel_affine_identity();
        b.labels = mb->device_labels;
    } else {
        be->copy(be, t->act.images, mb->device_images, image_bytes);
        be->copy(be, t->act.labels, mb->device_labels, label_bytes);
    }
    return b;
}

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
    model_loss(m, &t->act, be, b, &t->scaler.state->scale, 1.0f / (float)step_total);
    model_backward(m, &t->act, be, b, accumulate, buckets_on_grad_ready, &t->buckets);
}

// After the gradients: the agreed verdict (local check of the reduced buffer, MAX over ranks, all on the
// device; the compute stream first waits, device-side, for the sums in flight), then SGD and the scaler.
static void finish_step(Trainer *t) {
    Backend *be = t->be;
    Model *m = &t->model;
    buckets_finish(&t->buckets);  // a rank whose last micro-batch was empty still joins every sum
    t->grad_comm->wait(t->grad_comm);
    float *found_inf = &t->scaler.state->found_inf;
    be->nonfinite_check(be, m->act_dt, m->grads, m->params.padded_numel, found_inf);
    t->grad_comm->allreduce_max_flag(t->grad_comm, found_inf);
    t->grad_comm->wait(t->grad_comm);
    if (t->timed) be->mark_record(be, 2);
    sgd_step(&t->opt, be, m, &t->scaler);
    scaler_update(&t->scaler, be);
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
    return t->graphs && n_micro == 1 && !t->timed && t->cfg->debug.inject_step != t->step &&
           mb->count == t->act.max_batch && mb->step_total == s->batch * s->world * s->accum;
}

// An eligible step: the first runs as launches (cuDNN's search, workspaces), the second is captured (an op
// log takes the communicator's sums in their place), and from then on the graph is replayed.
static void graph_step(Trainer *t, const ModelBatch *b, int step_total) {
    Backend *be = t->be;
    if (!t->graph_warm) {
        whole_step(t, b, step_total);
        t->graph_warm = 1;
        return;
    }
    if (!t->graph) {
        be->graph_begin(be);
        struct OpLog *log = be->graph_log ? be->graph_log(be) : NULL;
        if (log) comm_record_into(t->grad_comm, log);
        whole_step(t, b, step_total);
        if (log) comm_record_into(t->grad_comm, NULL);
        t->graph = be->graph_end(be);
    }
    be->graph_launch(be, t->graph);
    t->graph_steps++;
}

void trainer_step(Trainer *t, MicroBatchFn next, void *ctx, int n_micro) {
    Backend *be = t->be;
    Model *m = &t->model;
    sgd_set_lr(&t->opt, be, (float)lr_at(&t->cfg->train, t->base_lr, (int)t->step, t->steps_per_epoch,
                                         (int)t->total_steps));
    const MicroBatch *first = next(ctx, 0);
    if (graph_eligible(t, first, n_micro)) {
        ModelBatch b = stage_batch(t, first);
        graph_step(t, &b, first->step_total);
        m->num_batches_tracked++;
        t->step++;
        return;
    }
    int wrote_grads = 0;
    if (t->timed) be->mark_record(be, 0);
    scaler_begin_step(&t->scaler, be);
    for (int k = 0; k < n_micro; k++) {
        const MicroBatch *mb = k == 0 ? first : next(ctx, k);
        if (mb->count == 0) {
            buckets_begin(&t->buckets, k == n_micro - 1, injection_for(t));
            continue;
        }
        ModelBatch b = stage_batch(t, mb);
        micro_step(t, &b, mb->step_total, k == n_micro - 1, wrote_grads, injection_for(t));
        m->num_batches_tracked++;
        wrote_grads = 1;
    }
    if (t->timed) be->mark_record(be, 1);
    if (!wrote_grads) be->zero(be, m->grads, m->params.padded_numel * dtype_size(m->act_dt));
    finish_step(t);
    if (t->timed) be->mark_record(be, 3);
    t->step++;
}

StepPhases trainer_step_phases(Trainer *t) {
    Backend *be = t->be;
    return (StepPhases){.compute_ms = be->mark_elapsed_ms(be, 0, 1),
                        .exposed_comm_ms = be->mark_elapsed_ms(be, 1, 2),
                        .optimizer_ms = be->mark_elapsed_ms(be, 2, 3)};
}

static const MicroBatch *array_micro(void *ctx, int k) { return (const MicroBatch *)ctx + k; }

void trainer_step_array(Trainer *t, const MicroBatch *micro, int n_micro) {
    trainer_step(t, array_micro, (void *)micro, n_micro);
}

// ---- evaluation and BN statistics -------------------------------------------------------------------

void trainer_sync_bn_stats(Trainer *t) {
    if (t->comm->size == 1) return;
    Model *m = &t->model;
    size_t bytes = m->stats_numel * sizeof(float);
    float *host = xcalloc(m->stats_numel, sizeof(float));
    t->be->to_host(t->be, host, m->running, bytes);
    t->comm->allreduce_sum(t->comm, host, m->stats_numel, DTYPE_F32);
    for (size_t i = 0; i < m->stats_numel; i++) host[i] /= (float)t->comm->size;
    t->be->to_device(t->be, m->running, host, bytes);
    free(host);
}

int trainer_last_epoch(const Trainer *t) {
    // After an epoch's last step the position has already moved to (epoch + 1, 0).
    return t->step_in_epoch == 0 ? t->epoch : t->epoch + 1;
}

// Top-1 and top-5 hits of one row of logits.
// A row with a NaN logit ranks nothing (NaN compares false both ways, so it would count as a hit):
// it is a miss.
static void count_hits(const float *row, int classes, int label, double *top1, double *top5) {
    for (int c = 0; c < classes; c++)
        if (isnan(row[c])) return;
    int better = 0;
    for (int c = 0; c < classes; c++)
        if (row[c] > row[label] || (row[c] == row[label] && c < label)) better++;
    *top1 += better == 0;
    *top5 += better < 5;
}

EvalRecord trainer_evaluate(Trainer *t) {
    EvalRecord r = {.epoch = trainer_last_epoch(t), .step = t->step};
    if (!t->val_set) return r;
    trainer_sync_bn_stats(t);
    Model *m = t->eval_at_own_side ? &t->eval_model : &t->model;
    Activations *act = t->eval_at_own_side ? &t->eval_act : &t->act;
    Backend *be = t->be;
    int b = act->max_batch, classes = m->cfg.num_classes, world = t->comm->size;
    size_t image_bytes = dataset_image_bytes(t->val_set);
    uint8_t *images = xcalloc((size_t)b * image_bytes, 1);
    int32_t *labels = xcalloc((size_t)b, sizeof(int32_t)), *indices = xcalloc((size_t)b, sizeof(int32_t));
    float *logits_host = xcalloc((size_t)b * classes, sizeof(float));
    float *logits_f32 = be->alloc(be, (size_t)b * classes * sizeof(float));
    double sums[4] = {0};  // loss*count, top1, top5, count
    const PixelAffine affine = pixel_affine_of(&t->val_set->norm);
    for (int first = t->comm->rank; first < t->val_set->size;) {
        int count = 0;
        for (; count < b && first < t->val_set->size; first += world) indices[count++] = first;
        dataset_get_batch(t->val_set, indices, count, 0, images, labels);
        be->to_device(be, act->images, images, (size_t)count * image_bytes);
        be->to_device(be, act->labels, labels, (size_t)count * sizeof(int32_t));
        ModelBatch batch = {.images = act->images, .images_dt = DTYPE_U8, .affine = affine,
                            .labels = act->labels, .n = count};
        model_forward(m, act, be, &batch, 0);
        model_loss(m, act, be, &batch, NULL, 0.0f);
        float loss;
        be->to_host(be, &loss, act->loss, sizeof loss);
        be->cast(be, logits_f32, DTYPE_F32, act->logits, m->act_dt, (size_t)count * classes);
        be->to_host(be, logits_host, logits_f32, (size_t)count * classes * sizeof(float));
        sums[0] += (double)loss * count;
        for (int i = 0; i < count; i++) count_hits(logits_host + (size_t)i * classes, classes, labels[i], &sums[1], &sums[2]);
        sums[3] += count;
    }
    float sums32[4] = {(float)sums[0], (float)sums[1], (float)sums[2], (float)sums[3]};
    t->comm->allreduce_sum(t->comm, sums32, 4, DTYPE_F32);
    r.samples = (long)sums32[3];
    if (r.samples > 0) r.loss = sums32[0] / sums32[3], r.top1 = sums32[1] / sums32[3], r.top5 = sums32[2] / sums32[3];
    be->free(be, logits_f32);
    free(images), free(labels), free(indices), free(logits_host);
    return r;
}

// ---- the loop ------------------------------------------------------------------------------------

// Log records travel one interval behind the training: at a logging step the loss and the scaler state
// are copied back asynchronously, and the record is completed and printed at the next logging step (or
// before an evaluation, a checkpoint, the end), so the step never waits for the device.
static void log_flush(Trainer *t) {
    if (!t->log_pending) return;
    t->be->readback_wait(t->be);
    ScalerState st;
    memcpy(&st, t->readback + 1, sizeof st);
    StepRecord r = t->pending_log;
    r.loss = t->readback[0];
    r.scale = st.scale;
    r.skipped_total = st.skipped_total;
    r.skipped = st.found_inf != 0;
    t->last_loss = r.loss;
    metrics_step(&t->metrics, &r);
    t->log_pending = 0;
}

static void log_step(Trainer *t, int force) {
    const LogConfig *log = &t->cfg->log;
    if (!force && t->step % log->every != 0 && t->step != 1 && t->step != t->total_steps) return;
    log_flush(t);
    Backend *be = t->be;
    be->readback_begin(be, t->readback, t->act.loss, sizeof(float));
    be->readback_begin(be, t->readback + 1, t->scaler.state, sizeof(ScalerState));
    double now = clock_seconds();
    long steps = t->step - t->last_log_step;
    long global_batch = (long)t->cfg->data.batch_size * t->comm->size * t->cfg->train.accum_steps;
    t->pending_log = (StepRecord){
        .step = t->step,
        .epoch = trainer_last_epoch(t),
        .lr = lr_at(&t->cfg->train, t->base_lr, (int)t->step - 1, t->steps_per_epoch, (int)t->total_steps),
        .images_per_s = steps > 0 ? steps * global_batch / (now - t->last_log_time) : 0,
        .step_ms = steps > 0 ? 1e3 * (now - t->last_log_time) / steps : 0,
        .memory_mib = be->peak_bytes(be) / 1048576.0,
        .data_wait_ms = steps > 0 ? 1e3 * t->data_wait_s / steps : 0,
    };
    t->data_wait_total_s += t->data_wait_s;
    t->data_wait_s = 0;
    t->log_pending = 1;
    t->last_log_step = t->step;
    t->last_log_time = now;
}

static void save_checkpoint(Trainer *t, const char *tag) {
    const char *dir = t->cfg->checkpoint.dir;
    if (!dir[0]) return;
    log_flush(t);
    trainer_sync_bn_stats(t);
    if (t->comm->rank != 0) return;
    char path[CONFIG_PATH_MAX + 64], err[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, tag);
    if (checkpoint_save(t, path, err, sizeof err) != 0) amp_fatal(__FILE__, __LINE__, "%s", err);
    metrics_note(&t->metrics, "checkpoint written: %s (step %ld)", path, t->step);
}

// Why every rank stops after this step, the same on all: 0 none, STOP_SIGNAL (SIGTERM/SIGINT on any
// rank), STOP_METRICS_FAILED (rank 0 cannot write the metrics file: it wins, the run then fails).
enum { STOP_SIGNAL = 1, STOP_METRICS_FAILED = 2 };
static int agreed_stop(Trainer *t, volatile sig_atomic_t *stop) {
    float flag = metrics_failed(&t->metrics) ? STOP_METRICS_FAILED : stop && *stop ? STOP_SIGNAL : 0;
    if (t->comm->size > 1) t->comm->allreduce_max_flag(t->comm, &flag);
    return (int)flag;
}

// Feeds trainer_step from the loader, one batch ahead: while step k runs, batch k+1 is already on its way
// up on the copy stream (trainer_upload into the next input slot). A loader buffer is handed back (by
// taking the next batch) only after its upload has left it. With data.decode on the device the decode
// thread (decode_feed.h) makes the batches instead.
typedef struct LoaderFeed {
    Trainer *t;
    Loader *loader;
    DecodeFeed *decode;     // the decode thread, or NULL: raw bytes uploaded from here
    const Batch *ahead;     // the next batch, uploaded into slot `ahead_slot`; NULL at the end
    int ahead_slot;
    MicroBatch current;
} LoaderFeed;

// decode_feed's DecodeBatchFn: trainer_decode on one of the loader's batches.
static void decode_loader_batch(void *trainer, int slot, const Batch *b) {
    trainer_decode(trainer, slot, b->jobs, b->indices, b->labels, b->count, b->epoch);
}

static void feed_advance(LoaderFeed *f) {
    if (f->decode) return;  // the decode thread works ahead by itself
    if (f->ahead) f->t->be->input_upload_wait(f->t->be, f->ahead_slot);
    f->ahead = loader_next(f->loader, &f->t->data_wait_s);
    f->ahead_slot = (f->ahead_slot + 1) % BACKEND_INPUT_SLOTS;
    if (f->ahead) trainer_upload(f->t, f->ahead_slot, f->ahead->images, f->ahead->labels, f->ahead->count);
}

// The batch uploaded (or decoded) ahead is this micro-batch; the next one starts up right away
// (accumulation), or after the step was launched (feed_advance in trainer_run).
static const MicroBatch *loader_micro(void *ctx, int k) {
    LoaderFeed *f = ctx;
    if (f->decode) {
        const MicroBatch *mb = decode_feed_next(f->decode, &f->t->data_wait_s);
        AMP_ASSERT(mb, "the loader ran out of batches inside a step");
        f->current = *mb;
        return &f->current;
    }
    if (k > 0) feed_advance(f);
    const Batch *b = f->ahead;
    AMP_ASSERT(b, "the loader ran out of batches inside a step");
    f->current = (MicroBatch){.count = b->count, .step_total = b->step_total, .host_images = b->images,
                              .host_labels = b->labels, .uploaded = 1, .slot = f->ahead_slot};
    return &f->current;
}

int trainer_run(Trainer *t, volatile sig_atomic_t *stop) {
    const Config *cfg = t->cfg;
    double start = clock_seconds();
    t->last_log_time = start;
    t->last_log_step = t->step;
    t->first_step = t->step;
    int stopped = 0;
    LoaderFeed feed = {.t = t, .ahead_slot = BACKEND_INPUT_SLOTS - 1};
    if (t->step < t->total_steps) {
        feed.loader = loader_create(t->train_set, &t->sampler, t->device_decode ? LOADER_JOBS : LOADER_PIXELS,
                                    cfg->data.prefetch, cfg->data.workers > 0 ? cfg->data.workers : loader_auto_workers(t->comm->local_size),
                                    t->epoch, t->step_in_epoch, cfg->train.epochs, t->be);
        if (t->device_decode)
            feed.decode = decode_feed_start(t->be, feed.loader, decode_loader_batch, t);
        else
            feed_advance(&feed);
    }
    while (t->step < t->total_steps) {
        comm_note_step(t->step + 1);  // named by a collective that times out in this step or after it
        trainer_step(t, loader_micro, &feed, cfg->train.accum_steps);
        feed_advance(&feed);
        t->images_seen += feed.current.step_total;
        // Start-up ends with the first step (cuDNN's search), or with the second when it captures the graph.
        if (t->startup_s == 0 && t->step - t->first_step >= (t->graphs ? 2 : 1)) {
            t->be->sync(t->be);
            t->steady_start = clock_seconds();
            t->startup_s = t->steady_start - t->init_start;
            t->steady_images = t->images_seen;
        }
        if (++t->step_in_epoch == t->steps_per_epoch) t->step_in_epoch = 0, t->epoch++;
        log_step(t, 0);
        if (t->step_in_epoch == 0 && t->val_set) {
            log_flush(t);
            t->last_eval = trainer_evaluate(t);
            t->has_eval = 1;
            metrics_eval(&t->metrics, &t->last_eval);
        }
        if (cfg->checkpoint.every > 0 && t->step % cfg->checkpoint.every == 0 && t->step < t->total_steps)
            save_checkpoint(t, "last");
        if ((stopped = agreed_stop(t, stop)) != 0) break;
    }
    t->be->sync(t->be);  // the last upload has left the loader's buffers, the last step is done
    double end = clock_seconds();
    decode_feed_stop(feed.decode);
    if (feed.loader) loader_destroy(feed.loader);
    t->train_seconds = end - start;
    t->total_seconds = end - t->init_start;
    if (t->startup_s > 0 && end > t->steady_start)
        t->steady_images_per_s = (double)(t->images_seen - t->steady_images) / (end - t->steady_start);
    if (t->step > t->first_step && t->step != t->last_log_step) log_step(t, 1);
    log_flush(t);
    save_checkpoint(t, "last");
    if (stopped == STOP_SIGNAL) metrics_note(&t->metrics, "stopped by signal after step %ld", t->step);
    // The last records were written after the loop's last agreement: agree once more.
    if (agreed_stop(t, NULL) == STOP_METRICS_FAILED) {
        metrics_note(&t->metrics, "stopped after step %ld: the metrics file cannot be written", t->step);
        return 1;
    }
    return 0;
}
