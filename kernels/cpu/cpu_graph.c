// cpu_graph.c - CUDA-graph semantics on the CPU backend: between graph_begin and graph_end every op is
// recorded into an OpLog (core/op_log.h) instead of run; graph_launch replays the log. What a replay
// reads is what the buffers hold then; every scalar argument is the one the capture saw. The trainer's
// graph path (train.cuda_graph: on) thus runs on the CPU too, and CI's tests hold it to plain launches.
//
// Copies between the host and the "device", waits and read-backs cannot be part of a graph (a CUDA
// capture refuses them, or bakes the host source in): called during a capture they end the job.
#include <stdlib.h>

#include "core/check.h"
#include "core/op_log.h"
#include "kernels/cpu/cpu_ops.h"

// The live Backend (its ops restored by then) travels with every entry.
#define RECORD(replay, ...)                                                                                  \
    do {                                                                                                     \
        replay##_args a_ = {be, __VA_ARGS__};                                                                \
        op_log_append(cpu_graph_log(be), replay, &a_, sizeof a_);                                            \
    } while (0)

// ---- one argument struct and one replay per op ------------------------------------------------------

typedef struct { Backend *be; void *ptr; size_t bytes; } replay_zero_args;
static void replay_zero(const void *p) {
    const replay_zero_args *a = p;
    a->be->zero(a->be, a->ptr, a->bytes);
}
static void record_zero(Backend *be, void *ptr, size_t bytes) { RECORD(replay_zero, ptr, bytes); }

typedef struct { Backend *be; void *dst; const void *src; size_t bytes; } replay_copy_args;
static void replay_copy(const void *p) {
    const replay_copy_args *a = p;
    a->be->copy(a->be, a->dst, a->src, a->bytes);
}
static void record_copy(Backend *be, void *dst, const void *src, size_t bytes) { RECORD(replay_copy, dst, src, bytes); }

typedef struct { Backend *be; void *dst; DType dst_dt; const void *src; DType src_dt; size_t n; } replay_cast_args;
static void replay_cast(const void *p) {
    const replay_cast_args *a = p;
    a->be->cast(a->be, a->dst, a->dst_dt, a->src, a->src_dt, a->n);
}
static void record_cast(Backend *be, void *dst, DType dst_dt, const void *src, DType src_dt, size_t n) {
    RECORD(replay_cast, dst, dst_dt, src, src_dt, n);
}

typedef struct { Backend *be; size_t pixels; DType src_dt; const void *src; PixelAffine affine; DType dst_dt; void *dst; } replay_input_normalize_args;
static void replay_input_normalize(const void *p) {
    const replay_input_normalize_args *a = p;
    a->be->input_normalize(a->be, a->pixels, a->src_dt, a->src, &a->affine, a->dst_dt, a->dst);
}
static void record_input_normalize(Backend *be, size_t pixels, DType src_dt, const void *src,
                                   const PixelAffine *affine, DType dst_dt, void *dst) {
    RECORD(replay_input_normalize, pixels, src_dt, src, *affine, dst_dt, dst);
}

typedef struct { Backend *be; ConvShape s; DType dt; const void *x, *w; void *y; } replay_conv_forward_args;
static void replay_conv_forward(const void *p) {
    const replay_conv_forward_args *a = p;
    a->be->conv_forward(a->be, &a->s, a->dt, a->x, a->w, a->y);
}
static void record_conv_forward(Backend *be, const ConvShape *s, DType dt, const void *x, const void *w, void *y) {
    RECORD(replay_conv_forward, *s, dt, x, w, y);
}

typedef struct { Backend *be; ConvShape s; DType dt; const void *dy, *w; void *dx; int accumulate; } replay_conv_backward_data_args;
static void replay_conv_backward_data(const void *p) {
    const replay_conv_backward_data_args *a = p;
    a->be->conv_backward_data(a->be, &a->s, a->dt, a->dy, a->w, a->dx, a->accumulate);
}
static void record_conv_backward_data(Backend *be, const ConvShape *s, DType dt, const void *dy, const void *w,
                                      void *dx, int accumulate) {
    RECORD(replay_conv_backward_data, *s, dt, dy, w, dx, accumulate);
}

