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
#include "config/config.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "train/grad_buckets.h"
#include "train/metrics.h"
#include "train/micro_batch.h"
#include "model/activations.h"
#include "model/resnext.h"
#include "train/optimizer.h"


typedef struct Trainer {
    const Config *cfg;
    Backend *be;
    Comm *comm;        // host-side communicator (MPI or single): control, eval sums, BN stats
    Comm *grad_comm;   // the one that sums gradients in backend memory (NCCL on GPUs, else == comm)
    Model model;       // at the training images' side
    Activations act;   // this rank's per-step buffers at data.batch_size
    // Evaluation at a side of its own (data.val_crop unlike data.train_crop): a view of the model at that side
    // and its buffers in act's arena, which is made large enough for both; eval_at_own_side 0: model and act.
    int eval_at_own_side;
    Model eval_model;
    Activations eval_act;
    PixelAffine affine;  // the training set's normalisation of raw bytes
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
    double total_seconds;  // trainer_init's start to the loop's end: start-up and training
    long images_seen;   // global samples trained on by this run
    double data_wait_s; // seconds the step loop waited for the loader since the last log record
    double data_wait_total_s;  // ... over the whole run
    // Phase split of each step for the benchmark (timing marks on the compute stream, when `timed`):
    // compute = forward + backward, exposed_comm = waiting for gradient sums + the verdict, optimizer.
    // A timed step runs as plain launches.
    int timed;
    // Input slots (backend memory, BACKEND_INPUT_SLOTS): where uploads land before the step copies them
    // into act.images / act.labels (backend.h says which stream owns a slot when).
    uint8_t *input_slot[BACKEND_INPUT_SLOTS];
    int32_t *input_slot_labels[BACKEND_INPUT_SLOTS];
    // data.decode on the device: the loader makes ImageJobs and trainer_decode has the backend decode them
    // into the slot. A job it cannot decode is replaced on the host (dataset_replace_failed) in the slot's
    // repair buffers (pinned, made at the first failure) and uploaded over its row.
    int device_decode;
    uint8_t *decode_failed;                          // (batch) input_decode's verdicts
    uint8_t *repair_images[BACKEND_INPUT_SLOTS];     // (batch, side, side, 3) u8 or NULL
    int32_t *repair_labels[BACKEND_INPUT_SLOTS];     // (batch) or NULL
    // The captured step (train.cuda_graph): NULL until captured. Steps with a full global batch, one
    // micro-batch and no debug injection replay it; the first such step runs eagerly (cuDNN's algorithm
    // search, workspaces), the second is captured.
    int graphs;          // the backend can capture and train.cuda_graph allows it
    int graph_warm;      // an eligible step ran eagerly
    void *graph;
    long graph_steps;    // steps replayed from the graph (for the summary)
    double init_start;   // clock_seconds() when trainer_init began
    double build_s;      // trainer_init's start to the model's upload but for the kernel choices: data opened,
                         // shapes, the weights drawn (beside the choices) and uploaded
    double choices_s;    // model_prepare_ops: the backend's kernel choices (cuDNN's search, batch-norm pairs)
    long first_step;     // the step this run started at (after a resume, the checkpoint's)
    double startup_s;    // seconds from trainer_init's start to the end of start-up: the first step (cuDNN's
                         // search), or the second when graphs are on (the capture)
    double steady_start; // clock_seconds() at the end of start-up
    long steady_images;  // images_seen then
    double steady_images_per_s;  // images per second after start-up (evaluation and checkpoints included)
} Trainer;

typedef struct StepPhases {
    float compute_ms, exposed_comm_ms, optimizer_ms;
} StepPhases;

// The phases of the last step (waits for it); requires t->timed = 1 before that step.
StepPhases trainer_step_phases(Trainer *t);

// Builds everything from a validated config. With checkpoint.resume set, loads it (refusing a mismatch
// or values no run writes, checkpoint.h). Rank 0 proves the outputs writable (outputs.h). Every stage is
// agreed over ranks (dist/agree.h): returns 0 on every rank, or on every rank the failing rank's exit
// code (2: data, resume file, outputs) with its message printed once.
int trainer_init(Trainer *t, const Config *cfg, Backend *be, Comm *comm, Comm *grad_comm);
// Runs to the end (or until *stop is set on any rank: then finishes the step, checkpoints, returns 0).
// A failed write to the metrics file stops every rank the same way but returns 1.
int trainer_run(Trainer *t, volatile sig_atomic_t *stop);
// Supplies micro-batch k (0..n_micro-1) of the current step; it stays valid until the next call.
typedef const MicroBatch *(*MicroBatchFn)(void *ctx, int k);
// One optimizer step over n_micro micro-batches, fetched in order from next(ctx, k).
void trainer_step(Trainer *t, MicroBatchFn next, void *ctx, int n_micro);
// Sends a host batch (pinned memory from host_alloc) up on the copy stream into input slot `slot` while
// the step before runs; the MicroBatch then carries uploaded = 1 and the slot.
void trainer_upload(Trainer *t, int slot, const uint8_t *images, const int32_t *labels, int count);
// The same for a batch of the loader's ImageJobs (t->device_decode): the backend decodes them into the slot,
// the jobs it refuses are replaced as the host path would have, and the labels follow. indices: the samples
// asked for, epoch: theirs (dataset_replace_failed). The jobs' bytes stay untouched until
// input_upload_wait(slot).
void trainer_decode(Trainer *t, int slot, const ImageJob *jobs, const int32_t *indices, const int32_t *labels,
                    int count, int epoch);
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
