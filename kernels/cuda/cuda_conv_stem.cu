// cuda_conv_stem.cu - amptrain's own kernels for a stride-2 convolution of at most 4 input channels into 64
// (the stem's 7x7/2 of 3 channels), forward and weight gradient, fp16 or bf16 on tensor cores (WMMA 16x16x16,
// fp32 accumulation; sm_80 and later). cuDNN has a dedicated kernel for this layer in fp16 only; in bf16 its
// fastest took 1.8 ms at batch 256 on an H200 against fp16's 0.46 (bench/RESULTS.md). cudnn_conv.cu times
// these kernels beside cuDNN's routes and takes the fastest.
//
// Both are implicit GEMMs over one work item at a time: up to STEM_TILE_M pixels of STEM_FWD_ROWS (forward)
// or STEM_WG_ROWS (weight gradient) consecutive output rows of an image, which share their staged input rows
// (a stride-2 row of 7 taps overlaps the next one's by 5). The item's input rows are staged in shared memory
// with their channels padded to 4, in[row][col][4]. With stride 2, output pixel m's taps of kernel row ky are the 32
// consecutive elements starting at in[ky][2m][0] (8 columns x 4 channels; taps kx >= kw and channels >= c
// meet zero weights), so for each ky the im2col matrix A_ky (pixels x 32) is in itself, row m at element
// 8m: a WMMA operand with leading dimension 8, read where it lies, with no unrolled copy:
//   forward          y (pixels x 64)        = sum over ky of A_ky (pixels x 32) . W_ky (32 x 64)
//   weight gradient  dW_ky (64 x 32)       += dY^T (64 x pixels) . A_ky (pixels x 32)
// Each block is persistent (as many as fit on every multiprocessor) and strides over the items. The forward
// keeps W (kh x 64 x 32, zero-padded) in its shared memory; the weight gradient keeps its block's sums in
// registers and writes them once to its own slice of a partial buffer, which stem_wgrad_finish_kernel sums
// in order (a run repeats bitwise). Shared-memory bandwidth bounds both (ncu), so each warp's tile is shaped
// to load few fragments per MMA (0.75). The shared tiles' leading dimensions are padded so that the rows
// one phase of a WMMA load or store touches fall in different banks. Every fragment is loaded from shared
// memory through stem_load (below), which names the shared state space in bf16 too.
#include <mma.h>

#include <type_traits>

#include "kernels/cuda/cuda_elem.cuh"

#define STEM_TILE_M 128   // output pixels per work item
#define STEM_C_OUT 64     // output channels (4 WMMA tiles)
#define STEM_THREADS 256  // 8 warps
#define STEM_WARPS (STEM_THREADS / 32)
#define STEM_STAGE_C 4      // channels per staged pixel
#define STEM_ROW_TAPS 32    // taps per kernel row: 8 columns x STEM_STAGE_C channels
#define STEM_MAX_KH 7       // kernel rows
#define STEM_MAX_KW 8       // kernel columns: STEM_ROW_TAPS / STEM_STAGE_C
#define STEM_W_LD 40        // the forward's weights: elements per output channel (32 taps used)
#define STEM_OUT_LD 40      // the forward's fp32 output tile: elements per pixel (32 channels used)
#define STEM_DY_LD 72       // the weight gradient's dY tile: elements per pixel (64 channels used)
#define STEM_FWD_WARP_M 32  // the forward: output pixels per warp (two tiles)
#define STEM_FWD_WARPS_PER_ROW (STEM_TILE_M / STEM_FWD_WARP_M)
#define STEM_FWD_ROW_LANES (STEM_WARPS / STEM_FWD_WARPS_PER_ROW)  // the forward: rows computed at once
#define STEM_FWD_ROWS 4  // the forward: output rows per work item (their staged input rows shared)
#define STEM_WG_ROWS 2   // the weight gradient: output rows per work item
#define STEM_WG_TAP_GROUPS (STEM_WARPS / 2)  // the weight gradient: two channel halves per group
#define STEM_WG_MAX_FRAGS ((2 * STEM_MAX_KH + STEM_WG_TAP_GROUPS - 1) / STEM_WG_TAP_GROUPS)

