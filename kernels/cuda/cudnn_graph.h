// cudnn_graph.h - cuDNN's backend (graph) API in small steps, for the fused batch-norm graphs: descriptors
// made and set with the first failure of a sequence kept (CudnnTrail) and destroyed together (CudnnMade);
// NHWC tensors; pointwise operations; a convolution's three directions (1x1 stride 1, or any); genstats (the
// per-channel sum and sum of squares of a tensor); the batch norm's backward weights (and dgrad_drelu_dbn
// around them); the engine search that turns a graph into execution plans, and one call of a plan. Used by
// cudnn_conv_bn.cu (the trainer), bench/bench_fused_bn.cu (the prototype of the other fused graphs) and
// cudnn_conv_graph.cu (a plain convolution's graph, which bench/bench_grouped_conv.cu measures).
//
// Every builder takes the CudnnMade that owns what it creates and the CudnnTrail of the sequence: after a
// failure the trail keeps the first one ("call(descriptor, attribute): status: cuDNN's message") and every
// later step does nothing, so a graph is described in straight-line code and checked once at the end.
#ifndef AMPTRAIN_CUDNN_GRAPH_H
#define AMPTRAIN_CUDNN_GRAPH_H

#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

// The batch-norm graphs' tensor ids (CUDNN_ATTR_TENSOR_UNIQUE_ID: the variant pack's keys), one list for the
// trainer's graphs (cudnn_conv_bn.cu: X to BN) and the prototype's (bench_fused_bn.cu: all). An id need only
// be unique within its graph; the trainer's keep their values when the list grows at the end.
enum {
    // the forward: in memory, then the prologue's virtual results
    UID_X = 1,
    UID_W,
    UID_Y,
    UID_SUM,
    UID_SQSUM,
    UID_SCALE,
    UID_BIAS,
    UID_SCALED,
    UID_BIASED,
    UID_RELU,
    // the backward: in memory, then virtual
    UID_DY,
    UID_MEAN,
    UID_INVSTD,
    UID_GAMMA,
    UID_BETA,
    UID_G,
    UID_DSCALE,
    UID_DBIAS,
    UID_EQ_DY,
    UID_EQ_X,
    UID_EQ_BIAS,
    UID_DGRAD,
    UID_CENTRED,
    UID_NORMED,
    UID_GAMMAED,
    UID_BN,
    // the prototype's other graphs: dbn_apply and the weight gradient's prologue (in memory, then virtual)
    UID_DX,
    UID_DW,
    UID_G_SCALED,
    UID_X_SCALED,
    UID_SUMMED,
};

// The first cuDNN failure of a sequence of calls.
typedef struct CudnnTrail {
    cudnnStatus_t status;
    char text[400];
} CudnnTrail;

// Descriptors destroyed together (cudnn_made_free, in reverse order of making).
typedef struct CudnnMade {
    cudnnBackendDescriptor_t *items;
    int count, cap;
} CudnnMade;

void cudnn_made_free(CudnnMade *m);

// cuDNN's last error message on one line (its traceback's lines joined by '|').
void cudnn_last_message(char *message, size_t len);
// t keeps st as its failure: "call(what, attr): status: message".
void cudnn_trail_fail(CudnnTrail *t, cudnnStatus_t st, const char *call, const char *what, const char *attr);

cudnnBackendDescriptor_t bk_make(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptorType_t type,
                                 const char *what);
void bk_set(CudnnTrail *t, cudnnBackendDescriptor_t d, const char *what, cudnnBackendAttributeName_t name,
            const char *name_text, cudnnBackendAttributeType_t type, int64_t count, const void *v);
void bk_get(CudnnTrail *t, cudnnBackendDescriptor_t d, const char *what, cudnnBackendAttributeName_t name,
            const char *name_text, cudnnBackendAttributeType_t type, int64_t capacity, int64_t *count,
            void *v);
