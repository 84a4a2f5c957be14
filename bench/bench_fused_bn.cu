// bench_fused_bn.cu - a measured prototype, not wired into the trainer: batch norm fused into ResNeXt-50
// 32x4d's 1x1 convolutions through cuDNN's backend (graph) API, beside the unfused passes amptrain runs today.
//
//   build/bench_fused_bn [n]     n: the batch (default 256)
//
// Per stride-1 1x1 convolution shape of the model, x (n, h, w, c_in) -> y (n, h, w, c_out), NHWC fp16, a row
// of the unfused passes, then a line per try of the fused plan:
// - unfused, today's passes for the same work: amptrain's own batch-norm apply with ReLU
//   (bn_own_forward_saved: gamma = scale, beta = bias over mean 0 and invstd 1), the convolution the trainer
//   runs (conv_forward after conv_prepare under cudnn.benchmark: cuDNN's pick or the cuBLAS GEMM), and the
//   statistics pass of the next batch norm's training forward, timed as bn_own_forward_train minus
//   bn_own_forward_saved on y (the two share the same apply pass).
// - fused: one cuDNN execution plan for the graph scale_bias_relu_conv_genstats (NVIDIA's MLPerf ResNet-50
//   pattern, ConvBNfprop): y = conv1x1(relu(x * scale[c] + bias[c])), scale and bias (c_in) fp16, with the
//   per-output-channel sum and sum of squares of y (c_out) fp32, from which the next batch norm's finalize
//   makes its own scale and bias. The graph is tried with fp16 and with fp32 virtual intermediates. Each
//   try makes a plan of every engine config heuristics mode A offers (else FALLBACK's), up to 16, checks and
//   times each, and prints the heuristics' first choice and the fastest with their engine and knobs; or
//   says "no engine" with cuDNN's status and message.
// Times: median of 20 calls after 3 warm-up calls (cudaEvent, compute stream); a fused call includes the
// one memset that zeroes its two sums. The last line weights each shape by its count in the model, as if
// every one ran the full pattern: in the model a block's conv1 follows the residual add (MLPerf's DBARCS
// variant) and layer1.0's conv1 and downsample follow the max pool (no prologue), so it bounds what this
// pattern alone saves.
// Check, before timing: an fp32 reference on the GPU from the same fp16 inputs (prologue and products in
// fp32, sums of the fp32 products in fp64); error = max |got - ref| / max |ref|, over y and over each of the
// two sums. Every fused plan's y under 1e-2 and sums under 1e-3 (a NaN counts as an infinite error), the
// unfused y under 1e-2, or FAIL. Exit 1 on a FAIL, or when cuDNN refuses to describe the graph itself on both
// tries for some shape (the line names the call, descriptor and attribute); a missing engine is a result,
// not a failure.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/cuda_batchnorm_own.h"
#include "kernels/cuda/cuda_diag.h"

#define WARMUP_RUNS 3
#define TIMED_RUNS 20
#define Y_TOLERANCE 1e-2
#define SUM_TOLERANCE 1e-3

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

#define REF_TILE 32         // reference_conv_kernel: 32 x 32 outputs per block, k in steps of 32
#define SUM_LANES 8         // reference_sums_kernel: row lanes per channel
#define SUM_CHUNK_ROWS 256  // reference_sums_kernel: rows per block

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

// ref (rows, c_out) fp32 = relu(x * scale + bias) . w^T, all in fp32 from x (rows, c_in), w (c_out, c_in),
// scale, bias (c_in) fp16; c_in and c_out multiples of REF_TILE. grid (ceil(rows / 32), c_out / 32), block
// (32, 32): thread (tx, ty) sums output (row0 + ty, o0 + tx) over k in shared-memory tiles.
__global__ void reference_conv_kernel(const __half *x, const __half *w, const __half *scale,
                                      const __half *bias, int rows, int c_in, int c_out, float *ref) {
    __shared__ float xs[REF_TILE][REF_TILE + 1], ws[REF_TILE][REF_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.x * REF_TILE + ty, o = blockIdx.y * REF_TILE + tx;
    const int w_row = blockIdx.y * REF_TILE + ty;  // the filter row this thread loads
    float acc = 0.0f;
    for (int k0 = 0; k0 < c_in; k0 += REF_TILE) {
        const int k = k0 + tx;
        const float v = row < rows ? __half2float(x[(size_t)row * c_in + k]) : 0.0f;
        xs[ty][tx] = fmaxf(v * __half2float(scale[k]) + __half2float(bias[k]), 0.0f);
        ws[ty][tx] = __half2float(w[(size_t)w_row * c_in + k]);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < REF_TILE; j++) acc = fmaf(xs[ty][j], ws[tx][j], acc);
        __syncthreads();
    }
    if (row < rows) ref[(size_t)row * c_out + o] = acc;
}

