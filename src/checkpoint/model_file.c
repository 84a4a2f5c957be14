#include "checkpoint/model_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/model_tensors.h"
#include "checkpoint/checkpoint_meta.h"
#include "checkpoint/safetensors.h"
#include "core/check.h"
#include "core/digest.h"
#include "core/log.h"
#include "dist/agree.h"

static void weights_alloc(ModelWeights *w, const Model *m) {
    w->master = xcalloc(m->params.padded_numel, sizeof(float));
    w->stats = xcalloc(m->stats_numel ? m->stats_numel : 1, sizeof(float));
}

static void weights_free(ModelWeights *w) {
    free(w->master), free(w->stats);
    memset(w, 0, sizeof *w);
}

void model_file_free(ModelFile *mf) {
    weights_free(&mf->model);
    weights_free(&mf->ema);
    memset(mf, 0, sizeof *mf);
}

// 1 when `name` is a key of m's state_dict: a parameter, or a BN layer's running_mean, running_var or
// num_batches_tracked.
static int model_has_tensor(const Model *m, const char *name) {
    if (params_find(&m->params, name) >= 0) return 1;
    const char *dot = strrchr(name, '.');
    if (!dot ||
        (strcmp(dot, ".running_mean") && strcmp(dot, ".running_var") && strcmp(dot, ".num_batches_tracked")))
        return 0;
    size_t len = (size_t)(dot - name);
    for (int i = 0; i < m->n_bn; i++)
        if (strlen(m->bn_list[i]->prefix) == len && !strncmp(m->bn_list[i]->prefix, name, len)) return 1;
    return 0;
}

// Every tensor of the file is the model's (or the EMA copy's), or state amptrain and AveragedModel keep
// beside it: a deeper network's extra blocks must not load silently into the first ones' names.
static int check_no_foreign(const SafetensorsFile *f, const Model *m, char *err, size_t err_len) {
    const size_t ema = strlen(CHECKPOINT_EMA_PREFIX);
    for (size_t i = 0; i < st_count(f); i++) {
        const char *name = st_tensor(f, i)->name;
        if (!strncmp(name, "amptrain.", 9) || !strcmp(name, "n_averaged")) continue;
        if (model_has_tensor(m, strncmp(name, CHECKPOINT_EMA_PREFIX, ema) ? name : name + ema)) continue;
        snprintf(err, err_len,
                 "%s: tensor '%s' is no part of this model (model.arch %s, layers [%d, %d, %d, %d]): "
                 "a file of another network?",
                 st_path(f), name, m->cfg.arch, m->cfg.layers[0], m->cfg.layers[1], m->cfg.layers[2],
                 m->cfg.layers[3]);
        return 1;
    }
    return 0;
}

// 1 when the file's classifier has the model's input width but another class count: *classes set to it.
static int other_classifier(const SafetensorsFile *f, const Model *m, long *classes) {
    const StTensor *w = st_find(f, "fc.weight"), *b = st_find(f, "fc.bias");
    const int64_t in = m->params.items[m->fc_weight].shape[1];
    if (!w || !b || w->dtype != ST_F32 || b->dtype != ST_F32 || w->ndim != 2 || b->ndim != 1) return 0;
    if (w->shape[1] != in || b->shape[0] != w->shape[0] || w->shape[0] == m->cfg.num_classes) return 0;
    *classes = (long)w->shape[0];
    return 1;
}

static int has_ema(const SafetensorsFile *f) {
    for (size_t i = 0; i < st_count(f); i++)
        if (!strncmp(st_tensor(f, i)->name, CHECKPOINT_EMA_PREFIX, strlen(CHECKPOINT_EMA_PREFIX))) return 1;
    return 0;
}

// err = "who: " err.
static void prefix_message(const char *who, char *err, size_t err_len) {
    size_t n = strlen(who) + 2, len = strlen(err);
    if (n + len + 1 > err_len) len = err_len > n + 1 ? err_len - n - 1 : 0;
    if (len == 0) return;
    memmove(err + n, err, len);
    err[n + len] = '\0';
    memcpy(err, who, n - 2);
    memcpy(err + n - 2, ": ", 2);
}

