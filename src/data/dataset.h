// dataset.h - the sources of training and validation samples (docs/data.md describes each).
//
// A Dataset is a random-access list of `size` samples; sample i is one image (side, side, 3) of raw uint8
// RGB bytes, HWC with the three channels of a pixel adjacent (a batch of them is NHWC), plus one int32
// label in [0, classes). `norm` says how the device normalises the bytes (pixels.h). Implementations:
//   synthetic  noise whose normalised values are N(0,1) clipped at 3.2 sigma, uniform labels, nothing to
//              learn (the throughput benchmark's data)
//   learnable  image = class template + noise; a small CNN learns it in a few hundred steps
//   cifar10    the CIFAR-10 binary files, read into memory at open; optional crop + flip augmentation
//   imagefolder  JPEGs in torchvision's ImageFolder layout, decoded and transformed in `get`
//              (image_dataset.h: torchvision's RandomResizedCrop + flip, or Resize + CenterCrop; the
//              training split at data.train_crop, the validation split at data.val_crop)
//   webdataset the same JPEGs in tar shards (webdataset.h), indexed at open, read by offset
// Sample i is a pure function of (seed, i) and, with augmentation, of (seed, epoch, i) (and of which
// repetition it is, with data.repeated_aug): every rank and thread that asks for it gets the same bits.
// Training with augmentation, TrivialAugmentWide and RandomErasing (image_augment.h, data.auto_augment and
// data.random_erase) follow the source's own crop and flip, from the same stream. `get` only reads the dataset, so the loader thread and the
// caller may call it at the same time.
#ifndef AMPTRAIN_DATASET_H
#define AMPTRAIN_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "config/config.h"
#include "core/image_job.h"
#include "core/pixels.h"
#include "data/data_rng.h"
#include "image/image_augment.h"

// CIFAR-10 per-channel statistics of the training set on [0,1] pixels (R, G, B), the usual constants.
#define CIFAR10_MEAN_R 0.4914f
#define CIFAR10_MEAN_G 0.4822f
#define CIFAR10_MEAN_B 0.4465f
#define CIFAR10_STD_R 0.2470f
#define CIFAR10_STD_G 0.2435f
#define CIFAR10_STD_B 0.2616f
#define CIFAR10_SIDE 32
#define CIFAR10_CLASSES 10
#define CIFAR10_RECORD_BYTES 3073  // 1 label byte, then 1024 R, 1024 G, 1024 B bytes (row-major planes)

typedef struct Dataset Dataset;
struct Dataset {
    const char *name;  // "synthetic", "learnable", "cifar10", "imagefolder", "webdataset"
    int size;          // samples
    int side;          // images are (side, side, 3)
    int classes;       // labels are in [0, classes)
    uint64_t seed;     // TrainConfig.seed: fixes data, templates and augmentation
    int augment;       // 1: `get` draws crop/flip from its rng (cifar10 training split only)
    PixelNorm norm;    // the normalisation of these bytes (torchvision's Normalize on [0, 1] pixels)
    ImageAugment
        extra;  // with augment: what dataset_get applies after `get` (all off unless the factory sets it)
    // What the samples are beyond the fields above, set at open (core/digest.h): cifar10 the records read;
    // imagefolder every file's path under the split folder and its label; webdataset every shard's name
    // and each sample's offset, size and label; 0 for synthetic and learnable (seed and size make them).
    uint64_t list_digest;

    // img (side, side, 3) u8; *label int32. rng: this sample's augmentation numbers
    // (data_rng_sample(rng, seed, epoch, repetition, index), see dataset_get_batch); NULL or augment == 0:
    // no augmentation.
    void (*get)(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng);
    void (*destroy)(Dataset *ds);
    void *impl;
};

// Opens the training split from the config. seed: TrainConfig.seed; model gives image_size and
// num_classes (cifar10 requires 32 and 10); the JPEG sources take their sides from data (train_crop;
// val_resize and val_crop for validation), the others are model.image_size square. cache_dir: where a source may keep what it learnt at open
// for the next start (imagefolder's file list; the trainer passes checkpoint.dir); NULL or "": nothing
// is written; a folder that does not exist yet: nothing is written now, see dataset_save_cache. Returns 0 and sets *out, or returns 2 (the CLI's exit code
// for bad input), sets *out = NULL and writes one line naming the problem (e.g. the missing or truncated
// file and its size) into err[err_cap]; the caller reports it and exits. Nothing is left allocated.
// An image split is probed: one where no sample reads and decodes is refused here (2), not at its first
// batch; the probe stops at the first sample that decodes.
int dataset_open_train(const DataConfig *data, const ModelConfig *model, long seed, const char *cache_dir,
                       Dataset **out, char *err, size_t err_cap);

// Same for the validation split (cifar10: test_batch.bin; synthetic/learnable: val_size samples drawn
// from a stream separate from the training samples). Returns 0 with *out = NULL when there is no
// validation split (synthetic/learnable with val_size 0). Validation never augments.
int dataset_open_val(const DataConfig *data, const ModelConfig *model, long seed, const char *cache_dir,
                     Dataset **out, char *err, size_t err_cap);

