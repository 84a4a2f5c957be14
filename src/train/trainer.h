// trainer.h - the training step contract (DESIGN.md) and the loop around it.
//
// One optimizer step, per rank, with S the loss scale on the device:
//   1. A micro-batches (train.accum_steps) from the loader, this rank's shard of the global batch
//   2. forward under autocast
//   3. backward seeded with S / (samples of the whole step over all ranks)
//   4. on the last micro-step, each gradient bucket is summed across ranks as soon as it is complete
//   5. one pass over the reduced buffer sets the local inf/NaN flag
//   6. MAX-allreduce of the flag: every rank holds the same verdict
//   7. SGD step or skip (device-side, reads the verdict)
//   8. GradScaler's update of S (device-side)
// Nothing waits for the host inside the step; loss and scale come back asynchronously for logging.
#ifndef AMPTRAIN_TRAINER_H
#define AMPTRAIN_TRAINER_H

#include <signal.h>
#include <stdint.h>

#include "amp/scaler.h"
#include "core/backend.h"
#include "core/config.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "grad_buckets.h"
#include "metrics.h"
#include "model/resnext.h"
#include "optimizer.h"

// One micro-batch of this rank. Images either on the host (uploaded by the step) or already in backend
// memory (the benchmark keeps a few batches resident, as torch_baseline.py does).
typedef struct MicroBatch {
    int count;                  // samples of this rank (0 allowed in an epoch's partial last step)
    int step_total;             // samples of the whole optimizer step over all ranks
    const float *host_images;   // (count, side, side, 3) fp32 or NULL
    const int32_t *host_labels; // (count) or NULL
    float *device_images;       // backend memory, used when host_images is NULL
    int32_t *device_labels;
} MicroBatch;

typedef struct Trainer {
    const Config *cfg;
    Backend *be;
    Comm *comm;        // host-side communicator (MPI or single): control, eval sums, BN stats
    Comm *grad_comm;   // the one that sums gradients in backend memory (NCCL on GPUs, else == comm)
    Model model;
    LossScaler scaler;
    Sgd opt;
    GradBuckets buckets;
    Dataset *train_set, *val_set;
    Sampler sampler;
    int steps_per_epoch;
    long total_steps;   // optimizer steps of the whole run
    double base_lr;
    // position: the next step to run is (epoch, step_in_epoch); `step` counts steps done
    int epoch, step_in_epoch;
    long step;
    // logging
    Metrics metrics;
    float *readback;    // host_alloc'ed: [0] loss, then a ScalerState
    StepRecord pending_log;  // the record whose device values are on their way back (log_pending)
    int log_pending;
    long last_log_step;
    double last_log_time;
    double last_loss;
    EvalRecord last_eval;
    int has_eval;
    double train_seconds;
    long images_seen;   // global samples trained on by this run
    // Phase split of each step for the benchmark (timing marks on the compute stream, when `timed`):
    // compute = forward + backward, exposed_comm = waiting for gradient sums + the verdict, optimizer.
    int timed;
} Trainer;

typedef struct StepPhases {
    float compute_ms, exposed_comm_ms, optimizer_ms;
} StepPhases;

// The phases of the last step (waits for it); requires t->timed = 1 before that step.
StepPhases trainer_step_phases(Trainer *t);

// Builds everything from a validated config. Returns 0, or 1/2 with a message printed (data files
// missing: 2; runtime failure: 1). With checkpoint.resume set, loads it (refusing a mismatch).
int trainer_init(Trainer *t, const Config *cfg, Backend *be, Comm *comm, Comm *grad_comm);
// Runs to the end (or until *stop is set on any rank: then finishes the step, checkpoints, returns 0).
int trainer_run(Trainer *t, volatile sig_atomic_t *stop);
// Supplies micro-batch k (0..n_micro-1) of the current step; it stays valid until the next call.
typedef const MicroBatch *(*MicroBatchFn)(void *ctx, int k);
// One optimizer step over n_micro micro-batches, fetched in order from next(ctx, k).
void trainer_step(Trainer *t, MicroBatchFn next, void *ctx, int n_micro);
// The same over an array of micro-batches (tests, the benchmark).
void trainer_step_array(Trainer *t, const MicroBatch *micro, int n_micro);
// Validation loss / top-1 / top-5 over all ranks (BN running stats averaged first).
EvalRecord trainer_evaluate(Trainer *t);
// The 1-based number of the epoch the last step done belonged to (0 before the first step): the one
// epoch number step lines, evaluation lines, the metrics file and the summary all show.
int trainer_last_epoch(const Trainer *t);
// Averages BN running statistics across ranks (before evaluation and checkpoints).
void trainer_sync_bn_stats(Trainer *t);
void trainer_free(Trainer *t);

#endif
