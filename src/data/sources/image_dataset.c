// image_dataset.c - Dataset over an EncodedSource: read, decode, transform (see image_dataset.h).
//
// `get` and image_dataset_job take the same path: the file read, its header parsed, the transform's geometry
// drawn (image_attempt_job); `get` then decodes that job with the reference decoder (image_job_decode), so a
// backend's decoder fed the jobs sees exactly what `get` would have made.
// Shared state is read-only in `get` except two atomics: the replacement counter and one "already
// named" flag per sample, so the loader's workers call `get` at once without a lock. Decoded pixels live
// in per-call buffers.
#include "data/sources/image_dataset.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/log.h"
#include "image/image_decode.h"
#include "image/image_job_decode.h"
#include "image/image_transform.h"

typedef struct ImageSet {
    EncodedSource *src;
    atomic_long skipped;  // calls of `get` that handed out a replacement
    atomic_uchar *named;  // (size) 1 once sample i's failure was logged by this process
    CropScale crop;       // RandomResizedCrop's scale range (training with augmentation)
    int resize;           // Resize's shorter side before CenterCrop (validation, or augment off)
    long max_pixels;      // data.max_image_pixels: a header claiming more is refused
} ImageSet;

// Names sample `index` in the log, the first time it fails in this process only. The rank that read it
// says so (log_warn_local): the sampler gives each sample of an epoch to one rank, so a bad file that
// only rank 3 reads would never be named by a rank-0-only warning, and no file is named by every rank.
static void image_report(ImageSet *s, int index, const char *why) {
    if (atomic_exchange(&s->named[index], 1)) return;
    char what[512];
    if (s->src->describe)
        s->src->describe(s->src, index, what, sizeof what);
    else
        snprintf(what, sizeof what, "sample %d", index);
    log_warn_local("%s: %s: %s; replaced by the next readable sample (counted as skipped)", s->src->name,
                   what, why);
}

// One attempt at sample `at`: pixels (img) or a job; 0, or 1 with err filled and rng as it was.
typedef int (*ImageAttempt)(const Dataset *ds, int at, Rng *rng, void *out, int32_t *label, char *err,
                            size_t err_cap);

// Tries samples first, first+1, ... (mod size) until an attempt succeeds, each failure named once; returns the
// sample that succeeded. Ends the run when no sample of the split succeeds.
static int image_attempt_from(const Dataset *ds, int first, ImageAttempt attempt, Rng *rng, void *out,
                              int32_t *label) {
    ImageSet *s = ds->impl;
    char err[512] = "";
    int at = first;
    while (attempt(ds, at, rng, out, label, err, sizeof err) != 0) {
        image_report(s, at, err);
        at = (at + 1) % ds->size;
        AMP_ASSERT(at != first,
                   "%s: none of the %d samples of this split can be read or decoded (the last: %s)",
                   s->src->name, ds->size, err);
    }
    return at;
}

// Counts one replacement (once per request that could not use the sample it asked for).
static void image_count_replacement(const Dataset *ds) {
    atomic_fetch_add(&((ImageSet *)ds->impl)->skipped, 1);
}

// A job: the bytes read, the header parsed (nothing decoded), the transform's geometry drawn from rng
// (training) or fixed (validation); rng untouched on failure. out: ImageJob, its bytes malloc'd.
static int image_attempt_job(const Dataset *ds, int at, Rng *rng, void *out, int32_t *label, char *err,
                             size_t err_cap) {
    const ImageSet *s = ds->impl;
    const EncodedSource *src = s->src;
    ImageJob *job = out;
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (src->read(src, at, &bytes, &len, label, err, err_cap) != 0) return 1;
    int width, height;
    int rc = image_decode_size(bytes, len, &width, &height, err, err_cap);
    if (rc == 0 && (long)width * height > s->max_pixels) {
        snprintf(err, err_cap,
                 "%d x %d = %ld pixels, more than data.max_image_pixels %ld (a decompression bomb?)", width,
                 height, (long)width * height, s->max_pixels);
        rc = 1;
    }
    if (rc == 0 && (*label < 0 || *label >= src->classes)) {
        snprintf(err, err_cap, "label %d outside [0, %d)", *label, src->classes);
        rc = 1;
    }
    if (rc != 0) {
        free(bytes);
        return 1;
    }
    *job = (ImageJob){bytes,
                      len,
                      at,
                      width,
                      height,
                      rng ? image_train_geometry(image_train_crop_draw(width, height, s->crop, rng), ds->side)
                          : image_val_geometry(width, height, s->resize, ds->side),
                      {0}};  // the augmentation is drawn after the job (dataset_get_job_batch)
    return 0;
}