static int read_file(const char *path, const Model *m, int skip_other_classifier, int want_ema,
                     ModelFile *out, char *err, size_t err_len) {
    SafetensorsFile *f = st_open(path, err, err_len);
    if (!f) return 2;
    int rc = 2;
    const char *format = st_meta(f, "format");
    out->is_checkpoint = format && !strcmp(format, CHECKPOINT_FORMAT);
    int checked = st_load_checked(f, err, err_len);
    if (checked < 0) goto done;
    // torchvision's files carry no checksum; amptrain's have had one since it wrote checkpoints
    if (checked == 1 && out->is_checkpoint)
        log_warn("%s has no data checksum (an older amptrain wrote it): its tensors load unchecked", path);
    if (out->is_checkpoint) {
        CheckpointMeta meta;
        if (checkpoint_meta_read(f, &meta, err, err_len)) goto done;
        out->step = meta.step;
        out->epoch = (int)(meta.samples_done > 0 ? meta.epoch + 1 : meta.epoch);
    }
    if (check_no_foreign(f, m, err, err_len)) goto done;
    long classes = m->cfg.num_classes;
    out->classifier_skipped = other_classifier(f, m, &classes);
    out->file_classes = classes;
    if (out->classifier_skipped && !skip_other_classifier) {
        snprintf(err, err_len,
                 "%s: tensor 'fc.weight' classifies %ld classes, this model %d: set "
                 "model.num_classes=%ld",
                 path, classes, m->cfg.num_classes, classes);
        goto done;
    }
    weights_alloc(&out->model, m);
    if (checkpoint_read_model(f, m, "", out->classifier_skipped, out->model.master, out->model.stats,
                              &out->model.tracked, err, err_len))
        goto done;
    out->tensors = m->params.count + 3 * m->n_bn - (out->classifier_skipped ? 2 : 0);
    if (want_ema && has_ema(f)) {
        out->has_ema = 1;
        weights_alloc(&out->ema, m);
        if (checkpoint_read_model(f, m, CHECKPOINT_EMA_PREFIX, out->classifier_skipped, out->ema.master,
                                  out->ema.stats, &out->ema.tracked, err, err_len))
            goto done;
    }
    rc = 0;
done:
    st_close(f);
    return rc;
}

int model_file_read(const char *who, const char *path, const Model *m, int skip_other_classifier,
                    int want_ema, ModelFile *out, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    int rc = read_file(path, m, skip_other_classifier, want_ema, out, err, err_len);
    if (rc) {
        model_file_free(out);
        prefix_message(who, err, err_len);
    }
    return rc;
}

void model_file_describe(const ModelFile *mf, const char *who, const char *path, const Model *m, char *line,
                         size_t cap) {
    char from[160] = "";
    if (mf->is_checkpoint)
        snprintf(from, sizeof from,
                 " (an amptrain checkpoint of step %ld: its momentum, loss scale and position are "
                 "not read)",
                 mf->step);
    if (mf->classifier_skipped)
        snprintf(line, cap,
                 "%s: %d tensors from %s%s; fc.weight, fc.bias left at their initial values (the file has "
                 "%ld classes, this model %d)",
                 who, mf->tensors, path, from, mf->file_classes, m->cfg.num_classes);
    else
        snprintf(line, cap, "%s: %d tensors from %s%s, every tensor of the model", who, mf->tensors, path,
                 from);
}

void model_file_upload(const ModelWeights *w, int keep_classifier, Model *m, Backend *be) {
    const size_t np = m->params.padded_numel;
    float *master = xcalloc(np, sizeof(float));
    memcpy(master, w->master, np * sizeof(float));
    for (int i = 0; keep_classifier && i < m->params.count; i++) {
        const ParamInfo *p = &m->params.items[i];
        if (i == m->fc_weight || i == m->fc_bias)
            be->to_host(be, master + p->offset, m->master + p->offset, p->numel * sizeof(float));
    }
    be->to_device(be, m->master, master, np * sizeof(float));
    be->to_device(be, m->running, w->stats, m->stats_numel * sizeof(float));
    m->num_batches_tracked = w->tracked;
    model_refresh_compute(m, be);
    free(master);
}

static void digest_weights(Digest *d, const ModelWeights *w, const Model *m) {
    digest_add(d, w->master, m->params.padded_numel * sizeof(float));
    digest_add(d, w->stats, m->stats_numel * sizeof(float));
    digest_add(d, &w->tracked, sizeof w->tracked);
}

int model_file_agree(Comm *comm, const ModelFile *mf, const Model *m, const char *what) {
    Digest d;
    digest_init(&d);
    digest_weights(&d, &mf->model, m);
    if (mf->has_ema) digest_weights(&d, &mf->ema, m);
    char hex[17];
    digest_hex(digest_end(&d), hex);
    return agree_same(comm, what, 1, (const char *[]){"the digest of the weights and BN statistics read"},
                      (const char *[]){hex});
}
