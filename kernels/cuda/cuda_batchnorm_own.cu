// cuda_batchnorm_own.cu - our own batch norm over NHWC rows (rows = n*h*w, c channels), fused with the
// residual add and ReLU that end a ResNeXt block: y = act(gamma * (x - mean) * invstd + beta + residual).
//
// Every pass moves 16-byte packs (8 fp16 or bf16, or 4 fp32 channels of one row; one element when c or a
// buffer does not allow it):
// - forward: one read of x for the per-channel sums, a small merge, one pass reading x (and residual)
//   and writing y (and the ReLU bits the backward of an add+ReLU layer reads instead of y);
// - backward: one read of x and dy for the sums of g and g * xhat (g: dy masked by the ReLU, whose mask
//   comes from x, the bits or y), a small merge, one pass reading x and dy and writing dx (and
//   d_residual = g).
// Every kernel walks rows the same way: a block covers up to 32 packs of channels (256 16-bit channels) and
// a chunk of rows, so a thread keeps one pack of channels for its whole life; the block stages its channels'
// coefficients (scale, shift, mean, ...) in shared memory once and each thread reads its own at each use, which
// leaves the registers to rows in flight (these passes are memory-bound). Reductions:
// each thread sums its rows in fp32 (values shifted by the channel's value in row 0, so the sum of squares
// does not cancel), lanes merged in a fixed tree; chunks are merged per channel in fp64 in a fixed order.
// Deterministic on one GPU model (the chunking follows the SM count), no atomics.
#include "kernels/cuda/cuda_batchnorm_own.h"

#include <type_traits>

#include "kernels/cuda/cuda_elem.cuh"

#define BN_REDUCE_THREADS 256
#define BN_REDUCE_MAX_PACKS 32     // channel packs per reduction block (threadIdx.x)
#define BN_REDUCE_BLOCKS_PER_SM 4  // reduction grid: about this many blocks per SM, all resident at once
#define BN_APPLY_BLOCKS_PER_SM 8   // elementwise grid: about this many blocks per SM (a few waves)
// Resident blocks per SM the kernels are compiled for (__launch_bounds__: at most 65536 / (256 * n) registers
// per thread). These passes are memory-bound: more resident rows in flight is what moves bytes. The reductions
// keep their whole grid resident; the elementwise passes run two or three waves. Each value is the most that
// ptxas -v fits at fp16 without spilling more than a few bytes (bn_add_bn's pass carries two layers).
#define BN_REDUCE_MIN_BLOCKS BN_REDUCE_BLOCKS_PER_SM
#define BN_APPLY_MIN_BLOCKS 4
#define BN_DUAL_APPLY_MIN_BLOCKS 3
#define BN_MERGE_CHANNELS 32    // merge kernels: channels per block (threadIdx.x) ...
#define BN_MERGE_LANES 8        // ... and chunk lanes (threadIdx.y)
#define BN_CHANNEL_THREADS 256  // the small per-channel kernels

// ---- device helpers ---------------------------------------------------------------------------------

// v as the stored element of type T would read back (16-bit rounding), so a mask decided here equals y > 0.
template <typename T>
static __device__ __forceinline__ float bn_round_trip(float v, T) {
    T stored;
    from_f32(&stored, v);
    return to_f32(stored);
}

// The per-channel fp32 coefficients of an elementwise pass (scale, shift, ...) for the channels of its block:
// staged in shared memory once per block and read back at each use, so the registers go to rows in flight
// (what a memory-bound pass needs) instead of holding up to six arrays of a pack's coefficients. The stage is
// laid out [array][k][pack] with a fixed stride of BN_REDUCE_MAX_PACKS packs, so a thread reaches every value
// from one base at constant offsets, and the lanes of a warp read consecutive words (or the same one).
// BnCoefView is one array seen from one thread: view[k] is the value of channel k of the thread's pack, read
// through a volatile pointer so the compiler cannot hoist the loads out of the row loop into registers again.
struct BnCoefView {
    // this thread's first channel of the array; channel k at at[k * BN_REDUCE_MAX_PACKS]
    const volatile float *at;
    __device__ __forceinline__ float operator[](int k) const { return at[k * BN_REDUCE_MAX_PACKS]; }
};

template <int N, int VEC>
struct BnCoefStage {
    float *smem;  // N * VEC * BN_REDUCE_MAX_PACKS floats

    // Copies src[a] (c) fp32, array a indexed by channel, for the block's channels; then a barrier, so every
    // thread of the block must call it before any returns.
    __device__ __forceinline__ void stage(const float *const (&src)[N], int c) const {
        const int px = blockDim.x, span = px * VEC, ch0 = blockIdx.x * span;
        const int threads = px * blockDim.y, tid = threadIdx.y * px + threadIdx.x;
#pragma unroll
        for (int a = 0; a < N; a++)
            for (int i = tid; i < span; i += threads)
                smem[(a * VEC + i % VEC) * BN_REDUCE_MAX_PACKS + i / VEC] = ch0 + i < c ? src[a][ch0 + i]
                                                                                        : 0.0f;
        __syncthreads();
    }
    __device__ __forceinline__ BnCoefView view(int a) const {
        return BnCoefView{smem + a * VEC * BN_REDUCE_MAX_PACKS + threadIdx.x};
    }
};

// Sums VEC values per thread over the blockDim.y row lanes of a (px, py) block in a fixed tree; every
// lane gets the totals. buf: BN_REDUCE_THREADS * VEC floats of shared memory.
template <int VEC>
static __device__ void bn_block_sum_lanes(float *v, float *buf) {
    const int px = blockDim.x, py = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
    float *mine = buf + (ty * px + tx) * VEC;
#pragma unroll
    for (int k = 0; k < VEC; k++) mine[k] = v[k];
    __syncthreads();
    int span = 1;
    while (span < py) span *= 2;
    for (int half = span / 2; half > 0; half /= 2) {
        if (ty < half && ty + half < py) {
            const float *other = buf + ((ty + half) * px + tx) * VEC;
#pragma unroll
            for (int k = 0; k < VEC; k++) mine[k] += other[k];
        }
        __syncthreads();
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) v[k] = buf[tx * VEC + k];
    __syncthreads();
}