// A fresh run opens its data before it makes checkpoint.dir (a refused start must leave nothing there),
// so a source whose cache_dir did not exist at open kept what it learnt (imagefolder's walked file
// list); once the run has made the folder, this writes it there. Nothing for other sources, for a list
// read from or already written to the cache, or with cache_dir NULL or "". A cache that cannot be
// written is one warning, never an error.
void dataset_save_cache(const Dataset *ds, const char *cache_dir);

// One sample; see Dataset.get. With augmentation, ds->extra follows from the same rng.
void dataset_get(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng);

// count samples indices[0..count) into images (count, side, side, 3) u8 and labels (count) int32.
// With augmentation, sample indices[k] draws from the stream data_rng_sample(seed, epoch, 0, indices[k]):
// its crop, flip and augmentation depend on the epoch and the index only, not on rank, batch position or
// thread.
void dataset_get_batch(const Dataset *ds, const int32_t *indices, int count, int epoch, uint8_t *images,
                       int32_t *labels);
// The same with repetitions (sampler_block_repetitions): sample k draws from repetition repetitions[k]'s
// stream (data_rng_sample); repetitions NULL: all 0, dataset_get_batch.
void dataset_get_repeated_batch(const Dataset *ds, const int32_t *indices, const uint8_t *repetitions,
                                int count, int epoch, uint8_t *images, int32_t *labels);

// dataset_get_batch for a backend that decodes (backend_ops.def input_decode), image sources only: the same
// samples as ImageJobs (image_dataset_job: encoded bytes and the transform's geometry, nothing decoded), with
// the same per-sample numbers: the crop and flip, then ds->extra's TrivialAugmentWide op and erasing box
// (image_augment_draw, into jobs[k].augment), so decoding job k gives sample indices[k]'s pixels bitwise on
// the CPU. Each jobs[k].bytes is malloc'd (the caller frees it).
void dataset_get_job_batch(const Dataset *ds, const int32_t *indices, int count, int epoch, ImageJob *jobs,
                           int32_t *labels);
// Sample index's pixels and label in epoch after its job `failed` did not decode (image_dataset_replace,
// then ds->extra from the same stream): the replacement dataset_get_batch would have made.
void dataset_replace_failed(const Dataset *ds, int index, const ImageJob *failed, int epoch, const char *why,
                            uint8_t *img, int32_t *label);

// data.decode for this backend: 1 when be decodes the training JPEGs (Backend.input_decode; the loader
// makes ImageJobs), 0 when the loader's threads do (data.decode host; the config refuses device for a source
// that is not JPEGs).
// Returns -1 with one line in err[err_cap] when data.decode is device and be has no decoder.
int dataset_decode_on_device(const DataConfig *data, const Backend *be, char *err, size_t err_cap);

// The identity of the samples, for a checkpoint to record and a resume to compare: the digest of name,
// size, side, classes and list_digest as 16 hex digits (17 bytes with the NUL). The seed is not in it: a
// checkpoint records that by itself. Ranks compare it at start-up too (trainer_agree_data). "none" for NULL.
void dataset_digest(const Dataset *ds, char out[17]);

// Bytes in one image: side * side * 3.
size_t dataset_image_bytes(const Dataset *ds);

void dataset_close(Dataset *ds);

// ---- the sources, for callers that do not start from a config (the factories above use these) ----

// split: 0 training, 1 validation (the same pool, different samples).
Dataset *dataset_synthetic_create(int size, int side, int classes, long seed, int split);
Dataset *dataset_learnable_create(int size, int side, int classes, long seed, int split);

// dir: folder holding data_batch_1..5.bin (train) or test_batch.bin (!train). Same return and error
// convention as dataset_open_train. augment only applies to the training split.
int dataset_cifar10_open(const char *dir, int train, int augment, long seed, Dataset **out, char *err,
                         size_t err_cap);

// root: the ImageFolder root, holding train/<class>/**/*.jpg and val/<class>/**/*.jpg (imagefolder.c
// says which files count and in what order). cache_dir: the folder of the file-list cache
// (imagefolder_list.h; NULL or "": none, the tree is walked at every open; missing: the walked list
// waits for dataset_save_cache). side: output images are (side, side, 3). max_classes:
// model.num_classes, which the class folders must not exceed. Same return and error convention as
// dataset_open_train (a missing root, a split without class folders, a class folder without JPEGs,
// class folders that differ between train/ and val/, too many classes); the validation split of a root
// without val/ is no split (0, *out NULL).
int dataset_imagefolder_open(const char *root, const char *cache_dir, int train, int augment, int side,
                             int max_classes, long seed, PixelNorm norm, Dataset **out, char *err,
                             size_t err_cap);

// dir: the folder of train-*.tar and val-*.tar shards (webdataset.h says what a shard holds and in what
// order its samples count). Otherwise as dataset_imagefolder_open: labels must lie in [0, max_classes);
// the validation split of a folder without val-*.tar is no split (0, *out NULL).
int dataset_webdataset_open(const char *dir, int train, int augment, int side, int max_classes, long seed,
                            PixelNorm norm, Dataset **out, char *err, size_t err_cap);

#endif
