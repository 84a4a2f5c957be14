// dataset.c - the factory, batch assembly, and the two generated sources (synthetic, learnable).
//
// Both generated sources draw their per-pixel randomness from one pool of N(0,1) floats made at open:
// sample i is the window pool[offset_i .. offset_i + side*side*3) with offset_i (and label_i) drawn from
// the stream keyed (DATA_STREAM_SAMPLE, split, i). Drawing 150k fresh normals per ImageNet-sized image
// would make the host, not the GPU, the bottleneck of the throughput benchmark; a window copy costs a
// memcpy. Within one image the values are independent N(0,1); across images they overlap, which no
// model can exploit to predict a label drawn independently of the offset.
//
// Both write bytes: value v becomes round(127.5 + v * k) clipped to [0, 255], with norm mean 0.5 and std
// k / 255, so the device's normalisation gives back v to within 1/(2k) (unclipped values). k is 40 for
// synthetic (clipped beyond 3.2 sigma) and 8 for learnable, whose values have a std of about 5.1.
#include "dataset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../core/log.h"
#include "image_dataset.h"
#include "image_decode.h"
#include "webdataset.h"

#define POOL_OFFSETS (1 << 18)   // distinct windows; the pool is image_bytes + POOL_OFFSETS values
#define LEARNABLE_NOISE 5.0f  // noise sigma relative to the templates' std of 1
#define SYNTHETIC_STEPS 40.0f  // bytes per unit of value (k above)
#define LEARNABLE_STEPS 8.0f

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

// ---- synthetic: N(0,1) images, uniform labels ------------------------------------------------------

typedef struct Generated {
    int split;
    float *pool;     // learnable: (image_bytes + POOL_OFFSETS) float32, N(0,1)
    uint8_t *pool_bytes;  // synthetic: the same pool as bytes (see the top of the file)
    float *colour;   // learnable: (classes, 3) float32, per-class mean colour
    float *rows;     // learnable: (classes, side, 3) float32, per-class wave along y
    float *cols;     // learnable: (classes, side, 3) float32, per-class wave along x
} Generated;

// Label and pool offset of sample i: the only per-sample randomness of the generated sources.
static size_t generated_sample(const Dataset *ds, int index, int32_t *label) {
    const Generated *g = ds->impl;
    Rng rng;
    data_rng_seed(&rng, ds->seed, DATA_STREAM_SAMPLE, (uint32_t)g->split, (uint32_t)index);
    *label = (int32_t)rng_below(&rng, (uint32_t)ds->classes);
    return rng_below(&rng, POOL_OFFSETS);
}

// v -> round(127.5 + v * steps) clipped to a byte.
static uint8_t quantise(float v, float steps) {
    float q = 127.5f + v * steps;
    return q <= 0.0f ? 0 : q >= 255.0f ? 255 : (uint8_t)(q + 0.5f);
}

static PixelNorm quantised_norm(float steps) {
    PixelNorm n;
    for (int ch = 0; ch < 3; ch++) n.mean[ch] = 0.5f, n.std[ch] = steps / 255.0f;
    return n;
}

static void synthetic_get(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng) {
    (void)rng;
    const Generated *g = ds->impl;
    memcpy(img, g->pool_bytes + generated_sample(ds, index, label), dataset_image_bytes(ds));
}

static void generated_destroy(Dataset *ds) {
    Generated *g = ds->impl;
    free(g->pool);
    free(g->pool_bytes);
    free(g->colour);
    free(g->rows);
    free(g->cols);
    free(g);
    free(ds);
}

static Dataset *generated_create(const char *name, int size, int side, int classes, long seed, int split) {
    AMP_ASSERT(size > 0 && side > 0 && classes > 0, "%s: size %d, side %d, classes %d must be positive",
               name, size, side, classes);
    Dataset *ds = xcalloc(1, sizeof *ds);
    Generated *g = xcalloc(1, sizeof *g);
    ds->name = name;
    ds->size = size;
    ds->side = side;
    ds->classes = classes;
    ds->seed = (uint64_t)seed;
    ds->destroy = generated_destroy;
    ds->impl = g;
    g->split = split;
    size_t pool_len = dataset_image_bytes(ds) + POOL_OFFSETS;
    g->pool = xcalloc(pool_len, sizeof(float));
    Rng rng;
    data_rng_seed(&rng, ds->seed, DATA_STREAM_POOL, 0, 0);
    for (size_t i = 0; i < pool_len; i++) g->pool[i] = rng_normal(&rng);
    return ds;
}

