#include "train/trainer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/autocast.h"
#include "train/checkpoint.h"
#include "checkpoint/model_file.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/kernel_cache.h"
#include "core/log.h"
#include "dist/agree.h"
#include "data/loader.h"
#include "train/history.h"
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
        snprintf(err, cap,
                 "data.repeated_aug: an epoch of repeated augmentation reads floor(%d / 256) x 256 = %d "
                 "samples (torchvision's RASampler), %s",
                 s->size, s->epoch_size,
                 s->epoch_size ? "less than one global batch"
                               : "none: the dataset needs at least 256 samples");
        return 2;
    }
    if (t->steps_per_epoch == 0) {
        snprintf(err, cap,
                 "data.drop_last: an epoch of %d samples is shorter than one global batch "
                 "(data.batch_size %d x %d ranks x train.accum_steps %d = %ld), so no step would run",
                 s->epoch_size, s->batch, s->world, s->accum, global);
        return 2;
    }
    if (t->model.final_hw > 1) return 0;
    if (s->batch == 1) {
        snprintf(err, cap,
                 "data.batch_size 1: batch norm in training needs two values per channel and the last "
                 "stage is 1x1 at model.image_size %d; use data.batch_size 2 or more",
                 t->model.cfg.image_size);
        return 2;
    }
    if (t->total_steps < t->steps_per_epoch) return 0;  // the run ends before the epoch's last step
    int last = t->steps_per_epoch - 1;
    for (int m = 0; m < s->accum; m++)
        for (int r = 0; r < s->world; r++)
            if (sampler_block_count(s, last, m, r) == 1) {
                snprintf(
                    err, cap,
                    "an epoch of %d samples with data.batch_size %d x %d ranks x train.accum_steps "
                    "%d ends in a step that gives rank %d one image, and batch norm in training needs two "
                    "values per channel (the last stage is 1x1 at model.image_size %d): set "
                    "data.drop_last: true (each epoch then skips its last %ld samples), or change data.batch_size",
                    s->epoch_size, s->batch, s->world, s->accum, r, t->model.cfg.image_size,
                    s->epoch_size - (long)last * global);
                return 2;
            }
    return 0;
}

// A checkpoint kept when a run diverged may hold a loss scale below amp.min_scale: the resumed run (with a
// lower train.lr, say) starts from amp.init_scale instead of stopping at its first record.
static void restart_fallen_scale(Trainer *t) {
    const AmpConfig *amp = &t->cfg->amp;
    ScalerState st = scaler_read(&t->scaler, t->be);
    if (!amp->enabled || !amp->dynamic || !(st.scale < amp->min_scale)) return;
    log_warn("%s: the loss scale %g is below amp.min_scale %g; it restarts at amp.init_scale %g",
             t->cfg->checkpoint.resume, st.scale, amp->min_scale, amp->init_scale);
    st.scale = (float)amp->init_scale;
    st.growth_count = 0;
    st.skipped_run = 0;
    scaler_write(&t->scaler, t->be, &st);
}

int trainer_agree_data(Comm *comm, const Dataset *train, const Dataset *val) {
    char values[4][32];
    snprintf(values[0], sizeof values[0], "%d", train ? train->size : 0);
    snprintf(values[1], sizeof values[1], "%d", val ? val->size : 0);
    dataset_digest(train, values[2]);
    dataset_digest(val, values[3]);
    const char *names[] = {"the training sample count", "the validation sample count",
                           "the digest of the training samples", "the digest of the validation samples"};
    const char *list[] = {values[0], values[1], values[2], values[3]};
    return agree_same(comm, "the data", 4, names, list);
}

// data.workers, or the CPUs this host's ranks may use shared among them (loader_auto_workers).
static int trainer_loader_threads(const Config *cfg, const Comm *comm) {
    return cfg->data.workers > 0 ? cfg->data.workers
                                 : loader_auto_workers(comm->local_cpus, comm->local_size);
}