// sums (2c) fp64 += per channel of ref (rows, c) fp32: the sum (first c), the sum of squares (next c).
// grid (c / 32, ceil(rows / SUM_CHUNK_ROWS)), block (32, SUM_LANES); one fp64 atomic per channel and block.
__global__ void reference_sums_kernel(const float *ref, int rows, int c, double *sums) {
    __shared__ double part[2][SUM_LANES][32];
    const int tx = threadIdx.x, ty = threadIdx.y, ch = blockIdx.x * 32 + tx;
    const int r0 = blockIdx.y * SUM_CHUNK_ROWS, r1 = min(rows, r0 + SUM_CHUNK_ROWS);
    double s = 0.0, q = 0.0;
    for (int r = r0 + ty; r < r1; r += SUM_LANES) {
        const double v = ref[(size_t)r * c + ch];
        s += v;
        q += v * v;
    }
    part[0][ty][tx] = s, part[1][ty][tx] = q;
    __syncthreads();
    if (ty != 0) return;
    for (int j = 1; j < SUM_LANES; j++) s += part[0][j][tx], q += part[1][j][tx];
    atomicAdd(&sums[ch], s);
    atomicAdd(&sums[c + ch], q);
}

// err[0] = max |y - ref| (a NaN or inf in y counts as inf), err[1] = max |ref|, over n elements, as the bits
// of non-negative floats, which order as unsigned ints. err zeroed by the caller.
__global__ void max_error_kernel(const __half *y, const float *ref, size_t n, unsigned *err) {
    float d = 0.0f, m = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float e = fabsf(__half2float(y[i]) - ref[i]);
        if (!(e <= FLT_MAX)) e = INFINITY;
        d = fmaxf(d, e);
        m = fmaxf(m, fabsf(ref[i]));
    }
    for (int lane = 16; lane > 0; lane /= 2) {
        d = fmaxf(d, __shfl_xor_sync(0xffffffffu, d, lane));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, lane));
    }
    if (threadIdx.x % 32 == 0) atomicMax(&err[0], __float_as_uint(d)), atomicMax(&err[1], __float_as_uint(m));
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

