#include "checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "metrics.h"
#include "safetensors.h"

#define CHECKPOINT_FORMAT "amptrain-checkpoint-1"

static void meta_long(SafetensorsWriter *w, const char *key, long value) {
    char text[32];
    snprintf(text, sizeof text, "%ld", value);
    st_writer_set_meta(w, key, text);
}

static void meta_double(SafetensorsWriter *w, const char *key, double value) {
    char text[48];
    snprintf(text, sizeof text, "%.17g", value);
    st_writer_set_meta(w, key, text);
}

// The model's shape as one string, so a checkpoint for another model is refused by name.
static void model_signature(const Model *m, char *out, size_t n) {
    const ModelConfig *c = &m->cfg;
    snprintf(out, n, "layers=%d,%d,%d,%d cardinality=%d base_width=%d planes=%d classes=%d", c->layers[0],
             c->layers[1], c->layers[2], c->layers[3], c->cardinality, c->base_width, c->planes, c->num_classes);
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

    if (metrics_make_parent_dir(path) != 0) {
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
    for (int i = 0; i < m->n_bn; i++) {
        const BnLayer *bn = m->bn_list[i];
        char name[PARAM_NAME_MAX + 32];
        int64_t shape[1] = {bn->c};
        snprintf(name, sizeof name, "%s.running_mean", bn->prefix);
        st_writer_add_copy(w, name, ST_F32, 1, shape, stats + bn->stats_offset);
        snprintf(name, sizeof name, "%s.running_var", bn->prefix);
        st_writer_add_copy(w, name, ST_F32, 1, shape, stats + bn->stats_offset + bn->c);
        snprintf(name, sizeof name, "%s.num_batches_tracked", bn->prefix);
        st_writer_add_copy(w, name, ST_I64, 0, NULL, &tracked);
    }
    char signature[256];
    model_signature(m, signature, sizeof signature);
    st_writer_set_meta(w, "format", CHECKPOINT_FORMAT);
    st_writer_set_meta(w, "model", signature);
    st_writer_set_meta(w, "arch", m->cfg.arch);
    meta_long(w, "amp", m->amp);
    meta_double(w, "scale", scaler.scale);
    meta_long(w, "growth_count", scaler.growth_count);
    meta_long(w, "skipped_total", scaler.skipped_total);
    meta_long(w, "step", t->step);
    meta_long(w, "epoch", t->epoch);
    meta_long(w, "samples_done", sampler_samples_before(&t->sampler, t->step_in_epoch));
    meta_long(w, "seed", t->cfg->train.seed);
    meta_long(w, "world_size", t->comm->size);
    meta_long(w, "batch_size", t->cfg->data.batch_size);
    meta_long(w, "accum_steps", t->cfg->train.accum_steps);
    int rc = st_writer_commit(w, err, err_len);
    free(torch_order), free(master), free(momentum), free(stats);
    return rc;
}

static int meta_get_long(const SafetensorsFile *f, const char *path, const char *key, long *out, char *err,
                         size_t err_len) {
    const char *text = st_meta(f, key);
    char *end;
    if (text) {
        errno = 0;
        *out = strtol(text, &end, 10);
        if (errno == 0 && end != text && *end == 0) return 0;
    }
    snprintf(err, err_len, "%s: checkpoint metadata '%s' is %s", path, key, text ? "not an integer" : "missing");
    return 1;
}

static int meta_get_double(const SafetensorsFile *f, const char *path, const char *key, double *out, char *err,
                           size_t err_len) {
    const char *text = st_meta(f, key);
    char *end;
    if (text) {
        *out = strtod(text, &end);
        if (end != text && *end == 0) return 0;
    }
    snprintf(err, err_len, "%s: checkpoint metadata '%s' is %s", path, key, text ? "not a number" : "missing");
    return 1;
}

// Reads one fp32 tensor of the parameter's torchvision shape into ours (our layout).
static int read_param(SafetensorsFile *f, const ParamInfo *p, const char *name, float *scratch, float *ours,
                      char *err, size_t err_len) {
    if (st_read(f, name, ST_F32, p->ndim, p->shape, scratch, err, err_len) != 0) return 1;
    params_from_torch_layout(p, scratch, ours);
    return 0;
}

int checkpoint_read_model(SafetensorsFile *f, const Model *m, float *master, float *stats, int64_t *tracked,
                          char *err, size_t err_len) {
    float *scratch = xcalloc(m->params.padded_numel, sizeof(float));
    int rc = 1;
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        if (read_param(f, p, p->name, scratch, master + p->offset, err, err_len)) goto done;
    }
    for (int i = 0; i < m->n_bn; i++) {
        const BnLayer *bn = m->bn_list[i];
        char name[PARAM_NAME_MAX + 32];
        int64_t shape[1] = {bn->c};
        snprintf(name, sizeof name, "%s.running_mean", bn->prefix);
        if (st_read(f, name, ST_F32, 1, shape, stats + bn->stats_offset, err, err_len)) goto done;
        snprintf(name, sizeof name, "%s.running_var", bn->prefix);
        if (st_read(f, name, ST_F32, 1, shape, stats + bn->stats_offset + bn->c, err, err_len)) goto done;
        snprintf(name, sizeof name, "%s.num_batches_tracked", bn->prefix);
        if (st_read(f, name, ST_I64, 0, NULL, tracked, err, err_len)) goto done;
    }
    rc = 0;
done:
    free(scratch);
    return rc;
}

