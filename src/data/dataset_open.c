// dataset_open.c - the factory: data.source's Dataset for the training or the validation split, each opened
// split probed before the first step, and the checks of data.decode on the device. The sources themselves
// live in sources/; dataset.c holds what every Dataset shares.
#include "data/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "data/sources/image_dataset.h"
#include "data/sources/webdataset.h"
#include "image/image_augment.h"
#include "image/image_decode.h"

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

static int dataset_open_images(const DataConfig *data, const ModelConfig *model, long seed,
                               const char *cache_dir, int train, Dataset **out, char *err, size_t err_cap) {
    if (!image_decode_available()) {
        snprintf(err, err_cap,
                 "data.source %s: this amptrain was built without libjpeg-turbo, which decodes "
                 "the JPEGs (Debian: libturbojpeg0-dev; then configure and build again)",
                 data->source);
        return 2;
    }
    PixelNorm norm;
    for (int ch = 0; ch < 3; ch++) norm.mean[ch] = (float)data->mean[ch], norm.std[ch] = (float)data->std[ch];
    int side = train ? data->train_crop : data->val_crop;
    int rc = strcmp(data->source, "webdataset") == 0
                 ? dataset_webdataset_open(data->path, train, data->augment, side, model->num_classes, seed,
                                           norm, out, err, err_cap)
                 : dataset_imagefolder_open(data->path, cache_dir, train, data->augment, side,
                                            model->num_classes, seed, norm, out, err, err_cap);
    if (rc == 0 && *out) {
        image_dataset_set_crop_scale(*out, (CropScale){data->crop_scale_min, data->crop_scale_max});
        if (!train) image_dataset_set_resize(*out, data->val_resize);
        image_dataset_set_max_pixels(*out, data->max_image_pixels);
    }
    return rc;
}

// data.auto_augment and data.random_erase for a training split with augmentation; RandomErasing's bytes
// are the ones that normalise closest to 0 under the split's own normalisation.
static void dataset_set_extra(Dataset *ds, const DataConfig *data) {
    if (!ds->augment) return;
    ds->extra.ta_wide = strcmp(data->auto_augment, "ta_wide") == 0;
    ds->extra.filter = strcmp(data->auto_augment_interpolation, "bilinear") == 0 ? AUGMENT_BILINEAR
                                                                                 : AUGMENT_NEAREST;
    ds->extra.erase_p = data->random_erase;
    for (int ch = 0; ch < 3; ch++) ds->extra.erase_fill[ch] = image_erase_byte(ds->norm.mean[ch]);
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
        snprintf(
            err, err_cap,
            "data.source: unknown source '%s' (synthetic | learnable | cifar10 | imagefolder | webdataset)",
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
    snprintf(
        err, err_cap,
        "data.decode: device, but the %s backend of this build has no JPEG decoder (nvJPEG was not found when "
        "it was built; amptrain --version lists the decoders); use data.decode=host",
        be->name);
    return -1;
}

// A split where no sample reads and decodes would end the run at its first batch, or the validation split
// after a whole epoch: found when it opens instead (exit 2). The probe stops at the first sample that
// decodes, so a healthy split costs one read and one decode.
static int dataset_probe(const Dataset *ds, int train, char *err, size_t err_cap) {
    const EncodedSource *src = ds ? image_dataset_source(ds) : NULL;
    if (!src) return 0;  // generated and CIFAR-10 samples always make pixels
    char why[512] = "";
    for (int i = 0; i < src->size; i++) {
        uint8_t *bytes = NULL;
        size_t len = 0;
        int32_t label;
        if (src->read(src, i, &bytes, &len, &label, why, sizeof why) != 0) continue;
        DecodedImage img;
        int rc = label >= 0 && label < src->classes ? image_decode(bytes, len, &img, why, sizeof why) : 1;
        if (label < 0 || label >= src->classes)
            snprintf(why, sizeof why, "label %d outside [0, %d)", label, src->classes);
        free(bytes);
        if (rc == 0) {
            image_free(&img);
            return 0;
        }
    }
    snprintf(err, err_cap, "%s: none of the %d samples of the %s split can be read or decoded (the last: %s)",
             ds->name, ds->size, train ? "training" : "validation", why);
    return 2;
}

static int dataset_open_probed(const DataConfig *data, const ModelConfig *model, long seed,
                               const char *cache_dir, int train, Dataset **out, char *err, size_t err_cap) {
    int rc = dataset_open(data, model, seed, cache_dir, train, out, err, err_cap);
    if (rc == 0) rc = dataset_probe(*out, train, err, err_cap);
    if (rc != 0 && *out) dataset_close(*out), *out = NULL;
    return rc;
}

int dataset_open_train(const DataConfig *data, const ModelConfig *model, long seed, const char *cache_dir,
                       Dataset **out, char *err, size_t err_cap) {
    int rc = dataset_open_probed(data, model, seed, cache_dir, 1, out, err, err_cap);
    if (rc == 0) dataset_set_extra(*out, data);
    return rc;
}

int dataset_open_val(const DataConfig *data, const ModelConfig *model, long seed, const char *cache_dir,
                     Dataset **out, char *err, size_t err_cap) {
    return dataset_open_probed(data, model, seed, cache_dir, 0, out, err, err_cap);
}
