// model_tensors.c - a model's tensors in a safetensors file under torchvision's names and layouts.
#include "checkpoint/model_tensors.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

// The model's shape as one string, so a checkpoint for another model is refused by name.
void checkpoint_model_signature(const Model *m, char *out, size_t n) {
    const ModelConfig *c = &m->cfg;
    snprintf(out, n, "layers=%d,%d,%d,%d cardinality=%d base_width=%d planes=%d classes=%d", c->layers[0],
             c->layers[1], c->layers[2], c->layers[3], c->cardinality, c->base_width, c->planes,
             c->num_classes);
}

// The BN running statistics and counter of every layer under `prefix` ("" for the model, "module." for the
// EMA): stats (stats_numel) fp32 in our layout.
void checkpoint_write_bn_stats(SafetensorsWriter *w, const Model *m, const char *prefix, const float *stats,
                               const int64_t *tracked) {
    for (int i = 0; i < m->n_bn; i++) {
        const ModelBnLayer *bn = m->bn_list[i];
        char name[PARAM_NAME_MAX + 32];
        int64_t shape[1] = {bn->c};
        snprintf(name, sizeof name, "%s%s.running_mean", prefix, bn->prefix);
        st_writer_add_copy(w, name, ST_F32, 1, shape, stats + bn->stats_offset);
        snprintf(name, sizeof name, "%s%s.running_var", prefix, bn->prefix);
        st_writer_add_copy(w, name, ST_F32, 1, shape, stats + bn->stats_offset + bn->c);
        snprintf(name, sizeof name, "%s%s.num_batches_tracked", prefix, bn->prefix);
        st_writer_add_copy(w, name, ST_I64, 0, NULL, tracked);
    }
}

// A tensor the run would train on must hold finite numbers: one NaN in a weight, a momentum or a BN
// statistic turns every later step into NaN (or a skipped step forever under AMP).
int checkpoint_check_finite(const SafetensorsFile *f, const char *name, const float *x, size_t n, char *err,
                            size_t err_len) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            snprintf(err, err_len,
                     "%s: tensor '%s' holds %s at element %zu: refusing to load "
                     "non-finite values",
                     st_path(f), name,
                     isnan(x[i]) ? "NaN"
                     : x[i] > 0  ? "+inf"
                                 : "-inf",
                     i);
            return 1;
        }
    return 0;
}

// Reads one fp32 tensor of the parameter's torchvision shape into ours (our layout).
int checkpoint_read_param(SafetensorsFile *f, const ParamInfo *p, const char *name, float *scratch,
                          float *ours, char *err, size_t err_len) {
    if (st_read(f, name, ST_F32, p->ndim, p->shape, scratch, err, err_len) != 0 ||
        checkpoint_check_finite(f, name, scratch, p->numel, err, err_len) != 0)
        return 1;
    params_from_torch_layout(p, scratch, ours);
    return 0;
}

// One BN statistic: finite, and a variance not negative (its square root normalises evaluation).
static int read_bn_stat(SafetensorsFile *f, const char *prefix, const ModelBnLayer *bn, const char *what,
                        float *dst, char *err, size_t err_len) {
    char name[PARAM_NAME_MAX + 64];
    int64_t shape[1] = {bn->c};
    snprintf(name, sizeof name, "%s%s.%s", prefix, bn->prefix, what);
    if (st_read(f, name, ST_F32, 1, shape, dst, err, err_len) ||
        checkpoint_check_finite(f, name, dst, (size_t)bn->c, err, err_len))
        return 1;
    if (strcmp(what, "running_var") != 0) return 0;
    for (int c = 0; c < bn->c; c++)
        if (dst[c] < 0) {
            snprintf(err, err_len, "%s: tensor '%s' holds the negative variance %g at element %d", st_path(f),
                     name, dst[c], c);
            return 1;
        }
    return 0;
}

// A non-negative I64 scalar tensor.
int checkpoint_read_count(SafetensorsFile *f, const char *name, int64_t *value, char *err, size_t err_len) {
    if (st_read(f, name, ST_I64, 0, NULL, value, err, err_len)) return 1;
    if (*value >= 0) return 0;
    snprintf(err, err_len, "%s: tensor '%s' is %" PRId64 ": must not be negative", st_path(f), name, *value);
    return 1;
}

int checkpoint_read_model(SafetensorsFile *f, const Model *m, const char *prefix, int skip_classifier,
                          float *master, float *stats, int64_t *tracked, char *err, size_t err_len) {
    float *scratch = xcalloc(m->params.padded_numel, sizeof(float));
    char name[PARAM_NAME_MAX + 64];
    int rc = 1;
    for (int i = 0; i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        if (skip_classifier && (i == m->fc_weight || i == m->fc_bias)) continue;
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        if (checkpoint_read_param(f, p, name, scratch, master + p->offset, err, err_len)) goto done;
    }
    for (int i = 0; i < m->n_bn; i++) {
        const ModelBnLayer *bn = m->bn_list[i];
        if (read_bn_stat(f, prefix, bn, "running_mean", stats + bn->stats_offset, err, err_len) ||
            read_bn_stat(f, prefix, bn, "running_var", stats + bn->stats_offset + bn->c, err, err_len))
            goto done;
        snprintf(name, sizeof name, "%s%s.num_batches_tracked", prefix, bn->prefix);
        if (checkpoint_read_count(f, name, tracked, err, err_len)) goto done;
    }
    rc = 0;
done:
    free(scratch);
    return rc;
}