int checkpoint_load(Trainer *t, const char *path, char *err, size_t err_len) {
    Model *m = &t->model;
    Backend *be = t->be;
    SafetensorsFile *f = st_open(path, err, err_len);
    if (!f) return 1;
    int rc = 1;
    size_t np = m->params.padded_numel;
    float *master = xcalloc(np, sizeof(float)), *momentum = xcalloc(np, sizeof(float));
    float *stats = xcalloc(m->stats_numel ? m->stats_numel : 1, sizeof(float)), *scratch = xcalloc(np, sizeof(float));
    long step, epoch, samples_done, amp, growth_count, skipped_total, world;
    double scale;
    char signature[256];
    model_signature(m, signature, sizeof signature);
    const char *format = st_meta(f, "format"), *model = st_meta(f, "model");
    if (!format || strcmp(format, CHECKPOINT_FORMAT) != 0) {
        snprintf(err, err_len, "%s: not an amptrain checkpoint (metadata format is %s)", path, format ? format : "missing");
        goto done;
    }
    if (!model || strcmp(model, signature) != 0) {
        snprintf(err, err_len, "%s: checkpoint is for model '%s', this run builds '%s'", path, model ? model : "?", signature);
        goto done;
    }
    if (meta_get_long(f, path, "step", &step, err, err_len) || meta_get_long(f, path, "epoch", &epoch, err, err_len) ||
        meta_get_long(f, path, "samples_done", &samples_done, err, err_len) ||
        meta_get_long(f, path, "amp", &amp, err, err_len) ||
        meta_get_long(f, path, "growth_count", &growth_count, err, err_len) ||
        meta_get_long(f, path, "skipped_total", &skipped_total, err, err_len) ||
        meta_get_long(f, path, "world_size", &world, err, err_len) ||
        meta_get_double(f, path, "scale", &scale, err, err_len))
        goto done;
    int64_t tracked = 0;
    if (checkpoint_read_model(f, m, master, stats, &tracked, err, err_len)) goto done;
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        char name[PARAM_NAME_MAX + 32];
        snprintf(name, sizeof name, CHECKPOINT_MOMENTUM_PREFIX "%s", p->name);
        if (read_param(f, p, name, scratch, momentum + p->offset, err, err_len)) goto done;
    }
    int resume_epoch, resume_step;
    if (!sampler_resume(&t->sampler, (int)epoch, samples_done, &resume_epoch, &resume_step))
        fprintf(stderr, "warning: %s was written with %ld ranks; this run's global batch does not divide the "
                        "%ld samples done in epoch %ld, so it continues at the start of epoch %d\n",
                path, world, samples_done, epoch, resume_epoch);
    // Everything checked: now change the run.
    be->to_device(be, m->master, master, np * sizeof(float));
    be->to_device(be, t->opt.momentum, momentum, np * sizeof(float));
    be->to_device(be, m->running, stats, m->stats_numel * sizeof(float));
    model_refresh_compute(m, be);
    m->num_batches_tracked = tracked;
    ScalerState st = {.scale = (float)scale, .growth_count = (int32_t)growth_count,
                      .skipped_total = (int32_t)skipped_total};
    if (!m->amp) {
        st.scale = 1.0f;  // fp32 run: no scaling, whatever the checkpoint used
    } else if (!amp) {
        st.scale = (float)t->cfg->amp.init_scale;  // an fp32 checkpoint continued under AMP starts fresh
        st.growth_count = 0;
    }
    scaler_write(&t->scaler, be, &st);
    t->step = step;
    t->epoch = resume_epoch;
    t->step_in_epoch = resume_step;
    rc = 0;
done:
    free(master), free(momentum), free(stats), free(scratch);
    st_close(f);
    return rc;
}