// max |y - ref| / max |ref| over n elements of y (fp16) against ref (fp32); inf for a NaN.
static double y_error(CudaBackend *cb, const void *y, const float *ref, size_t n, unsigned *err_dev) {
    CUDA_CHECK(cudaMemsetAsync(err_dev, 0, 2 * sizeof(unsigned), cb->stream));
    max_error_kernel<<<grid_for(cb), 256, 0, cb->stream>>>((const __half *)y, ref, n, err_dev);
    CUDA_CHECK_LAUNCH();
    unsigned bits[2];
    CUDA_CHECK(cudaMemcpyAsync(bits, err_dev, sizeof bits, cudaMemcpyDeviceToHost, cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    float d, m;
    memcpy(&d, &bits[0], sizeof d), memcpy(&m, &bits[1], sizeof m);
    return m > 0.0f ? (double)d / m : (double)d;
}

// The worse of max |got - ref| / max |ref| over the sums (first c) and the sums of squares (next c); inf for
// a NaN.
static double sums_error(CudaBackend *cb, const float *got_dev, const double *ref_dev, int c) {
    float *got = (float *)malloc(2 * (size_t)c * sizeof(float));
    double *ref = (double *)malloc(2 * (size_t)c * sizeof(double));
    CUDA_CHECK(
        cudaMemcpyAsync(got, got_dev, 2 * (size_t)c * sizeof(float), cudaMemcpyDeviceToHost, cb->stream));
    CUDA_CHECK(
        cudaMemcpyAsync(ref, ref_dev, 2 * (size_t)c * sizeof(double), cudaMemcpyDeviceToHost, cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    double worst = 0.0;
    for (int half = 0; half < 2; half++) {
        double d = 0.0, m = 0.0;
        for (int ch = half * c; ch < (half + 1) * c; ch++) {
            double e = fabs((double)got[ch] - ref[ch]);
            if (!(e <= DBL_MAX)) e = INFINITY;
            d = fmax(d, e), m = fmax(m, fabs(ref[ch]));
        }
        worst = fmax(worst, m > 0.0 ? d / m : d);
    }
    free(got), free(ref);
    return worst;
}

// ---- the fused plan, through cuDNN's backend API --------------------------------------------------------

// Tensor ids of the graph (CUDNN_ATTR_TENSOR_UNIQUE_ID; the variant pack's keys).
enum { UID_X = 1, UID_W, UID_SCALE, UID_BIAS, UID_Y, UID_SUM, UID_SQSUM, UID_SCALED, UID_BIASED, UID_RELU };
#define PACK_TENSORS 7  // UID_X .. UID_SQSUM: the tensors in memory

// The first cuDNN failure of a sequence of calls: "call(descriptor, attribute): status: cuDNN's message".
typedef struct Trail {
    cudnnStatus_t status;
    char text[400];
} Trail;

#define PLAN_MAX 16      // engine configs of one heuristics mode made into plans, checked and timed
#define ENGINE_TEXT 192  // "engine 2, knobs 2=3 25=0 27=1 28=2"

// One try at the fused graph: every descriptor made for it (destroyed together), why the graph could not be
// described or no engine config gave a plan, and the plans (in the heuristics' order) with their engines, the
// variant pack and the workspace they share.
typedef struct FusedPlan {
    cudnnBackendDescriptor_t *made;
    int made_count, made_cap;
    Trail described;  // describing the tensors, operations and variant pack: a failure is a defect here
    Trail searched;   // the operation graph's finalize, heuristics, the last plan that failed to finalize
    int plan_count;
    cudnnBackendDescriptor_t plans[PLAN_MAX];
    char engines[PLAN_MAX][ENGINE_TEXT];
    const char *mode;  // the heuristics mode that offered the plans
    cudnnBackendDescriptor_t pack;
    void *workspace;
} FusedPlan;

static void trail_fail(Trail *t, cudnnStatus_t st, const char *call, const char *what, const char *attr) {
    char message[256] = "";
    cudnnGetLastErrorString(message, sizeof message);
    t->status = st;
    snprintf(t->text, sizeof t->text, "%s(%s%s%s): %s%s%s", call, what, attr ? ", " : "", attr ? attr : "",
             cudnnGetErrorString(st), message[0] ? ": " : "", message);
}

static cudnnBackendDescriptor_t bk_make(FusedPlan *p, Trail *t, cudnnBackendDescriptorType_t type,
                                        const char *what) {
    cudnnBackendDescriptor_t d = NULL;
    if (t->status != CUDNN_STATUS_SUCCESS) return NULL;
    const cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        trail_fail(t, st, "cudnnBackendCreateDescriptor", what, NULL);
        return NULL;
    }
    if (p->made_count == p->made_cap) {
        p->made_cap = p->made_cap ? 2 * p->made_cap : 64;
        p->made = (cudnnBackendDescriptor_t *)realloc(p->made, p->made_cap * sizeof *p->made);
        AMP_ASSERT(p->made != NULL, "bench_fused_bn: out of host memory");
    }
    p->made[p->made_count++] = d;
    return d;
}

static void bk_set(Trail *t, cudnnBackendDescriptor_t d, const char *what, cudnnBackendAttributeName_t name,
                   const char *name_text, cudnnBackendAttributeType_t type, int64_t count, const void *v) {
    if (t->status != CUDNN_STATUS_SUCCESS) return;
    const cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, count, v);
    if (st != CUDNN_STATUS_SUCCESS) trail_fail(t, st, "cudnnBackendSetAttribute", what, name_text);
}

static void bk_get(Trail *t, cudnnBackendDescriptor_t d, const char *what, cudnnBackendAttributeName_t name,
                   const char *name_text, cudnnBackendAttributeType_t type, int64_t capacity, int64_t *count,
                   void *v) {
    if (t->status != CUDNN_STATUS_SUCCESS) return;
    const cudnnStatus_t st = cudnnBackendGetAttribute(d, name, type, capacity, count, v);
    if (st != CUDNN_STATUS_SUCCESS) trail_fail(t, st, "cudnnBackendGetAttribute", what, name_text);
}

#define BK_SET(t, d, what, name, type, count, v) bk_set(t, d, what, name, #name, type, count, v)
#define BK_GET(t, d, what, name, type, capacity, count, v)                                                   \
    bk_get(t, d, what, name, #name, type, capacity, count, v)

static void bk_finalize(Trail *t, cudnnBackendDescriptor_t d, const char *what) {
    if (t->status != CUDNN_STATUS_SUCCESS) return;
    const cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) trail_fail(t, st, "cudnnBackendFinalize", what, NULL);
}

// A finalized tensor of dimensions (n, c, h, w) in packed NHWC, 16-byte aligned.
static cudnnBackendDescriptor_t bk_tensor(FusedPlan *p, const char *what, int64_t uid, cudnnDataType_t dt,
                                          int64_t n, int64_t c, int64_t h, int64_t w, bool is_virtual) {
    Trail *t = &p->described;
    const int64_t dim[4] = {n, c, h, w}, stride[4] = {c * h * w, 1, w * c, c}, alignment = 16;
    cudnnBackendDescriptor_t d = bk_make(p, t, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    BK_SET(t, d, what, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    bk_finalize(t, d, what);
    return d;
}

// y = mode(x, b) (b NULL for a unary mode), computed in fp32.
static cudnnBackendDescriptor_t bk_pointwise(FusedPlan *p, const char *what, cudnnPointwiseMode_t mode,
                                             cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                             cudnnBackendDescriptor_t y) {
    Trail *t = &p->described;
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t pw = bk_make(p, t, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    BK_SET(t, pw, what, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    BK_SET(t, pw, what, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    bk_finalize(t, pw, what);
    cudnnBackendDescriptor_t op = bk_make(p, t, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) BK_SET(t, op, what, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    bk_finalize(t, op, what);
    return op;
}

// y = x (*) w: 1x1, stride 1, no padding, fp32 accumulation.
static cudnnBackendDescriptor_t bk_conv_forward(FusedPlan *p, cudnnBackendDescriptor_t x,
                                                cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y) {
    Trail *t = &p->described;
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, ones[2] = {1, 1}, zeros[2] = {0, 0};
    const float alpha = 1.0f, beta = 0.0f;
    cudnnBackendDescriptor_t conv = bk_make(p, t, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution");
    BK_SET(t, conv, "convolution", CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    BK_SET(t, conv, "convolution", CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    BK_SET(t, conv, "convolution", CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    BK_SET(t, conv, "convolution", CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones);
    BK_SET(t, conv, "convolution", CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, ones);
    BK_SET(t, conv, "convolution", CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, zeros);
    BK_SET(t, conv, "convolution", CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, zeros);
    bk_finalize(t, conv, "convolution");
    const char *what = "convolution forward";
    cudnnBackendDescriptor_t op = bk_make(p, t, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, what);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
           &conv);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    bk_finalize(t, op, what);
    return op;
}

// sum, sqsum (1, c, 1, 1) fp32 = per-channel sum and sum of squares of y.
static cudnnBackendDescriptor_t bk_genstats(FusedPlan *p, cudnnBackendDescriptor_t y,
                                            cudnnBackendDescriptor_t sum, cudnnBackendDescriptor_t sqsum) {
    Trail *t = &p->described;
    const char *what = "genstats";
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t op = bk_make(p, t, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, what);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum);
    BK_SET(t, op, what, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sqsum);
    bk_finalize(t, op, what);
    return op;
}

// scale_bias_relu_conv_genstats for shape s, its virtual intermediates in mid: the operation graph, not yet
// finalized (its finalize is the first step of the engine search).
static cudnnBackendDescriptor_t fused_graph(FusedPlan *p, cudnnHandle_t handle, const ConvShape *s,
                                            cudnnDataType_t mid) {
    const cudnnDataType_t fp16 = CUDNN_DATA_HALF, fp32 = CUDNN_DATA_FLOAT;
    const int64_t n = s->n, h = s->h, w = s->w, c = s->c_in, k = s->c_out;
    cudnnBackendDescriptor_t x = bk_tensor(p, "tensor x", UID_X, fp16, n, c, h, w, false);
    cudnnBackendDescriptor_t wt = bk_tensor(p, "tensor w", UID_W, fp16, k, c, 1, 1, false);
    cudnnBackendDescriptor_t scale = bk_tensor(p, "tensor scale", UID_SCALE, fp16, 1, c, 1, 1, false);
    cudnnBackendDescriptor_t bias = bk_tensor(p, "tensor bias", UID_BIAS, fp16, 1, c, 1, 1, false);
    cudnnBackendDescriptor_t scaled = bk_tensor(p, "tensor x*scale", UID_SCALED, mid, n, c, h, w, true);
    cudnnBackendDescriptor_t biased = bk_tensor(p, "tensor x*scale+bias", UID_BIASED, mid, n, c, h, w, true);
    cudnnBackendDescriptor_t relu = bk_tensor(p, "tensor relu", UID_RELU, mid, n, c, h, w, true);
    cudnnBackendDescriptor_t y = bk_tensor(p, "tensor y", UID_Y, fp16, n, k, h, w, false);
    cudnnBackendDescriptor_t sum = bk_tensor(p, "tensor sum", UID_SUM, fp32, 1, k, 1, 1, false);
    cudnnBackendDescriptor_t sqsum = bk_tensor(p, "tensor sqsum", UID_SQSUM, fp32, 1, k, 1, 1, false);
    cudnnBackendDescriptor_t ops[5] = {
        bk_pointwise(p, "pointwise scale", CUDNN_POINTWISE_MUL, x, scale, scaled),
        bk_pointwise(p, "pointwise bias", CUDNN_POINTWISE_ADD, scaled, bias, biased),
        bk_pointwise(p, "pointwise relu", CUDNN_POINTWISE_RELU_FWD, biased, NULL, relu),
        bk_conv_forward(p, relu, wt, y),
        bk_genstats(p, y, sum, sqsum),
    };
    Trail *t = &p->described;
    cudnnBackendDescriptor_t graph =
        bk_make(p, t, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    BK_SET(t, graph, "operation graph", CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 5, ops);
    BK_SET(t, graph, "operation graph", CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    return graph;
}

// text: the engine's global index, whether it compiles at run time, and its knob choices (type=value,
// cudnnBackendKnobType_t).
static void fused_describe_engine(FusedPlan *p, cudnnBackendDescriptor_t cfg, char text[ENGINE_TEXT]) {
    Trail t = {};
    int64_t count = 0, index = -1, notes_count = 0, knob_count = 0;
    cudnnBackendDescriptor_t engine = bk_make(p, &t, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
    BK_GET(&t, cfg, "engine config", CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
           &engine);
    BK_GET(&t, engine, "engine", CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, &index);
    cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    BK_GET(&t, engine, "engine", CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
           CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &notes_count, notes);
    int runtime_compiled = 0;
    for (int64_t i = 0; i < notes_count && t.status == CUDNN_STATUS_SUCCESS; i++)
        runtime_compiled |= notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    cudnnBackendDescriptor_t knobs[CUDNN_KNOB_TYPE_COUNTS];
    for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; i++)
        knobs[i] = bk_make(p, &t, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob choice");
    BK_GET(&t, cfg, "engine config", CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
           CUDNN_KNOB_TYPE_COUNTS, &knob_count, knobs);
    size_t len = (size_t)snprintf(text, ENGINE_TEXT, "engine %lld%s, knobs", (long long)index,
                                  runtime_compiled ? " (runtime compiled)" : "");
    for (int64_t i = 0; i < knob_count && t.status == CUDNN_STATUS_SUCCESS && len < ENGINE_TEXT; i++) {
        cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
        int64_t value = 0;
        BK_GET(&t, knobs[i], "knob choice", CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &count,
               &type);
        BK_GET(&t, knobs[i], "knob choice", CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &count,
               &value);
        len += (size_t)snprintf(text + len, ENGINE_TEXT - len, " %d=%lld", (int)type, (long long)value);
    }
    if (t.status != CUDNN_STATUS_SUCCESS && len < ENGINE_TEXT)
        snprintf(text + len, ENGINE_TEXT - len, " (%s)", t.text);
}

// p->plans: the engine configs of heuristics mode A (else FALLBACK, when A offers none that finalizes) whose
// execution plans finalize, at most PLAN_MAX, in the heuristics' order; else p->searched holds cuDNN's last
// refusal.
static void fused_search(FusedPlan *p, cudnnHandle_t handle, cudnnBackendDescriptor_t graph) {
    static const cudnnBackendHeurMode_t MODES[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    static const char *MODE_NAME[2] = {"A", "FALLBACK"};
    bk_finalize(&p->searched, graph, "operation graph");
    if (p->searched.status != CUDNN_STATUS_SUCCESS) return;
    for (int m = 0; m < 2; m++) {
        Trail h = {};
        int64_t count = 0, got = 0;
        cudnnBackendDescriptor_t heur = bk_make(p, &h, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
        BK_SET(&h, heur, "heuristics", CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               1, &graph);
        BK_SET(&h, heur, "heuristics", CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &MODES[m]);
        bk_finalize(&h, heur, "heuristics");
        BK_GET(&h, heur, "heuristics", CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
               &count, NULL);
        cudnnBackendDescriptor_t *cfgs =
            (cudnnBackendDescriptor_t *)calloc(count > 0 ? (size_t)count : 1, sizeof *cfgs);
        AMP_ASSERT(cfgs != NULL, "bench_fused_bn: out of host memory");
        for (int64_t i = 0; i < count; i++)
            cfgs[i] = bk_make(p, &h, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
        if (count > 0)
            BK_GET(&h, heur, "heuristics", CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                   count, &got, cfgs);
        if (h.status != CUDNN_STATUS_SUCCESS) {
            p->searched = h;
        } else if (got == 0) {
            p->searched.status = CUDNN_STATUS_NOT_SUPPORTED;
            snprintf(p->searched.text, sizeof p->searched.text, "heuristics mode %s offered no engine config",
                     MODE_NAME[m]);
        }
        for (int64_t i = 0; i < got && h.status == CUDNN_STATUS_SUCCESS && p->plan_count < PLAN_MAX; i++) {
            Trail e = {};
            const char *what = "execution plan";
            cudnnBackendDescriptor_t plan = bk_make(p, &e, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, what);
            BK_SET(&e, plan, what, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
            BK_SET(&e, plan, what, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                   &cfgs[i]);
            bk_finalize(&e, plan, what);
            if (e.status == CUDNN_STATUS_SUCCESS) {
                fused_describe_engine(p, cfgs[i], p->engines[p->plan_count]);
                p->plans[p->plan_count++] = plan;
            } else {
                p->searched = e;
            }
        }
        free(cfgs);
        if (p->plan_count > 0) {
            p->mode = MODE_NAME[m];
            return;
        }
    }
}

// ---- one shape -------------------------------------------------------------------------------------------

typedef struct CaseBuffers {
    void *x, *w, *scale16, *bias16;  // fp16: x (rows, c_in), w (c_out, c_in), scale and bias (c_in)
    float *scale, *bias;             // the same scale and bias in fp32: the unfused apply's gamma and beta
    float *zeros, *ones;             // (max(c_in, c_out)) fp32: mean and invstd of the apply, beta and gamma
                                     // of the statistics pass
    float *save_mean, *save_invstd;  // (c_out) fp32: the statistics pass's outputs
    void *y;                         // (rows, c_out) fp16: the fused plan's y
    float *sums;                     // (2 c_out) fp32: its sum, then its sum of squares
    void *a, *y2, *z;                // fp16: the unfused apply's output (rows, c_in), the convolution's y and
                                     // the statistics pass's output (rows, c_out)
    float *ref;                      // (rows, c_out) fp32: the reference y
    double *ref_sums;                // (2 c_out) fp64: the reference sums
    unsigned *err;                   // (2): max_error_kernel's result
} CaseBuffers;

// Allocates b for shape s, fills the inputs and computes the reference.
static void case_buffers_make(Backend *be, const ConvShape *s, int rows, CaseBuffers *b) {
    CudaBackend *cb = cuda_state(be);
    const size_t in = (size_t)rows * s->c_in, out = (size_t)rows * s->c_out;
    const int c_max = s->c_in > s->c_out ? s->c_in : s->c_out;
    b->x = be->alloc(be, in * 2), b->w = be->alloc(be, (size_t)s->c_out * s->c_in * 2);
    b->scale16 = be->alloc(be, (size_t)s->c_in * 2), b->bias16 = be->alloc(be, (size_t)s->c_in * 2);
    b->scale = (float *)be->alloc(be, (size_t)s->c_in * 4),
    b->bias = (float *)be->alloc(be, (size_t)s->c_in * 4);
    b->zeros = (float *)be->alloc(be, (size_t)c_max * 4), b->ones = (float *)be->alloc(be, (size_t)c_max * 4);
    b->save_mean = (float *)be->alloc(be, (size_t)s->c_out * 4);
    b->save_invstd = (float *)be->alloc(be, (size_t)s->c_out * 4);
    b->y = be->alloc(be, out * 2), b->sums = (float *)be->alloc(be, (size_t)s->c_out * 2 * 4);
    b->a = be->alloc(be, in * 2), b->y2 = be->alloc(be, out * 2), b->z = be->alloc(be, out * 2);
    b->ref = (float *)be->alloc(be, out * 4), b->ref_sums = (double *)be->alloc(be, (size_t)s->c_out * 2 * 8);
    b->err = (unsigned *)be->alloc(be, 2 * sizeof(unsigned));
    // w with variance 1 / c_in keeps y near unit scale whatever c_in; x * scale + bias is negative for about a
    // third of x, so the ReLU matters.
    const float w_bound = sqrtf(3.0f / (float)s->c_in);
    fill_half(cb, b->x, in, 1, -1.5f, 2.5f);
    fill_half(cb, b->w, (size_t)s->c_out * s->c_in, 2, -w_bound, w_bound);
    fill_half(cb, b->scale16, s->c_in, 3, 0.5f, 1.5f);
    fill_half(cb, b->bias16, s->c_in, 4, -0.5f, 0.5f);
    half_to_float_kernel<<<grid_for(cb), 256, 0, cb->stream>>>((const __half *)b->scale16, b->scale, s->c_in);
    CUDA_CHECK_LAUNCH();
    half_to_float_kernel<<<grid_for(cb), 256, 0, cb->stream>>>((const __half *)b->bias16, b->bias, s->c_in);
    CUDA_CHECK_LAUNCH();
    fill_float(cb, b->zeros, c_max, 0.0f);
    fill_float(cb, b->ones, c_max, 1.0f);
    reference_conv_kernel<<<dim3((rows + REF_TILE - 1) / REF_TILE, s->c_out / REF_TILE),
                            dim3(REF_TILE, REF_TILE), 0, cb->stream>>>(
        (const __half *)b->x, (const __half *)b->w, (const __half *)b->scale16, (const __half *)b->bias16,
        rows, s->c_in, s->c_out, b->ref);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemsetAsync(b->ref_sums, 0, (size_t)s->c_out * 2 * sizeof(double), cb->stream));
    reference_sums_kernel<<<dim3(s->c_out / 32, (rows + SUM_CHUNK_ROWS - 1) / SUM_CHUNK_ROWS),
                            dim3(32, SUM_LANES), 0, cb->stream>>>(b->ref, rows, s->c_out, b->ref_sums);
    CUDA_CHECK_LAUNCH();
}

static void case_buffers_free(Backend *be, CaseBuffers *b) {
    void *all[] = {b->x,     b->w,    b->scale16,   b->bias16,      b->scale,    b->bias,
                   b->zeros, b->ones, b->save_mean, b->save_invstd, b->y,        b->sums,
                   b->a,     b->y2,   b->z,         b->ref,         b->ref_sums, b->err};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
}

static void fused_plan_free(Backend *be, FusedPlan *p) {
    for (int i = p->made_count - 1; i >= 0; i--) CUDNN_CHECK(cudnnBackendDestroyDescriptor(p->made[i]));
    free(p->made);
    if (p->workspace) be->free(be, p->workspace);
    memset(p, 0, sizeof *p);
}

// The workspace the plans share (the largest any asks for), and their variant pack over b.
static void fused_bind(FusedPlan *p, Backend *be, const ConvShape *s, const CaseBuffers *b) {
    Trail *t = &p->described;
    const char *what = "variant pack";
    int64_t bytes = 0, count = 0;
    for (int i = 0; i < p->plan_count; i++) {
        int64_t plan_bytes = 0;
        BK_GET(t, p->plans[i], "execution plan", CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
               1, &count, &plan_bytes);
        if (plan_bytes > bytes) bytes = plan_bytes;
    }
    if (bytes > 0) p->workspace = be->alloc(be, (size_t)bytes);
    const int64_t uids[PACK_TENSORS] = {UID_X, UID_W, UID_SCALE, UID_BIAS, UID_Y, UID_SUM, UID_SQSUM};
    void *ptrs[PACK_TENSORS] = {b->x, b->w, b->scale16, b->bias16, b->y, b->sums, b->sums + s->c_out};
    p->pack = bk_make(p, t, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what);
    BK_SET(t, p->pack, what, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, PACK_TENSORS, uids);
    BK_SET(t, p->pack, what, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, PACK_TENSORS, ptrs);
    BK_SET(t, p->pack, what, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &p->workspace);
    bk_finalize(t, p->pack, what);
}

// The intermediate (virtual) tensors' type of a try: ConvBNfprop fixes its I/O at fp16 and says nothing of
// the intermediates, the runtime fusion engines recommend fp32; both are tried and timed.
#define MID_TRIES 2
static const cudnnDataType_t MID_TYPE[MID_TRIES] = {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT};
static const char *MID_NAME[MID_TRIES] = {"fp16 intermediates", "fp32 intermediates"};

// One try at the fused graph for shape s over b. Returns 1 with p->plans and p->pack; 0 when no engine took
// the graph (p->searched says why); -1 when cuDNN refused to describe it (p->described says where).
static int fused_plan_try(FusedPlan *p, Backend *be, const ConvShape *s, const CaseBuffers *b,
                          cudnnDataType_t mid) {
    CudaBackend *cb = cuda_state(be);
    memset(p, 0, sizeof *p);
    cudnnBackendDescriptor_t graph = fused_graph(p, cb->cudnn, s, mid);
    if (p->described.status == CUDNN_STATUS_SUCCESS) fused_search(p, cb->cudnn, graph);
    if (p->plan_count > 0) fused_bind(p, be, s, b);
    if (p->described.status != CUDNN_STATUS_SUCCESS) return -1;
    return p->plan_count > 0 ? 1 : 0;
}

// Seconds on the monotonic clock: how long making a plan takes (runtime-compiled engines compile then).
static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// What a timed call runs: the fused plan; or the unfused passes: the apply of x, the convolution, the
// statistics pass with its apply on y (bn_own_forward_train), that apply alone (bn_own_forward_saved).
typedef enum { RUN_FUSED, RUN_APPLY, RUN_CONV, RUN_STATS_APPLY, RUN_APPLY_Y } RunKind;

typedef struct CaseRun {
    Backend *be;
    const ConvShape *s;
    int rows;
    const CaseBuffers *b;
    cudnnBackendDescriptor_t plan, pack;  // RUN_FUSED's
} CaseRun;

static void case_run(const CaseRun *r, RunKind kind) {
    CudaBackend *cb = cuda_state(r->be);
    const CaseBuffers *b = r->b;
    const int c_in = r->s->c_in, c_out = r->s->c_out;
    switch (kind) {
    case RUN_FUSED:
        CUDA_CHECK(cudaMemsetAsync(b->sums, 0, 2 * (size_t)c_out * sizeof(float), cb->stream));
        CUDNN_CHECK(cudnnBackendExecute(cb->cudnn, r->plan, r->pack));
        break;
    case RUN_APPLY:
        bn_own_forward_saved(cb, r->rows, c_in, DTYPE_F16, b->x, 1, b->scale, b->bias, b->zeros, b->ones,
                             b->a);
        break;
    case RUN_CONV: r->be->conv_forward(r->be, r->s, DTYPE_F16, b->a, b->w, b->y2); break;
    case RUN_STATS_APPLY:
        bn_own_forward_train(cb, r->rows, c_out, DTYPE_F16, b->y2, NULL, 1, b->ones, b->zeros, NULL, NULL,
                             0.1f, 1e-5f, b->save_mean, b->save_invstd, b->z, NULL);
        break;
    case RUN_APPLY_Y:
        bn_own_forward_saved(cb, r->rows, c_out, DTYPE_F16, b->y2, 1, b->ones, b->zeros, b->save_mean,
                             b->save_invstd, b->z);
        break;
    }
}

static int compare_ms(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// The median ms of TIMED_RUNS calls after WARMUP_RUNS, each between two events on the compute stream.
static float median_ms(const CaseRun *r, RunKind kind) {
    CudaBackend *cb = cuda_state(r->be);
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    float ms[TIMED_RUNS];
    for (int i = 0; i < WARMUP_RUNS + TIMED_RUNS; i++) {
        CUDA_CHECK(cudaEventRecord(start, cb->stream));
        case_run(r, kind);
        CUDA_CHECK(cudaEventRecord(stop, cb->stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        if (i >= WARMUP_RUNS) CUDA_CHECK(cudaEventElapsedTime(&ms[i - WARMUP_RUNS], start, stop));
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    qsort(ms, TIMED_RUNS, sizeof ms[0], compare_ms);
    return ms[TIMED_RUNS / 2];
}

// One try of the fused graph on shape k over b: each plan checked against the reference, then timed; prints
// the try's line. Returns -1 when cuDNN refused to describe the graph, else 0, or 1 for a failed check; *best:
// the fastest plan's ms (unchanged without a plan).
static int run_fused(Backend *be, const ConvCase *k, const ConvShape *s, const CaseBuffers *b, int m,
                     float unfused, float *best) {
    CudaBackend *cb = cuda_state(be);
    const int rows = s->n * s->h * s->w;
    const size_t out = (size_t)rows * s->c_out;
    FusedPlan p;
    const double t0 = wall_seconds();
    const int found = fused_plan_try(&p, be, s, b, MID_TYPE[m]);
    const double made_s = wall_seconds() - t0;
    if (found != 1) {
        printf("    fused, %s: %s (%s); %.1f s\n", MID_NAME[m], found == 0 ? "no engine" : "graph refused",
               found == 0 ? p.searched.text : p.described.text, made_s);
        fused_plan_free(be, &p);
        return found;
    }
    double y_err = 0.0, sum_err = 0.0;
    float first = 0.0f, fastest = 0.0f;
    int fastest_at = 0;
    for (int i = 0; i < p.plan_count; i++) {
        CaseRun run = {be, s, rows, b, p.plans[i], p.pack};
        CUDA_CHECK(
            cudaMemsetAsync(b->y, 0xff, out * 2, cb->stream));  // NaN: a y the plan leaves unwritten fails
        case_run(&run, RUN_FUSED);
        y_err = fmax(y_err, y_error(cb, b->y, b->ref, out, b->err));
        sum_err = fmax(sum_err, sums_error(cb, b->sums, b->ref_sums, k->c_out));
        const float ms = median_ms(&run, RUN_FUSED);
        if (i == 0) first = ms;
        if (i == 0 || ms < fastest) fastest = ms, fastest_at = i;
    }
    const int ok = y_err < Y_TOLERANCE && sum_err < SUM_TOLERANCE;
    printf(
        "    fused, %s: %d plan(s) of heuristics %s, made in %.1f s; first %.3f ms (%s); fastest %.3f ms, %.2fx "
        "the unfused (%s); worst errors y %.1e sums %.1e%s\n",
        MID_NAME[m], p.plan_count, p.mode, made_s, first, p.engines[0], fastest, unfused / fastest,
        p.engines[fastest_at], y_err, sum_err, ok ? "" : " FAIL");
    if (*best == 0.0f || fastest < *best) *best = fastest;
    fused_plan_free(be, &p);
    return ok ? 0 : 1;
}

// Checks and times one shape and prints its row: the unfused passes, then a line per try of the fused graph.
// Returns 1 for a failed check, 2 when cuDNN refused to describe the graph on every try, else 0; step +=
// count * (unfused, fastest fused) ms when a fused plan ran.
static int run_case(Backend *be, const ConvCase *k, int n, double step[2]) {
    CudaBackend *cb = cuda_state(be);
    ConvShape s = {n, k->side, k->side, k->c_in, k->c_out, 1, 1, 1, 0, 1, 0, 0};
    conv_shape_finish(&s);
    const int rows = n * k->side * k->side;
    CaseBuffers b;
    case_buffers_make(be, &s, rows, &b);
    CaseRun run = {be, &s, rows, &b, NULL, NULL};
    be->conv_prepare(be, &s, DTYPE_F16);
    case_run(&run, RUN_APPLY);
    case_run(&run, RUN_CONV);
    const double unfused_y = y_error(cb, b.y2, b.ref, (size_t)rows * k->c_out, b.err);
    const float apply = median_ms(&run, RUN_APPLY), conv = median_ms(&run, RUN_CONV);
    const float stats = median_ms(&run, RUN_STATS_APPLY) - median_ms(&run, RUN_APPLY_Y);
    const float unfused = apply + conv + stats;
    const char *route = cuda_backend_conv_route_is_gemm(be, &s, DTYPE_F16, 0) == 1 ? "gemm" : "cuDNN";
    printf("%-19s %8d %5d %5d %5d | %8.3f = %6.3f + %6.3f %-5s + %6.3f | %7.1e%s\n", k->name, rows, k->c_in,
           k->c_out, k->count, unfused, apply, conv, route, stats, unfused_y,
           unfused_y < Y_TOLERANCE ? "" : " FAIL");
    int failed = unfused_y < Y_TOLERANCE ? 0 : 1, refused = 0;
    float best = 0.0f;
    for (int m = 0; m < MID_TRIES; m++) {
        const int r = run_fused(be, k, &s, &b, m, unfused, &best);
        refused += r == -1;
        failed |= r == 1;
    }
    if (best > 0.0f) step[0] += k->count * (double)unfused, step[1] += k->count * (double)best;
    case_buffers_free(be, &b);
    return failed | (refused == MID_TRIES ? 2 : 0);
}

int main(int argc, char **argv) {
    char *end = NULL;
    const long n = argc > 1 ? strtol(argv[1], &end, 10) : 256;
    if (argc > 2 || (argc > 1 && (end == argv[1] || *end != '\0' || n < 1 || n > 1024))) {
        fprintf(stderr, "usage: bench_fused_bn [n]   n: the batch, 1 to 1024 (default 256)\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);  // a row as soon as it is measured
    CudaOptions opts = cuda_options_default();
    opts.cudnn_benchmark = 1;  // the convolution route the AMP configs train with
    char why[256] = "";
    Backend *be = cuda_backend_create(0, &opts, why, sizeof why);
    if (!be) {
        fprintf(stderr, "bench_fused_bn: no CUDA backend: %s\n", why);
        return 1;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, cuda_state(be)->device));
    printf(
        "scale_bias_relu_conv_genstats, fused (one cuDNN plan) and unfused (amptrain's passes): %s, cuDNN %zu, "
        "batch %ld, fp16 NHWC; median of %d calls, ms\n",
        prop.name, cudnnGetVersion(), n, TIMED_RUNS);
    printf("%-19s %8s %5s %5s %5s | %8s = %6s + %6s %-5s + %6s | %7s\n", "shape", "rows", "c_in", "c_out",
           "count", "unfused", "apply", "conv", "", "stats", "y err");
    double step[2] = {0.0, 0.0};
    int failed = 0;
    for (int i = 0; i < CASE_COUNT; i++) failed |= run_case(be, &CASES[i], (int)n, step);
    printf(
        "one step's 1x1 convolutions with their batch-norm passes, weighted by count, over the shapes with a "
        "fused plan: unfused %.2f ms, fused %.2f ms\n",
        step[0], step[1]);
    be->destroy(be);
    if (failed & 1) fprintf(stderr, "bench_fused_bn: a result differs from the reference (FAIL above)\n");
    if (failed & 2) fprintf(stderr, "bench_fused_bn: cuDNN refused to describe the graph (above)\n");
    return failed ? 1 : 0;
}
