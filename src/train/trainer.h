// trainer.h - a training run: set-up, the loop around the step (step.h), the deferred log records,
// evaluation at each epoch's end (evaluate.h), checkpoints and the stop every rank agrees on.
#ifndef AMPTRAIN_TRAINER_H
#define AMPTRAIN_TRAINER_H

#include <signal.h>
#include <stdint.h>

#include "amp/scaler.h"
#include "core/backend.h"
#include "config/config.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "model/activations.h"
#include "model/resnext.h"
#include "train/divergence.h"
#include "train/ema.h"
#include "train/evaluate.h"
#include "train/grad_buckets.h"
#include "train/input.h"
#include "train/metrics.h"
#include "train/micro_batch.h"
#include "train/optimizer.h"
#include "train/step.h"

// Log records travel one interval behind the training: at a logging step the loss and the scaler state
// are copied back asynchronously, and the record is completed and written at the next logging step (or
// before an evaluation, a checkpoint, the end), so the step never waits for the device.
typedef struct TrainerLog {
    Metrics metrics;
    float *readback;     // host_alloc'ed: [0] loss, then a ScalerState, the state check's flag, the
                         // gradient norm (with clipping)
    StepRecord pending;  // the record whose device values are on their way back (has_pending)
    int has_pending;
    long last_step;            // the step of the last record
    double last_time;          // clock_seconds() then
    double last_loss;          // the loss of the last record completed
    double data_wait_s;        // seconds the step loop waited for the loader since the last record
    double data_wait_total_s;  // ... over the whole run
} TrainerLog;

// Start-up, from trainer_init's start to the end of the first step (cuDNN's search), or of the second
// when graphs are on (the capture); the steady state is what follows.
typedef struct StartupTimes {
    double init_start;  // clock_seconds() when trainer_init began
    double build_s;     // trainer_init's start to the model's upload but for the kernel choices: data opened,
                        // shapes, the weights drawn (beside the choices) and uploaded
    double choices_s;   // model_prepare_ops: the backend's kernel choices (cuDNN's search, batch-norm pairs)
    double search_s;    // of the whole start-up, the seconds spent timing kernels (the rest of the choices
                        // came from cudnn.cache or rank 0; core/kernel_cache.h)
    double startup_s;   // seconds from trainer_init's start to the end of start-up
    double steady_start;  // clock_seconds() at the end of start-up
    long steady_images;   // images_seen then
} StartupTimes;

typedef struct Trainer {
    const Config *cfg;
    Backend *be;
    Comm *comm;       // host-side communicator (MPI or single): control, eval sums, BN stats
    Comm *grad_comm;  // the one that sums gradients in backend memory (NCCL on GPUs, else == comm)
    Model model;      // at the training images' side
    Activations act;  // this rank's per-step buffers at data.batch_size
    LossScaler scaler;
    Sgd opt;
    Ema ema;  // the weights' moving average (train.ema_decay; enabled 0: none)
    GradBuckets buckets;
    Dataset *train_set;
    Sampler sampler;
    TrainerInput input;
    // MixUp/CutMix (data.mixup_alpha, data.cutmix_alpha; NULL both when off): the step's draws, one per
    // micro-batch, made on the host (mix_host) and uploaded before the step to backend memory (mix), where
    // batch_mix and softmax_xent read them, so a replayed graph follows them (data/batch_mix.h)
    BatchMix *mix, *mix_host;  // (train.accum_steps)
    StepGraph graph;
    // (model.stats_numel) fp32, backend memory: the BN running statistics before a step of several
    // micro-batches (train.accum_steps > 1), put back when that step is voided (step.h); else NULL
    float *running_kept;
    // Marks the phases of each step on the compute stream (trainer_step_phases); a timed step runs as
    // plain launches.
    int timed;
    int loader_abandoned;  // a loader thread stuck in a read may still touch train_set: it is never closed
    Evaluator eval;
    double best_top1;  // the best validation top-1 of this run (best.safetensors), -1 before one
    Divergence div;
    long saved_step;      // the step of the newest last.safetensors this run wrote, -1 before one
    const char *outcome;  // after trainer_run: "done", "stopped" (signal), "diverged", "failed"
    TrainerLog log;
    StartupTimes times;
    int steps_per_epoch;
    long total_steps;  // optimizer steps of the whole run
    double base_lr;
    // position: the next step to run is (epoch, step_in_epoch); `step` counts steps done
    int epoch, step_in_epoch;
    long step;
    long first_step;             // the step this run started at (after a resume, the checkpoint's)
    long images_seen;            // global samples trained on by this run
    double train_seconds;        // the loop
    double total_seconds;        // trainer_init's start to the loop's end: start-up and training
    double steady_images_per_s;  // images per second after start-up (evaluation and checkpoints included)
} Trainer;

// Builds everything from a validated config. With checkpoint.resume set, loads it (refusing a mismatch
// or values no run writes, checkpoint.h). Rank 0 proves the outputs writable (outputs.h). Every stage is
// agreed over ranks (dist/agree.h): returns 0 on every rank, or on every rank the failing rank's exit
// code (2: data, resume file, outputs) with its message printed once.
int trainer_init(Trainer *t, const Config *cfg, Backend *be, Comm *comm, Comm *grad_comm);
// Every rank must see the same data under the same data.path (per-node copies may differ): the sample
// counts and dataset_digest of both splits compared with rank 0's (dist/agree.h agree_same). 0, or 2 on
// every rank with the first difference printed.
int trainer_agree_data(Comm *comm, const Dataset *train, const Dataset *val);
// Runs to the end (or until *stop is set on any rank: then finishes the step, checkpoints, returns 0; a
// stop that ends a wait for a micro-batch inside a step of several voids that step instead, step.h).
// A failed write to the metrics file stops every rank the same way but returns 1. A run that diverges
// (divergence.h) stops on every rank at the next log record or checkpoint and returns 4, with the reason
// on stderr and in t->div.reason. No checkpoint is written from a non-finite state: last.safetensors
// stays the newest finite one. checkpoint.keep > 1 keeps step-<step>.safetensors files too;
// best.safetensors follows the best validation top-1.
int trainer_run(Trainer *t, volatile sig_atomic_t *stop);
// Validation loss / top-1 / top-5 over all ranks at the current position (evaluate.h), and the EMA's
// (has_ema) when it is on and the first evaluation was not stopped.
EvalRecord trainer_evaluate(Trainer *t);
// The 1-based number of the epoch the last step done belonged to (0 before the first step): the one
// epoch number step lines, evaluation lines, the metrics file and the summary all show.
int trainer_last_epoch(const Trainer *t);
void trainer_free(Trainer *t);

#endif
