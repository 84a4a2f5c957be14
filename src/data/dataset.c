// dataset.c - the factory that opens data.source, and batch assembly over any Dataset.
//
// The sources themselves live in sources/: synthetic.c (synthetic, learnable), cifar10.c, and the JPEG
// sources (imagefolder.c, webdataset.c) behind image_dataset.c.
#include "data/dataset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "data/sources/image_dataset.h"
#include "image/image_decode.h"
#include "data/sources/webdataset.h"

// ---- the interface -------------------------------------------------------------------------------

void dataset_get(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng) {
    AMP_ASSERT(index >= 0 && index < ds->size, "%s: sample %d out of range [0, %d)", ds->name, index,
               ds->size);
    ds->get(ds, index, img, label, ds->augment ? rng : NULL);
}

size_t dataset_image_bytes(const Dataset *ds) { return (size_t)ds->side * ds->side * 3; }

// Sample index's augmentation numbers in epoch (dataset_get_batch).
static Rng sample_rng(const Dataset *ds, int epoch, int index) {
    Rng rng;
    data_rng_seed(&rng, ds->seed, DATA_STREAM_AUGMENT, (uint32_t)epoch, (uint32_t)index);
    return rng;
}

void dataset_get_batch(const Dataset *ds, const int32_t *indices, int count, int epoch, uint8_t *images,
                       int32_t *labels) {
    size_t bytes = dataset_image_bytes(ds);
    for (int k = 0; k < count; k++) {
        Rng rng = sample_rng(ds, epoch, indices[k]);
        dataset_get(ds, indices[k], images + (size_t)k * bytes, &labels[k], &rng);
    }
}

void dataset_get_job_batch(const Dataset *ds, const int32_t *indices, int count, int epoch, ImageJob *jobs,
                           int32_t *labels) {
    for (int k = 0; k < count; k++) {
        Rng rng = sample_rng(ds, epoch, indices[k]);
        image_dataset_job(ds, indices[k], &rng, &jobs[k], &labels[k]);
    }
}

void dataset_replace_failed(const Dataset *ds, int index, const ImageJob *failed, int epoch, const char *why,
                            uint8_t *img, int32_t *label) {
    Rng rng = sample_rng(ds, epoch, index);
    image_dataset_replace(ds, index, failed, &rng, why, img, label);
}

void dataset_save_cache(const Dataset *ds, const char *cache_dir) {
    const EncodedSource *src = ds ? image_dataset_source(ds) : NULL;
    if (src && src->save_list) src->save_list(src, cache_dir);
}

void dataset_close(Dataset *ds) {
    if (ds) ds->destroy(ds);
}

// ---- the factory ---------------------------------------------------------------------------------

// The JPEG sources: libjpeg-turbo decodes them, data.mean/std normalise them.
// The webdataset source as a Dataset (webdataset.c only indexes and reads the shards).
int dataset_webdataset_open(const char *dir, int train, int augment, int side, int max_classes, long seed,
                            PixelNorm norm, Dataset **out, char *err, size_t err_cap) {
    *out = NULL;
    EncodedSource *src;
    int rc = webdataset_open(dir, train ? "train" : "val", max_classes, !train, &src, err, err_cap);
    if (rc) return rc;
    if (!src) {
        log_info("webdataset: no val-*.tar shards in %s: no evaluation", dir);
        return 0;
    }
    *out = image_dataset_create(src, side, train, augment, seed, norm);
    return 0;
}

static int dataset_open_images(const DataConfig *data, const ModelConfig *model, long seed, const char *cache_dir,
                               int train, Dataset **out, char *err, size_t err_cap) {
    if (!image_decode_available()) {
        snprintf(err, err_cap, "data.source %s: this amptrain was built without libjpeg-turbo, which decodes "
                 "the JPEGs (Debian: libturbojpeg0-dev; then configure and build again)", data->source);
        return 2;
    }
    PixelNorm norm;
    for (int ch = 0; ch < 3; ch++) norm.mean[ch] = (float)data->mean[ch], norm.std[ch] = (float)data->std[ch];
    int rc = strcmp(data->source, "webdataset") == 0
                 ? dataset_webdataset_open(data->path, train, data->augment, model->image_size, model->num_classes,
                                           seed, norm, out, err, err_cap)
                 : dataset_imagefolder_open(data->path, cache_dir, train, data->augment, model->image_size,
                                            model->num_classes, seed, norm, out, err, err_cap);
    if (rc == 0 && *out) {
        image_dataset_set_crop_scale(*out, (CropScale){data->crop_scale_min, data->crop_scale_max});
        image_dataset_set_max_pixels(*out, data->max_image_pixels);
    }
    return rc;
}

static int dataset_open(const DataConfig *data, const ModelConfig *model, long seed, const char *cache_dir,
                        int train, Dataset **out, char *err, size_t err_cap) {
    *out = NULL;
    int generated_size = train ? data->train_size : data->val_size;
    if (strcmp(data->source, "cifar10") == 0) {
        if (model->image_size != CIFAR10_SIDE || model->num_classes != CIFAR10_CLASSES) {
            snprintf(err, err_cap,
                     "data.source cifar10 needs model.image_size %d and model.num_classes %d (got %d and %d)",
                     CIFAR10_SIDE, CIFAR10_CLASSES, model->image_size, model->num_classes);
            return 2;
        }
        return dataset_cifar10_open(data->path, train, train && data->augment, seed, out, err, err_cap);
    }
    if (strcmp(data->source, "imagefolder") == 0 || strcmp(data->source, "webdataset") == 0)
        return dataset_open_images(data, model, seed, cache_dir, train, out, err, err_cap);
    int synthetic = strcmp(data->source, "synthetic") == 0;
    if (!synthetic && strcmp(data->source, "learnable") != 0) {
        snprintf(err, err_cap, "data.source: unknown source '%s' (synthetic | learnable | cifar10 | imagefolder | webdataset)",
                 data->source);
        return 2;
    }
    if (generated_size == 0 && !train) return 0;
    if (generated_size <= 0) {
        snprintf(err, err_cap, "data.%s: %d samples; a %s split needs at least 1",
                 train ? "train_size" : "val_size", generated_size, train ? "training" : "validation");
        return 2;
    }
    int split = train ? 0 : 1;
    *out = synthetic
               ? dataset_synthetic_create(generated_size, model->image_size, model->num_classes, seed, split)
               : dataset_learnable_create(generated_size, model->image_size, model->num_classes, seed, split);
    return 0;
}

int dataset_decode_on_device(const DataConfig *data, const Backend *be, char *err, size_t err_cap) {
    if (strcmp(data->decode, "device") != 0) return 0;  // the config allows device for the JPEG sources only
    if (be->input_decode) return 1;
    snprintf(err, err_cap,
             "data.decode: device, but the %s backend of this build has no JPEG decoder (nvJPEG was not found when "
             "it was built; amptrain --version lists the decoders); use data.decode=host",
             be->name);
    return -1;
}

int dataset_open_train(const DataConfig *data, const ModelConfig *model, long seed, const char *cache_dir,
                       Dataset **out, char *err, size_t err_cap) {
    return dataset_open(data, model, seed, cache_dir, 1, out, err, err_cap);
}

int dataset_open_val(const DataConfig *data, const ModelConfig *model, long seed, const char *cache_dir,
                     Dataset **out, char *err, size_t err_cap) {
    return dataset_open(data, model, seed, cache_dir, 0, out, err, err_cap);
}
