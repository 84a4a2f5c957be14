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

// ---- convolution (cpu_conv.c) ---------------------------------------------------------------------
void cpu_conv_forward(Backend *be, const ConvShape *s, DType dt, const void *x, const void *w, void *y);
void cpu_conv_backward_data(Backend *be, const ConvShape *s, DType dt, const void *dy, const void *w,
                            void *dx, int accumulate);
void cpu_conv_backward_filter(Backend *be, const ConvShape *s, DType dt, const void *x, const void *dy,
                              void *dw, int accumulate);

// ---- batch norm + residual + ReLU (cpu_batchnorm.c) ------------------------------------------------
void cpu_bn_forward_train(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                          int relu, const float *gamma, const float *beta, float *running_mean,
                          float *running_var, float momentum, float eps, float *save_mean,
                          float *save_invstd, void *y);
void cpu_bn_forward_eval(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                         int relu, const float *gamma, const float *beta, const float *running_mean,
                         const float *running_var, float eps, void *y);
void cpu_bn_forward_saved(Backend *be, int rows, int c, DType dt, const void *x, int relu, const float *gamma,
                          const float *beta, const float *save_mean, const float *save_invstd, void *y);
void cpu_bn_backward(Backend *be, int rows, int c, DType dt, const void *x, const void *y, const void *dy,
                     int relu, const float *gamma, const float *save_mean, const float *save_invstd,
                     void *dx, int accumulate, void *dgamma, void *dbeta, int accumulate_params,
                     void *d_residual);

// ---- pooling (cpu_pool.c) ----------------------------------------------------------------------------
void cpu_maxpool_forward(Backend *be, const PoolShape *s, DType dt, const void *x, void *y);
void cpu_maxpool_backward(Backend *be, const PoolShape *s, DType dt, const void *x, const void *y,
                          const void *dy, void *dx);
void cpu_avgpool_forward(Backend *be, int n, int hw, int c, DType dt, const void *x, void *y);
void cpu_avgpool_backward(Backend *be, int n, int hw, int c, DType dt, const void *dy, void *dx);

// ---- classifier (cpu_linear.c) -----------------------------------------------------------------------
void cpu_linear_forward(Backend *be, int n, int in, int out, DType dt, const void *x, const void *w,
                        const void *b, void *y);
void cpu_linear_backward(Backend *be, int n, int in, int out, DType dt, const void *x, const void *w,
                         const void *dy, void *dx, void *dw, void *db, int accumulate);

// ---- loss (cpu_loss.c) ---------------------------------------------------------------------------------
void cpu_softmax_xent(Backend *be, int n, int classes, DType logits_dt, const void *logits,
                      const int32_t *labels, float *loss_out, void *dlogits, const float *scale,
                      float seed_factor);

// ---- AMP and optimizer (cpu_optim.c) ---------------------------------------------------------------
void cpu_nonfinite_check(Backend *be, DType dt, const void *grad, size_t n, float *flag);
void cpu_sgd_step(Backend *be, size_t n, DType grad_dt, const void *grad, float *master, float *mom,
                  void *copy, const SgdParams *p, const float *lr, const ScalerState *state);
void cpu_scaler_update(Backend *be, ScalerState *state, float growth, float backoff, int interval,
                       int dynamic);

// ---- graphs as op logs (cpu_graph.c; the capture state lives in cpu_backend.c) --------------------------
void cpu_graph_begin(Backend *be);
void *cpu_graph_end(Backend *be);
void cpu_graph_launch(Backend *be, void *graph);
void cpu_graph_destroy(Backend *be, void *graph);
OpLog *cpu_graph_log(Backend *be);  // the log being captured into, NULL outside a capture
void cpu_graph_set_log(Backend *be, OpLog *log);
void cpu_graph_save_ops(Backend *be);
void cpu_graph_restore_ops(Backend *be);

#endif