// model.init on a fresh start: the file's weights and BN statistics over the drawn ones (a classifier of
// another class count keeps its draw), read by every rank and agreed; momentum, the scaler and the position
// start fresh.
static int init_from_file(Trainer *t) {
    const char *path = t->cfg->model.init;
    char err[AGREE_MESSAGE_MAX] = "";
    ModelFile mf;
    int rc = agree_startup(t->comm,
                           model_file_read("model.init", path, &t->model, 1, 0, &mf, err, sizeof err), err);
    if (rc == 0) rc = model_file_agree(t->comm, &mf, &t->model, "the weights model.init loaded");
    if (rc == 0) {
        model_file_upload(&mf.model, mf.classifier_skipped, &t->model, t->be);
        char line[CONFIG_PATH_MAX + 320];
        model_file_describe(&mf, "model.init", path, &t->model, line, sizeof line);
        log_info("%s", line);
    }
    model_file_free(&mf);
    return rc;
}

// Rank 0's kernel choices to the other ranks (kc: this rank's table, NULL where the backend times nothing):
// rank 0 calls it after choosing, the others before, so that they check and take rank 0's records instead
// of timing. Every rank makes the same broadcasts whatever its backend.
static void share_kernel_choices(Comm *comm, KernelCache *kc) {
    size_t exported = 0;
    char *text = comm->rank == 0 && kc ? kernel_cache_export(kc, &exported) : NULL;
    uint64_t len = exported;  // one width on every rank
    comm->broadcast(comm, &len, sizeof len, 0);
    if (len == 0) {
        free(text);
        return;
    }
    if (comm->rank != 0) text = xcalloc((size_t)len + 1, 1);
    comm->broadcast(comm, text, (size_t)len, 0);
    if (comm->rank != 0 && kc && kernel_cache_import(kc, text, (size_t)len) != 0)
        log_warn_local("rank 0's kernel choices arrived malformed: this rank times its own");
    free(text);
}

// The backend's kernel choices for every layer at the training batch, beside the weights' draw
// (model_alloc_and_prepare), shared from rank 0 under mpirun; one line says where they came from, and
// rank 0 saves its table to cudnn.cache. Returns the seconds the choices took on this rank.
static double choose_kernels(Trainer *t) {
    Backend *be = t->be;
    Comm *comm = t->comm;
    KernelCache *kc = be->kernel_choices ? be->kernel_choices(be) : NULL;
    if (comm->size > 1 && comm->rank != 0) share_kernel_choices(comm, kc);
    const double choices_s =
        model_alloc_and_prepare(&t->model, be, (uint64_t)t->cfg->train.seed, t->cfg->data.batch_size);
    if (comm->size > 1 && comm->rank == 0) share_kernel_choices(comm, kc);
    if (!kc) return choices_s;
    const KernelCacheStats st = kernel_cache_stats(kc);
    if (st.from_cache + st.searched > 0)
        log_info("kernel choices: %d from cache, %d searched", st.from_cache, st.searched);
    kernel_cache_save(kc);
    return choices_s;
}

