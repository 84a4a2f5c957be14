// cuda_pool.cu - max pooling (square window) and global average pooling, NHWC, fp16, bf16 or fp32.
//
// Each thread owns one pixel and VEC consecutive channels (8 fp16 or bf16, or 4 fp32 = one 16-byte load
// when C and the pointers allow; otherwise one channel). Max-pool backward is a gather from the input side:
// each input element adds up the gradients of the windows that route to it, so dx is written once,
// without atomics and without zeroing it first, and the sum order is fixed (deterministic).
// Two backward paths give the same bits:
// - the ResNeXt stem's pool (3x3 windows, stride 2, pad 1, 16-byte packs) runs one fused kernel that
//   walks down a band of window rows, finds each window's route from x and y in registers, trades the
//   shared columns with its left neighbour through shared memory, and writes dx once: x, y and dy are
//   read once from DRAM and no route buffer exists (maxpool_backward_k3s2_kernel);
//   On an H200 the stem's backward at batch 256 (256x112x112x64 fp16) takes 0.274 ms, 3750 GB/s
//   (build/bench_maxpool; the two passes took 0.31 + 0.64 ms);
// - any other shape runs two passes, route then gather, through a one-byte-per-output route buffer.
#include "core/bf16.h"
#include "kernels/cuda/cuda_elem.cuh"
#include "kernels/cuda/cuda_internal.h"

#define POOL_THREADS 256
#define POOL_MAX_BLOCKS 4224  // 32 blocks of 256 threads per SM on 132 SMs; the loops are grid-stride

// Max-pool kernels take the image from blockIdx.y and index within it in 32 bits: 64-bit division by a
// runtime value costs tens of instructions, which the gather would pay five times per element.
static void pool_check_indexing(const PoolShape *s) {
    AMP_ASSERT(s->n <= 65535 && (size_t)s->h * s->w * s->c < ((size_t)1 << 32),
               "maxpool: batch %d or image %dx%dx%d too large for the kernels' indexing", s->n, s->h, s->w,
               s->c);
}

static dim3 pool_image_grid(const PoolShape *s, size_t per_image) {
    pool_check_indexing(s);
    // One element per thread: the loops stay grid-stride only so any shape is covered.
    size_t x = (per_image + POOL_THREADS - 1) / POOL_THREADS;
    if (x > 65535) x = 65535;
    if (x < 1) x = 1;
    return dim3((unsigned)x, (unsigned)s->n);
}

static unsigned pool_blocks(size_t work) { return grid_stride_blocks(work, POOL_THREADS, POOL_MAX_BLOCKS); }

// ---- max pool ------------------------------------------------------------------------------------------

// x (n,h,w,c) -> y (n,out_h,out_w,c). NaN wins the max, as in torch, so an overflow upstream is not
// hidden from the loss-scale check.
template <typename T, int VEC>
__global__ void maxpool_forward_kernel(PoolShape s, const T *x, T *y) {
    const int cv_count = s.c / VEC;
    const int b = blockIdx.y;
    const unsigned per_image = (unsigned)s.out_h * s.out_w * cv_count;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < per_image; t += gridDim.x * blockDim.x) {
        const int cv = (int)(t % cv_count);
        const unsigned p = t / cv_count;
        const int ox = (int)(p % s.out_w), oy = (int)(p / s.out_w);
        const size_t pix = (size_t)b * s.out_h * s.out_w + p;  // (b, oy, ox)
        float m[VEC], v[VEC];
#pragma unroll
        for (int j = 0; j < VEC; j++) m[j] = -INFINITY;
        for (int ky = 0; ky < s.k; ky++) {
            const int iy = oy * s.stride - s.pad + ky;
            if (iy < 0 || iy >= s.h) continue;
            for (int kx = 0; kx < s.k; kx++) {
                const int ix = ox * s.stride - s.pad + kx;
                if (ix < 0 || ix >= s.w) continue;
                pack_load<T, VEC>(x + (((size_t)b * s.h + iy) * s.w + ix) * s.c + (size_t)cv * VEC, v);
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    if (v[j] > m[j] || isnan(v[j])) m[j] = v[j];
            }
        }
        pack_store<T, VEC>(y + pix * s.c + (size_t)cv * VEC, m);
    }
}

