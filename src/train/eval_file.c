#include "train/eval_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "amp/autocast.h"
#include "checkpoint/model_file.h"
#include "data/dataset.h"
#include "dist/agree.h"
#include "model/activations.h"
#include "model/resnext.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/outputs.h"
#include "train/trainer.h"

// The validation split, opened and agreed over ranks. 0, or 2 with the message printed.
static int open_val(const Config *cfg, Comm *comm, Dataset **val) {
    char err[AGREE_MESSAGE_MAX] = "";
    int rc = dataset_open_val(&cfg->data, &cfg->model, cfg->train.seed, NULL, val, err, sizeof err);
    if (rc == 0 && !*val) {
        snprintf(err, sizeof err,
                 "--eval: the config has no validation split (data.source %s with data.val_size 0): "
                 "set data.val_size",
                 cfg->data.source);
        rc = 2;
    }
    rc = agree_startup(comm, rc, err);
    return rc == 0 ? trainer_agree_data(comm, NULL, *val) : rc;
}

// Rank 0: `path` appended to (its folder made). 0, or 2 with one line in err.
static int open_metrics(Metrics *mt, const Config *cfg, const char *path, int rank, int world, char *err,
                        size_t cap) {
    LogConfig log = cfg->log;
    snprintf(log.metrics, sizeof log.metrics, "%s", path);
    snprintf(log.progress, sizeof log.progress, "never");
    char dir[CONFIG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    if (rank == 0 && slash && dir[0] && outputs_make_dir(dir, NULL) != 0) {
        snprintf(err, cap, "log.metrics: cannot create the folder '%s': %s", dir, strerror(errno));
        return 2;
    }
    return metrics_open(mt, &log, rank, world, 0, 1, err, cap);
}

int eval_file_run(const Config *cfg, const char *path, const char *metrics, Backend *be, Comm *comm) {
    Dataset *val = NULL;
    int rc = open_val(cfg, comm, &val);
    if (rc != 0) {
        if (val) dataset_close(val);
        return rc;
    }
    ModelConfig at_val_side = cfg->model;
    at_val_side.image_size = val->side;
    Model m;
    model_init_shapes(&m, &at_val_side, autocast_run_dtype(&cfg->amp));
    char err[AGREE_MESSAGE_MAX] = "";
    ModelFile mf;
    rc = agree_startup(comm, model_file_read("--eval", path, &m, 0, 1, &mf, err, sizeof err), err);
    if (rc == 0) rc = model_file_agree(comm, &mf, &m, "the weights --eval loaded");
    Metrics mt = {0};
    if (rc == 0)
        rc = agree_startup(comm, open_metrics(&mt, cfg, metrics, comm->rank, comm->size, err, sizeof err),
                           err);
    if (rc == 0) {
        const int batch = cfg->data.batch_size;
        model_alloc_and_prepare(&m, be, (uint64_t)cfg->train.seed, batch);
        Activations act = {0};
        activations_alloc(&act, &m, be, batch);
        Evaluator ev = {.val_set = val};
        for (int ema = 0; ema <= mf.has_ema; ema++) {
            model_file_upload(ema ? &mf.ema : &mf.model, 0, &m, be);
            EvalRecord r = evaluate_run(&ev, &m, &act, be, comm, mf.epoch, mf.step);
            r.file = path;
            r.ema = ema;
            metrics_eval(&mt, &r);
        }
        activations_free(&act, be);
        rc = metrics_failed(&mt) ? 1 : 0;
    }
    metrics_close(&mt);
    model_file_free(&mf);
    model_free(&m, be);
    dataset_close(val);
    return rc;
}
