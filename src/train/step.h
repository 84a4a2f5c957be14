// step.h - the training step contract (docs/design.md), its CUDA graph and its phase timings.
//
// One optimizer step, per rank, with S the loss scale on the device:
//   1. A micro-batches (train.accum_steps) from the loader, this rank's shard of the global batch; with
//      A > 1 the ranks agree before the last micro-step that each has them all (a stop may end the wait
//      for one: the step is then voided on every rank, trainer_step)
//   2. forward under autocast
//   3. backward seeded with S / (samples of the whole step over all ranks)
//   4. on the last micro-step, each gradient bucket is summed across ranks as soon as it is complete
//   5. one pass over the reduced buffer sets the local inf/NaN flag
//   6. MAX-allreduce of the flag: every rank holds the same verdict
//   7. with train.clip_grad_norm: the global norm of the unscaled reduced gradients (device-side; the same
//      on every rank, which all hold the same reduced buffer)
//   8. SGD step or skip (device-side, reads the verdict, and the norm for its clip factor)
//   9. GradScaler's update of S (device-side)
//  10. with train.ema_decay: the EMA update this step calls for (device-side, reads what the host wrote)
// Nothing waits for the host inside the step; loss and scale come back asynchronously for logging.
#ifndef AMPTRAIN_STEP_H
#define AMPTRAIN_STEP_H

#include "train/micro_batch.h"

// The captured step (train.cuda_graph). Steps with a full global batch, one micro-batch and no debug
// injection replay it; the first such step runs eagerly (cuDNN's algorithm search, workspaces), the second
// is captured.
typedef struct StepGraph {
    int enabled;    // the backend can capture and train.cuda_graph allows it
    int warm;       // an eligible step ran eagerly
    void *exec;     // the backend's graph, NULL until captured
    long replayed;  // steps replayed from it (for the summary)
} StepGraph;

// Phase split of a timed step for the benchmark: compute = forward + backward, exposed_comm = waiting for
// gradient sums + the verdict, optimizer = SGD and the scaler.
typedef struct StepPhases {
    float compute_ms, exposed_comm_ms, optimizer_ms;
} StepPhases;

struct Trainer;
// One optimizer step over n_micro micro-batches, fetched in order from next(ctx, k); 1 once taken. next may
// return NULL for k > 0 (its wait ended by the run's stop): then the step is voided on every rank (they
// agree on it before the last micro-step), no optimizer step is taken, the model is left as it was before
// the step (BN running statistics and num_batches_tracked put back; t->running_kept holds them meanwhile)
// and the position does not move; returns 0.
int trainer_step(struct Trainer *t, MicroBatchFn next, void *ctx, int n_micro);
// The same over an array of micro-batches (tests, the benchmark).
void trainer_step_array(struct Trainer *t, const MicroBatch *micro, int n_micro);
// Steps 5-10 on the gradients in t->model.grads, summed over ranks already: what every step ends with.
// Outside trainer_step (the optimizer's parity test), call sgd_set_lr, ema_begin_step and
// scaler_begin_step before, and ema_end_step after, as trainer_step does.
void trainer_apply_gradients(struct Trainer *t);
// The phases of the last step (waits for it); requires t->timed = 1 before that step.
StepPhases trainer_step_phases(struct Trainer *t);

#endif
