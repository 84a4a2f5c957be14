#include "train/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/autocast.h"
#include "checkpoint/checkpoint_meta.h"
#include "core/check.h"
#include "core/digest.h"
#include "core/log.h"
#include "dist/agree.h"
#include "train/outputs.h"
#include "checkpoint/safetensors.h"

// The EMA as torchvision's AveragedModel.state_dict() holds it: module.<every parameter and buffer>, and
// n_averaged. scratch: (padded_numel) floats.
static void write_ema(SafetensorsWriter *w, const Ema *e, const Model *m, Backend *be, float *scratch) {
    size_t np = m->params.padded_numel;
    float *params = xcalloc(np, sizeof(float)),
          *stats = xcalloc(m->stats_numel ? m->stats_numel : 1, sizeof(float));
    be->to_host(be, params, e->params, np * sizeof(float));
    be->to_host(be, stats, e->stats, m->stats_numel * sizeof(float));
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        char name[PARAM_NAME_MAX + 32];
        snprintf(name, sizeof name, CHECKPOINT_EMA_PREFIX "%s", p->name);
        params_to_torch_layout(p, params + p->offset, scratch + p->offset);
        st_writer_add_copy(w, name, ST_F32, p->ndim, p->shape, scratch + p->offset);
    }
    checkpoint_write_bn_stats(w, m, CHECKPOINT_EMA_PREFIX, stats, &e->num_batches_tracked);
    int64_t n_averaged = e->n_averaged;
    st_writer_add_copy(w, CHECKPOINT_EMA_COUNT, ST_I64, 0, NULL, &n_averaged);
    free(params), free(stats);
}

int checkpoint_save(Trainer *t, const char *path, char *err, size_t err_len) {
    Model *m = &t->model;
    Backend *be = t->be;
    size_t np = m->params.padded_numel;
    float *master = xcalloc(np, sizeof(float)), *momentum = xcalloc(np, sizeof(float));
    float *stats = xcalloc(m->stats_numel ? m->stats_numel : 1, sizeof(float));
    be->to_host(be, master, m->master, np * sizeof(float));
    be->to_host(be, momentum, t->opt.momentum, np * sizeof(float));
    be->to_host(be, stats, m->running, m->stats_numel * sizeof(float));
    ScalerState scaler = scaler_read(&t->scaler, be);

    char dir[CONFIG_PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    if (slash && dir[0] && outputs_make_dir(dir, NULL) != 0) {
        snprintf(err, err_len, "%s: cannot create its folder: %s", path, strerror(errno));
        free(master), free(momentum), free(stats);
        return 1;
    }
    SafetensorsWriter *w = st_writer_open(path);
    float *torch_order = xcalloc(np, sizeof(float));
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        float *dst = torch_order + p->offset;
        params_to_torch_layout(p, master + p->offset, dst);
        st_writer_add_copy(w, p->name, ST_F32, p->ndim, p->shape, dst);
        char name[PARAM_NAME_MAX + 32];
        snprintf(name, sizeof name, CHECKPOINT_MOMENTUM_PREFIX "%s", p->name);
        params_to_torch_layout(p, momentum + p->offset, dst);
        st_writer_add_copy(w, name, ST_F32, p->ndim, p->shape, dst);
    }
    int64_t tracked = m->num_batches_tracked;
    checkpoint_write_bn_stats(w, m, "", stats, &tracked);
    if (t->ema.enabled) write_ema(w, &t->ema, m, be, torch_order);
    char signature[256];
    checkpoint_model_signature(m, signature, sizeof signature);
    st_writer_set_meta(w, "format", CHECKPOINT_FORMAT);
    st_writer_set_meta(w, "model", signature);
    st_writer_set_meta(w, "arch", m->cfg.arch);
    const Config *cfg = t->cfg;
    CheckpointMeta meta = {.step = t->step,
                           .epoch = t->epoch,
                           .samples_done = sampler_samples_before(&t->sampler, t->step_in_epoch),
                           .amp = m->amp,
                           .dynamic = cfg->amp.dynamic,
                           .scale = scaler.scale,
                           .growth_count = scaler.growth_count,
                           .skipped_total = scaler.skipped_total,
                           .skipped_run = scaler.skipped_run,
                           .seed = cfg->train.seed,
                           .world = t->comm->size,
                           .batch = cfg->data.batch_size,
                           .accum = cfg->train.accum_steps,
                           .train_samples = t->train_set->size};
    snprintf(meta.amp_dtype, sizeof meta.amp_dtype, "%s", m->amp ? cfg->amp.dtype : "float32");
    snprintf(meta.dataset, sizeof meta.dataset, "%s", t->train_set->name);
    dataset_digest(t->train_set, meta.dataset_digest);
    checkpoint_meta_write(w, &meta);
    int rc = st_writer_commit(w, err, err_len);
    free(torch_order), free(master), free(momentum), free(stats);
    return rc;
}

