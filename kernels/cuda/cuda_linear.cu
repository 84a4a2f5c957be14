// cuda_linear.cu - the classifier (y = x w^T + b) on cuBLAS, with fp32 accumulation in every mode.
//
// cuBLAS is column-major; a row-major (r, c) matrix is the column-major (c, r) matrix, its transpose.
// So with x (n,in), w (out,in), y (n,out) row-major:
//   forward      y^T  (out,n) = w (out,in) . x^T (in,n)     -> gemm(T, N), m=out, n=n,  k=in
//   grad input   dx^T (in,n)  = w^T (in,out) . dy^T (out,n) -> gemm(N, N), m=in,  n=n,  k=out
//   grad weight  dw^T (in,out) = x^T (in,n) . dy (n,out)    -> gemm(N, T), m=in,  n=out, k=n
// The bias is written into y first and the GEMM adds onto it (beta = 1), so y is rounded to dt once,
// as on the CPU.
#include "kernels/cuda/cuda_elem.cuh"
#include "kernels/cuda/cuda_internal.h"

#define LINEAR_THREADS 256

// fp16 and bf16 GEMMs run on tensor cores with fp32 accumulation; fp32 ones may use TF32 only when allowed.
static cublasComputeType_t linear_compute_type(const CudaBackend *cb, DType dt) {
    if (dt == DTYPE_F32 && cb->matmul_tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
    return CUBLAS_COMPUTE_32F;
}

// C (m,n) = op(A) op(B) + beta C, all column-major in dtype dt (cuda_gemm under the classifier's rule).
static void linear_gemm(CudaBackend *cb, DType dt, cublasOperation_t op_a, cublasOperation_t op_b, int m,
                        int n, int k, const void *a, int lda, const void *b, int ldb, float beta, void *c,
                        int ldc) {
    cuda_gemm(cb, dt, linear_compute_type(cb, dt), op_a, op_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

// y (n,out) T = b (out) broadcast over rows.
template <typename T>
__global__ void linear_bias_fill_kernel(int n, int out, const T *b, T *y) {
    const size_t total = (size_t)n * out;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = b[i % out];
}

// db (out) T (+)= sum over the n rows of dy (n,out) T, in fp32, in row order. One thread per column:
// neighbouring threads read neighbouring columns, so each row is read coalesced.
template <typename T>
__global__ void linear_bias_grad_kernel(int n, int out, const T *dy, T *db, int accumulate) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= out) return;
    float sum = 0.0f;
    for (int r = 0; r < n; r++) sum += to_f32(dy[(size_t)r * out + o]);
    if (accumulate) sum = to_f32(db[o]) + sum;
    from_f32(&db[o], sum);
}

static unsigned linear_blocks(size_t work) {
    size_t b = (work + LINEAR_THREADS - 1) / LINEAR_THREADS;
    if (b < 1) b = 1;
    if (b > 4096) b = 4096;
    return (unsigned)b;
}

void cuda_linear_forward(Backend *be, int n, int in, int out, DType dt, const void *x, const void *w,
                         const void *b, void *y) {
    CudaBackend *cb = cuda_state(be);
    const unsigned blocks = linear_blocks((size_t)n * out);
    with_elem(dt, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        linear_bias_fill_kernel<T><<<blocks, LINEAR_THREADS, 0, cb->stream>>>(n, out, (const T *)b, (T *)y);
    });
    CUDA_CHECK_LAUNCH();
    linear_gemm(cb, dt, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, in, x, in, 1.0f, y, out);
}

void cuda_linear_backward(Backend *be, int n, int in, int out, DType dt, const void *x, const void *w,
                          const void *dy, void *dx, void *dw, void *db, int accumulate) {
    CudaBackend *cb = cuda_state(be);
    const float beta_params = accumulate ? 1.0f : 0.0f;
    linear_gemm(cb, dt, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w, in, dy, out, 0.0f, dx, in);
    linear_gemm(cb, dt, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, x, in, dy, out, beta_params, dw, in);
    const unsigned blocks = (unsigned)((out + LINEAR_THREADS - 1) / LINEAR_THREADS);
    with_elem(dt, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        linear_bias_grad_kernel<T>
            <<<blocks, LINEAR_THREADS, 0, cb->stream>>>(n, out, (const T *)dy, (T *)db, accumulate);
    });
    CUDA_CHECK_LAUNCH();
}
