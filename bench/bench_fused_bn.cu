// bench_fused_bn.cu - a measured prototype, not wired into the trainer: batch norm fused into ResNeXt-50
// 32x4d's 1x1 convolutions through cuDNN's backend (graph) API, forward and backward, beside the unfused
// passes amptrain runs today.
//
//   build/bench_fused_bn [n [only]]     n: the batch (default 256); only: just the shapes whose name has it
//
// Per stride-1 1x1 convolution shape of the model, x (n, h, w, c_in) -> y (n, h, w, c_out), NHWC fp16, with
// the batch norm + ReLU in front of it (over c_in; gamma = scale, beta = bias):
// - forward, unfused (a row): amptrain's own batch-norm apply with ReLU (bn_own_forward_saved: gamma =
//   scale, beta = bias over mean 0 and invstd 1), the convolution the trainer runs (conv_forward after
//   conv_prepare under cudnn.benchmark: cuDNN's pick or the cuBLAS GEMM), and the statistics pass of the
//   next batch norm's training forward, timed as bn_own_forward_train minus bn_own_forward_saved on y (the
//   two share the same apply pass).
// - forward, fused: scale_bias_relu_conv_genstats (NVIDIA's MLPerf ResNet-50 pattern, ConvBNfprop):
//   y = conv1x1(relu(x * scale[c] + bias[c])), scale and bias (c_in) fp16, with the per-output-channel sum
//   and sum of squares of y (c_out) fp32, from which the next batch norm's finalize makes its own scale and
//   bias.
// - backward, unfused (a row): the convolution's backward data (dy (rows, c_out) -> da (rows, c_in), on the
//   route conv_prepare picked) and amptrain's own batch-norm backward with the ReLU mask recomputed from x
//   (bn_own_backward: sums of g and g * xhat in one read of x and da, then dx in a second).
// - backward, fused: dgrad_drelu_dbn (DgradDreluBNBwdWeight): da = dgrad(dy, w), g = drelu(da, bn(x))
//   with the batch norm's output recomputed from x, mean, invstd, gamma, beta (fp32), written (fp16), and
//   the batch norm's weight gradients and the coefficients of dx = eq_dy * g + eq_x * x + eq_bias (c_in)
//   fp32; then dbn_apply, that dx in one pass.
// - weight gradient, unfused (a row): the convolution's backward filter on the applied x the unfused forward
//   keeps (dw (c_out, c_in) = dy^T . relu(x * scale + bias), on the route conv_prepare picked).
// - weight gradient, fused: scale_bias_relu_wgrad (ConvBNwgrad): the same dw with the apply in the
//   convolution's prologue, from x itself: what the fused forward leaves to the backward, which no longer
//   has the applied x.
// Each fused graph is tried with fp16 and with fp32 virtual intermediates. Each try makes a plan of every
// engine config heuristics mode A offers (else FALLBACK's), up to 16 and of them only the first that compiles
// at run time (seconds each), checks and times each, and prints the heuristics' first choice and the fastest
// with their engine and knobs; or says "no engine" with cuDNN's status and message.
// Times: median of 20 calls after 3 warm-up calls (cudaEvent, compute stream); a fused call includes the
// memset that zeroes its per-channel outputs. The last lines weight each shape by its count in the model,
// as if every one ran the full patterns: in the model a block's conv1 follows the residual add (MLPerf's
// DBARCS variant) and layer1.0's conv1 and downsample follow the max pool (no batch norm), so they bound what
// these patterns alone save.
// Check, before timing, against an fp32 reference on the GPU from the same fp16 inputs (products in fp32,
// per-channel sums in fp64): tensors (y, g, dx, dw) by ||got - ref|| / ||ref|| (L2: a ReLU mask decided the
// other way for a value within rounding of 0, as two correct paths may, moves it by next to nothing), per-channel vectors (sums, weight
// gradients, coefficients) by max |got - ref| / max |ref| per vector. Tensors under 1e-2, vectors under 1e-3,
// or FAIL; a NaN fails. dbn_apply is checked on the reference's g and coefficients, so that each graph is
// checked alone. Exit 1 on a FAIL, or when cuDNN refuses to describe a graph on both tries for some shape
// (the line names the call, descriptor and attribute); a missing engine is a result, not a failure.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_timing.h"
#include "kernels/cuda/cuda_batchnorm_own.h"
#include "kernels/cuda/cuda_diag.h"
#include "kernels/cuda/cudnn_graph.h"

#define WARMUP_RUNS 3
#define TIMED_RUNS 20
#define TENSOR_TOLERANCE 1e-2
#define VECTOR_TOLERANCE 1e-3

typedef struct ConvCase {
    const char *name;
    int side;  // h = w
    int c_in, c_out;
    int count;  // convolutions of this shape in ResNeXt-50 32x4d
} ConvCase;

// The stride-1 1x1 convolutions of ResNeXt-50 32x4d (the stride of a stage's first block is on its 3x3
// conv2; the strided 1x1 downsamples of layer2-4 are left out).
static const ConvCase CASES[] = {
    {"layer1.0 conv1", 56, 64, 128, 1},    {"layer1 conv1", 56, 256, 128, 2},
    {"layer1 conv3", 56, 128, 256, 3},     {"layer1.0 downsample", 56, 64, 256, 1},
    {"layer2.0 conv1", 56, 256, 256, 1},   {"layer2 conv1", 28, 512, 256, 3},
    {"layer2 conv3", 28, 256, 512, 4},     {"layer3.0 conv1", 28, 512, 512, 1},
    {"layer3 conv1", 14, 1024, 512, 5},    {"layer3 conv3", 14, 512, 1024, 6},
    {"layer4.0 conv1", 14, 1024, 1024, 1}, {"layer4 conv1", 7, 2048, 1024, 2},
    {"layer4 conv3", 7, 1024, 2048, 3},
};
#define CASE_COUNT ((int)(sizeof CASES / sizeof CASES[0]))

// ---- device: inputs, the reference, the error ---------------------------------------------------------

#define REF_TILE 32         // reference_gemm_kernel: 32 x 32 outputs per block, k in steps of 32
#define SUM_LANES 8         // the reference sums: row lanes per channel
#define SUM_CHUNK_ROWS 256  // the reference sums: rows per block

// Uniform in [lo, hi) from a hash of (seed, i) (splitmix64), whatever the grid.
static __device__ float hash_uniform(uint64_t seed, size_t i, float lo, float hi) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * (float)(z >> 40) * (1.0f / 16777216.0f);
}

__global__ void fill_half_kernel(__half *p, size_t n, uint64_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2half_rn(hash_uniform(seed, i, lo, hi));
}