// Per channel, the fp64 totals of two (chunks, c) fp32 partials, merged in a fixed order: lane l of a
// (BN_MERGE_CHANNELS, BN_MERGE_LANES) block takes chunks l, l + lanes, ..., then the lanes add up in a tree.
// Lane 0 (threadIdx.y == 0) gets the totals.
static __device__ void bn_merge_chunks(const float *part_a, const float *part_b, int chunks, int c, int ch,
                                       double *a, double *b) {
    __shared__ double buf_a[BN_MERGE_LANES][BN_MERGE_CHANNELS], buf_b[BN_MERGE_LANES][BN_MERGE_CHANNELS];
    double sa = 0.0, sb = 0.0;
    if (ch < c)
        for (int k = threadIdx.y; k < chunks; k += BN_MERGE_LANES) {
            sa += part_a[(size_t)k * c + ch];
            sb += part_b[(size_t)k * c + ch];
        }
    buf_a[threadIdx.y][threadIdx.x] = sa;
    buf_b[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    for (int half = BN_MERGE_LANES / 2; half > 0; half /= 2) {
        if (threadIdx.y < half) {
            buf_a[threadIdx.y][threadIdx.x] += buf_a[threadIdx.y + half][threadIdx.x];
            buf_b[threadIdx.y][threadIdx.x] += buf_b[threadIdx.y + half][threadIdx.x];
        }
        __syncthreads();
    }
    *a = buf_a[0][threadIdx.x];
    *b = buf_b[0][threadIdx.x];
}

// The affine map of a training forward from its statistics, as every kernel here forms it (explicit
// fma, so the forward, a recompute and a mask from x all see the same scale and shift bits).
static __device__ __forceinline__ void bn_affine(float gamma, float beta, float mean, float invstd,
                                                 float *scale, float *shift) {
    *scale = gamma * invstd;
    *shift = __fmaf_rn(-mean, *scale, beta);
}

// ---- forward ----------------------------------------------------------------------------------------

// grid (slices, chunks), block (px, py): block (bx, by) sums channel packs [bx*px, bx*px+px) over rows
// [by*chunk_rows, ...), shifted by row 0. x (rows, c) T -> part_s, part_q (chunks, c) fp32
template <typename T, int VEC>
__global__ void __launch_bounds__(BN_REDUCE_THREADS, BN_REDUCE_MIN_BLOCKS)
    bn_stats_partial_kernel(const T *x, int rows, int c, int chunk_rows, float *part_s, float *part_q) {
    __shared__ float buf[BN_REDUCE_THREADS * VEC];
    const int pack = blockIdx.x * blockDim.x + threadIdx.x;
    const int active = pack < c / VEC;
    const int r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
    float shift[VEC], s[VEC], q[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) shift[k] = s[k] = q[k] = 0.0f;
    if (active) {
        const T *col = x + (size_t)pack * VEC;
        pack_load<T, VEC>(col, shift);
        const int step = blockDim.y;
        int r = r0 + threadIdx.y;
        for (; r + 3 * step < r1; r += 4 * step) {  // four loads in flight per thread
            float v[4][VEC];
#pragma unroll
            for (int u = 0; u < 4; u++) pack_load<T, VEC>(col + (size_t)(r + u * step) * c, v[u]);
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    const float d = v[u][k] - shift[k];
                    s[k] += d;
                    q[k] = __fmaf_rn(d, d, q[k]);
                }
        }
        for (; r < r1; r += step) {
            float v[VEC];
            pack_load<T, VEC>(col + (size_t)r * c, v);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                const float d = v[k] - shift[k];
                s[k] += d;
                q[k] = __fmaf_rn(d, d, q[k]);
            }
        }
    }
    bn_block_sum_lanes<VEC>(s, buf);
    bn_block_sum_lanes<VEC>(q, buf);
    if (threadIdx.y == 0 && active) {
        float *ps = part_s + (size_t)blockIdx.y * c + pack * VEC,
              *pq = part_q + (size_t)blockIdx.y * c + pack * VEC;
#pragma unroll
        for (int k = 0; k < VEC; k++) ps[k] = s[k], pq[k] = q[k];
    }
}

// grid ceil(c / BN_MERGE_CHANNELS), block (BN_MERGE_CHANNELS, BN_MERGE_LANES): merges the chunks, updates
// the running statistics (unbiased variance, as torch), saves mean and invstd and leaves the affine map.
// x (rows, c) T (row 0: the shift; NULL: the sums are not shifted); part_* (chunks, c) fp32 -> save_*, scale,
// shift (c) fp32
template <typename T>
__global__ void bn_stats_merge_kernel(const T *x, const float *part_s, const float *part_q, int chunks,
                                      int rows, int c, const float *gamma, const float *beta,
                                      float *running_mean, float *running_var, float momentum, float eps,
                                      float *save_mean, float *save_invstd, float *scale, float *shift) {
    const int ch = blockIdx.x * BN_MERGE_CHANNELS + threadIdx.x;
    double s, q;
    bn_merge_chunks(part_s, part_q, chunks, c, ch, &s, &q);
    if (threadIdx.y != 0 || ch >= c) return;
    const double n = (double)rows, origin = x ? (double)to_f32(x[ch]) : 0.0;
    const double m2 = fmax(q - s * s / n, 0.0), mean = origin + s / n;
    const float invstd = (float)(1.0 / sqrt(m2 / n + (double)eps));
    save_mean[ch] = (float)mean;
    save_invstd[ch] = invstd;
    if (running_mean) running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * (float)mean;
    if (running_var)
        running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * (float)(m2 / (n - 1.0));
    bn_affine(gamma[ch], beta[ch], (float)mean, invstd, &scale[ch], &shift[ch]);
}

// The affine map from given statistics: running ones (eval: invstd from running_var) or saved ones.
// (c) fp32 -> scale, shift (c) fp32
__global__ void bn_eval_affine_kernel(int c, const float *gamma, const float *beta, const float *running_mean,
                                      const float *running_var, float eps, float *scale, float *shift) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c)
        bn_affine(gamma[ch], beta[ch], running_mean[ch], rsqrtf(running_var[ch] + eps), &scale[ch],
                  &shift[ch]);
}

__global__ void bn_saved_affine_kernel(int c, const float *gamma, const float *beta, const float *save_mean,
                                       const float *save_invstd, float *scale, float *shift) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c) bn_affine(gamma[ch], beta[ch], save_mean[ch], save_invstd[ch], &scale[ch], &shift[ch]);
}

// y = act(scale[ch] * x + shift[ch] + residual) for one pack (sc, sh: the pack's scale and shift; r, the
// residual, added when add says); the ReLU keeps NaN (as torch's). Returns the pack's ReLU bits: bit k set when
// element k of y (as stored) is > 0.
template <typename T, int VEC>
static __device__ __forceinline__ unsigned bn_apply_pack(float *v, const float *r, bool add, int relu,
                                                         BnCoefView sc, BnCoefView sh) {
    unsigned bits = 0;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        v[k] = __fmaf_rn(sc[k], v[k], sh[k]);
        if (add) v[k] += r[k];
        if (relu && v[k] < 0.0f) v[k] = 0.0f;
        if (bn_round_trip(v[k], T()) > 0.0f) bits |= 1u << k;
    }
    return bits;
}

