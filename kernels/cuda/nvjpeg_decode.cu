// nvjpeg_decode.cu - Backend.input_decode on CUDA (core/backend_ops.def): every ImageJob's JPEG (core/image_job.h)
// decoded by nvJPEG to interleaved RGB in device memory, then its geometry applied by two resampling kernels
// with Pillow's fixed-point taps, then its augmentation (TrivialAugmentWide's op, RandomErasing's box) by
// cuda_augment.cu's kernel. The taps come from the CPU resampler's own code (image_resample_taps) and the
// augmentation from the CPU's own ops (image/image_augment_ops.h), so given the same decoded pixels the bytes
// are the CPU reference's (image/image_job_decode.h); what differs is the decoder's rounding against
// libjpeg-turbo's.
//
// Decoders, per job:
// - nvJPEG's hardware engines, one batched call for every job they take (nvjpegDecodeBatchedSupported: baseline
//   JPEGs; progressive ones are refused), when the GPU has them (nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE));
// - libjpeg-turbo on the host (image_decode: the CPU reference's pixels, CMYK and progressive included),
//   uploaded, for the rest and for a hardware batch that failed. (nvJPEG's default backend is not used: on an
//   H200 it decoded a progressive 4:2:2 file 2 off libjpeg-turbo, where test_images_gpu allows 1.)
// A job neither decodes is reported in failed[] (libjpeg-turbo refuses it: corrupt or truncated data), and the
// caller puts a replacement in its rows.
// Chroma is upsampled with interpolation (NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION), as libjpeg-turbo's
// fancy upsampling does.
//
// Streams and memory: the decode (nvJPEG's engines, libjpeg-turbo's uploads, the taps and the augmentation's
// plans) runs on the decoder's own stream into its own device buffers (the decoded images, the horizontal
// pass's rows, the taps, the plans, the augmentation's input copies), grown when a batch needs more; the
// resampling and augmentation kernels that write the input slot run on the copy stream inside
// input_upload's hand-over (wait for the slot's "consumed" and for the decode, record "uploaded"). The caching
// allocator's blocks belong to the compute stream. nvJPEG's own buffers come from its default allocators
// (pools that never free, against cudaFree's device-wide wait, measured no difference on an H200:
// bench/log/2026-12-02.md). The trainer calls this from its decode thread (train/decode_feed.h), so a
// wait in here never holds back a step's launch.
//
// test_images_gpu compares it with the CPU reference.
#include <nvjpeg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_augment.h"
#include "kernels/cuda/cuda_internal.h"

extern "C" {
#include "image/image_decode.h"
#include "core/clock.h"
#include "image/image_resample.h"
}

#define JPEG_RESAMPLE_THREADS 256

#define NVJPEG_CHECK(expr)                                                                                   \
    do {                                                                                                     \
        nvjpegStatus_t st_ = (expr);                                                                         \
        if (st_ != NVJPEG_STATUS_SUCCESS)                                                                    \
            amp_fatal(__FILE__, __LINE__, "%s: nvJPEG status %d", #expr, (int)st_);                          \
    } while (0)

// One job's places in the decoder's buffers, for the kernels.
typedef struct JpegJobPlan {
    size_t image;  // byte offset of the decoded image (height, width, 3) u8 in the image buffer
    int width;     // its row length in pixels
    int top,
        left;    // the first row the horizontal pass reads (box.top + the vertical taps' first row), box.left
    int rows;    // rows the horizontal pass makes
    size_t tmp;  // byte offset of those rows (rows, side, 3) u8 in the row buffer
    size_t
        taps_h;  // int32 offsets in the taps buffer: horizontal bounds (side, 2) then weights (side, ksize_h)
    size_t taps_v;  // vertical bounds (side, 2), relative to the first row made, then weights (side, ksize_v)
    int ksize_h, ksize_v;
} JpegJobPlan;

// A device buffer the decoder owns, grown (never shrunk) on demand.
typedef struct JpegBuffer {
    void *ptr;
    size_t bytes;
} JpegBuffer;

struct CudaJpeg {
    nvjpegHandle_t hardware;  // NULL when the GPU has no JPEG engines
    nvjpegJpegState_t hardware_state;
    nvjpegJpegStream_t parsed;  // header parsing for the hardware's support check
    int hardware_batch;         // the batch size hardware_state was initialised for (0: none)
    JpegBuffer images, rows, taps, plans;
    JpegBuffer augment_work, augment_inputs;  // cuda_augment_launch's work and scratch
    cudaStream_t stream;    // the decode and the uploads into the buffers above (see cuda_input_decode)
    cudaEvent_t decoded;    // the batch's images, taps and plans are on the device
    cudaEvent_t resampled;  // the last batch's kernels are done with these buffers (see cuda_input_decode)
    int log;                // AMPTRAIN_DECODE_LOG=1 (see cuda_input_decode)
};

// Grows b to at least `bytes` (with a quarter more, so that batches of slightly larger images do not grow it
// again). cudaFree waits for the whole device; it happens in the first batches only, on the trainer's decode
// thread, and it also means the buffer exists before nvJPEG's engines write into it (they do not wait in
// stream order, see cuda_input_decode).
static void jpeg_buffer_reserve(JpegBuffer *b, size_t bytes) {
    if (bytes <= b->bytes) return;
    bytes += bytes / 4;
    if (b->ptr) CUDA_CHECK(cudaFree(b->ptr));
    CUDA_CHECK(cudaMalloc(&b->ptr, bytes));
    b->bytes = bytes;
}

static CudaJpeg *jpeg_create(void) {
    CudaJpeg *j = (CudaJpeg *)xcalloc(1, sizeof(CudaJpeg));
    j->log = log_env_flag("AMPTRAIN_DECODE_LOG");
    CUDA_CHECK(cudaEventCreateWithFlags(&j->resampled, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&j->decoded, cudaEventDisableTiming));
    CUDA_CHECK(cudaStreamCreateWithFlags(&j->stream, cudaStreamNonBlocking));
    if (nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION,
                       &j->hardware) == NVJPEG_STATUS_SUCCESS) {
        NVJPEG_CHECK(nvjpegJpegStateCreate(j->hardware, &j->hardware_state));
        NVJPEG_CHECK(nvjpegJpegStreamCreate(j->hardware, &j->parsed));
    } else {
        j->hardware = NULL;  // no JPEG engines: libjpeg-turbo decodes every job
    }
    return j;
}

