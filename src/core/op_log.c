#include "core/op_log.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

typedef struct OpEntry {
    OpReplayFn fn;
    void *args;
} OpEntry;

struct OpLog {
    OpEntry *entries;
    size_t count, cap;
};

OpLog *op_log_create(void) { return xcalloc(1, sizeof(OpLog)); }

void op_log_append(OpLog *log, OpReplayFn fn, const void *args, size_t bytes) {
    if (log->count == log->cap) {
        log->cap = log->cap ? 2 * log->cap : 256;
        log->entries = realloc(log->entries, log->cap * sizeof *log->entries);
        AMP_ASSERT(log->entries != NULL, "op log: out of memory for %zu entries", log->cap);
    }
    void *copy = xcalloc(1, bytes ? bytes : 1);
    memcpy(copy, args, bytes);
    log->entries[log->count++] = (OpEntry){fn, copy};
}

void op_log_replay(const OpLog *log) {
    for (size_t i = 0; i < log->count; i++) log->entries[i].fn(log->entries[i].args);
}

void op_log_free(OpLog *log) {
    if (!log) return;
    for (size_t i = 0; i < log->count; i++) free(log->entries[i].args);
    free(log->entries);
    free(log);
}
