// arena.h - one backend allocation carved into buffers by byte offset.
//
// Buffers that live for the whole step are appended in order. A short-lived buffer is placed first-fit
// at or above a floor (the end of everything still live when it is used), clear of the few other
// short-lived buffers in use at the same time; the arena grows past its appended part only when that
// region is too small. The layout is plain arithmetic, so --dry-run and the allocation agree.
#ifndef AMPTRAIN_ARENA_H
#define AMPTRAIN_ARENA_H

#include <stddef.h>

#define ARENA_ALIGN 256  // bytes; every buffer starts on this boundary (vector loads, cuDNN)

typedef struct ArenaSpan {
    size_t offset, bytes;
} ArenaSpan;

typedef struct ArenaLayout {
    size_t appended;  // end of the appended (whole-step) buffers
    size_t size;      // bytes the arena needs: the highest end of any buffer, aligned
} ArenaLayout;

// The next whole-step buffer, after every buffer appended before it.
ArenaSpan arena_append(ArenaLayout *a, size_t bytes);
// The lowest aligned offset >= floor where `bytes` overlap none of busy[0..n_busy).
ArenaSpan arena_place_above(ArenaLayout *a, size_t floor, size_t bytes, const ArenaSpan *busy, int n_busy);
// 1 when the two spans share a byte.
int arena_spans_overlap(ArenaSpan x, ArenaSpan y);

#endif
