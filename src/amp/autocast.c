#include "amp/autocast.h"

#include <string.h>

// 1 for the ops on PyTorch's lower-precision list: they run in the autocast dtype.
static const int autocast_lowered[OP_COUNT] = {
    [OP_CONV] = 1,
    [OP_LINEAR] = 1,
};

DType autocast_run_dtype(const AmpConfig *amp) {
    if (!amp->enabled) return DTYPE_F32;
    return strcmp(amp->dtype, "bfloat16") == 0 ? DTYPE_BF16 : DTYPE_F16;
}

DType autocast_dtype(AutocastOp op, DType amp_dt) { return autocast_lowered[op] ? amp_dt : DTYPE_F32; }
