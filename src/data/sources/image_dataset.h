// image_dataset.h - the Dataset of the JPEG sources (imagefolder, webdataset): encoded samples read by
// index from an EncodedSource, decoded (image_decode.h) and transformed (image_transform.h) in `get`.
//
// Training split with data.augment: RandomResizedCrop + horizontal flip from the sample's rng (keyed
// (seed, epoch, index), so the same images, crops and flips on any rank count); otherwise (validation,
// or augment off) Resize + CenterCrop (image_dataset_set_resize). A sample that cannot be read or decoded is counted, named once in
// the log by the rank that read it, and replaced by the next readable index (i+1, i+2, ... mod size)
// with that sample's label and the original sample's rng: deterministic, so every rank and thread
// agrees, and the run never stops for it. Only a split where no sample at all decodes ends the run (exit 1).
#ifndef AMPTRAIN_IMAGE_DATASET_H
#define AMPTRAIN_IMAGE_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/image_job.h"
#include "data/dataset.h"
#include "image/image_transform.h"

// Encoded samples a source can read by index. Sources fill the struct (calloc'd) and hand it over.
typedef struct EncodedSource {
    int size, classes;
    // Reads sample i's encoded bytes (malloc'd into *bytes, *len) and its label; thread-safe (pread).
    // 0, or 1 with one line in err (an unreadable file/shard member).
    int (*read)(const struct EncodedSource *src, int index, uint8_t **bytes, size_t *len, int32_t *label,
                char *err, size_t err_cap);
    void (*destroy)(struct EncodedSource *src);
    void *impl;
    char name[64];         // "imagefolder", "webdataset"
    uint64_t list_digest;  // the samples' identity (Dataset.list_digest), set by the source at open
    // Optional (NULL: "sample i"): writes what a user calls sample i (its file, its shard member) into
    // out, for the log line that names a sample that does not decode.
    void (*describe)(const struct EncodedSource *src, int index, char *out, size_t out_cap);
    // Optional (NULL: nothing to save): writes into cache_dir what the open learnt for the next start but
    // could not keep because cache_dir did not exist yet (imagefolder's file list); see dataset_save_cache.
    void (*save_list)(const struct EncodedSource *src, const char *cache_dir);
} EncodedSource;

// Takes ownership of src. A sample that cannot be read or decoded is counted, named in the log by the
// rank that read it (log_warn_local: once per sample and process, with the rank in front) and replaced
// by the next readable index (i+1, i+2, ... mod size): deterministic, so every rank and thread agrees;
// never stops the run. side: output images are (side, side, 3) u8.
Dataset *image_dataset_create(EncodedSource *src, int side, int train, int augment, long seed,
                              PixelNorm norm);

// For a backend that decodes (backend_ops.def input_decode): sample `index` as an ImageJob (core/image_job.h),
// its encoded bytes malloc'd into job->bytes (the caller frees them), its size from the header and its
// transform's geometry, drawn from rng exactly as `get` draws it (rng: as dataset_get's, used only with
// augmentation), so image_job_decode makes bitwise `get`'s pixels of it. Nothing is decoded: a sample whose
// file cannot be read, whose header does not parse or whose label is out of range is replaced as `get`
// replaces it; one whose compressed data turns out corrupt is the decoder's to report (image_dataset_replace).
void image_dataset_job(const Dataset *ds, int index, Rng *rng, ImageJob *job, int32_t *label);

// Sample index's pixels after its job `failed` (image_dataset_job's for index) did not decode (why: the
// decoder's message): the job's sample named once in the log, then the next readable sample after it with
// index's rng, as `get` goes on from a sample it cannot decode; index counted as replaced once. img (side,
// side, 3) u8.
void image_dataset_replace(const Dataset *ds, int index, const ImageJob *failed, Rng *rng, const char *why,
                           uint8_t *img, int32_t *label);

// RandomResizedCrop's scale range for this dataset's training transform (default torchvision's (0.08, 1));
// set once, after creation, before any `get`.
void image_dataset_set_crop_scale(Dataset *ds, CropScale scale);
// The Resize of the shorter side before CenterCrop(side) (default image_val_resize(side)); at least side; set
// once, after creation, before any `get`.
void image_dataset_set_resize(Dataset *ds, int resize);

// The most pixels a sample's header may claim (data.max_image_pixels, in [1, IMAGE_MAX_PIXELS]; default
// IMAGE_DEFAULT_MAX_PIXELS); a sample claiming more is replaced like an unreadable one, before any
// pixel buffer is made for it. Set once, after creation, before any `get`.
void image_dataset_set_max_pixels(Dataset *ds, long max_pixels);

// Samples replaced so far (each replacement counts, so a bad file read every epoch counts every epoch).
long image_dataset_skipped(const Dataset *ds);

// The source behind an image dataset (for --bench-data's decode-only rate), or NULL for other datasets.
const EncodedSource *image_dataset_source(const Dataset *ds);

#endif