// Loads a 16x16 operand fragment from shared memory at p (leading dimension ldm, in elements). In fp16 this
// is wmma::load_matrix_sync, which nvcc compiles to wmma.load.*.shared.f16. In bf16 nvcc 13.0 compiles the
// same call to a load on a generic address (wmma.load.*.bf16), so bf16 names the shared state space itself:
// the instruction fills the fragment's four 32-bit registers exactly as the builtin does.
#define STEM_LOAD_BF16(use, layout)                                                                          \
    asm("wmma.load." use ".sync.aligned." layout ".m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;"        \
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                                                     \
        : "r"(address), "r"(ldm)                                                                             \
        : "memory")
template <typename Use, typename T, typename Layout>
static __device__ __forceinline__ void stem_load(nvcuda::wmma::fragment<Use, 16, 16, 16, T, Layout> &f,
                                                 const T *p, unsigned ldm) {
#if __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        static_assert(sizeof f.x == 4 * sizeof(unsigned),
                      "a bf16 m16n16k16 operand is four 32-bit registers");
        unsigned *r = reinterpret_cast<unsigned *>(f.x);
        const unsigned address = (unsigned)__cvta_generic_to_shared(p);
        constexpr bool a = std::is_same<Use, wmma::matrix_a>::value;
        constexpr bool row = std::is_same<Layout, wmma::row_major>::value;
        if constexpr (a && row)
            STEM_LOAD_BF16("a", "row");
        else if constexpr (a)
            STEM_LOAD_BF16("a", "col");
        else if constexpr (row)
            STEM_LOAD_BF16("b", "row");
        else
            STEM_LOAD_BF16("b", "col");
    } else {
        wmma::load_matrix_sync(f, p, ldm);
    }
#endif
}
#undef STEM_LOAD_BF16

// The geometry both kernels share (host-computed). A work item is `rows` consecutive output rows of one
// image (the forward's two rows share their staged input rows), STEM_TILE_M pixels of each.
typedef struct StemGeometry {
    int n, h, w, c, kh, kw, pad, out_h, out_w;
    int rows;         // output rows per work item
    int staged_rows;  // input rows staged per item: 2 * (rows - 1) + kh
    int cols;         // staged input columns per row: 2 * (STEM_TILE_M - 1) + STEM_MAX_KW, rounded up to 4
    int chunks;       // work items across an output row
    int row_groups;   // work items down an image: out_h / rows, rounded up
    long items;       // work items: n * row_groups * chunks
} StemGeometry;

// Shared memory, in bytes: the staged rows; then the forward's weights and per-warp output tiles, or the
// weight gradient's dY tile.
static __host__ __device__ size_t stem_in_bytes(const StemGeometry &g) {
    return (size_t)g.staged_rows * g.cols * STEM_STAGE_C * 2;
}
static __host__ __device__ size_t stem_w_bytes(const StemGeometry &g) {
    return (size_t)g.kh * STEM_C_OUT * STEM_W_LD * 2;
}
static size_t stem_forward_smem(const StemGeometry &g) {
    return stem_in_bytes(g) + stem_w_bytes(g) + (size_t)STEM_WARPS * 16 * STEM_OUT_LD * sizeof(float);
}
static size_t stem_wgrad_smem(const StemGeometry &g) {
    return stem_in_bytes(g) + (size_t)STEM_WG_ROWS * STEM_TILE_M * STEM_DY_LD * 2;
}