void cuda_jpeg_destroy(CudaBackend *cb) {
    CudaJpeg *j = cb->jpeg;
    if (!j) return;
    if (j->hardware) {
        NVJPEG_CHECK(nvjpegJpegStreamDestroy(j->parsed));
        NVJPEG_CHECK(nvjpegJpegStateDestroy(j->hardware_state));
        NVJPEG_CHECK(nvjpegDestroy(j->hardware));
    }
    JpegBuffer *buffers[] = {&j->images, &j->rows, &j->taps, &j->plans, &j->augment_work, &j->augment_inputs};
    for (int i = 0; i < 6; i++)
        if (buffers[i]->ptr) CUDA_CHECK(cudaFree(buffers[i]->ptr));
    CUDA_CHECK(cudaEventDestroy(j->resampled));
    CUDA_CHECK(cudaEventDestroy(j->decoded));
    CUDA_CHECK(cudaStreamDestroy(j->stream));
    free(j);
    cb->jpeg = NULL;
}

// ---- the resampling kernels (image_resample.c's arithmetic, one output byte per thread) ------------------

// Pillow's clip8: the rounded fixed-point sum as a byte.
static __device__ __forceinline__ uint8_t jpeg_clip8(int32_t sum) {
    const int32_t v = sum >> RESAMPLE_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

// grid (blocks over the most rows * side * 3 of any job, jobs): job blockIdx.y's horizontal pass, its rows
// (rows, side, 3) u8 into the row buffer.
__global__ void jpeg_resample_rows_kernel(const JpegJobPlan *plans, int side, const uint8_t *images,
                                          const int32_t *taps, uint8_t *rows) {
    const JpegJobPlan p = plans[blockIdx.y];
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)p.rows * side * 3) return;
    const int c = (int)(e % 3), x = (int)(e / 3 % side), y = (int)(e / 3 / side);
    const int32_t *bounds = taps + p.taps_h,
                  *weights = taps + p.taps_h + 2 * (size_t)side + (size_t)x * p.ksize_h;
    const uint8_t *src = images + p.image + ((size_t)(p.top + y) * p.width + p.left + bounds[2 * x]) * 3 + c;
    int32_t sum = 1 << (RESAMPLE_BITS - 1);
    for (int j = 0; j < bounds[2 * x + 1]; j++) sum += (int32_t)src[(size_t)j * 3] * weights[j];
    rows[p.tmp + e] = jpeg_clip8(sum);
}

