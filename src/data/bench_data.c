// bench_data.c - the input pipeline's throughput (see bench_data.h). Timings go to stdout, never to tests.
#include "data/bench_data.h"

#include <stdlib.h>

#include "core/clock.h"
#include "core/cpus.h"
#include "data/sources/image_dataset.h"
#include "image/image_decode.h"
#include "data/loader.h"
#include "data/sampler.h"

#define DECODE_SAMPLES 64       // distinct files in the decode-only loop
#define DECODE_MIN_SECONDS 1.0  // the loop repeats them until at least this long has passed

// Decodes per second on this thread, over the first samples' bytes (read beforehand, so no I/O is in
// it); 0 when nothing decodes. *megapixels: the mean size of the decoded images.
static double decode_rate(const EncodedSource *src, double *megapixels) {
    int n = src->size < DECODE_SAMPLES ? src->size : DECODE_SAMPLES, have = 0;
    uint8_t *bytes[DECODE_SAMPLES];
    size_t len[DECODE_SAMPLES];
    char err[512];
    for (int i = 0; i < n; i++) {
        int32_t label;
        if (src->read(src, i, &bytes[have], &len[have], &label, err, sizeof err) == 0) have++;
    }
    long decoded = 0;
    double pixels = 0, start = clock_seconds(), elapsed = 0;
    while (have > 0 && elapsed < DECODE_MIN_SECONDS) {
        for (int i = 0; i < have; i++) {
            DecodedImage img;
            if (image_decode(bytes[i], len[i], &img, err, sizeof err) != 0) continue;
            decoded++;
            pixels += (double)img.width * img.height;
            image_free(&img);
        }
        elapsed = clock_seconds() - start;
        if (decoded == 0) break;
    }
    for (int i = 0; i < have; i++) free(bytes[i]);
    *megapixels = decoded ? pixels / decoded / 1e6 : 0;
    return decoded ? decoded / elapsed : 0;
}

// Decodes batch n into device buffer n % BACKEND_INPUT_SLOTS (as the trainer cycles its input slots) and waits
// until it is there; returns the jobs the decoder refused.
static int decode_on_device(Backend *be, void *const slots[BACKEND_INPUT_SLOTS], long n, const Batch *b,
                            int side, uint8_t *failed) {
    int slot = (int)(n % BACKEND_INPUT_SLOTS), refused = 0;
    be->input_decode(be, slot, slots[slot], b->count, side, b->jobs, failed);
    be->input_upload_wait(be, slot);  // before the next loader_next releases the jobs' bytes
    for (int k = 0; k < b->count; k++) refused += failed[k];
    return refused;
}

void bench_data_run(const Config *cfg, const Dataset *ds, Backend *decoder, int world, int rank, int batches,
                    FILE *out) {
    // the same threads the training loop would get on this host with one rank
    int threads = cfg->data.workers > 0 ? cfg->data.workers : loader_auto_workers(cpus_usable(), 1);
    Sampler s;
    sampler_init(&s, ds->size, cfg->data.batch_size, world, rank, 1, cfg->data.drop_last, cfg->train.seed);
    int per_epoch = sampler_steps_per_epoch(&s);
    int epochs = per_epoch > 0 ? (batches + 1 + per_epoch - 1) / per_epoch : 1;
    Loader *l = loader_create(ds, &s, decoder ? LOADER_JOBS : LOADER_PIXELS, 2 * threads, threads, 0, 0,
                              epochs, decoder);
    void *slots[BACKEND_INPUT_SLOTS] = {0};
    uint8_t *failed = NULL;
    long refused = 0;
    if (decoder) {
        for (int k = 0; k < BACKEND_INPUT_SLOTS; k++)
            slots[k] = decoder->alloc(decoder, (size_t)cfg->data.batch_size * dataset_image_bytes(ds));
        failed = calloc((size_t)cfg->data.batch_size, 1);
    }
    const Batch *b = loader_next(l, NULL);  // untimed: the threads start and the caches fill
    if (decoder && b) decode_on_device(decoder, slots, 0, b, ds->side, failed);  // and the decoder's buffers
    long images = 0;
    int done = 0;
    double start = clock_seconds();
    while (done < batches && b && (b = loader_next(l, NULL))) {
        if (decoder) refused += decode_on_device(decoder, slots, done + 1, b, ds->side, failed);
        images += b->count;
        done++;
    }
    double elapsed = clock_seconds() - start;
    loader_destroy(l);
    for (int k = 0; k < BACKEND_INPUT_SLOTS && decoder; k++) decoder->free(decoder, slots[k]);
    free(failed);
    sampler_free(&s);
    const EncodedSource *src = image_dataset_source(ds);
    double megapixels = 0, decode = src ? decode_rate(src, &megapixels) : 0;
    if (!out) return;
    fprintf(
        out,
        "{\"bench\":\"data\",\"source\":\"%s\",\"decode\":\"%s\",\"side\":%d,\"augment\":%s,\"batch\":%d,\"batches\":%d,"
        "\"images\":%ld,\"seconds\":%.4f,\"threads\":%d,\"img_per_s\":%.1f,\"img_per_s_per_thread\":%.1f,"
        "\"decode_img_per_s_per_core\":%.1f,\"decode_megapixels\":%.3f,\"skipped\":%ld,\"device_refused\":%ld}\n",
        ds->name, decoder ? decoder->name : "host", ds->side, ds->augment ? "true" : "false",
        cfg->data.batch_size, done, images, elapsed, threads, elapsed > 0 ? images / elapsed : 0,
        elapsed > 0 ? images / elapsed / threads : 0, decode, megapixels, image_dataset_skipped(ds), refused);
    fflush(out);
}
