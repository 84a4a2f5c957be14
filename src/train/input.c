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

int input_slot_decode(TrainerInput *in, int slot, const ImageJob *jobs, const int32_t *indices,
                      const int32_t *labels, int count, int epoch, DecodeFeed *feed) {
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
        // the replacement is read into memory of its own: a stop may leave this thread inside the read
        uint8_t *read = xcalloc(bytes, 1);
        int32_t label;
        decode_feed_host_read_begin(feed);
        dataset_replace_failed(in->set, indices[k], &jobs[k], epoch, "the device decoder refused it", read,
                               &label);
        if (decode_feed_host_read_end(feed)) {  // halted meanwhile: the slot may be gone
            free(read);
            return 0;
        }
        uint8_t *row = in->repair_images[slot] + (size_t)k * bytes;
        memcpy(row, read, bytes);
        free(read);
        in->repair_labels[slot][k] = label;
        be->input_upload(be, slot, in->slot_images[slot] + (size_t)k * bytes, row, bytes);
    }
    be->input_upload(be, slot, in->slot_labels[slot], labels, (size_t)count * sizeof(int32_t));
    return 1;
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
static int decode_loader_batch(void *in, int slot, const Batch *b, DecodeFeed *feed) {
    return input_slot_decode(in, slot, b->jobs, b->indices, b->labels, b->count, b->epoch, feed);
}

// The next batch into f->next: from the loader, uploaded into the next slot, or from the decode thread.
static void feed_fetch(InputFeed *f) {
    Backend *be = f->in->be;
    if (f->decode) {
        const MicroBatch *mb = decode_feed_next(f->decode, f->waited, f->stop);
        f->has_next = mb != NULL;
        if (mb) f->next = *mb;
    } else {
        // taking a batch hands the loader's buffer of the one before back: its upload must have left it
        if (f->has_next) be->input_upload_wait(be, f->next.slot);
        const Batch *b = loader_next_unless(f->loader, f->waited, f->stop);
        f->has_next = b != NULL;
        if (b) {
            const int slot = (f->next.slot + 1) % BACKEND_INPUT_SLOTS;
            input_slot_upload(f->in, slot, b->images, b->labels, b->count);
            f->next = (MicroBatch){.count = b->count,
                                   .step_total = b->step_total,
                                   .host_images = b->images,
                                   .host_labels = b->labels,
                                   .uploaded = 1,
                                   .slot = slot};
        }
    }
    if (!f->has_next && f->stop && *f->stop) f->interrupted = 1;
}

void input_feed_start(InputFeed *f, TrainerInput *in, Loader *loader, double *waited,
                      volatile sig_atomic_t *stop) {
    *f = (InputFeed){.in = in,
                     .loader = loader,
                     .waited = waited,
                     .next = {.slot = BACKEND_INPUT_SLOTS - 1},
                     .stop = stop};
    if (in->device_decode) f->decode = decode_feed_start(in->be, loader, decode_loader_batch, in);
    feed_fetch(f);
}

void input_feed_advance(InputFeed *f) { feed_fetch(f); }

const MicroBatch *input_feed_micro(void *ctx, int k) {
    InputFeed *f = ctx;
    if (k > 0) feed_fetch(f);
    if (!f->has_next && f->interrupted) return NULL;
    AMP_ASSERT(f->has_next, "the loader ran out of batches inside a step");
    f->current = f->next;
    return &f->current;
}

void input_feed_stop(InputFeed *f) {
    const int by_signal = f->stop && *f->stop;
    if (decode_feed_stop(f->decode, by_signal) && by_signal) f->interrupted = 1;
    f->decode = NULL;
}
