// checkpoint_meta.h - what a checkpoint says about its run (safetensors metadata, strings): the
// position, the loss scaler and what the run trained on. checkpoint_save writes it; a resume reads it
// and is refused (one line naming the key, the file's value and this run's) when the values are ones no
// run writes, or when continuing would not be the same run: another train.seed, or other data.
//
// Keys: format, model, arch (train/checkpoint.c); amp, dynamic_scale, scale, growth_count, skipped_total,
// skipped_run (skipped steps in a row up to this one; a file without it resumes with 0), step,
// epoch, samples_done (of that epoch), seed, world_size, batch_size, accum_steps, dataset (the source's
// name), train_samples, dataset_digest (dataset_digest: the samples' identity), data_checksum
// (safetensors.h). Files written before dynamic_scale and the dataset keys existed load without those
// checks, with a warning.
#ifndef AMPTRAIN_CHECKPOINT_META_H
#define AMPTRAIN_CHECKPOINT_META_H

#include <stddef.h>

#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "data/dataset.h"
#include "data/sampler.h"

typedef struct CheckpointMeta {
    long step;   // optimizer steps done
    long epoch;  // the epoch in progress (0-based) and the samples of it consumed
    long samples_done;
    long amp;            // amp.enabled of the run that wrote it
    char amp_dtype[12];  // its amp.dtype under AMP, "float32" without
    long dynamic;        // amp.dynamic of that run; -1: not recorded
    double scale;        // its loss scale
    long growth_count, skipped_total;
    long skipped_run;  // skipped steps in a row up to this one (amp.max_consecutive_skips)
    long seed, world, batch, accum;
    char dataset[32];  // Dataset.name; "": not recorded (then train_samples and dataset_digest neither)
    long train_samples;
    char dataset_digest[17];
} CheckpointMeta;

// What a resume is compared with: this run's config, its training data and its sampler (W, b, A, size).
typedef struct CheckpointRun {
    const Config *cfg;
    const Dataset *train;
    const Sampler *sampler;
} CheckpointRun;

void checkpoint_meta_write(SafetensorsWriter *w, const CheckpointMeta *meta);

// Reads every key; 0, or 1 with one line in err (a key missing or not a number).
int checkpoint_meta_read(const SafetensorsFile *f, CheckpointMeta *meta, char *err, size_t err_len);

// 0 when `run` may continue from meta; else 1 with one line in err: another seed, other data or another
// autocast dtype; values no run writes (negative counters, samples_done beyond the epoch, fewer steps than
// epochs begun, more steps than samples consumed, more than INT32_MAX steps, growth_count or skipped_total
// beyond step, a loss scale that is no positive normal fp32 number, a non-positive
// world_size/batch_size/accum_steps, an amp_dtype that does not go with amp).
int checkpoint_meta_check(const SafetensorsFile *f, const CheckpointMeta *meta, const CheckpointRun *run,
                          char *err, size_t err_len);

#endif