// The residual of one pack as bn_apply_pack adds it: as loaded, or (AFFINE_RES) through its own batch norm's
// affine map, rsc * r + rsh, unrounded.
template <bool AFFINE_RES, int VEC>
static __device__ __forceinline__ void bn_residual_pack(float *r, BnCoefView rsc, BnCoefView rsh) {
    if (AFFINE_RES) {
#pragma unroll
        for (int k = 0; k < VEC; k++) r[k] = __fmaf_rn(rsc[k], r[k], rsh[k]);
    }
}

// Grid and block as bn_stats_partial_kernel, two rows in flight per thread. mask (nullable): per pack
// the bits of bn_apply_pack. AFFINE_RES: the residual is a second batch norm's input (bn_add_bn), mapped
// by rscale, rshift before the add.
// x, residual (nullable), y (rows, c) T; scale, shift, rscale, rshift (c) fp32; mask (rows * c / VEC) u8
template <typename T, int VEC, bool AFFINE_RES>
__global__ void __launch_bounds__(BN_REDUCE_THREADS, BN_APPLY_MIN_BLOCKS)
    bn_apply_kernel(const T *__restrict__ x, const T *__restrict__ residual, int relu, int rows, int c,
                    int chunk_rows, const float *scale, const float *shift, const float *rscale,
                    const float *rshift, T *__restrict__ y, uint8_t *__restrict__ mask) {
    constexpr int N = AFFINE_RES ? 4 : 2;
    __shared__ float smem[N * VEC * BN_REDUCE_MAX_PACKS];
    const BnCoefStage<N, VEC> coefs{smem};
    if constexpr (AFFINE_RES)
        coefs.stage({scale, shift, rscale, rshift}, c);
    else
        coefs.stage({scale, shift}, c);
    const int packs_per_row = c / VEC, pack = blockIdx.x * blockDim.x + threadIdx.x;
    if (pack >= packs_per_row) return;
    const BnCoefView sc = coefs.view(0), sh = coefs.view(1), rsc = coefs.view(N - 2), rsh = coefs.view(N - 1);
    const int r1 = min(rows, (int)(blockIdx.y + 1) * chunk_rows), step = blockDim.y;
    int r = blockIdx.y * chunk_rows + threadIdx.y;
    for (; r + step < r1; r += 2 * step) {
        float v[2][VEC], res[2][VEC];
        size_t j[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            j[u] = (size_t)(r + u * step) * packs_per_row + pack;
            pack_load<T, VEC>(x + j[u] * VEC, v[u]);
            if (residual) pack_load<T, VEC>(residual + j[u] * VEC, res[u]);
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            bn_residual_pack<AFFINE_RES, VEC>(res[u], rsc, rsh);
            const unsigned bits = bn_apply_pack<T, VEC>(v[u], res[u], residual != NULL, relu, sc, sh);
            pack_store<T, VEC>(y + j[u] * VEC, v[u]);
            if (mask) mask[j[u]] = (uint8_t)bits;
        }
    }
    if (r < r1) {
        float v[VEC], res[VEC];
        const size_t j = (size_t)r * packs_per_row + pack;
        pack_load<T, VEC>(x + j * VEC, v);
        if (residual) pack_load<T, VEC>(residual + j * VEC, res);
        bn_residual_pack<AFFINE_RES, VEC>(res, rsc, rsh);
        const unsigned bits = bn_apply_pack<T, VEC>(v, res, residual != NULL, relu, sc, sh);
        pack_store<T, VEC>(y + j * VEC, v);
        if (mask) mask[j] = (uint8_t)bits;
    }
}

// ---- backward ---------------------------------------------------------------------------------------

// g = dy masked by the ReLU of the forward for one pack (S: the BnMaskSource; a, b: the pack's channels'
// values of the forward's affine map, for BN_MASK_FROM_X).
template <int S, typename T, int VEC>
static __device__ __forceinline__ void bn_masked_grad(const T *y, const uint8_t *mask, size_t j,
                                                      const float *xv, BnCoefView a, BnCoefView b, float *g) {
    if (S == BN_MASK_FROM_Y) {
        float yv[VEC];
        pack_load<T, VEC>(y + j * VEC, yv);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (!(yv[k] > 0.0f)) g[k] = 0.0f;
    } else if (S == BN_MASK_BITS) {
        const unsigned bits = mask[j];
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (!((bits >> k) & 1u)) g[k] = 0.0f;
    } else if (S == BN_MASK_FROM_X) {
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (!(bn_round_trip(__fmaf_rn(a[k], xv[k], b[k]), T()) > 0.0f)) g[k] = 0.0f;
    }
}

// x and dy of one pack in rows r and r + step: j[u] the pack's index in row r + u * step.
template <typename T, int VEC>
static __device__ __forceinline__ void bn_load_two_rows(const T *x, const T *dy, int r, int step,
                                                        int packs_per_row, int pack, size_t *j,
                                                        float (*xv)[VEC], float (*g)[VEC]) {
#pragma unroll
    for (int u = 0; u < 2; u++) {
        j[u] = (size_t)(r + u * step) * packs_per_row + pack;
        pack_load<T, VEC>(x + j[u] * VEC, xv[u]);
        pack_load<T, VEC>(dy + j[u] * VEC, g[u]);
    }
}