int trainer_init(Trainer *t, const Config *cfg, Backend *be, Comm *comm, Comm *grad_comm) {
    memset(t, 0, sizeof *t);
    t->times.init_start = clock_seconds();
    t->cfg = cfg, t->be = be, t->comm = comm, t->grad_comm = grad_comm;
    // Each stage ends in an agreement (dist/agree.h): a rank that failed, and every other, return here.
    char err[AGREE_MESSAGE_MAX] = "";
    int rc = dataset_open_train(&cfg->data, &cfg->model, cfg->train.seed, cfg->checkpoint.dir, &t->train_set,
                                err, sizeof err);
    if (rc == 0)
        rc = dataset_open_val(&cfg->data, &cfg->model, cfg->train.seed, cfg->checkpoint.dir, &t->eval.val_set,
                              err, sizeof err);
    int device_decode = 0;
    if (rc == 0 && (device_decode = dataset_decode_on_device(&cfg->data, be, err, sizeof err)) < 0) rc = 2;
    if (rc == 0) rc = outputs_check_descriptors(trainer_loader_threads(cfg, comm), err, sizeof err);
    if ((rc = agree_startup(comm, rc ? 2 : 0, err)) != 0) return rc;
    if ((rc = trainer_agree_data(comm, t->train_set, t->eval.val_set)) != 0) return rc;
    if (device_decode)
        log_info("training JPEGs decoded by the %s backend (data.decode %s)", be->name, cfg->data.decode);
    sampler_init(&t->sampler, t->train_set->size, cfg->data.batch_size, comm->size, comm->rank,
                 cfg->train.accum_steps, cfg->data.drop_last, cfg->train.seed);
    sampler_set_repeats(&t->sampler, cfg->data.repeated_aug);
    t->steps_per_epoch = sampler_steps_per_epoch(&t->sampler);
    t->total_steps = total_steps_of(cfg, t->steps_per_epoch);
    t->base_lr = lr_base(&cfg->train, (long)cfg->data.batch_size * comm->size * cfg->train.accum_steps);

    ModelConfig at_train_side = cfg->model;
    at_train_side.image_size = t->train_set->side;
    model_init_shapes(&t->model, &at_train_side, autocast_run_dtype(&cfg->amp));
    if ((rc = agree_startup(comm, check_epoch_split(t, err, sizeof err), err)) != 0) return rc;
    // auto: graphs where the backend captures natively (CUDA); on: also the CPU's op-log emulation
    // (cpu_graph.c), which runs the same path for the tests.
    int native = be->graph_begin != NULL && be->graph_log == NULL;
    t->graph.enabled = be->graph_begin != NULL && (!strcmp(cfg->train.cuda_graph, "on") ||
                                                   (!strcmp(cfg->train.cuda_graph, "auto") && native));
    StartupTimes *times = &t->times;
    times->choices_s = choose_kernels(t);
    // the weights' draw beside the choices too
    times->build_s = clock_seconds() - times->init_start - times->choices_s;
    evaluate_layout(&t->eval, &t->model, &t->act, cfg->data.batch_size, t->train_set->side);
    activations_alloc(&t->act, &t->model, be, cfg->data.batch_size);
    evaluate_share_buffers(&t->eval, &t->act, cfg->data.batch_size);
    input_init(&t->input, be, t->train_set, cfg->data.batch_size, device_decode);
    if (cfg->train.accum_steps > 1) t->running_kept = be->alloc(be, t->model.stats_numel * sizeof(float));
    if (cfg->data.mixup_alpha > 0 || cfg->data.cutmix_alpha > 0) {
        t->mix = be->alloc(be, (size_t)cfg->train.accum_steps * sizeof(BatchMix));
        t->mix_host = xcalloc((size_t)cfg->train.accum_steps, sizeof(BatchMix));
    }
    scaler_init(&t->scaler, be, &cfg->amp);
    sgd_init(&t->opt, be, &t->model, &cfg->train);
    const long global_batch = (long)cfg->data.batch_size * comm->size * cfg->train.accum_steps;
    ema_init(&t->ema, be, &t->model, &cfg->train, global_batch);
    if (t->ema.enabled)
        log_info(
            "EMA of the weights: decay %.6g per update every %d steps (train.ema_decay %g adjusted for a "
            "global batch of %ld over %d epochs); it remembers %.0f steps, %.1f%% of the run's %ld",
            t->ema.decay, t->ema.every, cfg->train.ema_decay, global_batch, cfg->train.epochs,
            ema_memory_steps(&t->ema), 100.0 * ema_memory_steps(&t->ema) / (double)t->total_steps,
            t->total_steps);
    buckets_init(&t->buckets, &t->model, be, grad_comm, cfg->dist.first_bucket_mb, cfg->dist.bucket_mb);
    t->log.readback = be->host_alloc(be, 3 * sizeof(float) + sizeof(ScalerState));
    divergence_init(&t->div, be);
    t->best_top1 = -1;
    t->saved_step = -1;

    if (!cfg->checkpoint.resume[0] && cfg->model.init[0] && (rc = init_from_file(t)) != 0) return rc;
    if (cfg->checkpoint.resume[0]) {
        rc = checkpoint_load(t, cfg->checkpoint.resume, err, sizeof err) != 0 ? 2 : 0;
        if ((rc = agree_startup(comm, rc, err)) != 0 || (rc = checkpoint_agree_resumed(t)) != 0) return rc;
        // The epoch as the progress lines count it (1-based, the one the checkpoint's step belonged to).
        log_info("resumed from %s at epoch %d, step %ld", cfg->checkpoint.resume, trainer_last_epoch(t),
                 t->step);
        if (cfg->model.init[0])
            log_info("model.init %s not read: the weights are the resumed checkpoint's", cfg->model.init);
        restart_fallen_scale(t);
        // The run ends with train.epochs: steps counted at another global batch may leave fewer to go
        // than train.epochs x steps_per_epoch - step.
        long left = (long)(cfg->train.epochs - t->epoch) * t->steps_per_epoch - t->step_in_epoch;
        if (t->total_steps > t->step + left) t->total_steps = t->step + (left > 0 ? left : 0);
    }
    rc = comm->rank == 0 ? outputs_prepare(cfg, 0, err, sizeof err) : 0;
    if (rc == 0)
        rc = metrics_open(&t->log.metrics, &cfg->log, comm->rank, comm->size, t->total_steps,
                          cfg->checkpoint.resume[0] != 0, err, sizeof err);
    if ((rc = agree_startup(comm, rc, err)) != 0) return rc;
    // The data was opened before checkpoint.dir existed on a fresh run: its file lists are cached now.
    dataset_save_cache(t->train_set, cfg->checkpoint.dir);
    dataset_save_cache(t->eval.val_set, cfg->checkpoint.dir);
    return 0;
}