// Max-pool backward runs in two passes. Route: for each output element, the offset (ky * k + kx) of the
// window position its gradient goes to. Gather: each input element sums dy over the covering windows
// whose route names it. The route costs one byte per output and spares the gather any look at x or y.
#define POOL_NO_ROUTE 255  // a window where no x equals y (y is NaN): its gradient goes nowhere

// y (n,out_h,out_w,c) -> route (n,out_h,out_w,c) uint8: the first window position, in row-major order,
// whose x equals y (the tie rule of core/backend_ops.def).
template <typename T, int VEC>
__global__ void maxpool_route_kernel(PoolShape s, const T *x, const T *y, unsigned char *route) {
    const int cv_count = s.c / VEC;
    const int b = blockIdx.y;
    const unsigned per_image = (unsigned)s.out_h * s.out_w * cv_count;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < per_image; t += gridDim.x * blockDim.x) {
        const int cv = (int)(t % cv_count);
        const unsigned p = t / cv_count;
        const int ox = (int)(p % s.out_w), oy = (int)(p / s.out_w);
        const size_t pix = (size_t)b * s.out_h * s.out_w + p;  // (b, oy, ox)
        float yv[VEC], v[VEC];
        pack_load<T, VEC>(y + pix * s.c + (size_t)cv * VEC, yv);
        ElemPack<unsigned char, VEC> r;
#pragma unroll
        for (int j = 0; j < VEC; j++) r.e[j] = POOL_NO_ROUTE;
        for (int ky = 0; ky < s.k; ky++) {
            const int iy = oy * s.stride - s.pad + ky;
            if (iy < 0 || iy >= s.h) continue;
            for (int kx = 0; kx < s.k; kx++) {
                const int ix = ox * s.stride - s.pad + kx;
                if (ix < 0 || ix >= s.w) continue;
                pack_load<T, VEC>(x + (((size_t)b * s.h + iy) * s.w + ix) * s.c + (size_t)cv * VEC, v);
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    if (r.e[j] == POOL_NO_ROUTE && v[j] == yv[j]) r.e[j] = (unsigned char)(ky * s.k + kx);
            }
        }
        *(ElemPack<unsigned char, VEC> *)(route + pix * s.c + (size_t)cv * VEC) = r;
    }
}

// First window index (row or column) whose window covers input index i: ceil((i + pad - k + 1) / stride).
static __device__ __forceinline__ int pool_first_window(int i, int pad, int k, int stride) {
    const int t = i + pad - k + 1;
    return t <= 0 ? 0 : (t + stride - 1) / stride;
}

// dx (n,h,w,c) = sum of dy over the windows covering each input element whose route names it, visited
// in (oy, ox) order, the order the CPU reference adds them in.
template <typename T, int VEC>
__global__ void maxpool_gather_kernel(PoolShape s, const unsigned char *route, const T *dy, T *dx) {
    const int cv_count = s.c / VEC;
    const int b = blockIdx.y;
    const unsigned per_image = (unsigned)s.h * s.w * cv_count;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < per_image; t += gridDim.x * blockDim.x) {
        const int cv = (int)(t % cv_count);
        const unsigned p = t / cv_count;
        const int ix = (int)(p % s.w), iy = (int)(p / s.w);
        const size_t pix = (size_t)b * s.h * s.w + p;  // (b, iy, ix)
        const size_t ch = (size_t)cv * VEC;
        float acc[VEC], g[VEC];
#pragma unroll
        for (int j = 0; j < VEC; j++) acc[j] = 0.0f;
        const int oy_end = min(s.out_h - 1, (iy + s.pad) / s.stride);
        const int ox_end = min(s.out_w - 1, (ix + s.pad) / s.stride);
        for (int oy = pool_first_window(iy, s.pad, s.k, s.stride); oy <= oy_end; oy++) {
            for (int ox = pool_first_window(ix, s.pad, s.k, s.stride); ox <= ox_end; ox++) {
                const size_t o = (((size_t)b * s.out_h + oy) * s.out_w + ox) * s.c + ch;
                const unsigned char here =
                    (unsigned char)((iy - (oy * s.stride - s.pad)) * s.k + (ix - (ox * s.stride - s.pad)));
                const ElemPack<unsigned char, VEC> r = *(const ElemPack<unsigned char, VEC> *)(route + o);
                bool any = false;
#pragma unroll
                for (int j = 0; j < VEC; j++) any |= r.e[j] == here;
                if (!any) continue;  // the common case: this element is not the window's max
                pack_load<T, VEC>(dy + o, g);
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    if (r.e[j] == here) acc[j] += g[j];
            }
        }
        pack_store<T, VEC>(dx + pix * s.c + ch, acc);
    }
}

