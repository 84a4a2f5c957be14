// autocast.h - the autocast policy: which dtype each op of the model runs in, as one table.
//
// Modelled on PyTorch's aten/src/ATen/autocast_mode.h lists: convolutions and matmuls run in fp16 (fp32
// accumulation); reductions that decide numerics (batch-norm statistics, softmax, the loss) run in fp32;
// element-wise ops and pooling follow their input. With AMP off, every op is fp32.
#ifndef AMPTRAIN_AUTOCAST_H
#define AMPTRAIN_AUTOCAST_H

#include "core/dtype.h"

typedef enum {
    OP_CONV,          // convolution: fp16 inputs and weights
    OP_LINEAR,        // classifier matmul: fp16 inputs and weights
    OP_BN_STATS,      // batch-norm mean/variance, running stats, affine params: fp32
    OP_BN_OUTPUT,     // batch-norm output: follows its input (fp16 after a conv)
    OP_RELU,          // follows its input
    OP_ADD,           // residual add: follows its input
    OP_MAXPOOL,       // follows its input
    OP_AVGPOOL,       // follows its input
    OP_SOFTMAX_XENT,  // softmax and loss: fp32 (logits are read in their dtype, math in fp32)
    OP_COUNT
} AutocastOp;

typedef enum { CAST_FP16, CAST_FP32, CAST_FOLLOW_INPUT } CastPolicy;

// The policy row of an op (for documentation and tests).
CastPolicy autocast_policy(AutocastOp op);
const char *autocast_op_name(AutocastOp op);
// The dtype `op` runs in, given whether AMP is on and the dtype of its input.
DType autocast_dtype(AutocastOp op, int amp_enabled, DType input_dt);

#endif
