// model_tensors.h - a model's tensors in a safetensors file: every parameter under its torchvision name and
// layout, BN running statistics and counters, the names amptrain's checkpoints add (momentum, the EMA as
// torchvision's AveragedModel stores it), and the checks a reader applies (finite values, a variance that is
// not negative, counters that are not negative). train/checkpoint.h writes and reads whole runs with these;
// model_file.h reads weights alone.
#ifndef AMPTRAIN_MODEL_TENSORS_H
#define AMPTRAIN_MODEL_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/safetensors.h"
#include "model/resnext.h"

#define CHECKPOINT_MOMENTUM_PREFIX "amptrain.momentum."
#define CHECKPOINT_EMA_PREFIX "module."
#define CHECKPOINT_EMA_COUNT "n_averaged"
// The metadata `format` of every version of amptrain's checkpoint; this one writes and reads version 1.
#define CHECKPOINT_FORMAT_PREFIX "amptrain-checkpoint-"
#define CHECKPOINT_FORMAT CHECKPOINT_FORMAT_PREFIX "1"

// The model's shape as one string ("layers=... classes=N"), so a file for another model is refused by name.
void checkpoint_model_signature(const Model *m, char *out, size_t n);
// Every BN layer's running_mean, running_var (stats: (stats_numel) fp32, our layout) and num_batches_tracked
// under `prefix` ("" for the model, CHECKPOINT_EMA_PREFIX for the EMA).
void checkpoint_write_bn_stats(SafetensorsWriter *w, const Model *m, const char *prefix, const float *stats,
                               const int64_t *tracked);
// 0 when x[0..n) is finite; else 1 with one line in err naming the tensor and the first bad element.
int checkpoint_check_finite(const SafetensorsFile *f, const char *name, const float *x, size_t n, char *err,
                            size_t err_len);
// Reads fp32 tensor `name` of p's torchvision shape into ours (our layout), refusing non-finite values.
// scratch: (p->numel) floats.
int checkpoint_read_param(SafetensorsFile *f, const ParamInfo *p, const char *name, float *scratch,
                          float *ours, char *err, size_t err_len);
// A non-negative I64 scalar tensor.
int checkpoint_read_count(SafetensorsFile *f, const char *name, int64_t *value, char *err, size_t err_len);
// The model part alone (torchvision names and layouts) into host buffers in our layout: master
// (padded_numel) fp32, stats (stats_numel) fp32 running mean/var, tracked = num_batches_tracked.
// Reads a torchvision state_dict exported to safetensors as well as an amptrain checkpoint. Every name is
// read with prefix in front ("" for the model, "module." for an AveragedModel's copy, model_file.h);
// skip_classifier leaves fc.weight and fc.bias in master as they were. 0, or 1 with one line in err: a
// tensor missing, of another dtype or shape (both named), holding NaN or inf, a negative variance or count.
int checkpoint_read_model(SafetensorsFile *f, const Model *m, const char *prefix, int skip_classifier,
                          float *master, float *stats, int64_t *tracked, char *err, size_t err_len);

#endif