// Stages work item `item`'s input rows into in[staged_rows][cols][4] (zeros outside the image and past c)
// and returns its image, first output row and first output column.
template <typename T>
static __device__ void stem_stage_input(const T *__restrict__ x, const StemGeometry &g, long item, T *in,
                                        int *img, int *oy0, int *ox0) {
    const int chunk = (int)(item % g.chunks);
    const long group = item / g.chunks;
    *oy0 = (int)(group % g.row_groups) * g.rows;
    *img = (int)(group / g.row_groups);
    *ox0 = chunk * STEM_TILE_M;
    const int iy0 = *oy0 * 2 - g.pad, ix0 = *ox0 * 2 - g.pad;
    // slot p = row * cols + col, its row and column stepped along (STEM_THREADS < cols: at most one row a step)
    static_assert(STEM_THREADS <= 2 * (STEM_TILE_M - 1) + STEM_MAX_KW,
                  "a stride of STEM_THREADS slots crosses one row at most");
    int row = threadIdx.x / g.cols, col = threadIdx.x % g.cols;
    for (int p = threadIdx.x; p < g.staged_rows * g.cols; p += STEM_THREADS) {
        const int iy = iy0 + row, ix = ix0 + col;
        ElemPack<T, STEM_STAGE_C> pk;
#pragma unroll
        for (int ch = 0; ch < STEM_STAGE_C; ch++) pk.e[ch] = T(0.0f);
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
            const T *src = x + (((size_t)*img * g.h + iy) * g.w + ix) * g.c;
#pragma unroll
            for (int ch = 0; ch < STEM_STAGE_C; ch++)
                if (ch < g.c) pk.e[ch] = src[ch];
        }
        *(ElemPack<T, STEM_STAGE_C> *)(in + (size_t)p * STEM_STAGE_C) = pk;
        col += STEM_THREADS;
        if (col >= g.cols) col -= g.cols, row++;
    }
}

// x (n,h,w,c) T, w (64,kh,kw,c) T -> y (n,out_h,out_w,64) T. An item is STEM_FWD_ROWS output rows; warp w
// computes rows w / STEM_FWD_WARPS_PER_ROW + k STEM_FWD_ROW_LANES, pixels 32 (w % STEM_FWD_WARPS_PER_ROW)..
// +31, all 64 channels: per kernel row and 16 taps, 4 weight fragments serve the warp's two pixel tiles
// (8 MMAs for 6 loads).
template <typename T>
__global__ void __launch_bounds__(STEM_THREADS)
    stem_forward_kernel(const T *__restrict__ x, const T *__restrict__ w, T *__restrict__ y, StemGeometry g) {
#if __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem[];
    T *in = (T *)smem;
    T *b = (T *)(smem + stem_in_bytes(g));  // [ky][n][STEM_W_LD]: W_ky column-major
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int lane_row = warp / STEM_FWD_WARPS_PER_ROW,
              p0 = (warp % STEM_FWD_WARPS_PER_ROW) * STEM_FWD_WARP_M;
    float *out = (float *)(smem + stem_in_bytes(g) + stem_w_bytes(g)) +
                 warp * 16 * STEM_OUT_LD;  // the warp's
    for (int i = threadIdx.x; i < g.kh * STEM_C_OUT * STEM_W_LD; i += STEM_THREADS) {
        const int j = i % STEM_W_LD, n = (i / STEM_W_LD) % STEM_C_OUT, ky = i / (STEM_W_LD * STEM_C_OUT);
        const int kx = j / STEM_STAGE_C, ch = j % STEM_STAGE_C;
        b[i] = kx < g.kw && ch < g.c ? w[(((size_t)n * g.kh + ky) * g.kw + kx) * g.c + ch] : T(0.0f);
    }
    for (long item = blockIdx.x; item < g.items; item += gridDim.x) {
        int img, oy0, ox0;
        __syncthreads();  // every warp has read the previous item's rows
        stem_stage_input(x, g, item, in, &img, &oy0, &ox0);
        __syncthreads();
        for (int r = lane_row; r < STEM_FWD_ROWS; r += STEM_FWD_ROW_LANES) {
            // pixels of the warp's 32 inside the image: none past the last row or the row's end (out_w 112 of a
            // 128-pixel item), one tile when at most 16
            const int oy = oy0 + r;
            const int valid = oy < g.out_h ? min(STEM_FWD_WARP_M, g.out_w - ox0 - p0) : 0;
            if (valid <= 0) continue;
            const int tiles = valid > 16 ? 2 : 1;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][STEM_C_OUT / 16];
#pragma unroll
            for (int t = 0; t < 2; t++)
#pragma unroll
                for (int j = 0; j < STEM_C_OUT / 16; j++) wmma::fill_fragment(acc[t][j], 0.0f);
            for (int ky = 0; ky < g.kh; ky++) {
                const T *row = in + (size_t)(2 * r + ky) * g.cols * STEM_STAGE_C + p0 * 8;
#pragma unroll
                for (int half = 0; half < STEM_ROW_TAPS / 16; half++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb[STEM_C_OUT / 16];
#pragma unroll
                    for (int j = 0; j < STEM_C_OUT / 16; j++)
                        stem_load(fb[j], b + ((size_t)ky * STEM_C_OUT + j * 16) * STEM_W_LD + half * 16,
                                  STEM_W_LD);
#pragma unroll
                    for (int t = 0; t < 2; t++) {
                        if (t >= tiles) break;
                        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                        stem_load(fa, row + t * 16 * 8 + half * 16, 8);
#pragma unroll
                        for (int j = 0; j < STEM_C_OUT / 16; j++)
                            wmma::mma_sync(acc[t][j], fa, fb[j], acc[t][j]);
                    }
                }
            }
            // out to y through the warp's fp32 tile, 16 pixels x 32 channels at a time: each pixel's 32 are 64
            // contiguous bytes of y, 8 elements (16 bytes) per store
#pragma unroll
            for (int t = 0; t < 2; t++) {
                if (t >= tiles) break;
                const int pixels = min(16, valid - t * 16);
                T *dst = y + (((size_t)img * g.out_h + oy) * g.out_w + ox0 + p0 + t * 16) * STEM_C_OUT;
#pragma unroll
                for (int part = 0; part < 2; part++) {
#pragma unroll
                    for (int j = 0; j < 2; j++)
                        wmma::store_matrix_sync(out + j * 16, acc[t][part * 2 + j], STEM_OUT_LD,
                                                wmma::mem_row_major);
                    __syncwarp();
                    for (int i = lane * 8; i < pixels * 32; i += 32 * 8)
                        pack_store<T, 8>(dst + (i / 32) * STEM_C_OUT + part * 32 + i % 32,
                                         out + (i / 32) * STEM_OUT_LD + i % 32);
                    __syncwarp();
                }
            }
        }
    }