// A checkpoint read and judged, in host memory, before it changes anything.
typedef struct Loaded {
    float *master, *momentum, *stats;  // (padded_numel), (padded_numel), (stats_numel) fp32, our layout
    int64_t tracked;
    int has_ema;                    // the run averages and the file holds the average: ...
    float *ema_params, *ema_stats;  // ... its tensors, as master and stats
    int64_t ema_tracked, n_averaged;
    CheckpointMeta meta;
    ScalerState scaler;        // what the run's scaler starts from
    int epoch, step_in_epoch;  // where the run continues, in its own sampler's steps
} Loaded;

static void loaded_free(Loaded *l) {
    free(l->master), free(l->momentum), free(l->stats), free(l->ema_params), free(l->ema_stats);
}

// The scaler the run starts from. A static scale (amp.dynamic false) is the config's amp.init_scale
// whatever the file says: the user chose it; a warning says when the file's differs. A bf16 run's is static
// at 1 (config_load resolves its amp.dynamic and amp.init_scale so).
static ScalerState resume_scaler(const char *path, const CheckpointMeta *meta, const Model *m,
                                 const AmpConfig *amp) {
    ScalerState st = {.scale = (float)meta->scale,
                      .growth_count = (int32_t)meta->growth_count,
                      .skipped_total = (int32_t)meta->skipped_total,
                      .skipped_run = (int32_t)meta->skipped_run};
    if (!m->amp) {
        st.scale = 1.0f;  // fp32 run: no scaling, whatever the checkpoint used
    } else if (!meta->amp) {
        st.scale = (float)amp->init_scale;  // an fp32 checkpoint continued under AMP starts fresh
        st.growth_count = 0;
    } else if (!amp->dynamic) {
        if ((float)amp->init_scale != st.scale)
            log_warn(
                "%s: amp.dynamic is false, so the loss scale is amp.init_scale %g, not the checkpoint's %g",
                path, amp->init_scale, meta->scale);
        st.scale = (float)amp->init_scale;
        st.growth_count = 0;
    } else if (meta->dynamic == 0) {
        log_warn(
            "%s: the checkpoint's loss scale %g was static (amp.dynamic false); dynamic scaling starts from it",
            path, meta->scale);
    }
    return st;
}