// grid (blocks over side * side * 3, jobs): job blockIdx.y's vertical pass into its input (side, side, 3) u8.
__global__ void jpeg_resample_columns_kernel(const JpegJobPlan *plans, int side, const uint8_t *rows,
                                             const int32_t *taps, uint8_t *out) {
    const JpegJobPlan p = plans[blockIdx.y];
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x, row_bytes = (size_t)side * 3;
    if (e >= (size_t)side * row_bytes) return;
    const int y = (int)(e / row_bytes);
    const size_t col = e % row_bytes;
    const int32_t *bounds = taps + p.taps_v,
                  *weights = taps + p.taps_v + 2 * (size_t)side + (size_t)y * p.ksize_v;
    const uint8_t *src = rows + p.tmp + (size_t)bounds[2 * y] * row_bytes + col;
    int32_t sum = 1 << (RESAMPLE_BITS - 1);
    for (int j = 0; j < bounds[2 * y + 1]; j++) sum += (int32_t)src[(size_t)j * row_bytes] * weights[j];
    out[(size_t)blockIdx.y * side * row_bytes + e] = jpeg_clip8(sum);
}

// ---- planning on the host ------------------------------------------------------------------------------

static size_t jpeg_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

// Appends a pass's taps (bounds, then weights) to the host taps array at *used; returns their offset.
static size_t jpeg_taps_append(const ResampleTaps *t, int count, int32_t *host, size_t *used) {
    const size_t at = *used;
    for (int i = 0; i < 2 * count; i++) host[at + i] = t->bounds[i];
    memcpy(host + at + 2 * (size_t)count, t->weights, (size_t)count * t->ksize * sizeof(int32_t));
    *used += 2 * (size_t)count + (size_t)count * t->ksize;
    return at;
}

// Every job's plan, its taps in host_taps (grown as needed); returns the bytes of decoded images, and sets
// *row_bytes and *most_rows.
static size_t jpeg_plan(const ImageJob *jobs, int count, int side, JpegJobPlan *plans, int32_t **host_taps,
                        size_t *taps_used, size_t *row_bytes, int *most_rows) {
    size_t image = 0, rows = 0, capacity = 0;
    *taps_used = 0, *most_rows = 0;
    for (int i = 0; i < count; i++) {
        const ImageGeometry *g = &jobs[i].geometry;
        AMP_ASSERT(g->win.height == side && g->win.width == side,
                   "image job: window %dx%d for inputs of side %d", g->win.height, g->win.width, side);
        ResampleTaps th, tv;
        image_resample_taps(g->box.width, g->out_w, g->win.left, side, g->mirror, &th);
        image_resample_taps(g->box.height, g->out_h, g->win.top, side, 0, &tv);
        const int first = tv.bounds[0], last = tv.bounds[2 * (side - 1)] + tv.bounds[2 * (side - 1) + 1];
        for (int y = 0; y < side; y++) tv.bounds[2 * y] -= first;  // rows relative to the first one made
        const size_t need = *taps_used + 4 * (size_t)side + (size_t)side * (th.ksize + tv.ksize);
        if (need > capacity) {
            capacity = 2 * need;
            *host_taps = (int32_t *)realloc(*host_taps, capacity * sizeof(int32_t));
            AMP_ASSERT(*host_taps, "image jobs: out of memory for %zu taps", capacity);
        }
        JpegJobPlan *p = &plans[i];
        p->image = image;
        p->width = jobs[i].width;
        p->top = g->box.top + first, p->left = g->box.left, p->rows = last - first;
        p->tmp = rows;
        p->ksize_h = th.ksize, p->ksize_v = tv.ksize;
        p->taps_h = jpeg_taps_append(&th, side, *host_taps, taps_used);
        p->taps_v = jpeg_taps_append(&tv, side, *host_taps, taps_used);
        image += jpeg_align((size_t)jobs[i].width * jobs[i].height * 3);
        rows += jpeg_align((size_t)p->rows * side * 3);
        if (p->rows > *most_rows) *most_rows = p->rows;
        image_resample_taps_free(&th), image_resample_taps_free(&tv);
    }
    *row_bytes = rows;
    return image;
}

// ---- decoding -------------------------------------------------------------------------------------------

// nvJPEG decodes a stream cut short without an error (measured: the hardware engines return success and
// pixels for a file cut in half), where libjpeg-turbo refuses it ("premature end of data"). A stream that does
// not end with the end-of-image marker therefore goes to libjpeg-turbo, whose verdict is the reference's.
// (Entropy data corrupted in the middle of a stream that still ends with its marker is not caught here.)
static int jpeg_ends_with_eoi(const ImageJob *job) {
    return job->len >= 4 && job->bytes[job->len - 2] == 0xFF && job->bytes[job->len - 1] == 0xD9;
}

// Job i's decoded image as nvJPEG's interleaved RGB destination.
static nvjpegImage_t jpeg_destination(const CudaJpeg *j, const ImageJob *job, const JpegJobPlan *p) {
    nvjpegImage_t d;
    memset(&d, 0, sizeof d);
    d.channel[0] = (unsigned char *)j->images.ptr + p->image;
    d.pitch[0] = (size_t)job->width * 3;
    return d;
}

