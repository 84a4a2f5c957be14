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

#include "checkpoint/model_tensors.h"
#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "data/dataset.h"
#include "train/trainer.h"

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

#endif