// Per chunk of rows (grid and block as bn_stats_partial_kernel): sums of g and g * (x - mean), and with
// DUAL (bn_add_bn: g also flows into a second batch norm of input x2) of g * (x2 - mean2).
// x, y, dy, x2 (rows, c) T; mask (packs) u8; save_mean, a, b, mean2 (c) fp32
//   -> part_g, part_gx, part_gx2 (chunks, c) fp32
template <typename T, int VEC, bool DUAL, int S>
__global__ void __launch_bounds__(BN_REDUCE_THREADS, BN_REDUCE_MIN_BLOCKS)
    bn_backward_partial_kernel(const T *__restrict__ x, const T *__restrict__ y, const T *__restrict__ dy,
                               const uint8_t *__restrict__ mask, const float *a, const float *b, int rows,
                               int c, int chunk_rows, const float *save_mean, float *part_g, float *part_gx,
                               const T *__restrict__ x2, const float *mean2, float *part_gx2) {
    __shared__ float buf[BN_REDUCE_THREADS * VEC];
    // staged per-channel values: mean, then mean2 (DUAL) or the forward's affine map (a mask from x)
    constexpr int N = DUAL ? 2 : S == BN_MASK_FROM_X ? 3 : 1;
    __shared__ float smem[N * VEC * BN_REDUCE_MAX_PACKS];
    const BnCoefStage<N, VEC> coefs{smem};
    if constexpr (DUAL)
        coefs.stage({save_mean, mean2}, c);
    else if constexpr (S == BN_MASK_FROM_X)
        coefs.stage({save_mean, a, b}, c);
    else
        coefs.stage({save_mean}, c);
    const BnCoefView mean = coefs.view(0), m2 = coefs.view(N - 1);
    const BnCoefView av = coefs.view(N == 3 ? 1 : 0), bv = coefs.view(N == 3 ? 2 : 0);  // a mask from x's
    const int pack = blockIdx.x * blockDim.x + threadIdx.x;
    const int packs_per_row = c / VEC, active = pack < packs_per_row, ch = pack * VEC;
    const int r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
    float sg[VEC], sgx[VEC], sgx2[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) sg[k] = sgx[k] = sgx2[k] = 0.0f;
    if (active) {
        const int step = blockDim.y;
        int r = r0 + threadIdx.y;
        for (; r + step < r1; r += 2 * step) {  // two rows of x and dy in flight per thread
            float xv[2][VEC], g[2][VEC], x2v[2][VEC];
            size_t j[2];
            bn_load_two_rows<T, VEC>(x, dy, r, step, packs_per_row, pack, j, xv, g);
            if (DUAL) {
                pack_load<T, VEC>(x2 + j[0] * VEC, x2v[0]);
                pack_load<T, VEC>(x2 + j[1] * VEC, x2v[1]);
            }
#pragma unroll
            for (int u = 0; u < 2; u++) {
                bn_masked_grad<S, T, VEC>(y, mask, j[u], xv[u], av, bv, g[u]);
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    sg[k] += g[u][k];
                    sgx[k] = __fmaf_rn(g[u][k], xv[u][k] - mean[k], sgx[k]);
                    if (DUAL) sgx2[k] = __fmaf_rn(g[u][k], x2v[u][k] - m2[k], sgx2[k]);
                }
            }
        }
        if (r < r1) {
            float xv[VEC], g[VEC], x2v[VEC];
            const size_t j = (size_t)r * packs_per_row + pack;
            pack_load<T, VEC>(x + j * VEC, xv);
            pack_load<T, VEC>(dy + j * VEC, g);
            if (DUAL) pack_load<T, VEC>(x2 + j * VEC, x2v);
            bn_masked_grad<S, T, VEC>(y, mask, j, xv, av, bv, g);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                sg[k] += g[k];
                sgx[k] = __fmaf_rn(g[k], xv[k] - mean[k], sgx[k]);
                if (DUAL) sgx2[k] = __fmaf_rn(g[k], x2v[k] - m2[k], sgx2[k]);
            }
        }
    }
    bn_block_sum_lanes<VEC>(sg, buf);
    bn_block_sum_lanes<VEC>(sgx, buf);
    if (DUAL) bn_block_sum_lanes<VEC>(sgx2, buf);
    if (threadIdx.y == 0 && active) {
        const size_t at = (size_t)blockIdx.y * c + ch;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            part_g[at + k] = sg[k], part_gx[at + k] = sgx[k];
            if (DUAL) part_gx2[at + k] = sgx2[k];
        }
    }
}

// Channel ch's end of the backward from sg = sum g and sgx = sum g (x - mean): dbeta = sg,
// dgamma = invstd * sgx, stored in dt (+= with accumulate_params), and the coefficients of
//   dx = gamma * invstd * (g - mean(g) - (x - mean) * invstd^2 * mean(g * (x - mean)))
//      = k_g * g - (k_x * x + k_0)
// (k_0 formed in fp64, so folding the mean into it costs no more than an fp32 rounding of each term).
// dgamma, dbeta (c) T; coef (3, c) fp32: k_g, k_x, k_0
template <typename T>
static __device__ __forceinline__ void bn_backward_finish(int ch, double sg, double sgx, int rows, int c,
                                                          const float *gamma, const float *save_mean,
                                                          const float *save_invstd, T *dgamma, T *dbeta,
                                                          int accumulate_params, float *coef) {
    const float invstd = save_invstd[ch];
    const float db = (float)sg, dg = (float)sgx * invstd;
    from_f32(&dbeta[ch], db + (accumulate_params ? to_f32(dbeta[ch]) : 0.0f));
    from_f32(&dgamma[ch], dg + (accumulate_params ? to_f32(dgamma[ch]) : 0.0f));
    const double k_g = (double)gamma[ch] * invstd, k_x = k_g * (sgx / rows) * invstd * invstd;
    coef[ch] = (float)k_g;
    coef[c + ch] = (float)k_x;
    coef[2 * c + ch] = (float)(k_g * (sg / rows) - k_x * save_mean[ch]);
}

// grid and block as bn_stats_merge_kernel: the sums from part_* (chunks, c) fp32, then bn_backward_finish.
template <typename T>
__global__ void bn_backward_merge_kernel(const float *part_g, const float *part_gx, int chunks, int rows,
                                         int c, const float *gamma, const float *save_mean,
                                         const float *save_invstd, T *dgamma, T *dbeta, int accumulate_params,
                                         float *coef) {
    const int ch = blockIdx.x * BN_MERGE_CHANNELS + threadIdx.x;
    double sg, sgx;
    bn_merge_chunks(part_g, part_gx, chunks, c, ch, &sg, &sgx);
    if (threadIdx.y != 0 || ch >= c) return;
    bn_backward_finish(ch, sg, sgx, rows, c, gamma, save_mean, save_invstd, dgamma, dbeta, accumulate_params,
                       coef);
}

// The same from sums made elsewhere (a convolution's epilogue): sum_g = sum g, sum_gxhat = sum g * xhat
// (c) fp32, with g the gradient at the batch norm's output (after the ReLU's mask); sum g * (x - mean) is
// sum_gxhat / invstd. One thread per channel.
template <typename T>
__global__ void bn_backward_sums_kernel(const float *sum_g, const float *sum_gxhat, int rows, int c,
                                        const float *gamma, const float *save_mean, const float *save_invstd,
                                        T *dgamma, T *dbeta, int accumulate_params, float *coef) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    bn_backward_finish(ch, (double)sum_g[ch], (double)sum_gxhat[ch] / save_invstd[ch], rows, c, gamma,
                       save_mean, save_invstd, dgamma, dbeta, accumulate_params, coef);
}