#endif
}

// x (n,h,w,c) T, dy (n,out_h,out_w,64) T -> partial[blockIdx.x] (64, kh * 32) fp32: this block's items' sum.
// The kh * 2 tap fragments (kernel row ky, half h: fragment f = 2 ky + h) are split into STEM_WG_TAP_GROUPS
// groups of at most STEM_WG_MAX_FRAGS; warp w owns the 32 output channels 32 (w % 2).. and tap group w / 2:
// per 16 pixels, two dY^T fragments and one A_ky fragment per tap fragment feed its 2 x 4 accumulators.
template <typename T>
__global__ void __launch_bounds__(STEM_THREADS)
    stem_wgrad_kernel(const T *__restrict__ x, const T *__restrict__ dy, float *__restrict__ partial,
                      StemGeometry g) {
#if __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem[];
    T *in = (T *)smem;
    // [STEM_WG_ROWS][STEM_TILE_M][STEM_DY_LD]: the item's dY, zero past the valid pixels and rows
    T *d = (T *)(smem + stem_in_bytes(g));
    const int warp = threadIdx.x / 32, c0 = (warp % 2) * 32, group = warp / 2;
    const int frags = g.kh * 2, f0 = group * frags / STEM_WG_TAP_GROUPS,
              count = (group + 1) * frags / STEM_WG_TAP_GROUPS - f0;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][STEM_WG_MAX_FRAGS];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int i = 0; i < STEM_WG_MAX_FRAGS; i++) wmma::fill_fragment(acc[a][i], 0.0f);
    for (long item = blockIdx.x; item < g.items; item += gridDim.x) {
        int img, oy, ox0;
        __syncthreads();  // every warp has read the previous item's tiles
        stem_stage_input(x, g, item, in, &img, &oy, &ox0);
        const int valid = min(STEM_TILE_M, g.out_w - ox0), rows = min(STEM_WG_ROWS, g.out_h - oy);
        for (int i = threadIdx.x * 8; i < STEM_WG_ROWS * STEM_TILE_M * STEM_C_OUT; i += STEM_THREADS * 8) {
            const int r = i / (STEM_TILE_M * STEM_C_OUT), k = i % (STEM_TILE_M * STEM_C_OUT);
            ElemPack<T, 8> pk;
            if (r < rows && k < valid * STEM_C_OUT)
                pk = *(const ElemPack<T, 8> *)(dy +
                                               (((size_t)img * g.out_h + oy + r) * g.out_w + ox0) *
                                                   STEM_C_OUT +
                                               k);
            else
#pragma unroll
                for (int e = 0; e < 8; e++) pk.e[e] = T(0.0f);
            *(ElemPack<T, 8> *)(d + ((size_t)r * STEM_TILE_M + k / STEM_C_OUT) * STEM_DY_LD +
                                k % STEM_C_OUT) = pk;
        }
        __syncthreads();
        for (int r = 0; r < rows; r++)
            for (int m = 0; m < valid; m += 16) {  // 16-pixel steps past the row's end would add zeros
                // dY^T (16 channels x 16 pixels): d is [pixel][channel], so column-major
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> fa[2];
#pragma unroll
                for (int a = 0; a < 2; a++)
                    stem_load(fa[a], d + ((size_t)r * STEM_TILE_M + m) * STEM_DY_LD + c0 + a * 16,
                              STEM_DY_LD);
#pragma unroll
                for (int i = 0; i < STEM_WG_MAX_FRAGS; i++) {
                    if (i >= count) break;
                    const int f = f0 + i;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
                    stem_load(fb, in + (size_t)(2 * r + f / 2) * g.cols * STEM_STAGE_C + m * 8 + (f % 2) * 16,
                              8);
#pragma unroll
                    for (int a = 0; a < 2; a++) wmma::mma_sync(acc[a][i], fa[a], fb, acc[a][i]);
                }
            }
    }
    const int ld = g.kh * STEM_ROW_TAPS;
    float *mine = partial + (size_t)blockIdx.x * STEM_C_OUT * ld;