void trainer_free(Trainer *t) {
    metrics_close(&t->log.metrics);
    if (t->graph.exec) t->be->graph_destroy(t->be, t->graph.exec);
    input_free(&t->input);
    if (t->mix) t->be->free(t->be, t->mix);
    if (t->running_kept) t->be->free(t->be, t->running_kept);
    free(t->mix_host);
    evaluate_free(&t->eval, t->be);
    if (t->act.arena) activations_free(&t->act, t->be);
    if (t->log.readback) t->be->host_free(t->be, t->log.readback);
    divergence_free(&t->div, t->be);
    buckets_free(&t->buckets);
    ema_free(&t->ema, t->be);
    sgd_free(&t->opt, t->be);
    scaler_free(&t->scaler, t->be);
    model_free(&t->model, t->be);
    sampler_free(&t->sampler);
    if (t->train_set && !t->loader_abandoned) dataset_close(t->train_set);
    if (t->eval.val_set) dataset_close(t->eval.val_set);
    memset(t, 0, sizeof *t);
}

// ---- position and evaluation --------------------------------------------------------------------

int trainer_last_epoch(const Trainer *t) {
    // After an epoch's last step the position has already moved to (epoch + 1, 0).
    return t->step_in_epoch == 0 ? t->epoch : t->epoch + 1;
}

EvalRecord trainer_evaluate(Trainer *t) {
    EvalRecord r = evaluate_run(&t->eval, &t->model, &t->act, t->be, t->comm, trainer_last_epoch(t), t->step);
    if (!t->ema.enabled || !t->eval.val_set || r.samples < t->eval.val_set->size) return r;
    EvalRecord e = ema_evaluate(&t->ema, &t->eval, &t->model, &t->act, t->be, t->comm, r.epoch, r.step);
    if (e.samples == r.samples) r.has_ema = 1, r.ema_loss = e.loss, r.ema_top1 = e.top1, r.ema_top5 = e.top5;
    return r;
}