// dx (= or +=) k_g * g - (k_x * x + k_0) for one pack (the coefficients of its channels as BnCoefViews).
template <int VEC>
static __device__ __forceinline__ void bn_backward_pack(const float *xv, const float *g, BnCoefView k_g,
                                                        BnCoefView k_x, BnCoefView k_0, int accumulate,
                                                        float *d) {
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        const float v = k_g[k] * g[k] - __fmaf_rn(k_x[k], xv[k], k_0[k]);
        d[k] = accumulate ? d[k] + v : v;
    }
}

// With DUAL (bn_add_bn), where plain writes d_residual = g: the second batch norm's dx2 = k_g2 * g -
// (k_x2 * x2 + k_02), overwritten. Each element of dx2 is written by the thread that read dy there, after
// reading it, so dx2 may be dy (neither is __restrict__).
// x2v: the pack of x2 (DUAL only).
template <bool DUAL, typename T, int VEC>
static __device__ __forceinline__ void bn_backward_store_second(T *d_residual, T *dx2, size_t j,
                                                                const float *g, const float *x2v,
                                                                BnCoefView k_g2, BnCoefView k_x2,
                                                                BnCoefView k_02) {
    if (!DUAL) {
        if (d_residual) pack_store<T, VEC>(d_residual + j * VEC, g);
        return;
    }
    float d2[VEC];
    bn_backward_pack<VEC>(x2v, g, k_g2, k_x2, k_02, 0, d2);
    pack_store<T, VEC>(dx2 + j * VEC, d2);
}

// The backward's output pass, for its two kernels below (which say what may alias). Grid and block as
// bn_stats_partial_kernel, two rows in flight per thread: dx (= or +=) as bn_backward_pack; d_residual (nullable)
// = g, or with DUAL dx2 as bn_backward_store_second.
// x, y, dy, dx, d_residual, x2, dx2 (rows, c) T; mask (rows * c / VEC) u8; a, b (c), coef, coef2 (3, c) fp32
template <typename T, int VEC, bool DUAL, int S>
static __device__ __forceinline__ void bn_backward_apply_rows(const T *x, const T *y, const T *dy,
                                                              const uint8_t *mask, const float *a,
                                                              const float *b, int rows, int c, int chunk_rows,
                                                              const float *coef, T *dx, int accumulate,
                                                              T *d_residual, const T *x2, const float *coef2,
                                                              T *dx2) {
    // staged coefficients: k_g, k_x, k_0, then the second's (DUAL) or the forward's affine map (a mask from x)
    constexpr int N = DUAL ? 6 : S == BN_MASK_FROM_X ? 5 : 3;
    __shared__ float smem[N * VEC * BN_REDUCE_MAX_PACKS];
    const BnCoefStage<N, VEC> coefs{smem};
    if constexpr (DUAL)
        coefs.stage({coef, coef + c, coef + 2 * c, coef2, coef2 + c, coef2 + 2 * c}, c);
    else if constexpr (S == BN_MASK_FROM_X)
        coefs.stage({coef, coef + c, coef + 2 * c, a, b}, c);
    else
        coefs.stage({coef, coef + c, coef + 2 * c}, c);
    const int packs_per_row = c / VEC, pack = blockIdx.x * blockDim.x + threadIdx.x;
    if (pack >= packs_per_row) return;
    const BnCoefView k_g = coefs.view(0), k_x = coefs.view(1), k_0 = coefs.view(2);
    const BnCoefView k_g2 = coefs.view(N - 3), k_x2 = coefs.view(N - 2), k_02 = coefs.view(N - 1);
    const BnCoefView av = coefs.view(N == 5 ? 3 : 0), bv = coefs.view(N == 5 ? 4 : 0);  // a mask from x's
    const int r1 = min(rows, (int)(blockIdx.y + 1) * chunk_rows), step = blockDim.y;
    int r = blockIdx.y * chunk_rows + threadIdx.y;
    for (; r + step < r1; r += 2 * step) {
        float xv[2][VEC], g[2][VEC], d[2][VEC], x2v[2][VEC];
        size_t j[2];
        bn_load_two_rows<T, VEC>(x, dy, r, step, packs_per_row, pack, j, xv, g);
        if (DUAL) {
            pack_load<T, VEC>(x2 + j[0] * VEC, x2v[0]);
            pack_load<T, VEC>(x2 + j[1] * VEC, x2v[1]);
        }
        if (accumulate) {
            pack_load<T, VEC>(dx + j[0] * VEC, d[0]);
            pack_load<T, VEC>(dx + j[1] * VEC, d[1]);
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            bn_masked_grad<S, T, VEC>(y, mask, j[u], xv[u], av, bv, g[u]);
            bn_backward_pack<VEC>(xv[u], g[u], k_g, k_x, k_0, accumulate, d[u]);
            pack_store<T, VEC>(dx + j[u] * VEC, d[u]);
            bn_backward_store_second<DUAL, T, VEC>(d_residual, dx2, j[u], g[u], x2v[u], k_g2, k_x2, k_02);
        }
    }
    if (r < r1) {
        float xv[VEC], g[VEC], d[VEC], x2v[VEC];
        const size_t j = (size_t)r * packs_per_row + pack;
        pack_load<T, VEC>(x + j * VEC, xv);
        pack_load<T, VEC>(dy + j * VEC, g);
        if (DUAL) pack_load<T, VEC>(x2 + j * VEC, x2v);
        if (accumulate) pack_load<T, VEC>(dx + j * VEC, d);
        bn_masked_grad<S, T, VEC>(y, mask, j, xv, av, bv, g);
        bn_backward_pack<VEC>(xv, g, k_g, k_x, k_0, accumulate, d);
        pack_store<T, VEC>(dx + j * VEC, d);
        bn_backward_store_second<DUAL, T, VEC>(d_residual, dx2, j, g, x2v, k_g2, k_x2, k_02);
    }
}

// One layer's: no output aliases an input, so every pointer is __restrict__.
template <typename T, int VEC, int S>
__global__ void __launch_bounds__(BN_REDUCE_THREADS, BN_APPLY_MIN_BLOCKS)
    bn_backward_apply_kernel(const T *__restrict__ x, const T *__restrict__ y, const T *__restrict__ dy,
                             const uint8_t *__restrict__ mask, const float *a, const float *b, int rows,
                             int c, int chunk_rows, const float *coef, T *__restrict__ dx, int accumulate,
                             T *__restrict__ d_residual) {
    bn_backward_apply_rows<T, VEC, false, S>(x, y, dy, mask, a, b, rows, c, chunk_rows, coef, dx, accumulate,
                                             d_residual, NULL, NULL, NULL);
}