// ---- max-pool backward, fast path: 3x3 windows, stride 2, pad 1 (the ResNeXt stem) ---------------------
//
// Window (m, n) covers input rows 2m-1..2m+1 and columns 2n-1..2n+1. The thread of window (m, n) and one
// 16-byte channel pack writes the input pixels whose last covering window it is, rows 2m-1, 2m x columns
// 2n-1, 2n; m runs to out_h and n to out_w (virtual windows, routing nothing) so the last row and column
// of an even-sized input are written too. Of its four pixels it needs the routed gradients of windows
// (m-1, n-1), (m-1, n), (m, n-1) and (m, n):
//   dx(2m-1, 2n-1) = R(m-1,n-1)[8] + R(m-1,n)[6] + R(m,n-1)[2] + R(m,n)[0]
//   dx(2m-1, 2n)   = R(m-1,n)[7] + R(m,n)[1]        dx(2m, 2n-1) = R(m,n-1)[5] + R(m,n)[3]
//   dx(2m, 2n)     = R(m,n)[4]
// where R(w)[ky*3+kx] is dy(w) where the window's route is (ky, kx), else +0, and each sum starts from
// 0.0f in fp32 and rounds once: the (oy, ox) order and arithmetic of the gather, since adding +0 to a sum
// that started at +0 changes no bit. A block owns a band of window rows and a tile of window columns plus
// one halo column on its left (computed, not written); it walks down the band (from one halo row above),
// keeping the row above in registers, so each x, y and dy byte comes from DRAM once (the halo excepted).
#define POOL_K3S2_MAX_THREADS 256  // a block: (tile columns + 1 halo) x channel packs
#define POOL_K3S2_BAND_STEPS 16    // window rows a block walks, about (plus one halo row)
#define POOL_K3S2_MIN_BLOCKS 3     // per SM: caps registers at 80 (unbounded it takes 100), no spills

// A 16-byte pack of 8 fp16 or bf16, or 4 fp32 channels held as four 32-bit words, so that an equality mask
// selects elements from it bit by bit.
template <typename T>
struct PackWords;

template <>
struct PackWords<__half> {
    static constexpr int per_word = 2;
    static constexpr unsigned nan = 0x7e007e00u;  // padding: equals no y, so it never takes the route
    // 0xffff in each half where a == b (IEEE: NaN equals nothing, -0 equals +0), else 0.
    static __device__ __forceinline__ unsigned equal(unsigned a, unsigned b) {
        __half2 ha, hb;
        memcpy(&ha, &a, 4);
        memcpy(&hb, &b, 4);
        return __heq2_mask(ha, hb);
    }
    static __device__ __forceinline__ void add(float *acc, unsigned w) {
        __half2 h;
        memcpy(&h, &w, 4);
        const float2 f = __half22float2(h);
        acc[0] += f.x;
        acc[1] += f.y;
    }
    static __device__ __forceinline__ unsigned round(const float *v) {
        const __half2 h = __floats2half2_rn(v[0], v[1]);
        unsigned w;
        memcpy(&w, &h, 4);
        return w;
    }
};