// ---- the loop ------------------------------------------------------------------------------------

// Completes the pending record (TrainerLog) and writes it.
static void log_flush(Trainer *t) {
    TrainerLog *lg = &t->log;
    if (!lg->has_pending) return;
    t->be->readback_wait(t->be);
    ScalerState st;
    memcpy(&st, lg->readback + 1, sizeof st);
    float state_flag = lg->readback[1 + sizeof st / sizeof(float)];
    StepRecord r = lg->pending;
    r.has_grad_norm = t->opt.grad_norm != NULL;
    r.grad_norm = lg->readback[2 + sizeof st / sizeof(float)];
    r.loss = lg->readback[0];
    r.scale = st.scale;
    r.skipped_total = st.skipped_total;
    r.skipped = st.found_inf != 0;
    lg->last_loss = r.loss;
    metrics_step(&lg->metrics, &r);
    lg->has_pending = 0;
    divergence_judge(&t->div, &t->cfg->amp, state_flag, &st, &t->model, &t->opt, t->be, r.step);
}

static void log_step(Trainer *t, int force) {
    const LogConfig *log = &t->cfg->log;
    if (!force && t->step % log->every != 0 && t->step != 1 && t->step != t->total_steps) return;
    log_flush(t);
    TrainerLog *lg = &t->log;
    Backend *be = t->be;
    be->readback_begin(be, lg->readback, t->act.loss, sizeof(float));
    be->readback_begin(be, lg->readback + 1, t->scaler.state, sizeof(ScalerState));
    divergence_check_state_async(&t->div, &t->model, &t->opt, be);
    be->readback_begin(be, lg->readback + 1 + sizeof(ScalerState) / sizeof(float), t->div.flag,
                       sizeof(float));
    if (t->opt.grad_norm)
        be->readback_begin(be, lg->readback + 2 + sizeof(ScalerState) / sizeof(float), t->opt.grad_norm,
                           sizeof(float));
    double now = clock_seconds();
    long steps = t->step - lg->last_step;
    long global_batch = (long)t->cfg->data.batch_size * t->comm->size * t->cfg->train.accum_steps;
    lg->pending = (StepRecord){
        .step = t->step,
        .epoch = trainer_last_epoch(t),
        .lr = lr_at(&t->cfg->train, t->base_lr, t->step - 1, t->steps_per_epoch, t->total_steps),
        .images_per_s = steps > 0 ? steps * global_batch / (now - lg->last_time) : 0,
        .step_ms = steps > 0 ? 1e3 * (now - lg->last_time) / steps : 0,
        .memory_mib = be->peak_bytes(be) / 1048576.0,
        .data_wait_ms = steps > 0 ? 1e3 * lg->data_wait_s / steps : 0,
    };
    lg->data_wait_total_s += lg->data_wait_s;
    lg->data_wait_s = 0;
    lg->has_pending = 1;
    lg->last_step = t->step;
    lg->last_time = now;
}

// checkpoint.keep > 1: the step file beside last (a hard link, or a second write where links fail).
static void keep_history(Trainer *t, const char *last) {
    const CheckpointConfig *ck = &t->cfg->checkpoint;
    if (ck->keep <= 1) return;
    if (history_link(ck->dir, last, t->step) != 0) {
        char path[CONFIG_PATH_MAX + 64], err[1024];
        history_path(path, sizeof path, ck->dir, t->step);
        if (checkpoint_save(t, path, err, sizeof err) != 0) amp_fatal(__FILE__, __LINE__, "%s", err);
    }
    history_prune(ck->dir, ck->keep);
}

