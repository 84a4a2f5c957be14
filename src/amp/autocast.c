#include "amp/autocast.h"

// The dtype of each op under AMP.
static const DType autocast_table[OP_COUNT] = {
    [OP_CONV] = DTYPE_F16,
    [OP_LINEAR] = DTYPE_F16,
};

DType autocast_dtype(AutocastOp op, int amp_enabled) { return amp_enabled ? autocast_table[op] : DTYPE_F32; }