// bf16 widens to fp32 by a shift, so each half is summed as the fp32 it stands for. The compare is IEEE
// equality of both halves at once: the hardware's bf16 pair compare from sm_90, else the bit patterns'
// (core/bf16.h: before sm_90 bf16 compares are emulated). Comparing the widened halves one by one made the
// kernel spill (200 bytes at the 80-register cap) and run 5x slower than fp16 on an H200.
template <>
struct PackWords<__nv_bfloat16> {
    static constexpr int per_word = 2;
    static constexpr unsigned nan = 0x7fc07fc0u;
    static __device__ __forceinline__ unsigned equal(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        __nv_bfloat162 ha, hb;
        memcpy(&ha, &a, 4);
        memcpy(&hb, &b, 4);
        return __heq2_mask(ha, hb);
#else
        return bf16x2_equal_mask(a, b);
#endif
    }
    static __device__ __forceinline__ void add(float *acc, unsigned w) {
        acc[0] += __uint_as_float(w << 16);
        acc[1] += __uint_as_float(w & 0xffff0000u);
    }
    static __device__ __forceinline__ unsigned round(const float *v) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[0], v[1]);
        unsigned w;
        memcpy(&w, &h, 4);
        return w;
    }
};

template <>
struct PackWords<float> {
    static constexpr int per_word = 1;
    static constexpr unsigned nan = 0x7fc00000u;
    static __device__ __forceinline__ unsigned equal(unsigned a, unsigned b) {
        return __uint_as_float(a) == __uint_as_float(b) ? 0xffffffffu : 0u;
    }
    static __device__ __forceinline__ void add(float *acc, unsigned w) { acc[0] += __uint_as_float(w); }
    static __device__ __forceinline__ unsigned round(const float *v) { return __float_as_uint(v[0]); }
};

static __device__ __forceinline__ uint4 pack_and(uint4 a, uint4 b) {
    return make_uint4(a.x & b.x, a.y & b.y, a.z & b.z, a.w & b.w);
}

// Sums `count` routed-gradient packs in order into fp32 from 0.0f and stores the pack, rounded once.
template <typename T>
static __device__ __forceinline__ void store_routed_sum(T *dst, const uint4 *terms, int count) {
    typedef PackWords<T> W;
    float acc[4 * W::per_word];
#pragma unroll
    for (int j = 0; j < 4 * W::per_word; j++) acc[j] = 0.0f;
#pragma unroll
    for (int t = 0; t < count; t++) {
        W::add(acc + 0 * W::per_word, terms[t].x);
        W::add(acc + 1 * W::per_word, terms[t].y);
        W::add(acc + 2 * W::per_word, terms[t].z);
        W::add(acc + 3 * W::per_word, terms[t].w);
    }
    *(uint4 *)dst = make_uint4(W::round(acc + 0 * W::per_word), W::round(acc + 1 * W::per_word),
                               W::round(acc + 2 * W::per_word), W::round(acc + 3 * W::per_word));
}

