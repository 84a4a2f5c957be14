// checkpoint.h - a training run in one safetensors file.
//
// Tensors (fp32 unless noted), with torchvision's names and layouts so that
// `torchvision.models.resnext50_32x4d().load_state_dict(..., strict=False)` takes the model:
//   <param>                         every parameter (conv weights permuted back to (C_out, C_in/g, kh, kw))
//   <bn>.running_mean, .running_var BN statistics (averaged over ranks before writing)
//   <bn>.num_batches_tracked        I64 scalar
//   amptrain.momentum.<param>       SGD momentum, same layout as the parameter
//   module.<key>, n_averaged        with train.ema_decay: the EMA of the weights as torchvision's
//                                   AveragedModel.state_dict() holds it (every model key above under module.,
//                                   n_averaged I64 scalar)
// Metadata (strings): format, arch and model shape, then the run's position, scaler and identity
// (checkpoint_meta.h), and the data region's checksum (safetensors.h).
// Written atomically (temp file, fsync, rename). Loading checks the checksum, every name, dtype and
// shape and the metadata before it changes anything, so a bad file leaves the run untouched and the
// message says what is wrong.
#ifndef AMPTRAIN_CHECKPOINT_H
#define AMPTRAIN_CHECKPOINT_H

#include <stddef.h>

#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "data/dataset.h"
#include "train/trainer.h"

#define CHECKPOINT_MOMENTUM_PREFIX "amptrain.momentum."
#define CHECKPOINT_EMA_PREFIX "module."
#define CHECKPOINT_EMA_COUNT "n_averaged"
// The metadata `format` of every version of the file; this one writes and reads version 1.
#define CHECKPOINT_FORMAT_PREFIX "amptrain-checkpoint-"
#define CHECKPOINT_FORMAT CHECKPOINT_FORMAT_PREFIX "1"

int checkpoint_save(Trainer *t, const char *path, char *err, size_t err_len);
// Restores weights, momentum, BN statistics, scaler state, the EMA (with train.ema_decay; a file without one
// restarts the average from its weights, with a warning) and the data position. Refuses (1, one line in
// err, the run untouched) a file whose data does not match its checksum (an old file without one loads
// with a warning), a checkpoint of another model, what no run writes: a tensor holding NaN or inf
// (named), a negative BN variance, and the metadata checkpoint_meta_check refuses (another seed or other
// data, counters no run writes). A position at or past the end of the run is no error: trainer_init
// leaves total_steps at or below step, and the caller says there is nothing to do.
// With amp.dynamic false the loss scale is amp.init_scale, not the file's (a warning says when they differ).
int checkpoint_load(Trainer *t, const char *path, char *err, size_t err_len);

// Every check checkpoint_load makes, without a trainer (--dry-run): the model's shapes from cfg, this
// rank's sampler over `train`. 0, or 1 with the message checkpoint_load would give.
int checkpoint_check(const char *path, const Config *cfg, const Dataset *train, int world, int rank,
                     char *err, size_t err_len);

// After every rank loaded checkpoint.resume (its own copy, maybe on another host): 0 when all resumed
// the same state (position, scaler, a digest of weights, momentum and BN statistics), else 2 on every
// rank with the first difference printed (dist/agree.h).
int checkpoint_agree_resumed(Trainer *t);

// The model part alone (torchvision names and layouts) into host buffers in our layout: master
// (padded_numel) fp32, stats (stats_numel) fp32 running mean/var, tracked = num_batches_tracked.
// Reads a torchvision state_dict exported to safetensors as well as an amptrain checkpoint. Every name is
// read with prefix in front ("" for the model, "module." for an AveragedModel's copy, model_file.h);
// skip_classifier leaves fc.weight and fc.bias in master as they were. 0, or 1 with one line in err: a
// tensor missing, of another dtype or shape (both named), holding NaN or inf, a negative variance or count.
int checkpoint_read_model(SafetensorsFile *f, const Model *m, const char *prefix, int skip_classifier,
                          float *master, float *stats, int64_t *tracked, char *err, size_t err_len);

#endif
