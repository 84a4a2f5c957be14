// decode_feed.h - the training loop's batches when the backend decodes the JPEGs (data.decode on the device):
// a thread of its own takes the loader's ImageJob batches and has the backend decode each into an input slot
// (the caller's DecodeBatchFn: input.h's input_slot_decode, which replaces the refused jobs on the host and uploads the
// labels), up to BACKEND_INPUT_SLOTS batches ahead of the step that reads them.
//
// Why a thread: input_slot_decode returns only once it knows which jobs failed, and a decoder may synchronise the
// device on the way (nvJPEG grows its buffers with cudaFree/cudaFreeHost); on the training thread either
// would hold back the launch of the next step. Here the training thread only waits, on the host, for a batch
// that is not decoded yet (counted as data wait).
//
// Slot hand-over (host side; the device side is the backend's uploaded / consumed events): the thread decodes
// batch n into slot n % BACKEND_INPUT_SLOTS once the training thread has staged batch n - SLOTS out of it
// (input_stage's input_release is issued, so input_slot_decode's wait for "consumed" waits for that release).
// decode_feed_next releases the slot of the batch it returned before: the loop's feed (input.h) stages every
// batch before it asks for the next one.
//
// Stops: the training thread's wait ends when the run's stop flag is set, the thread's wait for the loader
// when decode_feed_stop halts it, each looked at every LOADER_STOP_POLL_MS, since a loader worker may be
// stuck in a read for ever (a hung file system) and nothing would wake either wait. The thread itself reads
// files too (the replacement of a sample the decoder refused); it says so around each such read
// (decode_feed_host_read_begin / _end), and a stop by signal that finds it inside one leaves it there: the
// feed is abandoned (kept until the process exits), as a loader with a stuck worker is.
#ifndef AMPTRAIN_DECODE_FEED_H
#define AMPTRAIN_DECODE_FEED_H

#include "core/backend.h"
#include "data/loader.h"
#include "train/micro_batch.h"

typedef struct DecodeFeed DecodeFeed;

// Has the backend decode batch b's jobs into input slot `slot` (called on the feed's thread, f the feed).
// Returns 1 when the batch is in its slot, 0 when decode_feed_host_read_end said the feed was halted (the
// function then returns at once, touching the backend no more).
typedef int (*DecodeBatchFn)(void *ctx, int slot, const Batch *b, DecodeFeed *f);

// Starts the thread over loader (LOADER_JOBS, owned by the caller, which destroys it after decode_feed_stop);
// decode(ctx, ...) fills be's input slots.
DecodeFeed *decode_feed_start(Backend *be, Loader *loader, DecodeBatchFn decode, void *ctx);

// The next micro-batch, decoded into its slot (uploaded = 1), or NULL after the last one, or NULL when *stop
// (NULL: never) is set while the batch is not decoded yet. Adds the seconds it waited for the thread to
// *waited.
const MicroBatch *decode_feed_next(DecodeFeed *f, double *waited, volatile sig_atomic_t *stop);

// Around a read of files on the feed's thread inside DecodeBatchFn, into memory of the read's own (the
// thread may be left inside it): _end returns 1 when the feed has been halted meanwhile, and the caller then
// stops (DecodeBatchFn returns 0) without using what it read. f NULL: no feed, _end returns 0.
void decode_feed_host_read_begin(DecodeFeed *f);
int decode_feed_host_read_end(DecodeFeed *f);

// Stops the thread (also mid-run) and waits for its last decode to reach the device; frees the feed. With
// may_abandon (the run was stopped by a signal), a thread inside a host read is not waited for: the feed is
// abandoned, its thread left in the read. Returns 1 when the thread's wait for the loader was cut short or
// the thread was left in a read (the loader and the dataset can then only be abandoned, loader.h), else 0.
int decode_feed_stop(DecodeFeed *f, int may_abandon);

#endif