// x (n,h,w,c), y and dy (n,out_h,out_w,c) -> dx (n,h,w,c), T = __half, __nv_bfloat16 or float, c a multiple
// of the pack, out_h = (h - 1) / 2 + 1 and out_w likewise. Grid: (column tiles, row bands, n); block:
// (cols + 1) x (c / pack) threads, the channel pack fastest.
template <typename T>
__global__ void __launch_bounds__(POOL_K3S2_MAX_THREADS, POOL_K3S2_MIN_BLOCKS)
    maxpool_backward_k3s2_kernel(PoolShape s, int cols, int band_steps, const T *x, const T *y, const T *dy,
                                 T *dx) {
    typedef PackWords<T> W;
    const int vec = 16 / (int)sizeof(T);
    const int cv_count = s.c / vec;
    const int cv = (int)threadIdx.x % cv_count;
    const int col = (int)threadIdx.x / cv_count;     // 0: the halo column
    const int n = (int)blockIdx.x * cols - 1 + col;  // window column, -1 .. out_w (+ tile overhang)
    const bool owner = col > 0 && n <= s.out_w;      // writes dx columns 2n-1, 2n
    const int m0 = (int)blockIdx.y * band_steps;     // first window row written
    const int m_end = min(m0 + band_steps, s.out_h + 1);
    const size_t image = blockIdx.z;
    const T *xb = x + image * s.h * s.w * s.c + cv * vec;
    const T *yb = y + image * s.out_h * s.out_w * s.c + cv * vec;
    const T *dyb = dy + image * s.out_h * s.out_w * s.c + cv * vec;
    T *dxb = dx + image * s.h * s.w * s.c + cv * vec;
    const uint4 nan4 = make_uint4(W::nan, W::nan, W::nan, W::nan);
    const uint4 zero4 = make_uint4(0, 0, 0, 0);

    // Within an image offsets fit 32 bits (pool_check_indexing). Outside it: padding, NaN.
    auto load_x = [&](int iy, int ix) -> uint4 {
        if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) return nan4;
        return __ldg((const uint4 *)(xb + ((unsigned)iy * s.w + ix) * s.c));
    };
    auto dx_at = [&](int iy, int ix) -> T * { return dxb + ((unsigned)iy * s.w + ix) * s.c; };
    auto inside = [&](int iy, int ix) { return iy >= 0 && iy < s.h && ix >= 0 && ix < s.w; };

    // The right column of this thread's own 2x2 pixels is its right neighbour's left column; the routed
    // gradients at window positions 2, 5, 8 are the right neighbour's too.
    __shared__ uint4 right_x[2][POOL_K3S2_MAX_THREADS];       // x(2m, 2n+1), x(2m+1, 2n+1)
    __shared__ uint4 right_routed[3][POOL_K3S2_MAX_THREADS];  // R(m,n)[2], [5], [8]
    const int left = (int)threadIdx.x - cv_count;

    int m = max(m0 - 1, 0);
    // Row 2m-1 of the window (its top row), then carried from the bottom row of the step before.
    uint4 top_l = load_x(2 * m - 1, 2 * n - 1), top_c = load_x(2 * m - 1, 2 * n),
          top_r = load_x(2 * m - 1, 2 * n + 1);
    uint4 above_left_8 = zero4, above_6 = zero4, above_7 = zero4;  // R(m-1,n-1)[8], R(m-1,n)[6], R(m-1,n)[7]
    for (; m < m_end; m++) {
        const uint4 mid_c = load_x(2 * m, 2 * n), mid_r = load_x(2 * m, 2 * n + 1);
        const uint4 bot_c = load_x(2 * m + 1, 2 * n), bot_r = load_x(2 * m + 1, 2 * n + 1);
        const bool window = m < s.out_h && n >= 0 && n < s.out_w;
        const unsigned o = ((unsigned)m * s.out_w + n) * s.c;
        const uint4 yv = window ? __ldg((const uint4 *)(yb + o)) : nan4;  // a virtual window routes nothing
        const uint4 g = window ? __ldg((const uint4 *)(dyb + o)) : zero4;
        uint4 mid_l = nan4, bot_l = nan4;  // the left column: the halo reads it, the rest trade for it
        if (col == 0) {
            mid_l = load_x(2 * m, 2 * n - 1);
            bot_l = load_x(2 * m + 1, 2 * n - 1);
        }
        right_x[0][threadIdx.x] = mid_r;
        right_x[1][threadIdx.x] = bot_r;
        __syncthreads();
        if (col > 0) {
            mid_l = right_x[0][left];
            bot_l = right_x[1][left];
        }

        // The route: the first position in row-major order whose x equals y, per element.
        const uint4 win[9] = {top_l, top_c, top_r, mid_l, mid_c, mid_r, bot_l, bot_c, bot_r};
        uint4 routed[9], free4 = make_uint4(~0u, ~0u, ~0u, ~0u);
#pragma unroll
        for (int k = 0; k < 9; k++) {
            const uint4 eq = make_uint4(W::equal(win[k].x, yv.x), W::equal(win[k].y, yv.y),
                                        W::equal(win[k].z, yv.z), W::equal(win[k].w, yv.w));
            const uint4 taken = pack_and(eq, free4);
            free4 = pack_and(free4, make_uint4(~eq.x, ~eq.y, ~eq.z, ~eq.w));
            routed[k] = pack_and(g, taken);
        }
        right_routed[0][threadIdx.x] = routed[2];
        right_routed[1][threadIdx.x] = routed[5];
        right_routed[2][threadIdx.x] = routed[8];
        __syncthreads();

        uint4 left_8 = zero4;
        if (col > 0) {
            const uint4 left_2 = right_routed[0][left], left_5 = right_routed[1][left];
            left_8 = right_routed[2][left];
            if (owner && m >= m0) {
                const int iy = 2 * m - 1, ix = 2 * n - 1;  // this thread's pixels: iy, iy+1 x ix, ix+1
                const uint4 t00[4] = {above_left_8, above_6, left_2, routed[0]};
                const uint4 t01[2] = {above_7, routed[1]};
                const uint4 t10[2] = {left_5, routed[3]};
                if (inside(iy, ix)) store_routed_sum<T>(dx_at(iy, ix), t00, 4);
                if (inside(iy, ix + 1)) store_routed_sum<T>(dx_at(iy, ix + 1), t01, 2);
                if (inside(iy + 1, ix)) store_routed_sum<T>(dx_at(iy + 1, ix), t10, 2);
                if (inside(iy + 1, ix + 1)) store_routed_sum<T>(dx_at(iy + 1, ix + 1), &routed[4], 1);
            }
        }
        above_left_8 = left_8, above_6 = routed[6], above_7 = routed[7];
        top_l = bot_l, top_c = bot_c, top_r = bot_r;
    }
}

