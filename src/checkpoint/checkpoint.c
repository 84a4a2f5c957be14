#include "checkpoint/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "dist/agree.h"
#include "train/outputs.h"
#include "checkpoint/safetensors.h"

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
    for (int i = 0; i < m->n_bn; i++) {
        const ModelBnLayer *bn = m->bn_list[i];
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

// A tensor the run would train on must hold finite numbers: one NaN in a weight, a momentum or a BN
// statistic turns every later step into NaN (or a skipped step forever under AMP).
static int check_finite(const SafetensorsFile *f, const char *name, const float *x, size_t n, char *err,
                        size_t err_len) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            snprintf(err, err_len, "%s: tensor '%s' holds %s at element %zu: refusing to resume from "
                     "non-finite values", st_path(f), name, isnan(x[i]) ? "NaN" : x[i] > 0 ? "+inf" : "-inf", i);
            return 1;
        }
    return 0;
}

// Reads one fp32 tensor of the parameter's torchvision shape into ours (our layout).
static int read_param(SafetensorsFile *f, const ParamInfo *p, const char *name, float *scratch, float *ours,
                      char *err, size_t err_len) {
    if (st_read(f, name, ST_F32, p->ndim, p->shape, scratch, err, err_len) != 0 ||
        check_finite(f, name, scratch, p->numel, err, err_len) != 0)
        return 1;
    params_from_torch_layout(p, scratch, ours);
    return 0;
}

// One BN statistic: finite, and a variance not negative (its square root normalises evaluation).
static int read_bn_stat(SafetensorsFile *f, const ModelBnLayer *bn, const char *what, float *dst, char *err,
                        size_t err_len) {
    char name[PARAM_NAME_MAX + 32];
    int64_t shape[1] = {bn->c};
    snprintf(name, sizeof name, "%s.%s", bn->prefix, what);
    if (st_read(f, name, ST_F32, 1, shape, dst, err, err_len) || check_finite(f, name, dst, (size_t)bn->c, err, err_len))
        return 1;
    if (strcmp(what, "running_var") != 0) return 0;
    for (int c = 0; c < bn->c; c++)
        if (dst[c] < 0) {
            snprintf(err, err_len, "%s: tensor '%s' holds the negative variance %g at element %d", st_path(f), name,
                     dst[c], c);
            return 1;
        }
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
        const ModelBnLayer *bn = m->bn_list[i];
        char name[PARAM_NAME_MAX + 32];
        if (read_bn_stat(f, bn, "running_mean", stats + bn->stats_offset, err, err_len) ||
            read_bn_stat(f, bn, "running_var", stats + bn->stats_offset + bn->c, err, err_len))
            goto done;
        snprintf(name, sizeof name, "%s.num_batches_tracked", bn->prefix);
        if (st_read(f, name, ST_I64, 0, NULL, tracked, err, err_len)) goto done;
        if (*tracked < 0) {
            snprintf(err, err_len, "%s: tensor '%s' is %" PRId64 ": must not be negative", st_path(f), name, *tracked);
            goto done;
        }
    }
    rc = 0;
done:
    free(scratch);
    return rc;
}

// The run's position and the scaler as the checkpoint's metadata gives them.
typedef struct ResumeMeta {
    long step, epoch, samples_done, amp, growth_count, skipped_total, world, batch, accum;
    double scale;
} ResumeMeta;

static int read_meta(const SafetensorsFile *f, ResumeMeta *r, char *err, size_t err_len) {
    const char *path = st_path(f);
    const struct {
        const char *key;
        long *out;
    } longs[] = {{"step", &r->step},           {"epoch", &r->epoch},
                 {"samples_done", &r->samples_done}, {"amp", &r->amp},
                 {"growth_count", &r->growth_count}, {"skipped_total", &r->skipped_total},
                 {"world_size", &r->world},    {"batch_size", &r->batch},
                 {"accum_steps", &r->accum}};
    for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++)
        if (meta_get_long(f, path, longs[i].key, longs[i].out, err, err_len)) return 1;
    return meta_get_double(f, path, "scale", &r->scale, err, err_len);
}

