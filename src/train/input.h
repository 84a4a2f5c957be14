// input.h - the training step's input: BACKEND_INPUT_SLOTS slots in backend memory where a micro-batch lands
// before the step reads it, and the loop's feed that fills them from the loader.
//
// A slot is filled on the copy stream while the step before runs: raw bytes uploaded from pinned host
// memory (input_slot_upload), or, with data.decode on the device, the loader's ImageJobs decoded by the backend
// (input_slot_decode, on the decode thread of decode_feed.h). A job the decoder refuses is replaced on the host
// as the host path would have (dataset_replace_failed) and its row uploaded over the slot's. The step then
// copies the slot into the static act.images / act.labels (input_stage), the addresses a captured graph
// reads. backend.h says which stream owns a slot when.
#ifndef AMPTRAIN_INPUT_H
#define AMPTRAIN_INPUT_H

#include <stdint.h>

#include "core/backend.h"
#include "core/image_job.h"
#include "core/pixels.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "model/activations.h"
#include "model/resnext.h"
#include "train/decode_feed.h"
#include "train/micro_batch.h"

typedef struct TrainerInput {
    Backend *be;
    const Dataset *set;  // the training set: image bytes, the replacement of refused jobs
    int batch;           // data.batch_size: samples a slot holds
    PixelAffine affine;  // the training set's normalisation of raw bytes
    int device_decode;   // data.decode on the device: the loader makes ImageJobs
    uint8_t *slot_images[BACKEND_INPUT_SLOTS];  // (batch, side, side, 3) u8, backend memory
    int32_t *slot_labels[BACKEND_INPUT_SLOTS];  // (batch), backend memory
    uint8_t *decode_failed;                     // (batch) the backend's verdicts of one input_slot_decode
    // A slot's pinned host rows and labels for refused jobs' replacements, made at its first (else NULL).
    uint8_t *repair_images[BACKEND_INPUT_SLOTS];  // (batch, side, side, 3) u8
    int32_t *repair_labels[BACKEND_INPUT_SLOTS];  // (batch)
} TrainerInput;

// Allocates the slots (backend memory) for batches of `batch` samples of set.
void input_init(TrainerInput *in, Backend *be, const Dataset *set, int batch, int device_decode);
// Frees what input_init and input_slot_decode made; a zeroed TrainerInput is fine.
void input_free(TrainerInput *in);
// Sends a host batch (pinned memory from host_alloc) up on the copy stream into slot `slot`.
void input_slot_upload(TrainerInput *in, int slot, const uint8_t *images, const int32_t *labels, int count);
// The same for a batch of the loader's ImageJobs: the backend decodes them into the slot, the jobs it
// refuses are replaced as the host path would have, and the labels follow. indices: the samples asked for,
// epoch: theirs (dataset_replace_failed). The jobs' bytes stay untouched until input_upload_wait(slot).
// On feed's thread (NULL: none) each replacement's read is a host read of the feed's (decode_feed.h): when
// the feed is halted meanwhile, returns 0 at once, the slot left unfinished; else 1.
int input_slot_decode(TrainerInput *in, int slot, const ImageJob *jobs, const int32_t *indices,
                      const int32_t *labels, int count, int epoch, DecodeFeed *feed);
// Puts micro-batch mb where the step reads it and says so as a ModelBatch: raw bytes in act->images /
// act->labels (from its slot, or uploaded through slot 0 first, or copied from backend memory); fp32 images
// (tests) are read where they are.
ModelBatch input_stage(TrainerInput *in, Activations *act, const MicroBatch *mb);

// The loop's micro-batches from the loader, one batch ahead: while step k runs, batch k+1 is already on its
// way up on the copy stream (input_slot_upload into the next slot). A loader buffer is handed back (by taking
// the next batch) only after its upload has left it. With data.decode on the device the decode thread
// (decode_feed.h) makes the batches instead, and the feed takes them from it one ahead alike.
// Every wait for a batch, for the loader's workers or for the decode thread, ends when the run's stop flag
// is set (looked at every LOADER_STOP_POLL_MS: a worker may be stuck in a read for ever): the feed is then
// interrupted, and the loader can only be abandoned (loader_abandon). With data.prefetch 0 the training
// thread reads the files itself, and that read cannot be interrupted.
typedef struct InputFeed {
    TrainerInput *in;
    Loader *loader;
    DecodeFeed *decode;           // the decode thread, or NULL: raw bytes uploaded from here
    double *waited;               // seconds spent waiting for batches are added here
    MicroBatch next;              // the batch fetched last, uploaded (or decoded) into slot next.slot
    int has_next;                 // 0 after the last batch, or when the wait for it was interrupted
    MicroBatch current;           // what input_feed_micro returned last
    volatile sig_atomic_t *stop;  // the run's stop flag (NULL: none)
    int interrupted;              // 1 once a wait ended without its batch because *stop was set
} InputFeed;

// Starts feeding from loader (owned by the caller, destroyed after input_feed_stop): the decode thread,
// if any, and the wait for the first batch.
void input_feed_start(InputFeed *f, TrainerInput *in, Loader *loader, double *waited,
                      volatile sig_atomic_t *stop);
// The MicroBatchFn of the feed (ctx = the InputFeed): the batch fetched ahead; for k > 0 it first fetches
// the next one (accumulation), and returns NULL when that wait was interrupted.
const MicroBatch *input_feed_micro(void *ctx, int k);
// After a step was launched: fetches the next step's first batch (the run stops after this step when
// that wait was interrupted).
void input_feed_advance(InputFeed *f);
// Stops the decode thread, if any; its wait for the loader, cut short while *stop is set, interrupts the
// feed too.
void input_feed_stop(InputFeed *f);

#endif
