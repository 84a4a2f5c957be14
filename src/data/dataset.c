// dataset.c - what every Dataset shares: sample and batch access (augmentation included), its digest,
// its cache and its end. The factory is dataset_open.c; the sources live in sources/ (synthetic.c,
// cifar10.c, and the JPEG sources imagefolder.c and webdataset.c behind image_dataset.c).
#include "data/dataset.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/digest.h"
#include "data/sources/image_dataset.h"

// ---- the interface -------------------------------------------------------------------------------

void dataset_get(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng) {
    AMP_ASSERT(index >= 0 && index < ds->size, "%s: sample %d out of range [0, %d)", ds->name, index,
               ds->size);
    ds->get(ds, index, img, label, ds->augment ? rng : NULL);
    if (ds->augment && rng) image_augment_apply(&ds->extra, img, ds->side, rng);
}

size_t dataset_image_bytes(const Dataset *ds) { return (size_t)ds->side * ds->side * 3; }

void dataset_digest(const Dataset *ds, char out[17]) {
    if (!ds) {
        snprintf(out, 17, "none");
        return;
    }
    Digest d;
    digest_init(&d);
    digest_add_string(&d, ds->name);
    const int64_t fields[] = {ds->size, ds->side, ds->classes};
    digest_add(&d, fields, sizeof fields);
    digest_add(&d, &ds->list_digest, sizeof ds->list_digest);
    digest_hex(digest_end(&d), out);
}

// Repetition `repetition` of sample index's augmentation numbers in epoch (dataset_get_batch).
static Rng sample_rng(const Dataset *ds, int epoch, int repetition, int index) {
    AMP_ASSERT(repetition == 0 || (epoch >= 0 && epoch < (1 << DATA_REPEAT_SHIFT)),
               "%s: epoch %d: repeated augmentation keys epochs below %d", ds->name, epoch,
               1 << DATA_REPEAT_SHIFT);
    Rng rng;
    data_rng_sample(&rng, ds->seed, epoch, repetition, (uint32_t)index);
    return rng;
}

void dataset_get_repeated_batch(const Dataset *ds, const int32_t *indices, const uint8_t *repetitions,
                                int count, int epoch, uint8_t *images, int32_t *labels) {
    size_t bytes = dataset_image_bytes(ds);
    for (int k = 0; k < count; k++) {
        Rng rng = sample_rng(ds, epoch, repetitions ? repetitions[k] : 0, indices[k]);
        dataset_get(ds, indices[k], images + (size_t)k * bytes, &labels[k], &rng);
    }
}

void dataset_get_batch(const Dataset *ds, const int32_t *indices, int count, int epoch, uint8_t *images,
                       int32_t *labels) {
    dataset_get_repeated_batch(ds, indices, NULL, count, epoch, images, labels);
}

void dataset_get_job_batch(const Dataset *ds, const int32_t *indices, int count, int epoch, ImageJob *jobs,
                           int32_t *labels) {
    for (int k = 0; k < count; k++) {
        Rng rng = sample_rng(ds, epoch, 0, indices[k]);
        image_dataset_job(ds, indices[k], &rng, &jobs[k], &labels[k]);
        if (ds->augment) image_augment_draw(&ds->extra, ds->side, &rng, &jobs[k].augment);
    }
}

void dataset_replace_failed(const Dataset *ds, int index, const ImageJob *failed, int epoch, const char *why,
                            uint8_t *img, int32_t *label) {
    Rng rng = sample_rng(ds, epoch, 0, index);
    image_dataset_replace(ds, index, failed, &rng, why, img, label);
    if (ds->augment) image_augment_apply(&ds->extra, img, ds->side, &rng);
}

void dataset_save_cache(const Dataset *ds, const char *cache_dir) {
    const EncodedSource *src = ds ? image_dataset_source(ds) : NULL;
    if (src && src->save_list) src->save_list(src, cache_dir);
}

void dataset_close(Dataset *ds) {
    if (ds) ds->destroy(ds);
}