// bn_add_bn's (x2, coef2, dx2: the shortcut's layer): dx2 may be dy (each element written after its read), so
// neither is __restrict__.
template <typename T, int VEC, int S>
__global__ void __launch_bounds__(BN_REDUCE_THREADS, BN_DUAL_APPLY_MIN_BLOCKS)
    bn_add_bn_backward_apply_kernel(const T *__restrict__ x, const T *__restrict__ y, const T *dy,
                                    const uint8_t *__restrict__ mask, const float *a, const float *b,
                                    int rows, int c, int chunk_rows, const float *coef, T *__restrict__ dx,
                                    int accumulate, const T *__restrict__ x2, const float *coef2, T *dx2) {
    bn_backward_apply_rows<T, VEC, true, S>(x, y, dy, mask, a, b, rows, c, chunk_rows, coef, dx, accumulate,
                                            NULL, x2, coef2, dx2);
}

// ---- launch helpers -----------------------------------------------------------------------------------

// How a (rows, c) pass is cut: blocks of (px channel packs, py row lanes), `slices` blocks across the
// channels, `chunks` of chunk_rows rows down them, about blocks_per_sm blocks per SM in all.
typedef struct BnRowCut {
    int px, py, slices, chunks, chunk_rows;
} BnRowCut;

static BnRowCut bn_row_cut(const CudaBackend *cb, int rows, int c, int vec, int blocks_per_sm) {
    BnRowCut cut;
    const int packs = c / vec;
    cut.px = packs < BN_REDUCE_MAX_PACKS ? packs : BN_REDUCE_MAX_PACKS;
    cut.py = BN_REDUCE_THREADS / cut.px;
    cut.slices = (packs + cut.px - 1) / cut.px;
    const int target = blocks_per_sm * cb->sm_count;
    int chunks = target / cut.slices;
    const int most = (rows + cut.py - 1) / cut.py;  // every chunk keeps each row lane busy
    if (chunks > most) chunks = most;
    if (chunks < 1) chunks = 1;
    cut.chunk_rows = (rows + chunks - 1) / chunks;
    cut.chunks = (rows + cut.chunk_rows - 1) / cut.chunk_rows;
    return cut;
}

static dim3 bn_grid(BnRowCut cut) { return dim3(cut.slices, cut.chunks); }
static dim3 bn_block(BnRowCut cut) { return dim3(cut.px, cut.py); }

static int bn_channel_blocks(int c) { return (c + BN_CHANNEL_THREADS - 1) / BN_CHANNEL_THREADS; }
static int bn_merge_blocks(int c) { return (c + BN_MERGE_CHANNELS - 1) / BN_MERGE_CHANNELS; }

static size_t bn_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

size_t bn_own_mask_bytes(int rows, int c) { return (size_t)rows * c / BN_MASK_PACK; }

// Calls launch(std::true_type()) or launch(std::false_type()) as flag says: a kernel's bool template argument
// from a value known at run time (with_pack does the same for the element type and pack width).
template <typename F>
static void with_flag(bool flag, F &&launch) {
    if (flag)
        launch(std::true_type());
    else
        launch(std::false_type());
}

// Calls launch(std::integral_constant<int, S>()) for the S among SOURCES that equals source: a kernel's mask
// source as a template argument, so each kernel carries only the registers and branches of its own source.
template <int... SOURCES, typename F>
static void with_mask_source(BnMaskSource source, F &&launch) {
    const bool found =
        ((source == SOURCES ? (launch(std::integral_constant<int, SOURCES>()), true) : false) || ...);
    if (!found)
        amp_fatal(__FILE__, __LINE__, "batch norm backward: no kernel for mask source %d", (int)source);
}

// y = act(scale * x + shift + residual) over (rows, c) dt, the residual mapped by rscale, rshift first when
// they are given (bn_add_bn); mask (nullable) gets the ReLU bits
static void bn_apply(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *residual,
                     int relu, const float *scale, const float *shift, const float *rscale,
                     const float *rshift, void *y, uint8_t *mask) {
    const int vec = pack_width(dt, c, {x, residual, y});
    const BnRowCut cut = bn_row_cut(cb, rows, c, vec, BN_APPLY_BLOCKS_PER_SM);
    with_pack(dt, vec, [&](auto pk) {
        with_flag(rscale != NULL, [&](auto affine_res) {
            typedef typename decltype(pk)::type T;
            bn_apply_kernel<T, decltype(pk)::vec, decltype(affine_res)::value>
                <<<bn_grid(cut), bn_block(cut), 0, cb->stream>>>((const T *)x, (const T *)residual, relu,
                                                                 rows, c, cut.chunk_rows, scale, shift,
                                                                 rscale, rshift, (T *)y, mask);
        });
    });
    CUDA_CHECK_LAUNCH();
}

// The bytes of one (chunks, c) fp32 partial-sum table of bn_stats over x.
static size_t bn_stats_part_bytes(const CudaBackend *cb, int rows, int c, DType dt, const void *x) {
    const BnRowCut cut = bn_row_cut(cb, rows, c, pack_width(dt, c, {x}), BN_REDUCE_BLOCKS_PER_SM);
    return bn_align((size_t)cut.chunks * c * sizeof(float));
}

// A training forward's statistics of x in one read, merged: save_mean, save_invstd, the running statistics,
// and the affine map scale, shift (c) fp32. part_s, part_q: bn_stats_part_bytes each, workspace.
static void bn_stats(CudaBackend *cb, int rows, int c, DType dt, const void *x, const float *gamma,
                     const float *beta, float *running_mean, float *running_var, float momentum, float eps,
                     float *save_mean, float *save_invstd, float *part_s, float *part_q, float *scale,
                     float *shift) {
    const int vec = pack_width(dt, c, {x});
    const BnRowCut cut = bn_row_cut(cb, rows, c, vec, BN_REDUCE_BLOCKS_PER_SM);
    with_pack(dt, vec, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        bn_stats_partial_kernel<T, decltype(pk)::vec><<<bn_grid(cut), bn_block(cut), 0, cb->stream>>>(
            (const T *)x, rows, c, cut.chunk_rows, part_s, part_q);
        CUDA_CHECK_LAUNCH();
        bn_stats_merge_kernel<T>
            <<<bn_merge_blocks(c), dim3(BN_MERGE_CHANNELS, BN_MERGE_LANES), 0, cb->stream>>>(
                (const T *)x, part_s, part_q, cut.chunks, rows, c, gamma, beta, running_mean, running_var,
                momentum, eps, save_mean, save_invstd, scale, shift);
        CUDA_CHECK_LAUNCH();
    });
}