typedef struct { Backend *be; ConvShape s; DType dt; const void *x, *dy; void *dw; int accumulate; } replay_conv_backward_filter_args;
static void replay_conv_backward_filter(const void *p) {
    const replay_conv_backward_filter_args *a = p;
    a->be->conv_backward_filter(a->be, &a->s, a->dt, a->x, a->dy, a->dw, a->accumulate);
}
static void record_conv_backward_filter(Backend *be, const ConvShape *s, DType dt, const void *x, const void *dy,
                                        void *dw, int accumulate) {
    RECORD(replay_conv_backward_filter, *s, dt, x, dy, dw, accumulate);
}

typedef struct {
    Backend *be; int rows, c; DType dt; const void *x, *residual; int relu; const float *gamma, *beta;
    float *running_mean, *running_var; float momentum, eps; float *save_mean, *save_invstd; void *y;
} replay_bn_forward_train_args;
static void replay_bn_forward_train(const void *p) {
    const replay_bn_forward_train_args *a = p;
    a->be->bn_forward_train(a->be, a->rows, a->c, a->dt, a->x, a->residual, a->relu, a->gamma, a->beta,
                            a->running_mean, a->running_var, a->momentum, a->eps, a->save_mean, a->save_invstd, a->y);
}
static void record_bn_forward_train(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                                    int relu, const float *gamma, const float *beta, float *running_mean,
                                    float *running_var, float momentum, float eps, float *save_mean,
                                    float *save_invstd, void *y) {
    RECORD(replay_bn_forward_train, rows, c, dt, x, residual, relu, gamma, beta, running_mean, running_var, momentum,
           eps, save_mean, save_invstd, y);
}

typedef struct {
    Backend *be; int rows, c; DType dt; const void *x, *residual; int relu; const float *gamma, *beta;
    const float *running_mean, *running_var; float eps; void *y;
} replay_bn_forward_eval_args;
static void replay_bn_forward_eval(const void *p) {
    const replay_bn_forward_eval_args *a = p;
    a->be->bn_forward_eval(a->be, a->rows, a->c, a->dt, a->x, a->residual, a->relu, a->gamma, a->beta,
                           a->running_mean, a->running_var, a->eps, a->y);
}
static void record_bn_forward_eval(Backend *be, int rows, int c, DType dt, const void *x, const void *residual,
                                   int relu, const float *gamma, const float *beta, const float *running_mean,
                                   const float *running_var, float eps, void *y) {
    RECORD(replay_bn_forward_eval, rows, c, dt, x, residual, relu, gamma, beta, running_mean, running_var, eps, y);
}

typedef struct {
    Backend *be; int rows, c; DType dt; const void *x; int relu; const float *gamma, *beta, *save_mean, *save_invstd;
    void *y;
} replay_bn_forward_saved_args;
static void replay_bn_forward_saved(const void *p) {
    const replay_bn_forward_saved_args *a = p;
    a->be->bn_forward_saved(a->be, a->rows, a->c, a->dt, a->x, a->relu, a->gamma, a->beta, a->save_mean,
                            a->save_invstd, a->y);
}
static void record_bn_forward_saved(Backend *be, int rows, int c, DType dt, const void *x, int relu,
                                    const float *gamma, const float *beta, const float *save_mean,
                                    const float *save_invstd, void *y) {
    RECORD(replay_bn_forward_saved, rows, c, dt, x, relu, gamma, beta, save_mean, save_invstd, y);
}

typedef struct {
    Backend *be; int rows, c; DType dt; const void *x, *y, *dy; int relu; const float *gamma, *save_mean, *save_invstd;
    void *dx; int accumulate; void *dgamma, *dbeta; int accumulate_params; void *d_residual;
} replay_bn_backward_args;
static void replay_bn_backward(const void *p) {
    const replay_bn_backward_args *a = p;
    a->be->bn_backward(a->be, a->rows, a->c, a->dt, a->x, a->y, a->dy, a->relu, a->gamma, a->save_mean,
                       a->save_invstd, a->dx, a->accumulate, a->dgamma, a->dbeta, a->accumulate_params, a->d_residual);
}
static void record_bn_backward(Backend *be, int rows, int c, DType dt, const void *x, const void *y, const void *dy,
                               int relu, const float *gamma, const float *save_mean, const float *save_invstd,
                               void *dx, int accumulate, void *dgamma, void *dbeta, int accumulate_params,
                               void *d_residual) {
    RECORD(replay_bn_backward, rows, c, dt, x, y, dy, relu, gamma, save_mean, save_invstd, dx, accumulate, dgamma,
           dbeta, accumulate_params, d_residual);
}