// Writes <checkpoint.dir>/<tag>.safetensors from a finite state only: a state holding inf/NaN is not
// written (the run has diverged, divergence.h) and the file there stays the newest finite one.
static void save_checkpoint(Trainer *t, const char *tag) {
    const char *dir = t->cfg->checkpoint.dir;
    if (!dir[0]) return;
    log_flush(t);
    evaluate_sync_bn_stats(&t->model, t->be, t->comm);
    ema_sync_stats(&t->ema, &t->model, t->be, t->comm);
    // After the sync every rank holds the same state, so all reach the same verdict.
    if (divergence_check_state(&t->div, &t->model, &t->opt, t->be, t->step)) {
        metrics_note(&t->log.metrics, "%s.safetensors not written at step %ld: the state is not finite", tag,
                     t->step);
        return;
    }
    if (t->comm->rank != 0) return;
    char path[CONFIG_PATH_MAX + 64], err[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, tag);
    if (checkpoint_save(t, path, err, sizeof err) != 0) amp_fatal(__FILE__, __LINE__, "%s", err);
    metrics_note(&t->log.metrics, "checkpoint written: %s (step %ld)", path, t->step);
    if (strcmp(tag, "last") != 0) return;
    t->saved_step = t->step;
    keep_history(t, path);
}

// best.safetensors after an evaluation that beats every earlier one of this run.
static void save_if_best(Trainer *t) {
    const EvalRecord *e = &t->eval.last;
    if (!isfinite(e->loss) || e->samples == 0 || !(e->top1 > t->best_top1)) return;
    t->best_top1 = e->top1;
    save_checkpoint(t, "best");
}

// Why every rank stops after this step, the same on all: 0 none, STOP_SIGNAL (SIGTERM/SIGINT on any
// rank), STOP_METRICS_FAILED (rank 0 cannot write the metrics file: the run then fails), STOP_DIVERGED
// (any rank found the run diverged: it wins over the others).
enum { STOP_SIGNAL = 1, STOP_METRICS_FAILED = 2, STOP_DIVERGED = 3 };
static int agreed_stop(Trainer *t, volatile sig_atomic_t *stop) {
    float flag = t->div.reason[0]                  ? STOP_DIVERGED
                 : metrics_failed(&t->log.metrics) ? STOP_METRICS_FAILED
                 : stop && *stop                   ? STOP_SIGNAL
                                                   : 0;
    if (t->comm->size > 1) t->comm->allreduce_max_flag(t->comm, &flag);
    return (int)flag;
}

// Start-up ends with the first step (cuDNN's search), or with the second when it captures the graph.
static void note_startup_end(Trainer *t) {
    StartupTimes *times = &t->times;
    if (times->startup_s != 0 || t->step - t->first_step < (t->graph.enabled ? 2 : 1)) return;
    t->be->sync(t->be);
    times->steady_start = clock_seconds();
    times->startup_s = times->steady_start - times->init_start;
    KernelCache *kc = t->be->kernel_choices ? t->be->kernel_choices(t->be) : NULL;
    times->search_s = kc ? kernel_cache_stats(kc).search_s : 0;
    times->steady_images = t->images_seen;
}

// Every rank learns the lowest diverged rank's reason (BN statistics differ between ranks); rank 0 says
// it and which checkpoint is left.
static int report_divergence(Trainer *t) {
    AgreedFailure f;
    agree_first(t->comm, t->div.reason[0] ? 4 : 0, t->div.reason, &f);
    snprintf(t->div.reason, sizeof t->div.reason, "%s", f.text);
    t->outcome = "diverged";
    char kept[CONFIG_PATH_MAX + 96] = "no checkpoint of this run was written";
    if (t->saved_step >= 0)
        snprintf(kept, sizeof kept, "%s/last.safetensors holds step %ld", t->cfg->checkpoint.dir,
                 t->saved_step);
    if (t->comm->size > 1)
        log_warn("the run diverged (rank %d of %d): %s; %s", f.rank, t->comm->size, t->div.reason, kept);
    else
        log_warn("the run diverged: %s; %s", t->div.reason, kept);
    return 4;
}