int bn_own_forward_train(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *residual,
                         int relu, const float *gamma, const float *beta, float *running_mean,
                         float *running_var, float momentum, float eps, float *save_mean, float *save_invstd,
                         void *y, uint8_t *mask) {
    if (pack_width(dt, c, {x, residual, y}) != BN_MASK_PACK) mask = NULL;
    const size_t part = bn_stats_part_bytes(cb, rows, c, dt, x), cvec = bn_align((size_t)c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, 2 * part + 2 * cvec);
    float *part_s = (float *)ws, *part_q = (float *)(ws + part);
    float *scale = (float *)(ws + 2 * part), *shift = (float *)(ws + 2 * part + cvec);
    bn_stats(cb, rows, c, dt, x, gamma, beta, running_mean, running_var, momentum, eps, save_mean,
             save_invstd, part_s, part_q, scale, shift);
    bn_apply(cb, rows, c, dt, x, residual, relu, scale, shift, NULL, NULL, y, mask);
    return mask != NULL;
}

size_t bn_own_stats_scratch_bytes(const CudaBackend *cb, int rows, int c, DType dt, const void *x) {
    return 2 * bn_stats_part_bytes(cb, rows, c, dt, x);
}

void bn_own_forward_train_stats(CudaBackend *cb, int rows, int c, DType dt, const void *x, const float *gamma,
                                const float *beta, float *running_mean, float *running_var, float momentum,
                                float eps, float *save_mean, float *save_invstd, void *scratch, float *scale,
                                float *shift) {
    const size_t part = bn_stats_part_bytes(cb, rows, c, dt, x);
    float *part_s = (float *)scratch, *part_q = (float *)((char *)scratch + part);
    bn_stats(cb, rows, c, dt, x, gamma, beta, running_mean, running_var, momentum, eps, save_mean,
             save_invstd, part_s, part_q, scale, shift);
}

int bn_own_forward_train_sums(CudaBackend *cb, int rows, int c, DType dt, const void *x, const float *sums,
                              const float *sqsums, const void *residual, int relu, const float *gamma,
                              const float *beta, float *running_mean, float *running_var, float momentum,
                              float eps, float *save_mean, float *save_invstd, float *scale, float *shift,
                              void *y, uint8_t *mask) {
    if (pack_width(dt, c, {x, residual, y}) != BN_MASK_PACK) mask = NULL;
    // the sums as one chunk, not shifted (the element type of the absent shift row is immaterial)
    bn_stats_merge_kernel<float>
        <<<bn_merge_blocks(c), dim3(BN_MERGE_CHANNELS, BN_MERGE_LANES), 0, cb->stream>>>(
            NULL, sums, sqsums, 1, rows, c, gamma, beta, running_mean, running_var, momentum, eps, save_mean,
            save_invstd, scale, shift);
    CUDA_CHECK_LAUNCH();
    bn_apply(cb, rows, c, dt, x, residual, relu, scale, shift, NULL, NULL, y, mask);
    return mask != NULL;
}

int bn_own_add_bn_forward_train(CudaBackend *cb, int rows, int c, DType dt, const BnArgs *a, const BnArgs *b,
                                int relu, float momentum, float eps, void *y, uint8_t *mask) {
    if (pack_width(dt, c, {a->x, b->x, y}) != BN_MASK_PACK) mask = NULL;
    const size_t part_a = bn_stats_part_bytes(cb, rows, c, dt, a->x),
                 part_b = bn_stats_part_bytes(cb, rows, c, dt, b->x);
    const size_t part = part_a > part_b ? part_a : part_b, cvec = bn_align((size_t)c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, 2 * part + 4 * cvec), *affine = ws + 2 * part;
    float *part_s = (float *)ws, *part_q = (float *)(ws + part);
    float *scale_a = (float *)affine, *shift_a = (float *)(affine + cvec);
    float *scale_b = (float *)(affine + 2 * cvec), *shift_b = (float *)(affine + 3 * cvec);
    bn_stats(cb, rows, c, dt, a->x, a->gamma, a->beta, a->running_mean, a->running_var, momentum, eps,
             a->save_mean, a->save_invstd, part_s, part_q, scale_a, shift_a);
    bn_stats(cb, rows, c, dt, b->x, b->gamma, b->beta, b->running_mean, b->running_var, momentum, eps,
             b->save_mean, b->save_invstd, part_s, part_q, scale_b, shift_b);
    bn_apply(cb, rows, c, dt, a->x, b->x, relu, scale_a, shift_a, scale_b, shift_b, y, mask);
    return mask != NULL;
}

void bn_own_forward_eval(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *residual,
                         int relu, const float *gamma, const float *beta, const float *running_mean,
                         const float *running_var, float eps, void *y) {
    const size_t cvec = bn_align((size_t)c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, 2 * cvec);
    float *scale = (float *)ws, *shift = (float *)(ws + cvec);
    bn_eval_affine_kernel<<<bn_channel_blocks(c), BN_CHANNEL_THREADS, 0, cb->stream>>>(
        c, gamma, beta, running_mean, running_var, eps, scale, shift);
    CUDA_CHECK_LAUNCH();
    bn_apply(cb, rows, c, dt, x, residual, relu, scale, shift, NULL, NULL, y, NULL);
}

void bn_own_forward_saved(CudaBackend *cb, int rows, int c, DType dt, const void *x, int relu,
                          const float *gamma, const float *beta, const float *save_mean,
                          const float *save_invstd, void *y) {
    const size_t cvec = bn_align((size_t)c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, 2 * cvec);
    float *scale = (float *)ws, *shift = (float *)(ws + cvec);
    bn_saved_affine_kernel<<<bn_channel_blocks(c), BN_CHANNEL_THREADS, 0, cb->stream>>>(
        c, gamma, beta, save_mean, save_invstd, scale, shift);
    CUDA_CHECK_LAUNCH();
    bn_apply(cb, rows, c, dt, x, NULL, relu, scale, shift, NULL, NULL, y, NULL);
}

