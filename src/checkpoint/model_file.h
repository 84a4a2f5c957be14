// model_file.h - a model's weights and BN statistics from a file, for a fresh model: model.init (a run
// that starts from trained weights, fine-tuning) and --eval (evaluation of a file alone).
//
// The file is safetensors with torchvision's state_dict names and layouts: what
//   safetensors.torch.save_file(torchvision.models.resnext50_32x4d(weights=...).state_dict(), FILE)
// writes (fp32 parameters and running statistics, I64 num_batches_tracked), or an amptrain checkpoint
// (checkpoint.h), of which only the model part is read: momentum, the loss scaler and the position are not.
// EMA weights: the file may also hold the state_dict of torchvision's AveragedModel around the model (what
// torchvision's reference train.py keeps with --model-ema), every tensor of the model once more under
// "module." (module.conv1.weight, module.bn1.running_mean, ...) beside its I64 counter "n_averaged".
//
// Rules: every tensor of the model must be in the file with the model's dtype and shape, finite, with
// variances and counts not negative (else 2, one line naming the tensor, the file's shape and the model's).
// A classifier for another number of classes (fc.weight (C, fc_in), fc.bias (C)) is skipped when the reader
// allows it (model.init: fc keeps its initial value) and refused otherwise (--eval). A tensor of the file
// that is no part of the model is refused too (the extra blocks of a deeper network), except the names
// amptrain.* (a checkpoint's own state), module.* and n_averaged.
#ifndef AMPTRAIN_MODEL_FILE_H
#define AMPTRAIN_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "dist/comm.h"
#include "model/resnext.h"

// One set of weights, host memory in our layout.
typedef struct ModelWeights {
    float *master;    // (padded_numel) fp32
    float *stats;     // (stats_numel) fp32 running mean, running var per BN layer
    int64_t tracked;  // num_batches_tracked
} ModelWeights;

typedef struct ModelFile {
    ModelWeights model;
    ModelWeights ema;  // the file's module.* copy (read only when asked for and present)
    int has_ema;
    int tensors;             // tensors read into `model`
    int classifier_skipped;  // fc.weight and fc.bias not read: the model's keep their initial values
    long file_classes;       // the file's classifier outputs
    long step;               // an amptrain checkpoint's step and its 1-based last epoch; 0 for other files
    int epoch;
    int is_checkpoint;  // an amptrain checkpoint
} ModelFile;

// Reads path for model m (shapes only are needed). skip_other_classifier: a classifier for another class
// count is skipped instead of refused. want_ema: read the module.* copy too when the file has one. Returns 0
// with *out filled (model_file_free), or 2 with one line "who: path: what is wrong" in err and *out empty.
int model_file_read(const char *who, const char *path, const Model *m, int skip_other_classifier,
                    int want_ema, ModelFile *out, char *err, size_t err_len);

// One line saying what was loaded and what kept its initial value, for `who` ("model.init"), e.g.
// "model.init: 318 tensors from FILE; fc.weight, fc.bias left at their initial values (the file has 1000
// classes, this model 10)".
void model_file_describe(const ModelFile *mf, const char *who, const char *path, const Model *m, char *line,
                         size_t cap);

// Puts w into m's backend memory (weights, BN statistics, num_batches_tracked, the compute copy). With
// keep_classifier the model's own fc.weight and fc.bias stay.
void model_file_upload(const ModelWeights *w, int keep_classifier, Model *m, Backend *be);

// After every rank read its own copy: 0 when all loaded the same (a digest of every set read), else 2 on
// every rank with the difference printed as "<what> differ between ranks: ..." (dist/agree.h).
int model_file_agree(Comm *comm, const ModelFile *mf, const Model *m, const char *what);

void model_file_free(ModelFile *mf);

#endif