// Route then gather, with one dtype and vector width.
template <typename T, int VEC>
static void maxpool_backward_launch(cudaStream_t stream, const PoolShape *s, const void *x, const void *y,
                                    const void *dy, void *dx, unsigned char *route) {
    const dim3 route_grid = pool_image_grid(s, (size_t)s->out_h * s->out_w * (s->c / VEC));
    maxpool_route_kernel<T, VEC>
        <<<route_grid, POOL_THREADS, 0, stream>>>(*s, (const T *)x, (const T *)y, route);
    CUDA_CHECK_LAUNCH();
    const dim3 gather_grid = pool_image_grid(s, (size_t)s->h * s->w * (s->c / VEC));
    maxpool_gather_kernel<T, VEC>
        <<<gather_grid, POOL_THREADS, 0, stream>>>(*s, route, (const T *)dy, (T *)dx);
    CUDA_CHECK_LAUNCH();
}

// The stem's shape with 16-byte packs: 3x3 windows, stride 2, pad 1, the output size that implies, and a
// block of at least two window columns.
static bool maxpool_k3s2_fits(const PoolShape *s, int vec) {
    return s->k == 3 && s->stride == 2 && s->pad == 1 && vec > 1 && s->out_h == (s->h - 1) / 2 + 1 &&
           s->out_w == (s->w - 1) / 2 + 1 && 2 * (s->c / vec) <= POOL_K3S2_MAX_THREADS;
}

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The fused backward: column tiles as wide as POOL_K3S2_MAX_THREADS allows, bands of about
// POOL_K3S2_BAND_STEPS window rows, both evened out so no block is left with a sliver.
template <typename T>
static void maxpool_backward_k3s2_launch(cudaStream_t stream, const PoolShape *s, const void *x,
                                         const void *y, const void *dy, void *dx) {
    pool_check_indexing(s);
    const int cv_count = s->c / (16 / (int)sizeof(T));
    const int tiles = ceil_div(s->out_w + 1, POOL_K3S2_MAX_THREADS / cv_count - 1);
    const int cols = ceil_div(s->out_w + 1, tiles);
    const int bands = ceil_div(s->out_h + 1, POOL_K3S2_BAND_STEPS);
    const int band_steps = ceil_div(s->out_h + 1, bands);
    const dim3 grid((unsigned)tiles, (unsigned)bands, (unsigned)s->n);
    maxpool_backward_k3s2_kernel<T><<<grid, (cols + 1) * cv_count, 0, stream>>>(
        *s, cols, band_steps, (const T *)x, (const T *)y, (const T *)dy, (T *)dx);
    CUDA_CHECK_LAUNCH();
}

void cuda_maxpool_forward(Backend *be, const PoolShape *s, DType dt, const void *x, void *y) {
    cudaStream_t stream = cuda_state(be)->stream;
    const int vec = pack_width(dt, s->c, {x, y});
    const dim3 blocks = pool_image_grid(s, (size_t)s->out_h * s->out_w * (s->c / vec));
    with_pack(dt, vec, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        maxpool_forward_kernel<T, decltype(pk)::vec>
            <<<blocks, POOL_THREADS, 0, stream>>>(*s, (const T *)x, (T *)y);
    });
    CUDA_CHECK_LAUNCH();
}