__global__ void fill_float_kernel(float *p, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

__global__ void half_to_float_kernel(const __half *src, float *dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __half2float(src[i]);
}

__global__ void float_to_half_kernel(const float *src, __half *dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

// out (rows, n) fp32 = f(a) . b^T, all in fp32: a (rows, k) fp16 with f(v) = relu(v * scale[k] + bias[k])
// (scale, bias (k) fp16) or f(v) = v (scale NULL); b element (o, k) at b[o * b_o + k * b_k] fp16. k and n
// multiples of REF_TILE. grid (ceil(rows / 32), n / 32), block (32, 32): thread (tx, ty) sums output
// (row0 + ty, o0 + tx) over k in shared-memory tiles.
//   forward:        y (rows, c_out)  = relu(x * scale + bias) . w^T, w (c_out, c_in): b_o = c_in, b_k = 1
//   backward data:  da (rows, c_in)  = dy . w:                         b_o = 1, b_k = c_in
__global__ void reference_gemm_kernel(const __half *a, const __half *scale, const __half *bias,
                                      const __half *b, int b_o, int b_k, int rows, int k_dim, int n_dim,
                                      float *out) {
    __shared__ float as[REF_TILE][REF_TILE + 1], bs[REF_TILE][REF_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.x * REF_TILE + ty, o = blockIdx.y * REF_TILE + tx;
    const int b_row = blockIdx.y * REF_TILE + ty;  // the b row this thread loads
    float acc = 0.0f;
    for (int k0 = 0; k0 < k_dim; k0 += REF_TILE) {
        const int k = k0 + tx;
        const float v = row < rows ? __half2float(a[(size_t)row * k_dim + k]) : 0.0f;
        as[ty][tx] = scale ? fmaxf(v * __half2float(scale[k]) + __half2float(bias[k]), 0.0f) : v;
        bs[ty][tx] = __half2float(b[(size_t)b_row * b_o + (size_t)k * b_k]);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < REF_TILE; j++) acc = fmaf(as[ty][j], bs[tx][j], acc);
        __syncthreads();
    }
    if (row < rows) out[(size_t)row * n_dim + o] = acc;
}

// dw (k, c) fp32 += the sum over one chunk of rows of dy[r, o] * relu(x[r, i] * scale[i] + bias[i]), x (rows,
// c) and dy (rows, k) fp16, scale and bias (c) fp16, c and k multiples of REF_TILE; dw zeroed by the caller.
// grid (c / 32, k / 32, chunks of chunk_rows rows), block (32, 32): thread (tx, ty) sums output (o0 + ty,
// i0 + tx) over its chunk in shared-memory tiles of 32 rows, then adds it with one fp32 atomic.
__global__ void reference_wgrad_kernel(const __half *x, const __half *scale, const __half *bias,
                                       const __half *dy, int rows, int c, int k, int chunk_rows, float *dw) {
    __shared__ float xs[REF_TILE][REF_TILE + 1], ds[REF_TILE][REF_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int i0 = blockIdx.x * REF_TILE, o0 = blockIdx.y * REF_TILE;
    const int r_begin = blockIdx.z * chunk_rows, r_end = min(rows, r_begin + chunk_rows);
    float acc = 0.0f;
    for (int r0 = r_begin; r0 < r_end; r0 += REF_TILE) {
        const int r = r0 + ty;  // the row this thread loads
        float v = 0.0f, d = 0.0f;
        if (r < r_end) {
            v = fmaxf(__half2float(x[(size_t)r * c + i0 + tx]) * __half2float(scale[i0 + tx]) +
                          __half2float(bias[i0 + tx]),
                      0.0f);
            d = __half2float(dy[(size_t)r * k + o0 + tx]);
        }
        xs[ty][tx] = v;  // (row, input channel)
        ds[ty][tx] = d;  // (row, output channel)
        __syncthreads();
#pragma unroll
        for (int j = 0; j < REF_TILE; j++) acc = fmaf(ds[j][ty], xs[j][tx], acc);
        __syncthreads();
    }
    atomicAdd(&dw[(size_t)(o0 + ty) * c + i0 + tx], acc);
}

// Sums per channel (fp64) over rows of (rows, c): grid (c / 32, ceil(rows / SUM_CHUNK_ROWS)), block (32,
// SUM_LANES); the lanes' sums meet in shared memory, then one fp64 atomic per channel and block.
//   forward (x NULL):  sums[ch] += v, sums[c + ch] += v * v over v = ref (y)
//   backward:          ref = da is replaced by g = da where bn(x) > 0, else 0, with bn(x) = gamma * xhat +
//                      beta and xhat = (x - mean) * invstd; sums[ch] += g, sums[c + ch] += g * xhat
__global__ void reference_sums_kernel(float *ref, const __half *x, const float *gamma, const float *beta,
                                      const float *mean, const float *invstd, int rows, int c, double *sums) {
    __shared__ double part[2][SUM_LANES][32];
    const int tx = threadIdx.x, ty = threadIdx.y, ch = blockIdx.x * 32 + tx;
    const int r0 = blockIdx.y * SUM_CHUNK_ROWS, r1 = min(rows, r0 + SUM_CHUNK_ROWS);
    double s = 0.0, q = 0.0;
    for (int r = r0 + ty; r < r1; r += SUM_LANES) {
        const size_t i = (size_t)r * c + ch;
        if (!x) {
            const double v = ref[i];
            s += v, q += v * v;
            continue;
        }
        const float xhat = (__half2float(x[i]) - mean[ch]) * invstd[ch];
        const float g = gamma[ch] * xhat + beta[ch] > 0.0f ? ref[i] : 0.0f;
        ref[i] = g;
        s += g, q += (double)g * xhat;
    }
    part[0][ty][tx] = s, part[1][ty][tx] = q;
    __syncthreads();
    if (ty != 0) return;
    for (int j = 1; j < SUM_LANES; j++) s += part[0][j][tx], q += part[1][j][tx];
    atomicAdd(&sums[ch], s);
    atomicAdd(&sums[c + ch], q);
}

// dx (rows, c) fp32 = eq_dy * g + eq_x * x + eq_bias, coefficients (c) fp32, g fp32, x fp16.
__global__ void reference_dx_kernel(const float *g, const __half *x, const float *eq_dy, const float *eq_x,
                                    const float *eq_bias, size_t n, int c, float *dx) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int ch = (int)(i % c);
        dx[i] = eq_dy[ch] * g[i] + eq_x[ch] * __half2float(x[i]) + eq_bias[ch];
    }
}

// acc[0] += sum (got - ref)^2, acc[1] += sum ref^2 over n elements; a NaN or inf in got counts as a
// difference of 1e30. acc zeroed by the caller.
__global__ void error_sums_kernel(const __half *got, const float *ref, size_t n, double *acc) {
    double d = 0.0, m = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        double e = fabs((double)__half2float(got[i]) - ref[i]);
        if (!(e <= FLT_MAX)) e = 1e30;
        d += e * e, m += (double)ref[i] * ref[i];
    }
    for (int lane = 16; lane > 0; lane /= 2) {
        d += __shfl_xor_sync(0xffffffffu, d, lane);
        m += __shfl_xor_sync(0xffffffffu, m, lane);
    }
    if (threadIdx.x % 32 == 0) atomicAdd(&acc[0], d), atomicAdd(&acc[1], m);
}

// ---- host: launches and checks ------------------------------------------------------------------------

static dim3 grid_for(const CudaBackend *cb) { return dim3(cb->sm_count * 8); }

static void fill_half(CudaBackend *cb, void *p, size_t n, uint64_t seed, float lo, float hi) {
    fill_half_kernel<<<grid_for(cb), 256, 0, cb->stream>>>((__half *)p, n, seed, lo, hi);
    CUDA_CHECK_LAUNCH();
}

static void fill_float(CudaBackend *cb, float *p, size_t n, float v) {
    fill_float_kernel<<<grid_for(cb), 256, 0, cb->stream>>>(p, n, v);
    CUDA_CHECK_LAUNCH();
}