// The jobs the hardware engines take, decoded in one batched call; decoded[i] = 1 for each. A batch the
// engines fail on is left to libjpeg-turbo.
static void jpeg_decode_hardware(CudaJpeg *j, cudaStream_t stream, const ImageJob *jobs, int count,
                                 const JpegJobPlan *plans, uint8_t *decoded) {
    if (!j->hardware) return;
    const unsigned char **data = (const unsigned char **)xcalloc((size_t)count, sizeof *data);
    size_t *lengths = (size_t *)xcalloc((size_t)count, sizeof *lengths);
    nvjpegImage_t *dest = (nvjpegImage_t *)xcalloc((size_t)count, sizeof *dest);
    int *which = (int *)xcalloc((size_t)count, sizeof *which), n = 0;
    for (int i = 0; i < count; i++) {
        int unsupported = 1;
        if (!jpeg_ends_with_eoi(&jobs[i]) ||
            nvjpegJpegStreamParseHeader(j->hardware, jobs[i].bytes, jobs[i].len, j->parsed) !=
                NVJPEG_STATUS_SUCCESS ||
            nvjpegDecodeBatchedSupported(j->hardware, j->parsed, &unsupported) != NVJPEG_STATUS_SUCCESS ||
            unsupported)
            continue;
        data[n] = jobs[i].bytes, lengths[n] = jobs[i].len, dest[n] = jpeg_destination(j, &jobs[i], &plans[i]);
        which[n++] = i;
    }
    if (n > 0 && j->hardware_batch != n)
        j->hardware_batch = nvjpegDecodeBatchedInitialize(j->hardware, j->hardware_state, n, 1,
                                                          NVJPEG_OUTPUT_RGBI) == NVJPEG_STATUS_SUCCESS
                                ? n
                                : 0;
    if (n > 0 && j->hardware_batch == n) {
        if (nvjpegDecodeBatched(j->hardware, j->hardware_state, data, lengths, dest, stream) ==
            NVJPEG_STATUS_SUCCESS)
            for (int k = 0; k < n; k++) decoded[which[k]] = 1;
        else
            j->hardware_batch = 0;  // the docs ask for a fresh initialisation after a failed batch
    }
    free(data), free(lengths), free(dest), free(which);
}

// Job i by libjpeg-turbo on the host (the CPU reference's decoder), uploaded; 0, or 1 when it refuses the job.
static int jpeg_decode_on_host(cudaStream_t stream, const ImageJob *job, unsigned char *dest) {
    DecodedImage img;
    char err[512];
    if (image_decode(job->bytes, job->len, &img, err, sizeof err) != 0) return 1;
    AMP_ASSERT(img.width == job->width && img.height == job->height,
               "image job: header says %dx%d, decoded %dx%d", job->width, job->height, img.width, img.height);
    // From pageable memory: returns once the bytes are staged, so img may go at once.
    CUDA_CHECK(
        cudaMemcpyAsync(dest, img.rgb, (size_t)img.width * img.height * 3, cudaMemcpyHostToDevice, stream));
    image_free(&img);
    return 0;
}