typedef struct { Backend *be; PoolShape s; DType dt; const void *x; void *y; } replay_maxpool_forward_args;
static void replay_maxpool_forward(const void *p) {
    const replay_maxpool_forward_args *a = p;
    a->be->maxpool_forward(a->be, &a->s, a->dt, a->x, a->y);
}
static void record_maxpool_forward(Backend *be, const PoolShape *s, DType dt, const void *x, void *y) {
    RECORD(replay_maxpool_forward, *s, dt, x, y);
}

typedef struct { Backend *be; PoolShape s; DType dt; const void *x, *y, *dy; void *dx; } replay_maxpool_backward_args;
static void replay_maxpool_backward(const void *p) {
    const replay_maxpool_backward_args *a = p;
    a->be->maxpool_backward(a->be, &a->s, a->dt, a->x, a->y, a->dy, a->dx);
}
static void record_maxpool_backward(Backend *be, const PoolShape *s, DType dt, const void *x, const void *y,
                                    const void *dy, void *dx) {
    RECORD(replay_maxpool_backward, *s, dt, x, y, dy, dx);
}

typedef struct { Backend *be; int n, hw, c; DType dt; const void *x; void *y; } replay_avgpool_forward_args;
static void replay_avgpool_forward(const void *p) {
    const replay_avgpool_forward_args *a = p;
    a->be->avgpool_forward(a->be, a->n, a->hw, a->c, a->dt, a->x, a->y);
}
static void record_avgpool_forward(Backend *be, int n, int hw, int c, DType dt, const void *x, void *y) {
    RECORD(replay_avgpool_forward, n, hw, c, dt, x, y);
}

typedef struct { Backend *be; int n, hw, c; DType dt; const void *dy; void *dx; } replay_avgpool_backward_args;
static void replay_avgpool_backward(const void *p) {
    const replay_avgpool_backward_args *a = p;
    a->be->avgpool_backward(a->be, a->n, a->hw, a->c, a->dt, a->dy, a->dx);
}
static void record_avgpool_backward(Backend *be, int n, int hw, int c, DType dt, const void *dy, void *dx) {
    RECORD(replay_avgpool_backward, n, hw, c, dt, dy, dx);
}

typedef struct { Backend *be; int n, in, out; DType dt; const void *x, *w, *b; void *y; } replay_linear_forward_args;
static void replay_linear_forward(const void *p) {
    const replay_linear_forward_args *a = p;
    a->be->linear_forward(a->be, a->n, a->in, a->out, a->dt, a->x, a->w, a->b, a->y);
}
static void record_linear_forward(Backend *be, int n, int in, int out, DType dt, const void *x, const void *w,
                                  const void *b, void *y) {
    RECORD(replay_linear_forward, n, in, out, dt, x, w, b, y);
}

typedef struct {
    Backend *be; int n, in, out; DType dt; const void *x, *w, *dy; void *dx, *dw, *db; int accumulate;
} replay_linear_backward_args;
static void replay_linear_backward(const void *p) {
    const replay_linear_backward_args *a = p;
    a->be->linear_backward(a->be, a->n, a->in, a->out, a->dt, a->x, a->w, a->dy, a->dx, a->dw, a->db, a->accumulate);
}
static void record_linear_backward(Backend *be, int n, int in, int out, DType dt, const void *x, const void *w,
                                   const void *dy, void *dx, void *dw, void *db, int accumulate) {
    RECORD(replay_linear_backward, n, in, out, dt, x, w, dy, dx, dw, db, accumulate);
}

typedef struct {
    Backend *be; int n, classes; DType logits_dt; const void *logits; const int32_t *labels; float *loss_out;
    void *dlogits; const float *scale; float seed_factor;
} replay_softmax_xent_args;
static void replay_softmax_xent(const void *p) {
    const replay_softmax_xent_args *a = p;
    a->be->softmax_xent(a->be, a->n, a->classes, a->logits_dt, a->logits, a->labels, a->loss_out, a->dlogits,
                        a->scale, a->seed_factor);
}
static void record_softmax_xent(Backend *be, int n, int classes, DType logits_dt, const void *logits,
                                const int32_t *labels, float *loss_out, void *dlogits, const float *scale,
                                float seed_factor) {
    RECORD(replay_softmax_xent, n, classes, logits_dt, logits, labels, loss_out, dlogits, scale, seed_factor);
}