#pragma unroll
    for (int i = 0; i < STEM_WG_MAX_FRAGS; i++) {
        if (i >= count) break;
#pragma unroll
        for (int a = 0; a < 2; a++)
            wmma::store_matrix_sync(mine + (size_t)(c0 + a * 16) * ld + (f0 + i) * 16, acc[a][i], ld,
                                    wmma::mem_row_major);
    }
#endif
}

// partial (slices, 64, kh * 32) fp32 -> dw (64, kh, kw, c) T: the slices' sums in order, = or + dw.
template <typename T>
__global__ void stem_wgrad_finish_kernel(const float *__restrict__ partial, int slices, T *__restrict__ dw,
                                         StemGeometry g, int accumulate) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= STEM_C_OUT * g.kh * g.kw * g.c) return;
    const int ch = i % g.c, kx = (i / g.c) % g.kw, ky = (i / (g.c * g.kw)) % g.kh,
              n = i / (g.c * g.kw * g.kh);
    const int ld = g.kh * STEM_ROW_TAPS, col = ky * STEM_ROW_TAPS + kx * STEM_STAGE_C + ch;
    float sum = 0.0f;
    for (int b = 0; b < slices; b++) sum += partial[((size_t)b * STEM_C_OUT + n) * ld + col];
    if (accumulate) sum += to_f32(dw[i]);
    from_f32(&dw[i], sum);
}

// ---- host ---------------------------------------------------------------------------------------------

static StemGeometry stem_geometry(const ConvShape *s, int rows) {
    StemGeometry g;
    g.n = s->n, g.h = s->h, g.w = s->w, g.c = s->c_in, g.kh = s->kh, g.kw = s->kw, g.pad = s->pad;
    g.out_h = s->out_h, g.out_w = s->out_w;
    g.rows = rows;
    g.staged_rows = 2 * (rows - 1) + g.kh;
    g.cols = (2 * (STEM_TILE_M - 1) + STEM_MAX_KW + 3) / 4 * 4;
    g.chunks = (s->out_w + STEM_TILE_M - 1) / STEM_TILE_M;
    g.row_groups = (s->out_h + rows - 1) / rows;
    g.items = (long)g.n * g.row_groups * g.chunks;
    return g;
}