// Reads and checks everything the run would take from path: the model's tensors, momentum, the metadata
// against `run`. 0 with *out filled (loaded_free), or 1 with one line in err and nothing allocated.
static int load_checked(const char *path, const Model *m, const CheckpointRun *run, Loaded *out, char *err,
                        size_t err_len) {
    memset(out, 0, sizeof *out);
    SafetensorsFile *f = st_open(path, err, err_len);
    if (!f) return 1;
    int rc = 1;
    size_t np = m->params.padded_numel;
    out->master = xcalloc(np, sizeof(float)), out->momentum = xcalloc(np, sizeof(float));
    out->stats = xcalloc(m->stats_numel ? m->stats_numel : 1, sizeof(float));
    float *scratch = xcalloc(np, sizeof(float));
    char signature[256];
    checkpoint_model_signature(m, signature, sizeof signature);
    const char *format = st_meta(f, "format"), *model = st_meta(f, "model");
    if (!format || strcmp(format, CHECKPOINT_FORMAT) != 0) {
        snprintf(err, err_len, "%s: not an amptrain checkpoint (metadata format is %s)", path,
                 format ? format : "missing");
        goto done;
    }
    if (!model || strcmp(model, signature) != 0) {
        snprintf(err, err_len, "%s: checkpoint is for model '%s', this run builds '%s'", path,
                 model ? model : "?", signature);
        goto done;
    }
    int checked = st_load_checked(f, err, err_len);
    if (checked < 0) goto done;
    if (checked == 1)
        log_warn("%s has no data checksum (an older amptrain wrote it): its tensors load unchecked", path);
    CheckpointMeta *meta = &out->meta;
    if (checkpoint_meta_read(f, meta, err, err_len) || checkpoint_meta_check(f, meta, run, err, err_len))
        goto done;
    if (checkpoint_read_model(f, m, "", 0, out->master, out->stats, &out->tracked, err, err_len)) goto done;
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        char name[PARAM_NAME_MAX + 32];
        snprintf(name, sizeof name, CHECKPOINT_MOMENTUM_PREFIX "%s", p->name);
        if (checkpoint_read_param(f, p, name, scratch, out->momentum + p->offset, err, err_len)) goto done;
    }
    if (run->cfg->train.ema_decay > 0 && st_find(f, CHECKPOINT_EMA_COUNT)) {
        out->has_ema = 1;
        out->ema_params = xcalloc(np, sizeof(float));
        out->ema_stats = xcalloc(m->stats_numel ? m->stats_numel : 1, sizeof(float));
        if (checkpoint_read_model(f, m, CHECKPOINT_EMA_PREFIX, 0, out->ema_params, out->ema_stats,
                                  &out->ema_tracked, err, err_len) ||
            checkpoint_read_count(f, CHECKPOINT_EMA_COUNT, &out->n_averaged, err, err_len))
            goto done;
    }
    const Sampler *s = run->sampler;
    int exact = sampler_resume(s, (int)meta->epoch, meta->samples_done, &out->epoch, &out->step_in_epoch);
    if (!exact)
        log_warn(
            "%s was written with %ld ranks x batch %ld x accum_steps %ld; this run's global batch does not "
            "divide the %ld samples done in epoch %ld, so it continues at the start of epoch %d",
            path, meta->world, meta->batch, meta->accum, meta->samples_done, meta->epoch, out->epoch);
    else if (meta->world != s->world || meta->batch != s->batch || meta->accum != s->accum) {
        long now = (long)s->world * s->batch * s->accum, then = meta->world * meta->batch * meta->accum;
        char steps[96];
        snprintf(steps, sizeof steps,
                 now == then ? "the same %ld samples per step"
                             : "%ld samples per step instead "
                               "of %ld",
                 now, then);
        log_warn(
            "%s was written with %ld ranks x batch %ld x accum_steps %ld, this run has %d x %d x %d: the sample "
            "order continues exactly, with %s",
            path, meta->world, meta->batch, meta->accum, s->world, s->batch, s->accum, steps);
    }
    out->scaler = resume_scaler(path, meta, m, &run->cfg->amp);
    rc = 0;
done:
    free(scratch);
    if (rc) loaded_free(out);
    st_close(f);
    return rc;
}

