// bench_decode.c - times Backend.input_decode (decode + RandomResizedCrop + flip of JPEG ImageJobs into an
// input slot) on the CUDA backend, beside the CPU reference on one thread, through the dataset's job API.
//
//   build/bench_decode ROOT [batch] [batches] [side]   ROOT: an ImageFolder (ROOT/train/<class>/*.jpg)
//
// Per batch of the training split (augmentation on, epoch 0, samples in order): the jobs are made on this
// thread (files read, headers parsed, crops drawn: dataset_get_job_batch), then decoded; the first batch is a
// warm-up. Prints one line per backend: img/s of input_decode alone (CUDA: until input_upload_wait returns),
// img/s of making the jobs, and the failed jobs. Exit 1 when the CUDA backend or its decoder is missing.
#include <stdio.h>
#include <stdlib.h>

#include "core/backend.h"
#include "data/dataset.h"
#include "data/image_job_decode.h"
#include "kernels/cuda_backend.h"
#include "train/metrics.h"

// Times `batches` batches (after one warm-up batch) of be's input_decode; prints the rates.
static void time_backend(const char *name, Backend *be, const Dataset *ds, int batch, int batches, int side) {
    const size_t bytes = (size_t)batch * side * side * 3;
    void *slot = be->alloc(be, bytes);
    ImageJob *jobs = calloc((size_t)batch, sizeof *jobs);
    int32_t *indices = calloc((size_t)batch, sizeof *indices), *labels = calloc((size_t)batch, sizeof *labels);
    uint8_t *failed = calloc((size_t)batch, 1);
    double make_s = 0, decode_s = 0;
    long failures = 0;
    for (int b = 0; b <= batches; b++) {
        for (int k = 0; k < batch; k++) indices[k] = (int)(((long)b * batch + k) % ds->size);
        double t0 = metrics_now();
        dataset_get_job_batch(ds, indices, batch, 0, jobs, labels);
        double t1 = metrics_now();
        be->input_decode(be, 0, slot, batch, side, jobs, failed);
        be->input_upload_wait(be, 0);
        double t2 = metrics_now();
        for (int k = 0; k < batch && b == 0; k++) {  // the first refused job, named with the reference's reason
            char err[512] = "";
            uint8_t *pixels = malloc(bytes / batch);
            if (failed[k] && image_job_decode(&jobs[k], side, pixels, err, sizeof err) != 0)
                printf("%s: job %d (sample %d, %dx%d, %zu bytes) refused; the CPU reference says: %s\n", name, k,
                       jobs[k].sample, jobs[k].width, jobs[k].height, jobs[k].len, err);
            free(pixels);
            if (failed[k]) break;
        }
        for (int k = 0; k < batch; k++) free((void *)jobs[k].bytes);
        if (b == 0) continue;  // warm-up: the decoder's handles and buffers
        make_s += t1 - t0, decode_s += t2 - t1;
        for (int k = 0; k < batch; k++) failures += failed[k];
    }
    const double images = (double)batch * batches;
    printf("%-28s input_decode %9.1f img/s | making the jobs %9.1f img/s on one thread | %ld failed jobs\n", name,
           images / decode_s, images / make_s, failures);
    be->free(be, slot);
    free(jobs), free(indices), free(labels), free(failed);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_decode ROOT [batch 256] [batches 8] [side 224]\n");
        return 2;
    }
    const int batch = argc > 2 ? atoi(argv[2]) : 256, batches = argc > 3 ? atoi(argv[3]) : 8;
    const int side = argc > 4 ? atoi(argv[4]) : 224;
    const PixelNorm imagenet = {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
    Dataset *ds;
    char err[512] = "";
    if (dataset_imagefolder_open(argv[1], NULL, 1, 1, side, 1000, 1, imagenet, &ds, err, sizeof err) != 0) {
        fprintf(stderr, "bench_decode: %s\n", err);
        return 2;
    }
    printf("input_decode, %s: %d images, batch %d, %d timed batches, side %d\n", argv[1], ds->size, batch, batches,
           side);
    char why[256] = "";
    Backend *gpu = cuda_backend_create(0, 0, 0, 0, why, sizeof why);
    int rc = 0;
    if (!gpu || !gpu->input_decode) {
        fprintf(stderr, "bench_decode: no CUDA decoder: %s\n", gpu ? "this build has no nvJPEG" : why);
        rc = 1;
    } else {
        time_backend("cuda (nvJPEG + kernels)", gpu, ds, batch, batches, side);
    }
    Backend *cpu = cpu_backend_create();
    time_backend("cpu reference, 1 thread", cpu, ds, batch, batches < 2 ? batches : 2, side);
    cpu->destroy(cpu);
    if (gpu) gpu->destroy(gpu);
    dataset_close(ds);
    return rc;
}