// Blocks of `kernel` with `smem` bytes of dynamic shared memory to launch: as many as fit on every
// multiprocessor at once, at most one per work item. The function's shared-memory limit (raised to the most
// any launch of it asks) and its occupancy per size belong to the function on this process's device: they
// are set and asked once per (kernel, smem), not on every launch.
static int stem_blocks(const CudaBackend *cb, const void *kernel, size_t smem, long items) {
    static struct {
        const void *kernel;
        size_t smem;
        int per_sm;
    } known[4 * STEM_MAX_KH];  // two kernels in two dtypes, one size per kernel height
    static int known_count;
    int per_sm = -1;
    size_t limit = 0;  // the kernel's shared-memory limit as raised so far
    for (int i = 0; i < known_count; i++) {
        if (known[i].kernel != kernel) continue;
        if (known[i].smem == smem) per_sm = known[i].per_sm;
        if (known[i].smem > limit) limit = known[i].smem;
    }
    if (per_sm < 0) {
        if (smem > limit)
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, STEM_THREADS, smem));
        if (per_sm < 1) per_sm = 1;
        AMP_ASSERT(known_count < (int)(sizeof known / sizeof known[0]),
                   "stem kernels: more than %d launch sizes", (int)(sizeof known / sizeof known[0]));
        known[known_count].kernel = kernel, known[known_count].smem = smem,
        known[known_count++].per_sm = per_sm;
    }
    const long blocks = (long)per_sm * cb->sm_count;
    return (int)(blocks < items ? blocks : items);
}

int conv_stem_eligible(const CudaBackend *cb, const ConvShape *s, DType dt) {
    return cb->cc_major >= 8 && dtype_is_16bit(dt) && s->groups == 1 && s->c_out == STEM_C_OUT &&
           s->c_in <= STEM_STAGE_C && s->stride == 2 && s->kh <= STEM_MAX_KH && s->kw <= STEM_MAX_KW;
}

void conv_stem_forward(CudaBackend *cb, const ConvShape *s, DType dt, const void *x, const void *w, void *y) {
    AMP_ASSERT(conv_stem_eligible(cb, s, dt), "conv_stem_forward: shape not eligible");
    const StemGeometry g = stem_geometry(s, STEM_FWD_ROWS);
    const size_t smem = stem_forward_smem(g);
    with_half(dt, [&](auto pk) {
        using T = typename decltype(pk)::type;
        const int blocks = stem_blocks(cb, (const void *)stem_forward_kernel<T>, smem, g.items);
        stem_forward_kernel<T>
            <<<blocks, STEM_THREADS, smem, cb->stream>>>((const T *)x, (const T *)w, (T *)y, g);
    });
    CUDA_CHECK_LAUNCH();
}

void conv_stem_backward_filter(CudaBackend *cb, const ConvShape *s, DType dt, const void *x, const void *dy,
                               void *dw, int accumulate) {
    AMP_ASSERT(conv_stem_eligible(cb, s, dt), "conv_stem_backward_filter: shape not eligible");
    const StemGeometry g = stem_geometry(s, STEM_WG_ROWS);
    const size_t smem = stem_wgrad_smem(g);
    with_half(dt, [&](auto pk) {
        using T = typename decltype(pk)::type;
        const int blocks = stem_blocks(cb, (const void *)stem_wgrad_kernel<T>, smem, g.items);
        const size_t partial_bytes = (size_t)blocks * STEM_C_OUT * g.kh * STEM_ROW_TAPS * sizeof(float);
        float *partial = (float *)cuda_workspace(cb, partial_bytes);
        stem_wgrad_kernel<T>
            <<<blocks, STEM_THREADS, smem, cb->stream>>>((const T *)x, (const T *)dy, partial, g);
        CUDA_CHECK_LAUNCH();
        const int outputs = STEM_C_OUT * g.kh * g.kw * g.c;
        stem_wgrad_finish_kernel<T>
            <<<(outputs + 255) / 256, 256, 0, cb->stream>>>(partial, blocks, (T *)dw, g, accumulate);
    });
    CUDA_CHECK_LAUNCH();
}