void cuda_maxpool_backward(Backend *be, const PoolShape *s, DType dt, const void *x, const void *y,
                           const void *dy, void *dx) {
    AMP_ASSERT(s->k * s->k < POOL_NO_ROUTE, "maxpool_backward: window %d too large for a one-byte route",
               s->k);
    cudaStream_t stream = cuda_state(be)->stream;
    const int vec = pack_width(dt, s->c, {x, y, dy, dx});
    if (maxpool_k3s2_fits(s, vec)) {
        with_pack(dt, vec, [&](auto pk) {
            maxpool_backward_k3s2_launch<typename decltype(pk)::type>(stream, s, x, y, dy, dx);
        });
        return;
    }
    // Freed right after the launches: the allocator reuses it only for work queued behind them.
    unsigned char *route = (unsigned char *)be->alloc(be, (size_t)s->n * s->out_h * s->out_w * s->c);
    with_pack(dt, vec, [&](auto pk) {
        maxpool_backward_launch<typename decltype(pk)::type, decltype(pk)::vec>(stream, s, x, y, dy, dx,
                                                                                route);
    });
    be->free(be, route);
}

// ---- global average pool ----------------------------------------------------------------------------------

// x (n,hw,c) -> y (n,c) = sum over hw / hw, summed in hw order like the CPU reference.
template <typename T, int VEC>
__global__ void avgpool_forward_kernel(int n, int hw, int c, const T *x, T *y) {
    const int cv_count = c / VEC;
    const size_t total = (size_t)n * cv_count;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        const int cv = (int)(t % cv_count);
        const int b = (int)(t / cv_count);
        const T *xb = x + (size_t)b * hw * c + (size_t)cv * VEC;
        float sum[VEC], v[VEC];
#pragma unroll
        for (int j = 0; j < VEC; j++) sum[j] = 0.0f;
        for (int p = 0; p < hw; p++) {
            pack_load<T, VEC>(xb + (size_t)p * c, v);
#pragma unroll
            for (int j = 0; j < VEC; j++) sum[j] += v[j];
        }
#pragma unroll
        for (int j = 0; j < VEC; j++) sum[j] /= (float)hw;
        pack_store<T, VEC>(y + (size_t)b * c + (size_t)cv * VEC, sum);
    }
}

// dy (n,c) -> dx (n,hw,c) = dy / hw.
template <typename T, int VEC>
__global__ void avgpool_backward_kernel(int n, int hw, int c, const T *dy, T *dx) {
    const int cv_count = c / VEC;
    const size_t total = (size_t)n * hw * cv_count;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        const int cv = (int)(t % cv_count);
        const size_t row = t / cv_count;  // b * hw + p
        const int b = (int)(row / hw);
        float g[VEC];
        pack_load<T, VEC>(dy + (size_t)b * c + (size_t)cv * VEC, g);
#pragma unroll
        for (int j = 0; j < VEC; j++) g[j] /= (float)hw;
        pack_store<T, VEC>(dx + row * c + (size_t)cv * VEC, g);
    }
}

void cuda_avgpool_forward(Backend *be, int n, int hw, int c, DType dt, const void *x, void *y) {
    cudaStream_t stream = cuda_state(be)->stream;
    const int vec = pack_width(dt, c, {x, y});
    const unsigned blocks = pool_blocks((size_t)n * (c / vec));
    with_pack(dt, vec, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        avgpool_forward_kernel<T, decltype(pk)::vec>
            <<<blocks, POOL_THREADS, 0, stream>>>(n, hw, c, (const T *)x, (T *)y);
    });
    CUDA_CHECK_LAUNCH();
}

void cuda_avgpool_backward(Backend *be, int n, int hw, int c, DType dt, const void *dy, void *dx) {
    cudaStream_t stream = cuda_state(be)->stream;
    const int vec = pack_width(dt, c, {dy, dx});
    const unsigned blocks = pool_blocks((size_t)n * hw * (c / vec));
    with_pack(dt, vec, [&](auto pk) {
        typedef typename decltype(pk)::type T;
        avgpool_backward_kernel<T, decltype(pk)::vec>
            <<<blocks, POOL_THREADS, 0, stream>>>(n, hw, c, (const T *)dy, (T *)dx);
    });
    CUDA_CHECK_LAUNCH();
}