int trainer_run(Trainer *t, volatile sig_atomic_t *stop) {
    const Config *cfg = t->cfg;
    double start = clock_seconds();
    t->log.last_time = start;
    t->log.last_step = t->step;
    t->first_step = t->step;
    int stopped = 0, voided = 0;
    t->eval.stop = stop;
    Loader *loader = NULL;
    InputFeed feed = {0};
    if (t->step < t->total_steps) {
        loader = loader_create(t->train_set, &t->sampler,
                               t->input.device_decode ? LOADER_JOBS : LOADER_PIXELS, cfg->data.prefetch,
                               trainer_loader_threads(cfg, t->comm), t->epoch, t->step_in_epoch,
                               cfg->train.epochs, t->be);
        input_feed_start(&feed, &t->input, loader, &t->log.data_wait_s, stop);
        // A stop that ended the wait for the first batch, on any rank, ends the run before its first step.
        float interrupted = (float)feed.interrupted;
        if (t->comm->size > 1) t->comm->allreduce_max_flag(t->comm, &interrupted);
        if (interrupted != 0) stopped = STOP_SIGNAL;
    }
    while (!stopped && t->step < t->total_steps) {
        comm_note_step(t->step + 1);  // named by a collective that times out in this step or after it
        // A voided step was agreed on by every rank, and only a stop voids one.
        if (!trainer_step(t, input_feed_micro, &feed, cfg->train.accum_steps)) {
            stopped = STOP_SIGNAL, voided = 1;
            break;
        }
        input_feed_advance(&feed);
        t->images_seen += feed.current.step_total;
        note_startup_end(t);
        if (++t->step_in_epoch == t->steps_per_epoch) t->step_in_epoch = 0, t->epoch++;
        log_step(t, 0);
        if (t->step_in_epoch == 0 && t->eval.val_set) {
            log_flush(t);
            EvalRecord e = trainer_evaluate(t);
            if (e.samples < t->eval.val_set->size) {
                metrics_note(&t->log.metrics,
                             "evaluation at step %ld stopped by signal after %ld of %d samples", t->step,
                             e.samples, t->eval.val_set->size);
            } else {
                t->eval.last = e;
                t->eval.has_last = 1;
                metrics_eval(&t->log.metrics, &t->eval.last);
                save_if_best(t);
            }
        }
        if (cfg->checkpoint.every > 0 && t->step % cfg->checkpoint.every == 0 && t->step < t->total_steps)
            save_checkpoint(t, "last");
        if ((stopped = agreed_stop(t, stop)) != 0) break;
    }
    t->be->sync(t->be);  // the last upload has left the loader's buffers, the last step is done
    double end = clock_seconds();
    input_feed_stop(&feed);
    // A worker stuck in a read must not hold back the checkpoint of the steps done.
    if (feed.interrupted)
        loader_abandon(loader), t->loader_abandoned = 1;
    else if (loader)
        loader_destroy(loader);
    t->train_seconds = end - start;
    t->total_seconds = end - t->times.init_start;
    if (t->times.startup_s > 0 && end > t->times.steady_start)
        t->steady_images_per_s = (double)(t->images_seen - t->times.steady_images) /
                                 (end - t->times.steady_start);
    if (t->step > t->first_step && t->step != t->log.last_step) log_step(t, 1);
    log_flush(t);
    save_checkpoint(t, "last");
    if (voided)
        metrics_note(&t->log.metrics,
                     "step %ld not taken: a stop ended the wait for one of its micro-batches; a resumed run "
                     "repeats it",
                     t->step + 1);
    if (stopped == STOP_SIGNAL) metrics_note(&t->log.metrics, "stopped by signal after step %ld", t->step);
    t->outcome = stopped == STOP_SIGNAL ? "stopped" : "done";
    // The last records were written after the loop's last agreement: agree once more.
    int last = agreed_stop(t, NULL);
    if (last == STOP_DIVERGED) return report_divergence(t);
    if (last == STOP_METRICS_FAILED) {
        metrics_note(&t->log.metrics, "stopped after step %ld: the metrics file cannot be written", t->step);
        t->outcome = "failed";
        return 1;
    }
    return 0;
}
