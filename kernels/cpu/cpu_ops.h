// cpu_ops.h - the CPU backend's ops, one file per family, wired into a Backend by cpu_backend.c.
//
// Every op follows the same three steps: read its dt inputs into fp32 scratch (cpu_floats_load), compute
// in fp32 (double for statistics and sums over a whole batch), store the result rounded once to dt
// (cpu_floats_store). Scratch is plain host memory and is not counted in peak_bytes: like a cuDNN
// workspace it lives only for the duration of one op.
#ifndef AMPTRAIN_CPU_OPS_H
#define AMPTRAIN_CPU_OPS_H

#include "core/backend.h"
#include "core/op_log.h"

// ---- scratch and dtype conversion (cpu_backend.c) -------------------------------------------------
// n floats of scratch, zeroed; free() when done. Never NULL.
float *cpu_scratch(size_t n);
// A fresh fp32 copy of src (n elements of dt); free() when done.
float *cpu_floats_load(const void *src, DType dt, size_t n);
// dst (n elements of dt) = src, or dst += src when accumulate (the sum in fp32, rounded once to dt).
void cpu_floats_store(void *dst, DType dt, const float *src, size_t n, int accumulate);

// ---- the ops core/backend_ops.def marks LIST for the CPU: cpu_<op>, one file per family ---------------
// cpu_conv.c, cpu_batchnorm.c, cpu_pool.c, cpu_linear.c, cpu_loss.c, cpu_mix.c, cpu_optim.c; casts, input and
// the graph log's accessor in cpu_backend.c; graphs as op logs in cpu_graph.c.
#define CPU_DECLARE_LIST(ret, op, params) ret cpu_##op(Backend *be BACKEND_PARAMS(params));
#define CPU_DECLARE_OWN(ret, op, params)
#define CPU_DECLARE_NONE(ret, op, params)
#define BACKEND_OP(ret, op, cpu, cuda, graph, params) CPU_DECLARE_##cpu(ret, op, params)
#include "core/backend_ops.def"
#undef BACKEND_OP

// ---- the graph capture's state (kept by cpu_backend.c, used by cpu_graph.c) ---------------------------
void cpu_graph_set_log(Backend *be, OpLog *log);
void cpu_graph_save_ops(Backend *be);
void cpu_graph_restore_ops(Backend *be);

#endif
