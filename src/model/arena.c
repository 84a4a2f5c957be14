// arena.c - offsets inside one allocation (arena.h).
#include "model/arena.h"

static size_t align_up(size_t v) { return (v + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

static void note_end(ArenaLayout *a, ArenaSpan s) {
    size_t end = align_up(s.offset + s.bytes);
    if (end > a->size) a->size = end;
}

int arena_spans_overlap(ArenaSpan x, ArenaSpan y) {
    if (x.bytes == 0 || y.bytes == 0) return 0;
    return x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
}

ArenaSpan arena_append(ArenaLayout *a, size_t bytes) {
    ArenaSpan s = {align_up(a->appended), bytes};
    a->appended = align_up(s.offset + bytes);
    note_end(a, s);
    return s;
}

ArenaSpan arena_place_above(ArenaLayout *a, size_t floor, size_t bytes, const ArenaSpan *busy, int n_busy) {
    ArenaSpan s = {align_up(floor), bytes};
    // Each pass either finds no overlap or moves past the end of a busy span: at most n_busy moves.
    for (int moved = 1; moved;) {
        moved = 0;
        for (int i = 0; i < n_busy; i++)
            if (arena_spans_overlap(s, busy[i])) {
                s.offset = align_up(busy[i].offset + busy[i].bytes);
                moved = 1;
            }
    }
    note_end(a, s);
    return s;
}