int checkpoint_load(Trainer *t, const char *path, char *err, size_t err_len) {
    Model *m = &t->model;
    Backend *be = t->be;
    Loaded l;
    CheckpointRun run = {.cfg = t->cfg, .train = t->train_set, .sampler = &t->sampler};
    if (load_checked(path, m, &run, &l, err, err_len)) return 1;
    size_t np = m->params.padded_numel;
    be->to_device(be, m->master, l.master, np * sizeof(float));
    be->to_device(be, t->opt.momentum, l.momentum, np * sizeof(float));
    be->to_device(be, m->running, l.stats, m->stats_numel * sizeof(float));
    model_refresh_compute(m, be);
    m->num_batches_tracked = l.tracked;
    if (l.has_ema) {
        be->to_device(be, t->ema.params, l.ema_params, np * sizeof(float));
        be->to_device(be, t->ema.stats, l.ema_stats, m->stats_numel * sizeof(float));
        t->ema.num_batches_tracked = l.ema_tracked;
        t->ema.n_averaged = (long)l.n_averaged;
    } else if (t->ema.enabled) {
        log_warn(
            "%s holds no EMA of the weights (train.ema_decay was off): the average starts from its weights",
            path);
        ema_restart(&t->ema, be, m);
    }
    scaler_write(&t->scaler, be, &l.scaler);
    t->step = l.meta.step;
    t->epoch = l.epoch;
    t->step_in_epoch = l.step_in_epoch;
    loaded_free(&l);
    return 0;
}

int checkpoint_check(const char *path, const Config *cfg, const Dataset *train, int world, int rank,
                     char *err, size_t err_len) {
    Model m;
    model_init_shapes(&m, &cfg->model, autocast_run_dtype(&cfg->amp));
    Sampler s;
    sampler_init(&s, train->size, cfg->data.batch_size, world, rank, cfg->train.accum_steps,
                 cfg->data.drop_last, cfg->train.seed);
    CheckpointRun run = {.cfg = cfg, .train = train, .sampler = &s};
    Loaded l;
    int rc = load_checked(path, &m, &run, &l, err, err_len);
    if (rc == 0) loaded_free(&l);
    sampler_free(&s);
    model_free(&m, NULL);
    return rc;
}

// Feeds one backend buffer of n floats to the digest.
static void digest_device(Digest *d, Backend *be, const float *device, size_t n) {
    float *host = xcalloc(n ? n : 1, sizeof(float));
    be->to_host(be, host, device, n * sizeof(float));
    digest_add(d, host, n * sizeof(float));
    free(host);
}

int checkpoint_agree_resumed(Trainer *t) {
    Model *m = &t->model;
    ScalerState st = scaler_read(&t->scaler, t->be);
    Digest d;
    digest_init(&d);
    digest_device(&d, t->be, m->master, m->params.padded_numel);
    digest_device(&d, t->be, t->opt.momentum, m->params.padded_numel);
    digest_device(&d, t->be, m->running, m->stats_numel);
    if (t->ema.enabled) {
        digest_device(&d, t->be, t->ema.params, m->params.padded_numel);
        digest_device(&d, t->be, t->ema.stats, m->stats_numel);
        digest_add(&d, &t->ema.n_averaged, sizeof t->ema.n_averaged);
        digest_add(&d, &t->ema.num_batches_tracked, sizeof t->ema.num_batches_tracked);
    }
    char values[6][32];
    snprintf(values[0], sizeof values[0], "%ld", t->step);
    snprintf(values[1], sizeof values[1], "%d", t->epoch);
    snprintf(values[2], sizeof values[2], "%d", t->step_in_epoch);
    snprintf(values[3], sizeof values[3], "%.9g", st.scale);
    snprintf(values[4], sizeof values[4], "%d/%d", st.growth_count, st.skipped_total);
    digest_hex(digest_end(&d), values[5]);
    const char *names[] = {"step",
                           "epoch",
                           "step of the epoch",
                           "scale",
                           "growth_count/skipped_total",
                           "the digest of weights, momentum, BN statistics and their EMA"};
    const char *list[] = {values[0], values[1], values[2], values[3], values[4], values[5]};
    return agree_same(t->comm, "the resumed checkpoints", 6, names, list);
}
