// autocast.h - the autocast policy: the dtype each op that the model looks up runs in, as one table.
//
// Modelled on PyTorch's aten/src/ATen/autocast_mode.h lists: an op on the lower-precision list runs in the
// autocast dtype (amp.dtype: fp16 or bf16, the same list for both, as torch.autocast's dtype argument
// chooses), fp32 accumulation always; without autocast everything is fp32. The table holds only the rows
// the model reads (model/resnext.c): the convolutions, whose dtype is the activations' (act_dt), and the
// classifier matmul, whose dtype is the logits'. The rest of PyTorch's list is fixed by the kernels rather
// than looked up: batch-norm statistics, running stats and affine parameters are fp32; batch-norm output,
// ReLU, the residual add and the pools follow their input; softmax and the loss read the logits in their
// dtype and do the math in fp32.
#ifndef AMPTRAIN_AUTOCAST_H
#define AMPTRAIN_AUTOCAST_H

#include "config/config.h"
#include "core/dtype.h"

typedef enum {
    OP_CONV,    // convolution: inputs and weights in the autocast dtype
    OP_LINEAR,  // classifier matmul: inputs and weights in the autocast dtype
    OP_COUNT
} AutocastOp;

// The run's autocast dtype: amp.dtype (DTYPE_F16 or DTYPE_BF16) with amp.enabled, else DTYPE_F32 (no
// autocast).
DType autocast_run_dtype(const AmpConfig *amp);

// The dtype `op` runs in under autocast dtype `amp_dt` (DTYPE_F32: autocast off).
DType autocast_dtype(AutocastOp op, DType amp_dt);

#endif