static int fail_meta(const SafetensorsFile *f, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail_meta(const SafetensorsFile *f, char *err, size_t err_len, const char *fmt, ...) {
    int used = snprintf(err, err_len, "%s: checkpoint metadata ", st_path(f));
    if (used < 0 || (size_t)used >= err_len) return 1;
    va_list args;
    va_start(args, fmt);
    vsnprintf(err + used, err_len - (size_t)used, fmt, args);
    va_end(args);
    return 1;
}

// Counters that no run writes: negative, beyond their epoch, more skipped or clean steps than steps,
// a loss scale that is no positive normal fp32 number, a position past the end of this run's epochs.
// step >= epoch (+1 mid-epoch) is all that holds across resumes with other global batches.
static int check_meta(const SafetensorsFile *f, const ResumeMeta *r, const Trainer *t, char *err, size_t err_len) {
    const struct {
        const char *key;
        long value;
    } counts[] = {{"world_size", r->world}, {"batch_size", r->batch}, {"accum_steps", r->accum}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].value < 1) return fail_meta(f, err, err_len, "'%s' is %ld: must be at least 1", counts[i].key, counts[i].value);
    if (r->amp != 0 && r->amp != 1) return fail_meta(f, err, err_len, "'amp' is %ld: must be 0 or 1", r->amp);
    if (r->step < 0 || r->epoch < 0 || r->samples_done < 0 || r->epoch > INT_MAX)
        return fail_meta(f, err, err_len, "step %ld, epoch %ld, samples_done %ld: counters must not be negative",
                         r->step, r->epoch, r->samples_done);
    if (r->samples_done >= t->sampler.size)
        return fail_meta(f, err, err_len, "'samples_done' is %ld, beyond the epoch of %d samples (did data.train_size "
                         "or the data change?)", r->samples_done, t->sampler.size);
    if (r->step < r->epoch + (r->samples_done > 0))
        return fail_meta(f, err, err_len, "step %ld is too few for epoch %ld and samples_done %ld (every epoch "
                         "begun takes a step)", r->step, r->epoch, r->samples_done);
    if (r->growth_count < 0 || r->growth_count > r->step || r->growth_count > INT32_MAX ||
        r->skipped_total < 0 || r->skipped_total > r->step || r->skipped_total > INT32_MAX)
        return fail_meta(f, err, err_len, "growth_count %ld, skipped_total %ld: each must be in [0, step %ld]",
                         r->growth_count, r->skipped_total, r->step);
    float scale = (float)r->scale;
    if (!(r->scale > 0) || !isnormal(scale))
        return fail_meta(f, err, err_len, "'scale' is %g: the loss scale must be a finite, positive, normal fp32 "
                         "number", r->scale);
    int epochs = t->cfg->train.epochs;
    if (r->epoch > epochs || (r->epoch == epochs && r->samples_done > 0))
        return fail_meta(f, err, err_len, "epoch %ld (+%ld samples) is past the end of train.epochs %d: raise "
                         "train.epochs to train on", r->epoch, r->samples_done, epochs);
    return 0;
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
    ResumeMeta meta;
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
    if (read_meta(f, &meta, err, err_len) || check_meta(f, &meta, t, err, err_len)) goto done;
    int64_t tracked = 0;
    if (checkpoint_read_model(f, m, master, stats, &tracked, err, err_len)) goto done;
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        char name[PARAM_NAME_MAX + 32];
        snprintf(name, sizeof name, CHECKPOINT_MOMENTUM_PREFIX "%s", p->name);
        if (read_param(f, p, name, scratch, momentum + p->offset, err, err_len)) goto done;
    }
    int resume_epoch, resume_step;
    if (!sampler_resume(&t->sampler, (int)meta.epoch, meta.samples_done, &resume_epoch, &resume_step))
        log_warn("%s was written with %ld ranks x batch %ld x accum_steps %ld; this run's global batch does not "
                 "divide the %ld samples done in epoch %ld, so it continues at the start of epoch %d",
                 path, meta.world, meta.batch, meta.accum, meta.samples_done, meta.epoch, resume_epoch);
    // Everything checked: now change the run.
    be->to_device(be, m->master, master, np * sizeof(float));
    be->to_device(be, t->opt.momentum, momentum, np * sizeof(float));
    be->to_device(be, m->running, stats, m->stats_numel * sizeof(float));
    model_refresh_compute(m, be);
    m->num_batches_tracked = tracked;
    ScalerState st = {.scale = (float)meta.scale, .growth_count = (int32_t)meta.growth_count,
                      .skipped_total = (int32_t)meta.skipped_total};
    if (!m->amp) {
        st.scale = 1.0f;  // fp32 run: no scaling, whatever the checkpoint used
    } else if (!meta.amp) {
        st.scale = (float)t->cfg->amp.init_scale;  // an fp32 checkpoint continued under AMP starts fresh
        st.growth_count = 0;
    }
    scaler_write(&t->scaler, be, &st);
    t->step = meta.step;
    t->epoch = resume_epoch;
    t->step_in_epoch = resume_step;
    rc = 0;
done:
    free(master), free(momentum), free(stats), free(scratch);
    st_close(f);
    return rc;
}

// FNV-1a over bytes, continuing from h.
static uint64_t digest_bytes(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

// The digest of one backend buffer of n floats.
static uint64_t digest_device(uint64_t h, Backend *be, const float *device, size_t n) {
    float *host = xcalloc(n ? n : 1, sizeof(float));
    be->to_host(be, host, device, n * sizeof(float));
    h = digest_bytes(h, host, n * sizeof(float));
    free(host);
    return h;
}

int checkpoint_agree_resumed(Trainer *t) {
    Model *m = &t->model;
    ScalerState st = scaler_read(&t->scaler, t->be);
    uint64_t h = 0xcbf29ce484222325ull;
    h = digest_device(h, t->be, m->master, m->params.padded_numel);
    h = digest_device(h, t->be, t->opt.momentum, m->params.padded_numel);
    h = digest_device(h, t->be, m->running, m->stats_numel);
    char values[6][32];
    snprintf(values[0], sizeof values[0], "%ld", t->step);
    snprintf(values[1], sizeof values[1], "%d", t->epoch);
    snprintf(values[2], sizeof values[2], "%d", t->step_in_epoch);
    snprintf(values[3], sizeof values[3], "%.9g", st.scale);
    snprintf(values[4], sizeof values[4], "%d/%d", st.growth_count, st.skipped_total);
    snprintf(values[5], sizeof values[5], "%016" PRIx64, h);
    const char *names[] = {"step", "epoch", "step of the epoch", "scale", "growth_count/skipped_total",
                           "the digest of weights, momentum and BN statistics"};
    const char *list[] = {values[0], values[1], values[2], values[3], values[4], values[5]};
    return agree_same(t->comm, "the resumed checkpoints", 6, names, list);
}
