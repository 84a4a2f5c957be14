// cpu_backend.c - the CPU reference backend: memory with byte accounting, copies, casts, and the wiring
// of the ops (cpu_conv.c, cpu_batchnorm.c, ...) into a Backend. Host memory is the "device" memory;
// everything runs synchronously, so sync and readback_wait have nothing to wait for.
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/clock.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/half.h"
#include "image/image_job_decode.h"

typedef struct CpuState {
    size_t current_bytes;         // bytes handed out by alloc and not yet freed
    size_t peak_bytes;            // the high-water mark of current_bytes
    double marks[BACKEND_MARKS];  // seconds on a monotonic clock (timing marks)
    OpLog *capture;               // the graph being captured (cpu_graph.c), NULL when none
    Backend ops;                  // the backend's own ops while a capture has swapped in the recording ones
} CpuState;

// ---- graph capture state (cpu_graph.c records; the backend keeps) -----------------------------------

OpLog *cpu_graph_log(Backend *be) { return ((CpuState *)be->impl)->capture; }
void cpu_graph_set_log(Backend *be, OpLog *log) { ((CpuState *)be->impl)->capture = log; }
void cpu_graph_save_ops(Backend *be) { ((CpuState *)be->impl)->ops = *be; }
void cpu_graph_restore_ops(Backend *be) { *be = ((CpuState *)be->impl)->ops; }

// Each allocation carries its size in a header so free can subtract it; the union keeps the payload
// aligned like malloc's own result.
typedef union AllocHeader {
    size_t bytes;
    max_align_t align;
} AllocHeader;

// ---- scratch and dtype conversion -------------------------------------------------------------------

float *cpu_scratch(size_t n) { return xcalloc(n, sizeof(float)); }

float *cpu_floats_load(const void *src, DType dt, size_t n) {
    float *dst = xcalloc(n, sizeof(float));
    if (dt == DTYPE_F32)
        memcpy(dst, src, n * sizeof(float));
    else
        for (size_t i = 0; i < n; i++) dst[i] = dtype_load(src, dt, i);
    return dst;
}

void cpu_floats_store(void *dst, DType dt, const float *src, size_t n, int accumulate) {
    if (dt == DTYPE_F32 && !accumulate) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++)
        dtype_store(dst, dt, i, accumulate ? dtype_load(dst, dt, i) + src[i] : src[i]);
}

// ---- memory ----------------------------------------------------------------------------------------

static void *cpu_alloc(Backend *be, size_t bytes) {
    CpuState *st = be->impl;
    AllocHeader *h = malloc(sizeof(AllocHeader) + bytes);
    AMP_ASSERT(h != NULL, "cpu backend: out of host memory allocating %zu bytes", bytes);
    h->bytes = bytes;
    st->current_bytes += bytes;
    if (st->current_bytes > st->peak_bytes) st->peak_bytes = st->current_bytes;
    return h + 1;
}

static void cpu_free(Backend *be, void *ptr) {
    if (!ptr) return;
    CpuState *st = be->impl;
    AllocHeader *h = (AllocHeader *)ptr - 1;
    st->current_bytes -= h->bytes;
    free(h);
}

static void cpu_zero(Backend *be, void *ptr, size_t bytes) {
    (void)be;
    memset(ptr, 0, bytes);
}

// to_device, to_host and copy are all host-to-host on this backend; memmove tolerates any overlap.
static void cpu_copy(Backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
}

static void cpu_sync(Backend *be) { (void)be; }

static size_t cpu_peak_bytes(Backend *be) { return ((CpuState *)be->impl)->peak_bytes; }

static size_t cpu_current_bytes(Backend *be) { return ((CpuState *)be->impl)->current_bytes; }

// Host buffers for read-back are ordinary malloc memory, not counted as device memory (as with torch,
// whose pinned host buffers do not show in max_memory_allocated).
static void *cpu_host_alloc(Backend *be, size_t bytes) {
    (void)be;
    return xcalloc(1, bytes);
}

static void cpu_host_free(Backend *be, void *ptr) {
    (void)be;
    free(ptr);
}

static void cpu_readback_wait(Backend *be) { (void)be; }

