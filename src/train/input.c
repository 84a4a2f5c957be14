// input.c - the input slots, their filling (upload, device decode and its repair) and the loop's feed
// (see input.h).
#include "train/input.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

void input_init(TrainerInput *in, Backend *be, const Dataset *set, int batch, int device_decode) {
    in->be = be, in->set = set, in->batch = batch, in->device_decode = device_decode;
    in->affine = pixel_affine_of(&set->norm);
    size_t image_bytes = (size_t)batch * dataset_image_bytes(set);
    for (int s = 0; s < BACKEND_INPUT_SLOTS; s++) {
        in->slot_images[s] = be->alloc(be, image_bytes);
        in->slot_labels[s] = be->alloc(be, (size_t)batch * sizeof(int32_t));
    }
    if (device_decode) in->decode_failed = xcalloc((size_t)batch, 1);
}

void input_free(TrainerInput *in) {
    Backend *be = in->be;
    for (int s = 0; s < BACKEND_INPUT_SLOTS; s++) {
        if (in->slot_images[s]) be->free(be, in->slot_images[s]), be->free(be, in->slot_labels[s]);
        if (in->repair_images[s]) be->host_free(be, in->repair_images[s]);
        if (in->repair_labels[s]) be->host_free(be, in->repair_labels[s]);
    }
    free(in->decode_failed);
    memset(in, 0, sizeof *in);
}

void input_slot_upload(TrainerInput *in, int slot, const uint8_t *images, const int32_t *labels, int count) {
    Backend *be = in->be;
    size_t image_bytes = (size_t)count * dataset_image_bytes(in->set);
    be->input_upload(be, slot, in->slot_images[slot], images, image_bytes);
    be->input_upload(be, slot, in->slot_labels[slot], labels, (size_t)count * sizeof(int32_t));
}

void input_slot_decode(TrainerInput *in, int slot, const ImageJob *jobs, const int32_t *indices,
                       const int32_t *labels, int count, int epoch) {
    Backend *be = in->be;
    const size_t bytes = dataset_image_bytes(in->set);
    be->input_decode(be, slot, in->slot_images[slot], count, in->set->side, jobs, in->decode_failed);
    for (int k = 0; k < count; k++) {
        if (!in->decode_failed[k]) continue;
        if (!in->repair_images[slot]) {  // the first failure of this slot: its buffers
            in->repair_images[slot] = be->host_alloc(be, (size_t)in->batch * bytes);
            in->repair_labels[slot] = be->host_alloc(be, (size_t)in->batch * sizeof(int32_t));
        }
        if (labels != in->repair_labels[slot]) {
            memcpy(in->repair_labels[slot], labels, (size_t)count * sizeof(int32_t));
            labels = in->repair_labels[slot];
        }
        uint8_t *row = in->repair_images[slot] + (size_t)k * bytes;
        dataset_replace_failed(in->set, indices[k], &jobs[k], epoch, "the device decoder refused it", row,
                               &in->repair_labels[slot][k]);
        be->input_upload(be, slot, in->slot_images[slot] + (size_t)k * bytes, row, bytes);
    }
    be->input_upload(be, slot, in->slot_labels[slot], labels, (size_t)count * sizeof(int32_t));
}

// From a slot, the compute stream takes the slot from the copy stream, copies, and hands it back.
ModelBatch input_stage(TrainerInput *in, Activations *act, const MicroBatch *mb) {
    Backend *be = in->be;
    ModelBatch b = {.images = act->images,
                    .images_dt = DTYPE_U8,
                    .affine = in->affine,
                    .labels = act->labels,
                    .n = mb->count};
    size_t image_bytes = (size_t)mb->count * dataset_image_bytes(in->set);
    size_t label_bytes = (size_t)mb->count * sizeof(int32_t);
    if (mb->host_images || mb->uploaded) {
        int slot = mb->uploaded ? mb->slot : 0;
        if (!mb->uploaded) input_slot_upload(in, slot, mb->host_images, mb->host_labels, mb->count);
        be->input_acquire(be, slot);
        be->copy(be, act->images, in->slot_images[slot], image_bytes);
        be->copy(be, act->labels, in->slot_labels[slot], label_bytes);
        be->input_release(be, slot);
        if (!mb->uploaded) be->input_upload_wait(be, slot);  // the caller may reuse its buffer on return
    } else if (mb->device_dt == DTYPE_F32) {
        b.images = mb->device_images, b.images_dt = DTYPE_F32, b.affine = pixel_affine_identity();
        b.labels = mb->device_labels;
    } else {
        be->copy(be, act->images, mb->device_images, image_bytes);
        be->copy(be, act->labels, mb->device_labels, label_bytes);
    }
    return b;
}

// ---- the loop's feed ------------------------------------------------------------------------------

// decode_feed's DecodeBatchFn: input_slot_decode on one of the loader's batches.
static void decode_loader_batch(void *in, int slot, const Batch *b) {
    input_slot_decode(in, slot, b->jobs, b->indices, b->labels, b->count, b->epoch);
}

// The next batch from the loader, uploaded into the next slot. stop: NULL inside a step (its micro-batches
// must come), the run's flag between steps.
static void feed_fetch(InputFeed *f, volatile sig_atomic_t *stop) {
    Backend *be = f->in->be;
    if (f->ahead) be->input_upload_wait(be, f->ahead_slot);
    f->ahead = loader_next_unless(f->loader, f->waited, stop);
    if (!f->ahead && stop && *stop) f->interrupted = 1;
    f->ahead_slot = (f->ahead_slot + 1) % BACKEND_INPUT_SLOTS;
    if (f->ahead)
        input_slot_upload(f->in, f->ahead_slot, f->ahead->images, f->ahead->labels, f->ahead->count);
}

void input_feed_start(InputFeed *f, TrainerInput *in, Loader *loader, double *waited,
                      volatile sig_atomic_t *stop) {
    *f = (InputFeed){.in = in,
                     .loader = loader,
                     .waited = waited,
                     .ahead_slot = BACKEND_INPUT_SLOTS - 1,
                     .stop = stop};
    if (in->device_decode)
        f->decode = decode_feed_start(in->be, loader, decode_loader_batch, in);
    else
        feed_fetch(f, NULL);
}

void input_feed_advance(InputFeed *f) {
    if (f->decode) return;  // the decode thread works ahead by itself
    feed_fetch(f, f->stop);
}

const MicroBatch *input_feed_micro(void *ctx, int k) {
    InputFeed *f = ctx;
    if (f->decode) {
        const MicroBatch *mb = decode_feed_next(f->decode, f->waited);
        AMP_ASSERT(mb, "the loader ran out of batches inside a step");
        f->current = *mb;
        return &f->current;
    }
    if (k > 0) feed_fetch(f, NULL);
    const Batch *b = f->ahead;
    AMP_ASSERT(b, "the loader ran out of batches inside a step");
    f->current = (MicroBatch){.count = b->count,
                              .step_total = b->step_total,
                              .host_images = b->images,
                              .host_labels = b->labels,
                              .uploaded = 1,
                              .slot = f->ahead_slot};
    return &f->current;
}

void input_feed_stop(InputFeed *f) {
    decode_feed_stop(f->decode);
    f->decode = NULL;
}
