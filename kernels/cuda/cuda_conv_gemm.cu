// cuda_conv_gemm.cu - a 1x1, stride-1, unpadded, ungrouped NHWC convolution is a matrix product over the
// n*h*w rows, so it can run as one cuBLAS GEMM with no layout change:
//   x (rows, c_in), w (c_out, c_in) (OHWI with kh = kw = 1), y (rows, c_out), row-major.
// cuBLAS is column-major (a row-major (r, c) matrix is the column-major (c, r) one), so:
//   forward          y^T  (c_out, rows) = w (c_out, c_in) . x^T (c_in, rows)   -> gemm(T, N)
//   backward data    dx^T (c_in, rows)  = w^T (c_in, c_out) . dy^T (c_out, rows) -> gemm(N, N)
//   backward filter  dw^T (c_in, c_out) = x^T (c_in, rows) . dy (rows, c_out)   -> gemm(N, T)
// Accumulation in fp32 always; fp32 data uses TF32 only when the backend allows it for convolutions
// (cudnn.tf32), else CUBLAS_COMPUTE_32F_PEDANTIC keeps every product in true fp32 whatever the handle's
// math mode (which cudnn.matmul_tf32 sets for the classifier).
//
// cudnn_conv.cu decides per shape and direction whether this route runs: by timing it against cuDNN's
// pick when cudnn.benchmark is on, and for exact fp32 otherwise (cuDNN's legacy API has only two slow
// NHWC algorithms there).
#include <stdint.h>

#include "kernels/cuda/cuda_internal.h"

int conv_gemm_eligible(const ConvShape *s) {
    return s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0 && s->groups == 1 && s->out_h == s->h &&
           s->out_w == s->w && (size_t)s->n * s->h * s->w <= (size_t)INT32_MAX;
}

static cublasComputeType_t conv_gemm_compute_type(const CudaBackend *cb, DType dt) {
    if (dtype_is_16bit(dt)) return CUBLAS_COMPUTE_32F;
    return cb->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
}

// C (m,n) = op(A) op(B) + beta C, column-major, in dt (cuda_gemm under the convolutions' rule).
static void conv_gemm(CudaBackend *cb, DType dt, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n,
                      int k, const void *a, int lda, const void *b, int ldb, float beta, void *c, int ldc) {
    cuda_gemm(cb, dt, conv_gemm_compute_type(cb, dt), op_a, op_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

static int conv_gemm_rows(const ConvShape *s) { return s->n * s->h * s->w; }

// x (rows, c_in), w (c_out, c_in) -> y (rows, c_out)
void conv_gemm_forward(CudaBackend *cb, const ConvShape *s, DType dt, const void *x, const void *w, void *y) {
    conv_gemm(cb, dt, CUBLAS_OP_T, CUBLAS_OP_N, s->c_out, conv_gemm_rows(s), s->c_in, w, s->c_in, x, s->c_in,
              0.0f, y, s->c_out);
}

// dy (rows, c_out), w (c_out, c_in) -> dx (rows, c_in) (= or +=)
void conv_gemm_backward_data(CudaBackend *cb, const ConvShape *s, DType dt, const void *dy, const void *w,
                             void *dx, int accumulate) {
    conv_gemm(cb, dt, CUBLAS_OP_N, CUBLAS_OP_N, s->c_in, conv_gemm_rows(s), s->c_out, w, s->c_in, dy,
              s->c_out, accumulate ? 1.0f : 0.0f, dx, s->c_in);
}

// x (rows, c_in), dy (rows, c_out) -> dw (c_out, c_in) (= or +=)
void conv_gemm_backward_filter(CudaBackend *cb, const ConvShape *s, DType dt, const void *x, const void *dy,
                               void *dw, int accumulate) {
    conv_gemm(cb, dt, CUBLAS_OP_N, CUBLAS_OP_T, s->c_in, s->c_out, conv_gemm_rows(s), x, s->c_in, dy,
              s->c_out, accumulate ? 1.0f : 0.0f, dw, s->c_in);
}