// AMPTRAIN_DECODE_LOG=1: one line per batch on stderr with the host time of each phase (the wait for the last
// batch and the planning, the hardware engines' call, libjpeg-turbo's jobs, the rest up to the kernels' launch),
// to see where a decode beside the training step spends its time.
void cuda_input_decode(Backend *be, int slot, void *dst, int count, int side, const ImageJob *jobs,
                       uint8_t *failed) {
    CudaBackend *cb = cuda_state(be);
    CUDA_CHECK(
        cudaSetDevice(cb->device));  // the trainer's decode thread starts on device 0 whatever the rank's GPU
    if (!cb->jpeg) cb->jpeg = jpeg_create();
    CudaJpeg *j = cb->jpeg;
    const int log = j->log;
    const double t0 = log ? clock_seconds() : 0;
    JpegJobPlan *plans = (JpegJobPlan *)xcalloc((size_t)(count > 0 ? count : 1), sizeof *plans);
    int32_t *host_taps = NULL;
    size_t taps_used = 0, row_bytes = 0;
    int most_rows = 0;
    const size_t image_bytes =
        jpeg_plan(jobs, count, side, plans, &host_taps, &taps_used, &row_bytes, &most_rows);
    CudaAugmentJob *work = (CudaAugmentJob *)xcalloc((size_t)(count > 0 ? count : 1), sizeof *work);
    const int augmented = cuda_augment_plan(jobs, count, side, work);
    jpeg_buffer_reserve(&j->images, image_bytes);
    jpeg_buffer_reserve(&j->rows, row_bytes);
    jpeg_buffer_reserve(&j->taps, taps_used * sizeof(int32_t));
    jpeg_buffer_reserve(&j->plans, (size_t)count * sizeof *plans);
    jpeg_buffer_reserve(&j->augment_work, (size_t)augmented * sizeof *work);
    jpeg_buffer_reserve(&j->augment_inputs, (size_t)augmented * side * side * 3);
    // nvJPEG's hardware engines write their output when the call is made, not in stream order (torchcodec
    // found it on H100s, nvJPEG 12.3-13.2): the host waits until the last batch's kernels are done with the
    // decoded images before the engines are called.
    CUDA_CHECK(cudaEventSynchronize(j->resampled));

    // The decode fills the decoder's own buffers on its own stream, which waits for nothing; only the
    // resampling kernels, which write the slot, wait for the slot's "consumed" on the copy stream. (That alone
    // does not shorten the engines' call beside the step: bench/log/2026-12-02.md.)
    const double t1 = log ? clock_seconds() : 0;
    uint8_t *decoded = (uint8_t *)xcalloc((size_t)(count > 0 ? count : 1), 1);
    jpeg_decode_hardware(j, j->stream, jobs, count, plans, decoded);
    const double t2 = log ? clock_seconds() : 0;
    int on_host = 0;
    for (int i = 0; i < count; i++) {
        failed[i] = 0;
        if (decoded[i]) continue;
        on_host++;
        unsigned char *dest = jpeg_destination(j, &jobs[i], &plans[i]).channel[0];
        failed[i] = (uint8_t)(jpeg_decode_on_host(j->stream, &jobs[i], dest) != 0);
    }
    const double t3 = log ? clock_seconds() : 0;

    cudaStream_t stream = cb->copy_stream;
    cuda_input_slot_claim(cb, slot);
    if (count > 0) {
        CUDA_CHECK(cudaMemcpyAsync(j->taps.ptr, host_taps, taps_used * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, j->stream));
        CUDA_CHECK(cudaMemcpyAsync(j->plans.ptr, plans, (size_t)count * sizeof *plans, cudaMemcpyHostToDevice,
                                   j->stream));
        if (augmented > 0)
            CUDA_CHECK(cudaMemcpyAsync(j->augment_work.ptr, work, (size_t)augmented * sizeof *work,
                                       cudaMemcpyHostToDevice, j->stream));
        CUDA_CHECK(cudaEventRecord(j->decoded, j->stream));
        CUDA_CHECK(cudaStreamWaitEvent(stream, j->decoded, 0));
        const size_t most_row_bytes = (size_t)most_rows * side * 3, out_bytes = (size_t)side * side * 3;
        const dim3 rows_grid((unsigned)((most_row_bytes + JPEG_RESAMPLE_THREADS - 1) / JPEG_RESAMPLE_THREADS),
                             (unsigned)count);
        const dim3 out_grid((unsigned)((out_bytes + JPEG_RESAMPLE_THREADS - 1) / JPEG_RESAMPLE_THREADS),
                            (unsigned)count);
        jpeg_resample_rows_kernel<<<rows_grid, JPEG_RESAMPLE_THREADS, 0, stream>>>(
            (const JpegJobPlan *)j->plans.ptr, side, (const uint8_t *)j->images.ptr,
            (const int32_t *)j->taps.ptr, (uint8_t *)j->rows.ptr);
        CUDA_CHECK_LAUNCH();
        jpeg_resample_columns_kernel<<<out_grid, JPEG_RESAMPLE_THREADS, 0, stream>>>(
            (const JpegJobPlan *)j->plans.ptr, side, (const uint8_t *)j->rows.ptr,
            (const int32_t *)j->taps.ptr, (uint8_t *)dst);
        CUDA_CHECK_LAUNCH();
        cuda_augment_launch((const CudaAugmentJob *)j->augment_work.ptr, augmented, side, (uint8_t *)dst,
                            (uint8_t *)j->augment_inputs.ptr, stream);
    }
    CUDA_CHECK(cudaEventRecord(j->resampled, stream));
    cuda_input_slot_filled(cb, slot);
    if (log)
        fprintf(stderr,
                "decode: %d jobs (%d on the host): wait and plan %.2f ms, engines %.2f ms, host %.2f ms, "
                "launch %.2f ms\n",
                count, on_host, 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2),
                1e3 * (clock_seconds() - t3));
    free(plans), free(host_taps), free(decoded), free(work);
}
