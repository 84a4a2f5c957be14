#include "amp/autocast.h"

static const struct {
    const char *name;
    CastPolicy policy;
} autocast_table[OP_COUNT] = {
    [OP_CONV] = {"conv2d", CAST_FP16},
    [OP_LINEAR] = {"linear", CAST_FP16},
    [OP_BN_STATS] = {"batch_norm statistics", CAST_FP32},
    [OP_BN_OUTPUT] = {"batch_norm output", CAST_FOLLOW_INPUT},
    [OP_RELU] = {"relu", CAST_FOLLOW_INPUT},
    [OP_ADD] = {"add", CAST_FOLLOW_INPUT},
    [OP_MAXPOOL] = {"max_pool2d", CAST_FOLLOW_INPUT},
    [OP_AVGPOOL] = {"adaptive_avg_pool2d", CAST_FOLLOW_INPUT},
    [OP_SOFTMAX_XENT] = {"cross_entropy", CAST_FP32},
};

CastPolicy autocast_policy(AutocastOp op) { return autocast_table[op].policy; }

const char *autocast_op_name(AutocastOp op) { return autocast_table[op].name; }

DType autocast_dtype(AutocastOp op, int amp_enabled, DType input_dt) {
    if (!amp_enabled) return DTYPE_F32;
    switch (autocast_table[op].policy) {
    case CAST_FP16: return DTYPE_F16;
    case CAST_FP32: return DTYPE_F32;
    case CAST_FOLLOW_INPUT: return input_dt;
    }
    return DTYPE_F32;
}