typedef struct { Backend *be; DType dt; const void *grad; size_t n; float *flag; } replay_nonfinite_check_args;
static void replay_nonfinite_check(const void *p) {
    const replay_nonfinite_check_args *a = p;
    a->be->nonfinite_check(a->be, a->dt, a->grad, a->n, a->flag);
}
static void record_nonfinite_check(Backend *be, DType dt, const void *grad, size_t n, float *flag) {
    RECORD(replay_nonfinite_check, dt, grad, n, flag);
}

typedef struct {
    Backend *be; size_t n; DType grad_dt; const void *grad; float *master, *mom; void *copy; SgdParams params;
    const float *lr; const ScalerState *state;
} replay_sgd_step_args;
static void replay_sgd_step(const void *p) {
    const replay_sgd_step_args *a = p;
    a->be->sgd_step(a->be, a->n, a->grad_dt, a->grad, a->master, a->mom, a->copy, &a->params, a->lr, a->state);
}
static void record_sgd_step(Backend *be, size_t n, DType grad_dt, const void *grad, float *master, float *mom,
                            void *copy, const SgdParams *params, const float *lr, const ScalerState *state) {
    RECORD(replay_sgd_step, n, grad_dt, grad, master, mom, copy, *params, lr, state);
}

typedef struct { Backend *be; ScalerState *state; float growth, backoff; int interval, dynamic; } replay_scaler_update_args;
static void replay_scaler_update(const void *p) {
    const replay_scaler_update_args *a = p;
    a->be->scaler_update(a->be, a->state, a->growth, a->backoff, a->interval, a->dynamic);
}
static void record_scaler_update(Backend *be, ScalerState *state, float growth, float backoff, int interval,
                                 int dynamic) {
    RECORD(replay_scaler_update, state, growth, backoff, interval, dynamic);
}

// ---- what a capture refuses ---------------------------------------------------------------------------

static void refuse_host_copy(Backend *be, void *dst, const void *src, size_t bytes) {
    (void)be, (void)dst, (void)src, (void)bytes;
    amp_fatal(__FILE__, __LINE__, "a copy between host and device during a graph capture (it cannot be replayed)");
}
static void refuse_sync(Backend *be) {
    (void)be;
    amp_fatal(__FILE__, __LINE__, "a wait for the device during a graph capture");
}

// ---- capture, launch --------------------------------------------------------------------------------

void cpu_graph_begin(Backend *be) {
    AMP_ASSERT(cpu_graph_log(be) == NULL, "cpu backend: a graph capture is already under way");
    cpu_graph_set_log(be, op_log_create());
    cpu_graph_save_ops(be);
    be->zero = record_zero;
    be->copy = record_copy;
    be->cast = record_cast;
    be->input_normalize = record_input_normalize;
    be->conv_forward = record_conv_forward;
    be->conv_backward_data = record_conv_backward_data;
    be->conv_backward_filter = record_conv_backward_filter;
    be->bn_forward_train = record_bn_forward_train;
    be->bn_forward_eval = record_bn_forward_eval;
    be->bn_forward_saved = record_bn_forward_saved;
    be->bn_backward = record_bn_backward;
    be->maxpool_forward = record_maxpool_forward;
    be->maxpool_backward = record_maxpool_backward;
    be->avgpool_forward = record_avgpool_forward;
    be->avgpool_backward = record_avgpool_backward;
    be->linear_forward = record_linear_forward;
    be->linear_backward = record_linear_backward;
    be->softmax_xent = record_softmax_xent;
    be->nonfinite_check = record_nonfinite_check;
    be->sgd_step = record_sgd_step;
    be->scaler_update = record_scaler_update;
    be->to_device = refuse_host_copy;
    be->to_host = refuse_host_copy;
    be->upload_async = refuse_host_copy;
    be->readback_begin = refuse_host_copy;
    be->sync = refuse_sync;
}

void *cpu_graph_end(Backend *be) {
    OpLog *log = cpu_graph_log(be);
    AMP_ASSERT(log != NULL, "cpu backend: graph_end without graph_begin");
    cpu_graph_restore_ops(be);
    cpu_graph_set_log(be, NULL);
    return log;
}

void cpu_graph_launch(Backend *be, void *graph) {
    AMP_ASSERT(cpu_graph_log(be) == NULL, "cpu backend: a graph launched during a capture");
    op_log_replay(graph);
}

void cpu_graph_destroy(Backend *be, void *graph) {
    (void)be;
    op_log_free(graph);
}