Dataset *dataset_synthetic_create(int size, int side, int classes, long seed, int split) {
    Dataset *ds = generated_create("synthetic", size, side, classes, seed, split);
    Generated *g = ds->impl;
    size_t pool_len = dataset_image_bytes(ds) + POOL_OFFSETS;
    g->pool_bytes = xcalloc(pool_len, 1);
    for (size_t i = 0; i < pool_len; i++) g->pool_bytes[i] = quantise(g->pool[i], SYNTHETIC_STEPS);
    free(g->pool);
    g->pool = NULL;
    ds->norm = quantised_norm(SYNTHETIC_STEPS);
    ds->get = synthetic_get;
    return ds;
}

// ---- learnable: image = template[label] + 0.5 * N(0,1) -----------------------------------------------
//
// template[c](y, x, ch) = colour[c][ch] + rows[c][y][ch] + cols[c][x][ch], where colour ~ N(0, 1/3) and
// rows/cols are sines a*sin(2*pi*f*t/side + phase) with f in {1,2,3}, a = sqrt(2/3) (variance 1/3 over
// whole periods). So templates have std about 1, are smooth (a CNN with global pooling sees both the
// colour and the waves), and cost O(classes * side) floats, not O(classes * side^2): 1000 ImageNet
// classes would otherwise need 600 MB.

static void learnable_get(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng) {
    (void)rng;
    const Generated *g = ds->impl;
    const float *noise = g->pool + generated_sample(ds, index, label);
    int side = ds->side, c = *label;
    const float *colour = g->colour + (size_t)c * 3;
    const float *rows = g->rows + (size_t)c * side * 3;
    const float *cols = g->cols + (size_t)c * side * 3;
    for (int y = 0; y < side; y++) {
        for (int x = 0; x < side; x++) {
            size_t p = ((size_t)y * side + x) * 3;
            for (int ch = 0; ch < 3; ch++)
                img[p + ch] = quantise(colour[ch] + rows[y * 3 + ch] + cols[x * 3 + ch] + LEARNABLE_NOISE * noise[p + ch],
                                       LEARNABLE_STEPS);
        }
    }
}

// wave (side, 3): one sine per channel with its own frequency and phase.
static void learnable_fill_wave(float *wave, int side, Rng *rng) {
    const double amplitude = 0.816496580927726;  // sqrt(2/3)
    for (int ch = 0; ch < 3; ch++) {
        int freq = 1 + (int)rng_below(rng, 3);
        double phase = 6.283185307179586 * rng_uniform(rng);
        for (int t = 0; t < side; t++)
            wave[t * 3 + ch] = (float)(amplitude * sin(6.283185307179586 * freq * t / side + phase));
    }
}

Dataset *dataset_learnable_create(int size, int side, int classes, long seed, int split) {
    Dataset *ds = generated_create("learnable", size, side, classes, seed, split);
    Generated *g = ds->impl;
    ds->get = learnable_get;
    ds->norm = quantised_norm(LEARNABLE_STEPS);
    g->colour = xcalloc((size_t)classes * 3, sizeof(float));
    g->rows = xcalloc((size_t)classes * side * 3, sizeof(float));
    g->cols = xcalloc((size_t)classes * side * 3, sizeof(float));
    // Templates depend on (seed, class) only, so the training and validation splits share them.
    for (int c = 0; c < classes; c++) {
        Rng rng;
        data_rng_seed(&rng, ds->seed, DATA_STREAM_TEMPLATE, 0, (uint32_t)c);
        for (int ch = 0; ch < 3; ch++) g->colour[c * 3 + ch] = 0.577350269f * rng_normal(&rng);
        learnable_fill_wave(g->rows + (size_t)c * side * 3, side, &rng);
        learnable_fill_wave(g->cols + (size_t)c * side * 3, side, &rng);
    }
    return ds;
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
    if (rc == 0 && *out) image_dataset_set_crop_scale(*out, (CropScale){data->crop_scale_min, data->crop_scale_max});
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
