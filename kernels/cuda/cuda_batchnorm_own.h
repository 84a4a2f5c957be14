// cuda_batchnorm_own.h - our own batch-norm kernels over NHWC rows (rows = n*h*w, c channels), the path
// beside cuDNN's in cudnn_batchnorm.cu, which decides per call which one runs and keeps per layer what a
// backward needs from its forward (the ReLU mask source below).
#ifndef AMPTRAIN_CUDA_BATCHNORM_OWN_H
#define AMPTRAIN_CUDA_BATCHNORM_OWN_H

#include <stdint.h>

#include "kernels/cuda/cuda_internal.h"

// Where a backward with ReLU finds which outputs were positive (y > 0, the forward's rounded y):
typedef enum BnMaskSource {
    BN_MASK_NONE = 0,  // no ReLU
    BN_MASK_FROM_Y,    // read y (any forward)
    BN_MASK_FROM_X,    // recompute act(gamma * (x - mean) * invstd + beta) from x: no residual, our forward
    BN_MASK_BITS,      // one byte per pack of the forward, bit k for element k (our forward wrote it)
} BnMaskSource;

// The ReLU bits: one byte per 8 consecutive elements of a row (a 16-byte fp16 or bf16 pack), bit k for
// element k. Written only where the forward moves 8-element packs (fp16 or bf16, c % 8 == 0, 16-byte aligned
// buffers);
// bn_own_forward_train says whether it wrote them, a backward that cannot use them reads y instead.
#define BN_MASK_PACK 8
size_t bn_own_mask_bytes(int rows, int c);

// Training forward: statistics in one read of x, then y = act(gamma * xhat + beta + residual) in one pass;
// mask (nullable, bn_own_mask_bytes) receives the ReLU bits. Buffers as backend_ops.def's bn_forward_train.
// Returns 1 when it wrote the mask.
int bn_own_forward_train(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *residual,
                         int relu, const float *gamma, const float *beta, float *running_mean,
                         float *running_var, float momentum, float eps, float *save_mean, float *save_invstd,
                         void *y, uint8_t *mask);

// The statistics alone of a training forward over x (one read): save_mean, save_invstd, the running
// statistics and the affine map into scale and shift (c) fp32 (the caller's); scratch:
// bn_own_stats_scratch_bytes.
size_t bn_own_stats_scratch_bytes(const CudaBackend *cb, int rows, int c, DType dt, const void *x);
void bn_own_forward_train_stats(CudaBackend *cb, int rows, int c, DType dt, const void *x, const float *gamma,
                                const float *beta, float *running_mean, float *running_var, float momentum,
                                float eps, float *save_mean, float *save_invstd, void *scratch, float *scale,
                                float *shift);

// The same from the per-channel sum and sum of squares of x (sums, sqsums (c) fp32, not shifted: made by the
// convolution that wrote x): the finalize (mean, invstd, running statistics, the affine map into scale and
// shift (c) fp32, the caller's scratch) and the one pass over x. Returns 1 when it wrote the mask.
int bn_own_forward_train_sums(CudaBackend *cb, int rows, int c, DType dt, const void *x, const float *sums,
                              const float *sqsums, const void *residual, int relu, const float *gamma,
                              const float *beta, float *running_mean, float *running_var, float momentum,
                              float eps, float *save_mean, float *save_invstd, float *scale, float *shift,
                              void *y, uint8_t *mask);

// bn_add_bn's training forward (backend_ops.def): y = act(bn_a(x_a) + bn_b(x_b)); each layer's statistics in
// one read of its x, then one pass reading both and writing y (bn_b's output is never rounded nor written);
// mask as above. Returns 1 when it wrote the mask.
int bn_own_add_bn_forward_train(CudaBackend *cb, int rows, int c, DType dt, const BnArgs *a, const BnArgs *b,
                                int relu, float momentum, float eps, void *y, uint8_t *mask);

// y = act(x * scale + shift + residual) with scale, shift from the running (eval) or saved (recompute)
// statistics: one pass.
void bn_own_forward_eval(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *residual,
                         int relu, const float *gamma, const float *beta, const float *running_mean,
                         const float *running_var, float eps, void *y);
void bn_own_forward_saved(CudaBackend *cb, int rows, int c, DType dt, const void *x, int relu,
                          const float *gamma, const float *beta, const float *save_mean,
                          const float *save_invstd, void *y);

// Backward: sums in one read of x and dy (and the mask source), then dx (= or +=) and d_residual
// (nullable) in one pass. beta: the forward's, for BN_MASK_FROM_X; mask: for BN_MASK_BITS.
void bn_own_backward(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *y, const void *dy,
                     BnMaskSource mask_source, const float *beta, const uint8_t *mask, const float *gamma,
                     const float *save_mean, const float *save_invstd, void *dx, int accumulate, void *dgamma,
                     void *dbeta, int accumulate_params, void *d_residual);

// The backward's second pass and the layer's parameter gradients from sums made elsewhere (the epilogue of
// the data gradient that produced g): sum_g = sum g, sum_gxhat = sum g * (x - mean) * invstd (c) fp32, g
// (rows, c) dt the gradient at the output with any ReLU's mask already applied. dx (overwritten) in one pass
// over x and g; dgamma, dbeta (c) dt (+= with accumulate_params); coef: (3, c) fp32 of the caller's scratch.
void bn_own_backward_from_sums(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *g,
                               const float *sum_g, const float *sum_gxhat, const float *gamma,
                               const float *save_mean, const float *save_invstd, void *dx, void *dgamma,
                               void *dbeta, int accumulate_params, float *coef);

// bn_add_bn's backward: one read of x_a, x_b and dy (and the mask source) for both layers' sums, then one
// pass writing dx_a and dx_b (which may be dy). mask_source: BN_MASK_BITS (with mask) or BN_MASK_FROM_Y.
void bn_own_add_bn_backward(CudaBackend *cb, int rows, int c, DType dt, const BnArgs *a, const BnArgs *b,
                            const void *y, const void *dy, BnMaskSource mask_source, const uint8_t *mask,
                            void *dx_a, void *dx_b, int accumulate_params);

#endif
