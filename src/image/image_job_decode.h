// image_job_decode.h - the reference decoder of an ImageJob (core/image_job.h), on the CPU: libjpeg-turbo
// decodes the part of the image the geometry reads (image_decode_region; the whole image when the box is all
// of it), then Pillow's resize, window and flip (image_geometry_apply), then the job's augmentation
// (image_augment_run). The image dataset's `get` decodes every sample through it (image_dataset.c; its jobs
// carry no augmentation, dataset_get applies it), the CPU backend's input_decode runs it on jobs from
// dataset_get_job_batch, and a device decoder is tested against it.
#ifndef AMPTRAIN_IMAGE_JOB_DECODE_H
#define AMPTRAIN_IMAGE_JOB_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/image_job.h"

// out (side, side, 3) u8; the job's window must be side x side. 0, or 1 with one line in err and out
// untouched (what image_decode refuses: a corrupt or truncated stream whose header parsed).
int image_job_decode(const ImageJob *job, int side, uint8_t *out, char *err, size_t err_cap);

#endif