// Pixels: the sample's job (image_attempt_job) decoded by the reference decoder, which reads only the crop's
// region in training (image_job_decode). out (side, side, 3) u8; rng as it was on failure, so the replacement
// sample draws what it would have drawn in the failed one's place.
static int image_attempt_pixels(const Dataset *ds, int at, Rng *rng, void *out, int32_t *label, char *err,
                                size_t err_cap) {
    Rng start = rng ? *rng : (Rng){{0}};
    ImageJob job;
    if (image_attempt_job(ds, at, rng, &job, label, err, err_cap) != 0) return 1;
    int rc = image_job_decode(&job, ds->side, out, err, err_cap);
    free((void *)job.bytes);
    if (rc != 0 && rng) *rng = start;
    return rc;
}

static void image_get(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng) {
    if (image_attempt_from(ds, index, image_attempt_pixels, rng, img, label) != index)
        image_count_replacement(ds);
}

void image_dataset_job(const Dataset *ds, int index, Rng *rng, ImageJob *job, int32_t *label) {
    AMP_ASSERT(ds->get == image_get, "%s: not an image dataset", ds->name);
    AMP_ASSERT(index >= 0 && index < ds->size, "%s: sample %d out of range [0, %d)", ds->name, index,
               ds->size);
    if (image_attempt_from(ds, index, image_attempt_job, ds->augment ? rng : NULL, job, label) != index)
        image_count_replacement(ds);
}

void image_dataset_replace(const Dataset *ds, int index, const ImageJob *failed, Rng *rng, const char *why,
                           uint8_t *img, int32_t *label) {
    AMP_ASSERT(ds->get == image_get, "%s: not an image dataset", ds->name);
    AMP_ASSERT(index >= 0 && index < ds->size, "%s: sample %d out of range [0, %d)", ds->name, index,
               ds->size);
    image_report(ds->impl, failed->sample, why);
    AMP_ASSERT(ds->size > 1, "%s: its only sample cannot be decoded (%s)", ds->name, why);
    // Where `get` would have gone on from the failed sample; counted once (a job that was already a
    // replacement was counted when it was made).
    image_attempt_from(ds, (failed->sample + 1) % ds->size, image_attempt_pixels, ds->augment ? rng : NULL,
                       img, label);
    if (failed->sample == index) image_count_replacement(ds);
}

static void image_destroy(Dataset *ds) {
    ImageSet *s = ds->impl;
    s->src->destroy(s->src);
    free(s->named);
    free(s);
    free(ds);
}

Dataset *image_dataset_create(EncodedSource *src, int side, int train, int augment, long seed,
                              PixelNorm norm) {
    AMP_ASSERT(src->size > 0 && src->classes > 0 && side > 0, "%s: %d samples, %d classes, side %d",
               src->name, src->size, src->classes, side);
    ImageSet *s = xcalloc(1, sizeof *s);
    s->src = src;
    s->crop = CROP_SCALE_TORCHVISION;
    s->resize = image_val_resize(side);
    s->max_pixels = IMAGE_DEFAULT_MAX_PIXELS;
    atomic_init(&s->skipped, 0);
    s->named = xcalloc((size_t)src->size, sizeof *s->named);
    Dataset *ds = xcalloc(1, sizeof *ds);
    ds->name = src->name;
    ds->size = src->size;
    ds->side = side;
    ds->classes = src->classes;
    ds->seed = (uint64_t)seed;
    ds->augment = train && augment;
    ds->norm = norm;
    ds->list_digest = src->list_digest;
    ds->get = image_get;
    ds->destroy = image_destroy;
    ds->impl = s;
    return ds;
}

void image_dataset_set_crop_scale(Dataset *ds, CropScale scale) {
    AMP_ASSERT(ds->get == image_get, "%s: not an image dataset", ds->name);
    AMP_ASSERT(scale.min > 0 && scale.min <= scale.max && scale.max <= 1,
               "crop scale (%g, %g) outside 0 < min <= max <= 1", scale.min, scale.max);
    ((ImageSet *)ds->impl)->crop = scale;
}

void image_dataset_set_resize(Dataset *ds, int resize) {
    AMP_ASSERT(ds->get == image_get, "%s: not an image dataset", ds->name);
    AMP_ASSERT(resize >= ds->side, "resize %d below the crop %d", resize, ds->side);
    ((ImageSet *)ds->impl)->resize = resize;
}

void image_dataset_set_max_pixels(Dataset *ds, long max_pixels) {
    AMP_ASSERT(ds->get == image_get, "%s: not an image dataset", ds->name);
    AMP_ASSERT(max_pixels > 0 && max_pixels <= IMAGE_MAX_PIXELS, "max image pixels %ld outside [1, %ld]",
               max_pixels, IMAGE_MAX_PIXELS);
    ((ImageSet *)ds->impl)->max_pixels = max_pixels;
}

long image_dataset_skipped(const Dataset *ds) {
    return ds->get == image_get ? atomic_load(&((ImageSet *)ds->impl)->skipped) : 0;
}

const EncodedSource *image_dataset_source(const Dataset *ds) {
    return ds->get == image_get ? ((ImageSet *)ds->impl)->src : NULL;
}