// Everything has run by the time a call returns, so a mark is simply the time now.
static void cpu_mark_record(Backend *be, int slot) { ((CpuState *)be->impl)->marks[slot] = clock_seconds(); }

static float cpu_mark_elapsed_ms(Backend *be, int from, int to) {
    const CpuState *st = be->impl;
    return (float)(1e3 * (st->marks[to] - st->marks[from]));
}

// ---- input ---------------------------------------------------------------------------------------------

// Everything runs in call order, so an upload is a copy and the slot hand-overs are already in order.
static void cpu_input_upload(Backend *be, int slot, void *dst, const void *host_src, size_t bytes) {
    (void)slot;
    cpu_copy(be, dst, host_src, bytes);
}
static void cpu_input_slot_noop(Backend *be, int slot) { (void)be, (void)slot; }

// The reference decoder, one job after another (image/image_job_decode.h).
static void cpu_input_decode(Backend *be, int slot, void *dst, int count, int side, const ImageJob *jobs,
                             uint8_t *failed) {
    (void)be, (void)slot;
    const size_t bytes = (size_t)side * side * 3;
    char err[512];
    for (int i = 0; i < count; i++)
        failed[i] = (uint8_t)(image_job_decode(&jobs[i], side, (uint8_t *)dst + (size_t)i * bytes, err,
                                               sizeof err) != 0);
}

void cpu_input_normalize(Backend *be, size_t pixels, DType src_dt, const void *src, const PixelAffine *affine,
                         DType dst_dt, void *dst) {
    (void)be;
    for (size_t p = 0; p < pixels; p++)
        for (int ch = 0; ch < 3; ch++) {
            size_t i = p * 3 + ch;
            float x = src_dt == DTYPE_U8 ? (float)((const uint8_t *)src)[i] : ((const float *)src)[i];
            dtype_store(dst, dst_dt, i, x * affine->scale[ch] + affine->shift[ch]);
        }
}

// ---- casts -----------------------------------------------------------------------------------------

void cpu_cast(Backend *be, void *dst, DType dst_dt, const void *src, DType src_dt, size_t n) {
    if (dst_dt == src_dt) {
        cpu_copy(be, dst, src, n * dtype_size(dst_dt));
        return;
    }
    for (size_t i = 0; i < n; i++) dtype_store(dst, dst_dt, i, dtype_load(src, src_dt, i));
}

// ---- lifetime ----------------------------------------------------------------------------------------

static void cpu_destroy(Backend *be) {
    if (!be) return;
    free(be->impl);
    free(be);
}

Backend *cpu_backend_create(void) {
    Backend *be = xcalloc(1, sizeof(Backend));
    be->impl = xcalloc(1, sizeof(CpuState));
    be->name = "cpu";

    // The ops core/backend_ops.def marks LIST for the CPU (cpu_ops.h).
#define CPU_FILL_LIST(op) be->op = cpu_##op;
#define CPU_FILL_OWN(op)
#define CPU_FILL_NONE(op)
#define BACKEND_OP(ret, op, cpu, cuda, graph, params) CPU_FILL_##cpu(op)
#include "core/backend_ops.def"
#undef BACKEND_OP

    // The ops core/backend_ops.def marks OWN for the CPU.
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->zero = cpu_zero;
    be->to_device = cpu_copy;
    be->to_host = cpu_copy;
    be->copy = cpu_copy;
    be->upload_async = cpu_copy;
    be->sync = cpu_sync;
    be->peak_bytes = cpu_peak_bytes;
    be->current_bytes = cpu_current_bytes;
    be->host_alloc = cpu_host_alloc;
    be->host_free = cpu_host_free;
    be->readback_begin = cpu_copy;
    be->readback_wait = cpu_readback_wait;
    be->mark_record = cpu_mark_record;
    be->mark_elapsed_ms = cpu_mark_elapsed_ms;
    be->input_upload = cpu_input_upload;
    be->input_decode = cpu_input_decode;
    be->input_upload_wait = cpu_input_slot_noop;
    be->input_acquire = cpu_input_slot_noop;
    be->input_release = cpu_input_slot_noop;
    be->destroy = cpu_destroy;
    return be;
}