// ||got - ref|| / ||ref|| over n elements of got (fp16) against ref (fp32); huge for a NaN.
static double tensor_error(CudaBackend *cb, const void *got, const float *ref, size_t n, double *acc_dev) {
    CUDA_CHECK(cudaMemsetAsync(acc_dev, 0, 2 * sizeof(double), cb->stream));
    error_sums_kernel<<<grid_for(cb), 256, 0, cb->stream>>>((const __half *)got, ref, n, acc_dev);
    CUDA_CHECK_LAUNCH();
    double acc[2];
    CUDA_CHECK(cudaMemcpyAsync(acc, acc_dev, sizeof acc, cudaMemcpyDeviceToHost, cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    return acc[1] > 0.0 ? sqrt(acc[0] / acc[1]) : sqrt(acc[0]);
}

// The worst over `vectors` consecutive vectors of c of max |got - ref| / max |ref|; inf for a NaN. got (fp32)
// is on the device, ref on the host.
static double vector_error(CudaBackend *cb, const float *got_dev, const double *ref, int vectors, int c) {
    const size_t n = (size_t)vectors * c;
    float *got = (float *)malloc(n * sizeof(float));
    AMP_ASSERT(got != NULL, "bench_fused_bn: out of host memory");
    CUDA_CHECK(cudaMemcpyAsync(got, got_dev, n * sizeof(float), cudaMemcpyDeviceToHost, cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    double worst = 0.0;
    for (int v = 0; v < vectors; v++) {
        double d = 0.0, m = 0.0;
        for (size_t i = (size_t)v * c; i < (size_t)(v + 1) * c; i++) {
            double e = fabs((double)got[i] - ref[i]);
            if (!(e <= DBL_MAX)) e = INFINITY;
            d = fmax(d, e), m = fmax(m, fabs(ref[i]));
        }
        worst = fmax(worst, m > 0.0 ? d / m : d);
    }
    free(got);
    return worst;
}

// ---- the fused plan, through cuDNN's backend API --------------------------------------------------------

#define PACK_MAX 16  // tensors in memory of one graph, at most

// The fused graphs.
typedef enum {
    GRAPH_FORWARD,
    GRAPH_DGRAD_DRELU_DBN,
    GRAPH_DBN_APPLY,
    GRAPH_WGRAD,
    GRAPH_CONV_GENSTATS
} GraphKind;
static const char *GRAPH_NAME[5] = {"scale_bias_relu_conv_genstats", "dgrad_drelu_dbn", "dbn_apply",
                                    "scale_bias_relu_wgrad", "conv_genstats"};

#define PLAN_MAX 16      // engine configs of one heuristics mode made into plans, checked and timed
#define RUNTIME_TRIES 1  // engine configs that compile at run time (seconds each) tried per heuristics mode

// One try at the fused graph: every descriptor made for it (destroyed together), why the graph could not be
// described, the plans (in the heuristics' order) with their engines or why there are none, the variant pack
// and the workspace the plans share.
typedef struct FusedPlan {
    CudnnMade made;
    CudnnTrail described;  // describing the tensors, operations and variant pack: a failure is a defect here
    CudnnPlans found;
    cudnnBackendDescriptor_t pack;
    void *workspace;
} FusedPlan;

// The five per-channel outputs of dgrad_drelu_dbn (dbn_apply reads the last three).
static const int64_t COEF_UID[5] = {UID_DSCALE, UID_DBIAS, UID_EQ_DY, UID_EQ_X, UID_EQ_BIAS};
static const char *COEF_NAME[5] = {"tensor dscale", "tensor dbias", "tensor eq_dy", "tensor eq_x",
                                   "tensor eq_bias"};

// Graph `kind` for shape s, its virtual intermediates in mid: the operation graph, not yet finalized (its
// finalize is the first step of the engine search). Channels: c = c_in (the batch norm's), k = c_out.
static cudnnBackendDescriptor_t fused_graph(FusedPlan *p, GraphKind kind, cudnnHandle_t handle,
                                            const ConvShape *s, cudnnDataType_t mid) {
    const cudnnDataType_t fp16 = CUDNN_DATA_HALF, fp32 = CUDNN_DATA_FLOAT;
    const int64_t n = s->n, h = s->h, w = s->w, c = s->c_in, k = s->c_out;
    cudnnBackendDescriptor_t ops[8];
    int count = 0;
    cudnnBackendDescriptor_t x =
        bk_tensor(&p->made, &p->described, "tensor x", UID_X, fp16, n, c, h, w, false);
    const int64_t genstats_uids[4] = {UID_W, UID_Y, UID_SUM, UID_SQSUM};
    if (kind == GRAPH_CONV_GENSTATS) {  // y = conv(x), and y's per-channel sums: no prologue
        bk_conv_genstats(&p->made, &p->described, x, fp16, n, c, h, w, k, genstats_uids, ops + count);
        count += 2;
    } else if (kind == GRAPH_FORWARD || kind == GRAPH_WGRAD) {
        // the convolution's input: relu(x * scale + bias), scale and bias (c) fp16
        cudnnBackendDescriptor_t scale =
            bk_tensor(&p->made, &p->described, "tensor scale", UID_SCALE, fp16, 1, c, 1, 1, false);
        cudnnBackendDescriptor_t bias =
            bk_tensor(&p->made, &p->described, "tensor bias", UID_BIAS, fp16, 1, c, 1, 1, false);
        const int64_t prologue_uids[3] = {UID_SCALED, UID_BIASED, UID_RELU};
        cudnnBackendDescriptor_t relu = bk_scale_bias_relu(&p->made, &p->described, x, scale, bias, mid, n, c,
                                                           h, w, prologue_uids, ops + count);
        count += 3;
        if (kind == GRAPH_FORWARD) {  // y = conv(relu), and y's per-channel sums
            bk_conv_genstats(&p->made, &p->described, relu, fp16, n, c, h, w, k, genstats_uids, ops + count);
            count += 2;
        } else {  // dw = wgrad(relu, dy)
            cudnnBackendDescriptor_t dy =
                bk_tensor(&p->made, &p->described, "tensor dy", UID_DY, fp16, n, k, h, w, false);
            cudnnBackendDescriptor_t dw =
                bk_tensor(&p->made, &p->described, "tensor dw", UID_DW, fp16, k, c, 1, 1, false);
            ops[count++] = bk_conv(&p->made, &p->described, CUDNN_GRAPH_CONV_WGRAD, relu, dy, dw);
        }
    } else {
        cudnnBackendDescriptor_t g =
            bk_tensor(&p->made, &p->described, "tensor g", UID_G, fp16, n, c, h, w, false);
        cudnnBackendDescriptor_t coef[5] = {NULL, NULL, NULL, NULL, NULL};  // dbn_apply reads the last three
        for (int i = kind == GRAPH_DGRAD_DRELU_DBN ? 0 : 2; i < 5; i++)
            coef[i] = bk_tensor(&p->made, &p->described, COEF_NAME[i], COEF_UID[i], fp32, 1, c, 1, 1, false);
        if (kind == GRAPH_DGRAD_DRELU_DBN) {
            // da = dgrad(dy, w); g = da where bn(x) = ((x - mean) * invstd) * gamma + beta > 0; the weights.
            const int64_t uids[11] = {UID_DY,    UID_W,       UID_MEAN,   UID_INVSTD,  UID_GAMMA, UID_BETA,
                                      UID_DGRAD, UID_CENTRED, UID_NORMED, UID_GAMMAED, UID_BN};
            bk_dgrad_drelu_dbn(&p->made, &p->described, x, g, fp16, mid, n, c, h, w, k, uids, coef,
                               ops + count);
            count += 7;
        } else {
            // dx = (g * eq_dy + x * eq_x) + eq_bias
            cudnnBackendDescriptor_t gs =
                bk_tensor(&p->made, &p->described, "tensor g*eq_dy", UID_G_SCALED, mid, n, c, h, w, true);
            cudnnBackendDescriptor_t xs =
                bk_tensor(&p->made, &p->described, "tensor x*eq_x", UID_X_SCALED, mid, n, c, h, w, true);
            cudnnBackendDescriptor_t summed = bk_tensor(&p->made, &p->described, "tensor g*eq_dy+x*eq_x",
                                                        UID_SUMMED, mid, n, c, h, w, true);
            cudnnBackendDescriptor_t dx =
                bk_tensor(&p->made, &p->described, "tensor dx", UID_DX, fp16, n, c, h, w, false);
            ops[count++] = bk_pointwise(&p->made, &p->described, "pointwise g*eq_dy", CUDNN_POINTWISE_MUL, g,
                                        coef[2], gs);
            ops[count++] = bk_pointwise(&p->made, &p->described, "pointwise x*eq_x", CUDNN_POINTWISE_MUL, x,
                                        coef[3], xs);
            ops[count++] =
                bk_pointwise(&p->made, &p->described, "pointwise add", CUDNN_POINTWISE_ADD, gs, xs, summed);
            ops[count++] = bk_pointwise(&p->made, &p->described, "pointwise +eq_bias", CUDNN_POINTWISE_ADD,
                                        summed, coef[4], dx);
        }
    }
    return bk_graph(&p->made, &p->described, handle, ops, count);
}

// ---- one shape -------------------------------------------------------------------------------------------

typedef struct CaseBuffers {
    // inputs: x (rows, c_in), w (c_out, c_in), scale and bias (c_in) fp16, the same scale and bias in fp32
    // (the batch norm's gamma and beta), dy (rows, c_out) fp16; mean, invstd (c_in) fp32: x's statistics;
    // dy_w (rows, c_out) fp16: the weight gradient's dy, small enough that dw's sums over rows fit fp16
    void *x, *w, *scale16, *bias16, *dy, *dy_w;
    float *scale, *bias, *mean, *invstd;
    float *zeros, *ones;  // (max(c_in, c_out)) fp32: mean and invstd of the apply, beta and gamma of the
                          // statistics pass
    // fused outputs: y (rows, c_out) fp16 and its sums (2 c_out) fp32; g, dx (rows, c_in) fp16 and the
    // five vectors of dgrad_drelu_dbn (5 c_in) fp32
    void *y, *g, *dx, *dw;  // dw (c_out, c_in) fp16: scale_bias_relu_wgrad's
    float *sums, *coef;
    // unfused outputs: the apply's (rows, c_in), the convolution's y (rows, c_out), the statistics pass's
    // (rows, c_out) and its mean and invstd (c_out); the backward data's da and dx (rows, c_in) fp16, dgamma
    // and dbeta (c_in) fp16
    void *a, *y2, *z, *da, *dx2, *dgamma, *dbeta, *dw2;  // dw2 (c_out, c_in): the backward filter's
    float *save_mean, *save_invstd;
    // the reference: y (rows, c_out), g and dx (rows, c_in) fp32; the sums of y, and of g and g * xhat
    // (2 c_out, 2 c_in) fp64 (the first also on the host); the five vectors in fp32 (device: dbn_apply reads
    // them) and fp64 (host)
    float *ref_y, *ref_g, *ref_dx, *ref_coef, *ref_dw;  // ref_dw (c_out, c_in) fp32
    double *ref_sums, *ref_bwd_sums, *ref_sums_host, *ref_coef_host;
    double *acc;  // (2) fp64: error_sums_kernel's
} CaseBuffers;

// The five vectors of dgrad_drelu_dbn from the reference sums: dscale = sum g * xhat, dbias = sum g, and
// dx = eq_dy * g + eq_x * x + eq_bias with eq_dy = gamma * invstd, eq_x = -eq_dy * invstd * dscale / rows,
// eq_bias = -eq_dy * dbias / rows - eq_x * mean (torch's batch-norm backward, regrouped).
static void reference_coefficients(Backend *be, const ConvShape *s, int rows, CaseBuffers *b) {
    const int c = s->c_in;
    double *sums = (double *)malloc(2 * (size_t)c * sizeof(double));
    float *stat = (float *)malloc(3 * (size_t)c * sizeof(float)), *coef = (float *)malloc(5 * (size_t)c * 4);
    AMP_ASSERT(sums && stat && coef, "bench_fused_bn: out of host memory");
    be->to_host(be, sums, b->ref_bwd_sums, 2 * (size_t)c * sizeof(double));
    be->to_host(be, stat, b->scale, (size_t)c * 4);
    be->to_host(be, stat + c, b->mean, (size_t)c * 4);
    be->to_host(be, stat + 2 * c, b->invstd, (size_t)c * 4);
    double *r = b->ref_coef_host;
    for (int ch = 0; ch < c; ch++) {
        const double gamma = stat[ch], mean = stat[c + ch], invstd = stat[2 * c + ch];
        r[ch] = sums[c + ch], r[c + ch] = sums[ch];
        r[2 * c + ch] = gamma * invstd;
        r[3 * c + ch] = -r[2 * c + ch] * invstd * r[ch] / rows;
        r[4 * c + ch] = -r[2 * c + ch] * r[c + ch] / rows - r[3 * c + ch] * mean;
    }
    for (int i = 0; i < 5 * c; i++) coef[i] = (float)r[i];
    be->to_device(be, b->ref_coef, coef, 5 * (size_t)c * 4);
    free(sums), free(stat), free(coef);
}

// Allocates b for shape s, fills the inputs (x's statistics by bn_own_forward_train) and computes the
// reference.
static void case_buffers_make(Backend *be, const ConvShape *s, int rows, CaseBuffers *b) {
    CudaBackend *cb = cuda_state(be);
    const int c = s->c_in, k = s->c_out, c_max = c > k ? c : k;
    const size_t in = (size_t)rows * c, out = (size_t)rows * k;
    b->x = be->alloc(be, in * 2), b->w = be->alloc(be, (size_t)k * c * 2), b->dy = be->alloc(be, out * 2);
    b->scale16 = be->alloc(be, (size_t)c * 2), b->bias16 = be->alloc(be, (size_t)c * 2);
    b->scale = (float *)be->alloc(be, (size_t)c * 4), b->bias = (float *)be->alloc(be, (size_t)c * 4);
    b->mean = (float *)be->alloc(be, (size_t)c * 4), b->invstd = (float *)be->alloc(be, (size_t)c * 4);
    b->zeros = (float *)be->alloc(be, (size_t)c_max * 4), b->ones = (float *)be->alloc(be, (size_t)c_max * 4);
    b->y = be->alloc(be, out * 2), b->g = be->alloc(be, in * 2), b->dx = be->alloc(be, in * 2);
    b->dw = be->alloc(be, (size_t)k * c * 2), b->dw2 = be->alloc(be, (size_t)k * c * 2);
    b->dy_w = be->alloc(be, out * 2);
    b->ref_dw = (float *)be->alloc(be, (size_t)k * c * 4);
    b->sums = (float *)be->alloc(be, (size_t)k * 2 * 4), b->coef = (float *)be->alloc(be, (size_t)c * 5 * 4);
    b->a = be->alloc(be, in * 2), b->y2 = be->alloc(be, out * 2), b->z = be->alloc(be, out * 2);
    b->da = be->alloc(be, in * 2), b->dx2 = be->alloc(be, in * 2);
    b->dgamma = be->alloc(be, (size_t)c * 2), b->dbeta = be->alloc(be, (size_t)c * 2);
    b->save_mean = (float *)be->alloc(be, (size_t)k * 4),
    b->save_invstd = (float *)be->alloc(be, (size_t)k * 4);
    b->ref_y = (float *)be->alloc(be, out * 4), b->ref_g = (float *)be->alloc(be, in * 4);
    b->ref_dx = (float *)be->alloc(be, in * 4), b->ref_coef = (float *)be->alloc(be, (size_t)c * 5 * 4);
    b->ref_sums = (double *)be->alloc(be, (size_t)k * 2 * 8);
    b->ref_bwd_sums = (double *)be->alloc(be, (size_t)c * 2 * 8);
    b->ref_sums_host = (double *)malloc((size_t)k * 2 * sizeof(double));
    b->ref_coef_host = (double *)malloc((size_t)c * 5 * sizeof(double));
    AMP_ASSERT(b->ref_sums_host && b->ref_coef_host, "bench_fused_bn: out of host memory");
    b->acc = (double *)be->alloc(be, 2 * sizeof(double));
    // w with variance 1 / c_in keeps y near unit scale whatever c_in; x * scale + bias is negative for about a
    // third of x, so the ReLU matters; dy's mean away from 0 keeps the per-channel sums of g away from 0.
    const float w_bound = sqrtf(3.0f / (float)c);
    fill_half(cb, b->x, in, 1, -1.5f, 2.5f);
    fill_half(cb, b->w, (size_t)k * c, 2, -w_bound, w_bound);
    fill_half(cb, b->scale16, c, 3, 0.5f, 1.5f);
    fill_half(cb, b->bias16, c, 4, -0.5f, 0.5f);
    fill_half(cb, b->dy, out, 5, -0.5f, 1.0f);
    // dw sums about 0.2 per row (the applied x's mean 0.8 times dy's 0.25): dy_w scaled by 512 / rows keeps
    // dw near 100, as a training step's small gradients keep it far inside fp16's range
    const float dy_w_scale = 512.0f / (float)rows;
    fill_half(cb, b->dy_w, out, 6, -0.5f * dy_w_scale, 1.0f * dy_w_scale);
    half_to_float_kernel<<<grid_for(cb), 256, 0, cb->stream>>>((const __half *)b->scale16, b->scale, c);
    CUDA_CHECK_LAUNCH();
    half_to_float_kernel<<<grid_for(cb), 256, 0, cb->stream>>>((const __half *)b->bias16, b->bias, c);
    CUDA_CHECK_LAUNCH();
    fill_float(cb, b->zeros, c_max, 0.0f);
    fill_float(cb, b->ones, c_max, 1.0f);
    bn_own_forward_train(cb, rows, c, DTYPE_F16, b->x, NULL, 1, b->scale, b->bias, NULL, NULL, 0.1f, 1e-5f,
                         b->mean, b->invstd, b->a, NULL);
    const dim3 tile(REF_TILE, REF_TILE), rows_tiles((rows + REF_TILE - 1) / REF_TILE);
    const dim3 sum_block(32, SUM_LANES);
    const int sum_chunks = (rows + SUM_CHUNK_ROWS - 1) / SUM_CHUNK_ROWS;
    reference_gemm_kernel<<<dim3(rows_tiles.x, k / REF_TILE), tile, 0, cb->stream>>>(
        (const __half *)b->x, (const __half *)b->scale16, (const __half *)b->bias16, (const __half *)b->w, c,
        1, rows, c, k, b->ref_y);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemsetAsync(b->ref_sums, 0, (size_t)k * 2 * sizeof(double), cb->stream));
    reference_sums_kernel<<<dim3(k / 32, sum_chunks), sum_block, 0, cb->stream>>>(
        b->ref_y, NULL, NULL, NULL, NULL, NULL, rows, k, b->ref_sums);
    CUDA_CHECK_LAUNCH();
    be->to_host(be, b->ref_sums_host, b->ref_sums, (size_t)k * 2 * sizeof(double));
    reference_gemm_kernel<<<dim3(rows_tiles.x, c / REF_TILE), tile, 0, cb->stream>>>(
        (const __half *)b->dy, NULL, NULL, (const __half *)b->w, 1, c, rows, k, c, b->ref_g);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemsetAsync(b->ref_bwd_sums, 0, (size_t)c * 2 * sizeof(double), cb->stream));
    reference_sums_kernel<<<dim3(c / 32, sum_chunks), sum_block, 0, cb->stream>>>(
        b->ref_g, (const __half *)b->x, b->scale, b->bias, b->mean, b->invstd, rows, c, b->ref_bwd_sums);
    CUDA_CHECK_LAUNCH();
    reference_coefficients(be, s, rows, b);
    reference_dx_kernel<<<grid_for(cb), 256, 0, cb->stream>>>(b->ref_g, (const __half *)b->x,
                                                              b->ref_coef + 2 * c, b->ref_coef + 3 * c,
                                                              b->ref_coef + 4 * c, in, c, b->ref_dx);
    CUDA_CHECK_LAUNCH();
    const int wgrad_chunk = 4096;
    CUDA_CHECK(cudaMemsetAsync(b->ref_dw, 0, (size_t)k * c * sizeof(float), cb->stream));
    reference_wgrad_kernel<<<dim3(c / REF_TILE, k / REF_TILE, (rows + wgrad_chunk - 1) / wgrad_chunk), tile,
                             0, cb->stream>>>((const __half *)b->x, (const __half *)b->scale16,
                                              (const __half *)b->bias16, (const __half *)b->dy_w, rows, c, k,
                                              wgrad_chunk, b->ref_dw);
    CUDA_CHECK_LAUNCH();
}

static void case_buffers_free(Backend *be, CaseBuffers *b) {
    void *all[] = {b->x,      b->w,         b->scale16,     b->bias16,       b->dy,
                   b->scale,  b->bias,      b->mean,        b->invstd,       b->zeros,
                   b->ones,   b->y,         b->g,           b->dx,           b->dw,
                   b->dw2,    b->ref_dw,    b->sums,        b->coef,         b->a,
                   b->y2,     b->z,         b->da,          b->dx2,          b->dgamma,
                   b->dbeta,  b->save_mean, b->save_invstd, b->ref_y,        b->ref_g,
                   b->ref_dx, b->ref_coef,  b->ref_sums,    b->ref_bwd_sums, b->acc,
                   b->dy_w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
    free(b->ref_sums_host), free(b->ref_coef_host);
}

static void fused_plan_free(Backend *be, FusedPlan *p) {
    cudnn_made_free(&p->made);
    if (p->workspace) be->free(be, p->workspace);
    memset(p, 0, sizeof *p);
}

// The tensors in memory of graph `kind` over b: their ids and addresses; returns how many.
static int fused_pack_tensors(GraphKind kind, const ConvShape *s, const CaseBuffers *b, int64_t *uids,
                              void **ptrs) {
    const int c = s->c_in;
    int n = 0;
#define PACK(uid, ptr) (uids[n] = (uid), ptrs[n++] = (void *)(ptr))
    PACK(UID_X, kind == GRAPH_CONV_GENSTATS ? b->a : b->x);  // conv_genstats: the applied x, made unfused
    if (kind == GRAPH_FORWARD || kind == GRAPH_CONV_GENSTATS) {
        if (kind == GRAPH_FORWARD) PACK(UID_SCALE, b->scale16), PACK(UID_BIAS, b->bias16);
        PACK(UID_W, b->w), PACK(UID_Y, b->y);
        PACK(UID_SUM, b->sums), PACK(UID_SQSUM, b->sums + s->c_out);
    } else if (kind == GRAPH_DGRAD_DRELU_DBN) {
        PACK(UID_DY, b->dy), PACK(UID_W, b->w), PACK(UID_MEAN, b->mean), PACK(UID_INVSTD, b->invstd);
        PACK(UID_GAMMA, b->scale), PACK(UID_BETA, b->bias), PACK(UID_G, b->g);
        for (int i = 0; i < 5; i++) PACK(COEF_UID[i], b->coef + i * c);
    } else if (kind == GRAPH_WGRAD) {
        PACK(UID_SCALE, b->scale16), PACK(UID_BIAS, b->bias16), PACK(UID_DY, b->dy_w), PACK(UID_DW, b->dw);
    } else {  // the reference's g (fp16 in b->g) and coefficients: dbn_apply checked alone
        PACK(UID_G, b->g), PACK(UID_DX, b->dx);
        for (int i = 2; i < 5; i++) PACK(COEF_UID[i], b->ref_coef + i * c);
    }
#undef PACK
    return n;
}

// The workspace the plans share (the largest any asks for), and their variant pack over b.
static void fused_bind(FusedPlan *p, Backend *be, GraphKind kind, const ConvShape *s, const CaseBuffers *b) {
    int64_t bytes = 0, uids[PACK_MAX];
    void *ptrs[PACK_MAX];
    for (int i = 0; i < p->found.count; i++) {
        const int64_t plan_bytes = cudnn_plan_workspace(&p->described, p->found.plans[i]);
        if (plan_bytes > bytes) bytes = plan_bytes;
    }
    if (bytes > 0) p->workspace = be->alloc(be, (size_t)bytes);
    const int tensors = fused_pack_tensors(kind, s, b, uids, ptrs);
    p->pack = cudnn_variant_pack(&p->made, &p->described, tensors, uids, ptrs, p->workspace);
}

// The intermediate (virtual) tensors' type of a try: the specialized engines fix their I/O types and say
// nothing of the intermediates, the runtime fusion engines recommend fp32; both are tried and timed.
#define MID_TRIES 2
static const cudnnDataType_t MID_TYPE[MID_TRIES] = {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT};
static const char *MID_NAME[MID_TRIES] = {"fp16 intermediates", "fp32 intermediates"};

// One try at graph `kind` for shape s over b. Returns 1 with p->found's plans and p->pack; 0 when no engine
// took the graph (p->found.searched says why); -1 when cuDNN refused to describe it (p->described says where).
static int fused_plan_try(FusedPlan *p, Backend *be, GraphKind kind, const ConvShape *s, const CaseBuffers *b,
                          cudnnDataType_t mid) {
    CudaBackend *cb = cuda_state(be);
    memset(p, 0, sizeof *p);
    cudnnBackendDescriptor_t graph = fused_graph(p, kind, cb->cudnn, s, mid);
    if (p->described.status == CUDNN_STATUS_SUCCESS)
        cudnn_graph_plans(&p->made, cb->cudnn, graph, PLAN_MAX, RUNTIME_TRIES, &p->found);
    if (p->found.count > 0) fused_bind(p, be, kind, s, b);
    if (p->described.status != CUDNN_STATUS_SUCCESS) return -1;
    return p->found.count > 0 ? 1 : 0;
}

// Seconds on the monotonic clock: how long making the plans takes (runtime-compiled engines compile then).
static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// What a timed call runs: a fused plan; or an unfused pass: the apply of x, the convolution, the statistics
// pass with its apply on y (bn_own_forward_train), that apply alone (bn_own_forward_saved), the
// convolution's backward data, the batch norm's backward.
typedef enum {
    RUN_FUSED,
    RUN_APPLY,
    RUN_CONV,
    RUN_STATS_APPLY,
    RUN_APPLY_Y,
    RUN_DGRAD,
    RUN_BN_BACKWARD,
    RUN_WGRAD
} RunKind;

typedef struct CaseRun {
    Backend *be;
    const ConvShape *s;
    int rows;
    const CaseBuffers *b;
    GraphKind graph;  // RUN_FUSED's graph, plan and variant pack
    cudnnBackendDescriptor_t plan, pack;
} CaseRun;

// One call of r's fused plan, after zeroing the per-channel outputs it adds into.
static cudnnStatus_t fused_execute(const CaseRun *r) {
    CudaBackend *cb = cuda_state(r->be);
    const CaseBuffers *b = r->b;
    if (r->graph == GRAPH_FORWARD || r->graph == GRAPH_CONV_GENSTATS)
        CUDA_CHECK(cudaMemsetAsync(b->sums, 0, 2 * (size_t)r->s->c_out * sizeof(float), cb->stream));
    if (r->graph == GRAPH_DGRAD_DRELU_DBN)
        CUDA_CHECK(cudaMemsetAsync(b->coef, 0, 5 * (size_t)r->s->c_in * sizeof(float), cb->stream));
    return cudnnBackendExecute(cb->cudnn, r->plan, r->pack);
}

static void case_run(const CaseRun *r, RunKind kind) {
    CudaBackend *cb = cuda_state(r->be);
    const CaseBuffers *b = r->b;
    const int c = r->s->c_in, k = r->s->c_out;
    switch (kind) {
    case RUN_FUSED: CUDNN_CHECK(fused_execute(r)); break;
    case RUN_APPLY:
        bn_own_forward_saved(cb, r->rows, c, DTYPE_F16, b->x, 1, b->scale, b->bias, b->zeros, b->ones, b->a);
        break;
    case RUN_CONV: r->be->conv_forward(r->be, r->s, DTYPE_F16, b->a, b->w, b->y2); break;
    case RUN_STATS_APPLY:
        bn_own_forward_train(cb, r->rows, k, DTYPE_F16, b->y2, NULL, 1, b->ones, b->zeros, NULL, NULL, 0.1f,
                             1e-5f, b->save_mean, b->save_invstd, b->z, NULL);
        break;
    case RUN_APPLY_Y:
        bn_own_forward_saved(cb, r->rows, k, DTYPE_F16, b->y2, 1, b->ones, b->zeros, b->save_mean,
                             b->save_invstd, b->z);
        break;
    case RUN_DGRAD: r->be->conv_backward_data(r->be, r->s, DTYPE_F16, b->dy, b->w, b->da, 0); break;
    case RUN_BN_BACKWARD:
        bn_own_backward(cb, r->rows, c, DTYPE_F16, b->x, NULL, b->da, BN_MASK_FROM_X, b->bias, NULL, b->scale,
                        b->mean, b->invstd, b->dx2, 0, b->dgamma, b->dbeta, 0, NULL);
        break;
    case RUN_WGRAD: r->be->conv_backward_filter(r->be, r->s, DTYPE_F16, b->a, b->dy_w, b->dw2, 0); break;
    }
}

static void case_call(void *ctx, int kind) { case_run((const CaseRun *)ctx, (RunKind)kind); }

// The median ms of TIMED_RUNS calls after WARMUP_RUNS, each between two events on the compute stream.
static float median_ms(const CaseRun *r, RunKind kind) {
    return bench_time(r->be, WARMUP_RUNS, TIMED_RUNS, NULL, case_call, (void *)r, kind).median;
}

// The errors of graph `kind`'s outputs after a call: err[0] its tensor's (y, g or dx), err[1] the worst of
// its per-channel vectors (the sums of y, the five of dgrad_drelu_dbn; 0 for dbn_apply).
static void fused_errors(CudaBackend *cb, GraphKind kind, const ConvShape *s, const CaseBuffers *b,
                         double err[2]) {
    const size_t rows = (size_t)s->n * s->h * s->w;
    if (kind == GRAPH_FORWARD || kind == GRAPH_CONV_GENSTATS) {
        err[0] = tensor_error(cb, b->y, b->ref_y, rows * s->c_out, b->acc);
        err[1] = vector_error(cb, b->sums, b->ref_sums_host, 2, s->c_out);
    } else if (kind == GRAPH_DGRAD_DRELU_DBN) {
        err[0] = tensor_error(cb, b->g, b->ref_g, rows * s->c_in, b->acc);
        err[1] = vector_error(cb, b->coef, b->ref_coef_host, 5, s->c_in);
    } else if (kind == GRAPH_WGRAD) {
        err[0] = tensor_error(cb, b->dw, b->ref_dw, (size_t)s->c_out * s->c_in, b->acc);
        err[1] = 0.0;
    } else {
        err[0] = tensor_error(cb, b->dx, b->ref_dx, rows * s->c_in, b->acc);
        err[1] = 0.0;
    }
}

// One try of graph `kind` (intermediates MID_TYPE[m]) on shape s over b: each plan checked against the
// reference, then timed; prints the try's line. Returns -1 when cuDNN refused to describe the graph, 1 for
// a failed check, else 0; *best: the fastest plan's ms over the tries so far (0 before any).
static int run_fused(Backend *be, GraphKind kind, const ConvShape *s, const CaseBuffers *b, int m,
                     float *best) {
    CudaBackend *cb = cuda_state(be);
    const int rows = s->n * s->h * s->w;
    void *out = kind == GRAPH_FORWARD || kind == GRAPH_CONV_GENSTATS ? b->y
                : kind == GRAPH_DGRAD_DRELU_DBN                      ? b->g
                : kind == GRAPH_WGRAD                                ? b->dw
                                                                     : b->dx;
    const size_t out_bytes =
        kind == GRAPH_WGRAD
            ? (size_t)s->c_out * s->c_in * 2
            : (size_t)rows * (kind == GRAPH_FORWARD || kind == GRAPH_CONV_GENSTATS ? s->c_out : s->c_in) * 2;
    FusedPlan p;
    const double t0 = wall_seconds();
    const int found = fused_plan_try(&p, be, kind, s, b, MID_TYPE[m]);
    const double made_s = wall_seconds() - t0;
    if (found != 1) {
        printf("    %s, %s: %s (%s); %.1f s\n", GRAPH_NAME[kind], MID_NAME[m],
               found == 0 ? "no engine" : "graph refused",
               found == 0 ? p.found.searched.text : p.described.text, made_s);
        fused_plan_free(be, &p);
        return found;
    }
    double err[2] = {0.0, 0.0};
    float first = 0.0f, fastest = 0.0f;
    int first_at = -1, fastest_at = -1, executed = 0;
    for (int i = 0; i < p.found.count; i++) {
        CaseRun run = {be, s, rows, b, kind, p.found.plans[i], p.pack};
        CUDA_CHECK(cudaMemsetAsync(out, 0xff, out_bytes, cb->stream));  // NaN: an output left unwritten fails
        const cudnnStatus_t st = fused_execute(&run);
        if (st != CUDNN_STATUS_SUCCESS) {
            char message[256] = "";
            cudnn_last_message(message, sizeof message);
            printf("    %s, %s: plan %d (%s): cudnnBackendExecute: %s: %s FAIL\n", GRAPH_NAME[kind],
                   MID_NAME[m], i, p.found.engines[i], cudnnGetErrorString(st), message);
            err[0] = INFINITY;
            continue;
        }
        executed++;
        double e[2];
        fused_errors(cb, kind, s, b, e);
        err[0] = fmax(err[0], e[0]), err[1] = fmax(err[1], e[1]);
        const float ms = median_ms(&run, RUN_FUSED);
        if (executed == 1) first = ms, first_at = i;
        if (fastest_at < 0 || ms < fastest) fastest = ms, fastest_at = i;
    }
    if (executed == 0) {
        fused_plan_free(be, &p);
        return 1;
    }
    const int ok = err[0] < TENSOR_TOLERANCE && err[1] < VECTOR_TOLERANCE;
    char errors[64];
    if (kind == GRAPH_DBN_APPLY || kind == GRAPH_WGRAD)
        snprintf(errors, sizeof errors, "%s %.1e", kind == GRAPH_WGRAD ? "dw" : "dx", err[0]);
    else
        snprintf(errors, sizeof errors, "%s %.1e, %s %.1e", kind == GRAPH_DGRAD_DRELU_DBN ? "g" : "y", err[0],
                 kind == GRAPH_DGRAD_DRELU_DBN ? "vectors" : "sums", err[1]);
    printf(
        "    %s, %s: %d plan(s) of heuristics %s, made in %.1f s; first %.3f ms (%s); fastest %.3f ms (%s); "
        "worst errors %s%s\n",
        GRAPH_NAME[kind], MID_NAME[m], p.found.count, p.found.mode, made_s, first, p.found.engines[first_at],
        fastest, p.found.engines[fastest_at], errors, ok ? "" : " FAIL");
    if (*best == 0.0f || fastest < *best) *best = fastest;
    fused_plan_free(be, &p);
    return ok ? 0 : 1;
}

// The fastest fused time of graph `kind` on shape s over both tries (0 when none ran); *failed |= 1 for a
// failed check, *refused += 1 when cuDNN refused to describe the graph on both tries.
static float fused_fastest(Backend *be, GraphKind kind, const ConvShape *s, const CaseBuffers *b, int *failed,
                           int *refused) {
    float best = 0.0f;
    int refusals = 0;
    for (int m = 0; m < MID_TRIES; m++) {
        const int r = run_fused(be, kind, s, b, m, &best);
        refusals += r == -1;
        *failed |= r == 1;
    }
    *refused += refusals == MID_TRIES;
    return best;
}

// Checks and times one shape: a row of the unfused forward, the fused forward's tries; a row of the unfused
// backward, the fused backward's tries; a row of the unfused weight gradient, the fused one's tries; each
// direction's fused total. Returns 1 for a failed check, 2 when cuDNN refused to describe some graph on both
// tries, else 0. step[0..5] += count * (forward unfused, fused, backward unfused, fused, weight gradient
// unfused, fused) ms where the fused direction ran.
static int run_case(Backend *be, const ConvCase *k, int n, double step[6]) {
    CudaBackend *cb = cuda_state(be);
    ConvShape s = {n, k->side, k->side, k->c_in, k->c_out, 1, 1, 1, 0, 1, 0, 0};
    conv_shape_finish(&s);
    const int rows = n * k->side * k->side;
    CaseBuffers b;
    case_buffers_make(be, &s, rows, &b);
    CaseRun run = {be, &s, rows, &b, GRAPH_FORWARD, NULL, NULL};
    be->conv_prepare(be, &s, DTYPE_F16);
    case_run(&run, RUN_APPLY);
    case_run(&run, RUN_CONV);
    case_run(&run, RUN_DGRAD);
    case_run(&run, RUN_BN_BACKWARD);
    case_run(&run, RUN_WGRAD);
    const double y_err = tensor_error(cb, b.y2, b.ref_y, (size_t)rows * k->c_out, b.acc);
    const double dx_err = tensor_error(cb, b.dx2, b.ref_dx, (size_t)rows * k->c_in, b.acc);
    const double dw_err = tensor_error(cb, b.dw2, b.ref_dw, (size_t)k->c_out * k->c_in, b.acc);
    int failed = !(y_err < TENSOR_TOLERANCE) || !(dx_err < TENSOR_TOLERANCE) || !(dw_err < TENSOR_TOLERANCE),
        refused = 0;
    const char *fwd_route = cuda_backend_conv_route_is_gemm(be, &s, DTYPE_F16, 0) == 1 ? "gemm" : "cuDNN";
    const char *bwd_route = cuda_backend_conv_route_is_gemm(be, &s, DTYPE_F16, 1) == 1 ? "gemm" : "cuDNN";

    const float apply = median_ms(&run, RUN_APPLY), conv = median_ms(&run, RUN_CONV);
    const float stats = median_ms(&run, RUN_STATS_APPLY) - median_ms(&run, RUN_APPLY_Y);
    const float forward = apply + conv + stats;
    printf(
        "%-19s %8d %5d %5d %5d | forward  %8.3f = apply %6.3f + conv %6.3f %-5s + stats %6.3f | y err %.1e%s\n",
        k->name, rows, k->c_in, k->c_out, k->count, forward, apply, conv, fwd_route, stats, y_err,
        y_err < TENSOR_TOLERANCE ? "" : " FAIL");
    const float forward_fused = fused_fastest(be, GRAPH_FORWARD, &s, &b, &failed, &refused);
    if (forward_fused > 0.0f) {
        printf("    fused forward %.3f ms, %.2fx the unfused\n", forward_fused, forward / forward_fused);
        step[0] += k->count * (double)forward, step[1] += k->count * (double)forward_fused;
    }
    // the convolution alone with its output's sums (no batch norm in front): against conv + statistics
    const float genstats_fused = fused_fastest(be, GRAPH_CONV_GENSTATS, &s, &b, &failed, &refused);
    if (genstats_fused > 0.0f)
        printf("    fused conv_genstats %.3f ms, %.2fx the conv + stats\n", genstats_fused,
               (conv + stats) / genstats_fused);

    const float dgrad = median_ms(&run, RUN_DGRAD), bn_backward = median_ms(&run, RUN_BN_BACKWARD);
    const float backward = dgrad + bn_backward;
    printf("%-19s %8s %5s %5s %5s | backward %8.3f = dgrad %6.3f %-5s + bn backward %6.3f | dx err %.1e%s\n",
           "", "", "", "", "", backward, dgrad, bwd_route, bn_backward, dx_err,
           dx_err < TENSOR_TOLERANCE ? "" : " FAIL");
    const float weights = fused_fastest(be, GRAPH_DGRAD_DRELU_DBN, &s, &b, &failed, &refused);
    // dbn_apply reads the reference's g (in fp16) and coefficients
    float_to_half_kernel<<<grid_for(cb), 256, 0, cb->stream>>>(b.ref_g, (__half *)b.g,
                                                               (size_t)rows * k->c_in);
    CUDA_CHECK_LAUNCH();
    const float apply_dx = fused_fastest(be, GRAPH_DBN_APPLY, &s, &b, &failed, &refused);
    if (weights > 0.0f && apply_dx > 0.0f) {
        printf("    fused backward %.3f ms (dgrad_drelu_dbn %.3f + dbn_apply %.3f), %.2fx the unfused\n",
               weights + apply_dx, weights, apply_dx, backward / (weights + apply_dx));
        step[2] += k->count * (double)backward, step[3] += k->count * (double)(weights + apply_dx);
    }

    const float wgrad = median_ms(&run, RUN_WGRAD);
    printf("%-19s %8s %5s %5s %5s | weights  %8.3f = wgrad %6.3f on the applied x%12s | dw err %.1e%s\n", "",
           "", "", "", "", wgrad, wgrad, "", dw_err, dw_err < TENSOR_TOLERANCE ? "" : " FAIL");
    const float wgrad_fused = fused_fastest(be, GRAPH_WGRAD, &s, &b, &failed, &refused);
    if (wgrad_fused > 0.0f) {
        printf("    fused weight gradient %.3f ms (x applied in the prologue), %.2fx the unfused\n",
               wgrad_fused, wgrad / wgrad_fused);
        step[4] += k->count * (double)wgrad, step[5] += k->count * (double)wgrad_fused;
    }
    case_buffers_free(be, &b);
    return failed | (refused > 0 ? 2 : 0);
}

int main(int argc, char **argv) {
    char *end = NULL;
    const long n = argc > 1 ? strtol(argv[1], &end, 10) : 256;
    const char *only = argc > 2 ? argv[2] : "";
    if (argc > 3 || (argc > 1 && (end == argv[1] || *end != '\0' || n < 1 || n > 1024))) {
        fprintf(stderr,
                "usage: bench_fused_bn [n [only]]   n: the batch, 1 to 1024 (default 256); only: just the "
                "shapes whose name contains it (\"layer3\", \"conv1\")\n");
        return 2;
    }
    int matches = 0;
    for (int i = 0; i < CASE_COUNT; i++) matches += strstr(CASES[i].name, only) != NULL;
    if (matches == 0) {
        fprintf(stderr,
                "bench_fused_bn: no shape's name contains \"%s\" (names: \"layer1.0 conv1\" ... \"layer4 "
                "conv3\")\n",
                only);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);  // a row as soon as it is measured
    CudaOptions opts = cuda_options_default();
    opts.cudnn_benchmark = 1;  // the convolution routes the AMP configs train with
    char why[256] = "";
    Backend *be = cuda_backend_create(0, &opts, why, sizeof why);
    if (!be) {
        fprintf(stderr, "bench_fused_bn: no CUDA backend: %s\n", why);
        return 1;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, cuda_state(be)->device));
    printf("batch norm fused into the 1x1 convolutions (cuDNN graphs) against amptrain's unfused passes: %s, "
           "cuDNN %zu, batch %ld, fp16 NHWC; median of %d calls, ms\n",
           prop.name, cudnnGetVersion(), n, TIMED_RUNS);
    printf("%-19s %8s %5s %5s %5s |\n", "shape", "rows", "c_in", "c_out", "count");
    double step[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int failed = 0;
    for (int i = 0; i < CASE_COUNT; i++)
        if (strstr(CASES[i].name, only)) failed |= run_case(be, &CASES[i], (int)n, step);
    printf(
        "one step's 1x1 convolutions with their batch-norm passes, weighted by count, over the shapes the "
        "fused graphs ran on: forward unfused %.2f ms, fused %.2f ms; backward unfused %.2f ms, fused %.2f ms; "
        "weight gradient unfused %.2f ms, fused %.2f ms\n",
        step[0], step[1], step[2], step[3], step[4], step[5]);
    be->destroy(be);
    if (failed & 1) fprintf(stderr, "bench_fused_bn: a result differs from the reference (FAIL above)\n");
    if (failed & 2) fprintf(stderr, "bench_fused_bn: cuDNN refused to describe a graph (above)\n");
    return failed ? 1 : 0;
}
