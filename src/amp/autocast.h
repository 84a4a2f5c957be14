// autocast.h - the autocast policy: the dtype each op that the model looks up runs in, as one table.
//
// Modelled on PyTorch's aten/src/ATen/autocast_mode.h lists. The table holds only the rows the model reads
// (model/resnext.c): the convolutions, whose dtype is the activations' (act_dt), and the classifier matmul,
// whose dtype is the logits'; both fp16 under AMP (fp32 accumulation), fp32 without. The rest of PyTorch's
// list is fixed by the kernels rather than looked up: batch-norm statistics, running stats and affine
// parameters are fp32; batch-norm output, ReLU, the residual add and the pools follow their input; softmax
// and the loss read the logits in their dtype and do the math in fp32.
#ifndef AMPTRAIN_AUTOCAST_H
#define AMPTRAIN_AUTOCAST_H

#include "core/dtype.h"

typedef enum {
    OP_CONV,    // convolution: fp16 inputs and weights
    OP_LINEAR,  // classifier matmul: fp16 inputs and weights
    OP_COUNT
} AutocastOp;

// The dtype `op` runs in, given whether AMP is on.
DType autocast_dtype(AutocastOp op, int amp_enabled);

#endif