// bn_own_backward, and with second (bn_add_bn) the second batch norm's backward in the same two passes: its
// sums beside the first's, its dx (dx2) written where d_residual would be.
static void bn_backward_run(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *y,
                            const void *dy, BnMaskSource mask_source, const float *beta, const uint8_t *mask,
                            const float *gamma, const float *save_mean, const float *save_invstd, void *dx,
                            int accumulate, void *dgamma, void *dbeta, int accumulate_params,
                            void *d_residual, const BnArgs *second, void *dx2) {
    const void *x2 = second ? second->x : NULL;
    int vec = pack_width(dt, c, {x, y, dy, dx, d_residual, x2, dx2});
    if (mask_source == BN_MASK_BITS && vec != BN_MASK_PACK) mask_source = BN_MASK_FROM_Y;  // bits per 8 only
    if (mask_source != BN_MASK_FROM_Y) vec = pack_width(dt, c, {x, dy, dx, d_residual, x2, dx2});
    const BnRowCut cut = bn_row_cut(cb, rows, c, vec, BN_REDUCE_BLOCKS_PER_SM);
    const size_t part = bn_align((size_t)cut.chunks * c * sizeof(float)),
                 cvec = bn_align((size_t)c * sizeof(float));
    char *ws = (char *)cuda_workspace(cb, 3 * part + 8 * cvec);
    float *part_g = (float *)ws, *part_gx = (float *)(ws + part), *part_gx2 = (float *)(ws + 2 * part);
    float *coef = (float *)(ws + 3 * part), *coef2 = (float *)(ws + 3 * part + 3 * cvec);
    float *a = (float *)(ws + 3 * part + 6 * cvec), *b = (float *)(ws + 3 * part + 7 * cvec);
    if (mask_source == BN_MASK_FROM_X) {
        bn_saved_affine_kernel<<<bn_channel_blocks(c), BN_CHANNEL_THREADS, 0, cb->stream>>>(
            c, gamma, beta, save_mean, save_invstd, a, b);
        CUDA_CHECK_LAUNCH();
    }
    auto launch = [&](auto pk, auto dual, auto source) {
        typedef typename decltype(pk)::type T;
        constexpr int VEC = decltype(pk)::vec;
        constexpr bool DUAL = decltype(dual)::value;
        constexpr int S = decltype(source)::value;
        const dim3 merge_grid(bn_merge_blocks(c)), merge_block(BN_MERGE_CHANNELS, BN_MERGE_LANES);
        bn_backward_partial_kernel<T, VEC, DUAL, S><<<bn_grid(cut), bn_block(cut), 0, cb->stream>>>(
            (const T *)x, (const T *)y, (const T *)dy, mask, a, b, rows, c, cut.chunk_rows, save_mean, part_g,
            part_gx, (const T *)x2, DUAL ? second->save_mean : NULL, part_gx2);
        CUDA_CHECK_LAUNCH();
        bn_backward_merge_kernel<T><<<merge_grid, merge_block, 0, cb->stream>>>(
            part_g, part_gx, cut.chunks, rows, c, gamma, save_mean, save_invstd, (T *)dgamma, (T *)dbeta,
            accumulate_params, coef);
        CUDA_CHECK_LAUNCH();
        if (DUAL) {  // the second's dy is g: the same sum of g, its own sum of g * (x2 - mean2)
            bn_backward_merge_kernel<T><<<merge_grid, merge_block, 0, cb->stream>>>(
                part_g, part_gx2, cut.chunks, rows, c, second->gamma, second->save_mean, second->save_invstd,
                (T *)second->dgamma, (T *)second->dbeta, accumulate_params, coef2);
            CUDA_CHECK_LAUNCH();
        }
        const BnRowCut apply = bn_row_cut(cb, rows, c, VEC, BN_APPLY_BLOCKS_PER_SM);
        if (DUAL)
            bn_add_bn_backward_apply_kernel<T, VEC, S><<<bn_grid(apply), bn_block(apply), 0, cb->stream>>>(
                (const T *)x, (const T *)y, (const T *)dy, mask, a, b, rows, c, apply.chunk_rows, coef,
                (T *)dx, accumulate, (const T *)x2, coef2, (T *)dx2);
        else
            bn_backward_apply_kernel<T, VEC, S><<<bn_grid(apply), bn_block(apply), 0, cb->stream>>>(
                (const T *)x, (const T *)y, (const T *)dy, mask, a, b, rows, c, apply.chunk_rows, coef,
                (T *)dx, accumulate, (T *)d_residual);
        CUDA_CHECK_LAUNCH();
    };
    with_pack(dt, vec, [&](auto pk) {
        if (second)  // a residual: never a mask from x
            with_mask_source<BN_MASK_NONE, BN_MASK_FROM_Y, BN_MASK_BITS>(
                mask_source, [&](auto source) { launch(pk, std::true_type(), source); });
        else
            with_mask_source<BN_MASK_NONE, BN_MASK_FROM_Y, BN_MASK_BITS, BN_MASK_FROM_X>(
                mask_source, [&](auto source) { launch(pk, std::false_type(), source); });
    });
}

void bn_own_backward(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *y, const void *dy,
                     BnMaskSource mask_source, const float *beta, const uint8_t *mask, const float *gamma,
                     const float *save_mean, const float *save_invstd, void *dx, int accumulate, void *dgamma,
                     void *dbeta, int accumulate_params, void *d_residual) {
    bn_backward_run(cb, rows, c, dt, x, y, dy, mask_source, beta, mask, gamma, save_mean, save_invstd, dx,
                    accumulate, dgamma, dbeta, accumulate_params, d_residual, NULL, NULL);
}

void bn_own_add_bn_backward(CudaBackend *cb, int rows, int c, DType dt, const BnArgs *a, const BnArgs *b,
                            const void *y, const void *dy, BnMaskSource mask_source, const uint8_t *mask,
                            void *dx_a, void *dx_b, int accumulate_params) {
    bn_backward_run(cb, rows, c, dt, a->x, y, dy, mask_source, a->beta, mask, a->gamma, a->save_mean,
                    a->save_invstd, dx_a, 0, a->dgamma, a->dbeta, accumulate_params, NULL, b, dx_b);
}

void bn_own_backward_from_sums(CudaBackend *cb, int rows, int c, DType dt, const void *x, const void *g,
                               const float *sum_g, const float *sum_gxhat, const float *gamma,
                               const float *save_mean, const float *save_invstd, void *dx, void *dgamma,
                               void *dbeta, int accumulate_params, float *coef) {
    const int vec = pack_width(dt, c, {x, g, dx});
    with_pack(dt, vec, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        constexpr int VEC = decltype(pk)::vec;
        bn_backward_sums_kernel<T><<<bn_channel_blocks(c), BN_CHANNEL_THREADS, 0, cb->stream>>>(
            sum_g, sum_gxhat, rows, c, gamma, save_mean, save_invstd, (T *)dgamma, (T *)dbeta,
            accumulate_params, coef);
        CUDA_CHECK_LAUNCH();
        const BnRowCut apply = bn_row_cut(cb, rows, c, VEC, BN_APPLY_BLOCKS_PER_SM);
        bn_backward_apply_kernel<T, VEC, BN_MASK_NONE><<<bn_grid(apply), bn_block(apply), 0, cb->stream>>>(
            (const T *)x, NULL, (const T *)g, NULL, NULL, NULL, rows, c, apply.chunk_rows, coef, (T *)dx, 0,
            NULL);
        CUDA_CHECK_LAUNCH();
    });
}
