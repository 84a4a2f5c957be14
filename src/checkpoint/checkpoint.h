// checkpoint.h - a training run in one safetensors file.
//
// Tensors (fp32 unless noted), with torchvision's names and layouts so that
// `torchvision.models.resnext50_32x4d().load_state_dict(..., strict=False)` takes the model:
//   <param>                         every parameter (conv weights permuted back to (C_out, C_in/g, kh, kw))
//   <bn>.running_mean, .running_var BN statistics (averaged over ranks before writing)
//   <bn>.num_batches_tracked        I64 scalar
//   amptrain.momentum.<param>       SGD momentum, same layout as the parameter
// Metadata (strings): format, arch and model shape, amp, scale, growth_count, skipped_total, skipped_run
// (skipped steps in a row up to this one; optional), step, epoch, samples_done (of that epoch), seed, world_size, batch_size, accum_steps.
// Written atomically (temp file, fsync, rename). Loading checks every name, dtype and shape before it
// changes anything, so a bad file leaves the run untouched and the message says what is wrong.
#ifndef AMPTRAIN_CHECKPOINT_H
#define AMPTRAIN_CHECKPOINT_H

#include <stddef.h>

#include "checkpoint/safetensors.h"
#include "train/trainer.h"

#define CHECKPOINT_MOMENTUM_PREFIX "amptrain.momentum."

int checkpoint_save(Trainer *t, const char *path, char *err, size_t err_len);
// Restores weights, momentum, BN statistics, scaler state and the data position. Refuses (1, one line in
// err, the run untouched) what no run writes: a tensor holding NaN or inf (named), a negative BN
// variance, a loss scale that is not a positive normal fp32 number, negative counters, samples_done
// beyond the epoch, a step count below the epoch count, growth_count or skipped_total beyond step, a
// non-positive world_size/batch_size/accum_steps, a position past the end of train.epochs.
int checkpoint_load(Trainer *t, const char *path, char *err, size_t err_len);

// After every rank loaded checkpoint.resume (its own copy, maybe on another host): 0 when all resumed
// the same state (position, scaler, a digest of weights, momentum and BN statistics), else 2 on every
// rank with the first difference printed (dist/agree.h).
int checkpoint_agree_resumed(Trainer *t);

// The model part alone (torchvision names and layouts) into host buffers in our layout: master
// (padded_numel) fp32, stats (stats_numel) fp32 running mean/var, tracked = num_batches_tracked.
// Reads a torchvision state_dict exported to safetensors as well as an amptrain checkpoint.
int checkpoint_read_model(SafetensorsFile *f, const Model *m, float *master, float *stats, int64_t *tracked,
                          char *err, size_t err_len);

#endif
