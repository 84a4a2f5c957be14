// evaluate.h - validation: loss, top-1 and top-5 over the whole validation split, every rank taking the
// samples rank, rank + world, ..., with batch-norm running statistics averaged over ranks first.
#ifndef AMPTRAIN_EVALUATE_H
#define AMPTRAIN_EVALUATE_H

#include <signal.h>

#include "core/backend.h"
#include "data/dataset.h"
#include "dist/comm.h"
#include "model/activations.h"
#include "model/resnext.h"
#include "train/metrics.h"

typedef struct Evaluator {
    Dataset *val_set;  // NULL: no validation split
    EvalRecord last;   // the latest evaluation of the run ...
    int has_last;      // ... once one ran
    volatile sig_atomic_t
        *stop;  // the run's stop flag: set, the evaluation ends at its next batch (NULL: none)
    // Evaluation at a side of its own (data.val_crop unlike data.train_crop): a view of the training model at
    // that side, sharing its weights and statistics, and its buffers inside the training arena, which is made
    // large enough for both. own_side 0: evaluation runs the training model and buffers.
    int own_side;
    Model view;
    Activations view_act;
} Evaluator;

// Before the training buffers are allocated: when the validation images' side differs from train_side, makes
// the view of m at that side and asks act's arena to be large enough for its buffers at `batch` images.
void evaluate_layout(Evaluator *ev, const Model *m, Activations *act, int batch, int train_side);
// After act is allocated: lays the view's buffers out inside act's arena (nothing without a view).
void evaluate_share_buffers(Evaluator *ev, Activations *act, int batch);
// Frees the view (a zeroed Evaluator is fine).
void evaluate_free(Evaluator *ev, Backend *be);

// Averages BN running statistics across ranks (before evaluation and checkpoints).
void evaluate_sync_bn_stats(Model *m, Backend *be, Comm *comm);
// The same for any n fp32 values in backend memory: their mean over ranks on every rank.
void evaluate_average_over_ranks(float *values, size_t n, Backend *be, Comm *comm);
// The record of (epoch, step): the model (or its view at the validation side) in evaluation mode over ev's
// val_set in batches of act->max_batch, summed over ranks (only epoch and step without a val_set). A rank
// that sees ev->stop set evaluates no further batch, so an evaluation ends within a batch of a stop; its
// record then counts fewer samples than the split holds (samples, the same on every rank, tells).
EvalRecord evaluate_run(Evaluator *ev, Model *m, Activations *act, Backend *be, Comm *comm, int epoch,
                        long step);

#endif