void bk_finalize(CudnnTrail *t, cudnnBackendDescriptor_t d, const char *what);
#define BK_SET(t, d, what, name, type, count, v) bk_set(t, d, what, name, #name, type, count, v)
// d.name = v for an attribute that holds one descriptor.
#define BK_LINK(t, d, what, name, v) bk_set(t, d, what, name, #name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &(v))
#define BK_GET(t, d, what, name, type, capacity, count, v)                                                   \
    bk_get(t, d, what, name, #name, type, capacity, count, v)

// A finalized tensor of dimensions (n, c, h, w) in packed NHWC, 16-byte aligned.
cudnnBackendDescriptor_t bk_tensor(CudnnMade *m, CudnnTrail *t, const char *what, int64_t uid,
                                   cudnnDataType_t dt, int64_t n, int64_t c, int64_t h, int64_t w,
                                   bool is_virtual);
// y = mode(x, b) (b NULL for a unary mode), computed in fp32. ReLU's backward (CUDNN_POINTWISE_RELU_BWD)
// takes the forward's input as x and the gradient as b, and gives the input's gradient as y.
cudnnBackendDescriptor_t bk_pointwise(CudnnMade *m, CudnnTrail *t, const char *what,
                                      cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y);

// The three directions of a 1x1 stride-1 convolution (fp32 accumulation, alpha 1, beta 0) and their operands
// (a, b, out): forward (x, w, y); backward data (dy, w, dx); backward filter (x, dy, dw).
typedef enum { CUDNN_GRAPH_CONV_FORWARD, CUDNN_GRAPH_CONV_DGRAD, CUDNN_GRAPH_CONV_WGRAD } CudnnGraphConv;
cudnnBackendDescriptor_t bk_conv(CudnnMade *m, CudnnTrail *t, CudnnGraphConv dir, cudnnBackendDescriptor_t a,
                                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out);
// The same for any kernel size and grouping (the tensors' shapes say them: w (k, c / groups, kh, kw)), with
// `stride` and `pad` in both dimensions.
cudnnBackendDescriptor_t bk_conv_spatial(CudnnMade *m, CudnnTrail *t, CudnnGraphConv dir,
                                         cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                                         cudnnBackendDescriptor_t out, int64_t stride, int64_t pad);
// sum, sqsum (1, c, 1, 1) fp32 = per-channel sum and sum of squares of y.
cudnnBackendDescriptor_t bk_genstats(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t y,
                                     cudnnBackendDescriptor_t sum, cudnnBackendDescriptor_t sqsum);
// ops[0..2]: relu(x * scale + bias) per channel, the convolution's prologue (a batch norm's affine map and
// its ReLU). scale, bias: (1, c, 1, 1) tensors; the three results (n, c, h, w) virtual in mid, with
// uids[0..2]. Returns the last (the ReLU's output).
cudnnBackendDescriptor_t bk_scale_bias_relu(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t x,
                                            cudnnBackendDescriptor_t scale, cudnnBackendDescriptor_t bias,
                                            cudnnDataType_t mid, int64_t n, int64_t c, int64_t h, int64_t w,
                                            const int64_t uids[3], cudnnBackendDescriptor_t ops[3]);
// ops[0..1]: y = conv(in, w) (a 1x1 forward) and y's per-channel sum and sum of squares; the tensors
// w (k, c, 1, 1) and y (n, k, h, w) in io, sum and sqsum (1, k, 1, 1) fp32 get uids[0..3]. in: (n, c, h, w),
// in memory or virtual.
void bk_conv_genstats(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t in, cudnnDataType_t io, int64_t n,
                      int64_t c, int64_t h, int64_t w, int64_t k, const int64_t uids[4],
                      cudnnBackendDescriptor_t ops[2]);
// The batch norm's weight gradients and dx coefficients from x, g (its output's gradient), mean, invstd and
// gamma: out[0..4] = dscale, dbias, eq_dy, eq_x, eq_bias (1, c, 1, 1) fp32.
cudnnBackendDescriptor_t bk_bn_backward_weights(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t x,
                                                cudnnBackendDescriptor_t g, cudnnBackendDescriptor_t mean,
                                                cudnnBackendDescriptor_t invstd,
                                                cudnnBackendDescriptor_t gamma,
                                                const cudnnBackendDescriptor_t out[5]);
// ops[0..6]: da = dgrad(dy, w) of a 1x1 stride-1 convolution, g = da where the batch norm of x,
// ((x - mean) * invstd) * gamma + beta (recomputed in mid), is positive (the ReLU's backward), and the batch
// norm's backward weights of x and g into coef[0..4] (bk_bn_backward_weights): NVIDIA's dgrad_drelu_dbn.
// x and g (n, c, h, w), dy (n, k, h, w) and w (k, c, 1, 1) in io; mean, invstd, gamma, beta (1, c, 1, 1)
// fp32. uids[0..5]: dy, w, mean, invstd, gamma, beta; uids[6..10]: the virtual da, x - mean, xhat,
// xhat * gamma and the batch norm's output.
void bk_dgrad_drelu_dbn(CudnnMade *m, CudnnTrail *t, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t g,
                        cudnnDataType_t io, cudnnDataType_t mid, int64_t n, int64_t c, int64_t h, int64_t w,
                        int64_t k, const int64_t uids[11], const cudnnBackendDescriptor_t coef[5],
                        cudnnBackendDescriptor_t ops[7]);
// The operation graph of ops (not finalized: cudnn_graph_plans does that first).
cudnnBackendDescriptor_t bk_graph(CudnnMade *m, CudnnTrail *t, cudnnHandle_t handle,
                                  const cudnnBackendDescriptor_t *ops, int count);

#define CUDNN_PLAN_MAX 16      // execution plans one search makes, at most
#define CUDNN_ENGINE_TEXT 192  // "engine 2, knobs 2=3 25=0 27=1 28=2"

// The execution plans of a graph, in the heuristics' order, with their engines described; or, when there is
// none, why (searched).
typedef struct CudnnPlans {
    int count;
    cudnnBackendDescriptor_t plans[CUDNN_PLAN_MAX];
    char engines[CUDNN_PLAN_MAX][CUDNN_ENGINE_TEXT];
    const char *mode;  // the heuristics mode that offered them
    CudnnTrail searched;
} CudnnPlans;

// Finalizes graph and makes the execution plans of the engine configs heuristics mode A offers (else
// FALLBACK's, when A offers none that finalizes), at most max_plans (<= CUDNN_PLAN_MAX), of them only the
// first runtime_tries that compile at run time (seconds each).
void cudnn_graph_plans(CudnnMade *m, cudnnHandle_t handle, cudnnBackendDescriptor_t graph, int max_plans,
                       int runtime_tries, CudnnPlans *out);
// The workspace bytes a plan needs (0 after a failure, which t keeps).
int64_t cudnn_plan_workspace(CudnnTrail *t, cudnnBackendDescriptor_t plan);
// A finalized variant pack: the tensors uids[i] at ptrs[i], and the workspace.
cudnnBackendDescriptor_t cudnn_variant_pack(CudnnMade *m, CudnnTrail *t, int count, const int64_t *uids,
                                            void *const *ptrs, void *workspace);
// One call of plan on the tensors uids[i] at ptrs[i] with `workspace` (its variant pack made and freed around
// it); a failure fails the job.
void cudnn_plan_execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, int tensors, const int64_t *uids,
                        void *const *ptrs, void *workspace);

#endif
