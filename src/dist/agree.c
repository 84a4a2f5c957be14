#include "dist/agree.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

int agree_first(Comm *c, int rc, const char *message, AgreedFailure *out) {
    // The lowest failing rank r contributes size - r, the largest value: a MAX finds it (exact in a float
    // for any rank count below 2^24), a SUM counts the failures.
    float first = rc ? (float)(c->size - c->rank) : 0.0f, count = rc ? 1.0f : 0.0f;
    c->allreduce_max_flag(c, &first);
    memset(out, 0, sizeof *out);
    if (first == 0) return 0;
    c->allreduce_sum(c, &count, 1, DTYPE_F32);
    struct {
        int32_t rc;
        char text[AGREE_MESSAGE_MAX];
    } shared;
    memset(&shared, 0, sizeof shared);
    out->rank = c->size - (int)first;
    if (c->rank == out->rank) {
        shared.rc = rc;
        snprintf(shared.text, sizeof shared.text, "%s", message);
    }
    c->broadcast(c, &shared, sizeof shared, out->rank);
    memcpy(out->text, shared.text, sizeof out->text);
    out->count = (int)count;
    return shared.rc;
}

int agree_startup(Comm *c, int rc, const char *message) {
    AgreedFailure f;
    rc = agree_first(c, rc, message, &f);
    if (rc == 0 || c->rank != 0) return rc;
    if (c->size == 1)
        fprintf(stderr, "%s\n", f.text);
    else if (f.count > 1)
        fprintf(stderr, "rank %d of %d: %s [%d of %d ranks failed to start; the lowest is shown]\n", f.rank,
                c->size, f.text, f.count, c->size);
    else
        fprintf(stderr, "rank %d of %d: %s\n", f.rank, c->size, f.text);
    fflush(stderr);
    return rc;
}

int agree_same(Comm *c, const char *what, size_t n, const char *const *names, const char *const *values) {
    if (c->size == 1) return 0;
    // Rank 0's values, NUL-separated, to every rank; its length first so every rank has room for it.
    uint64_t len = 0;
    for (size_t i = 0; i < n; i++) len += strlen(values[i]) + 1;
    c->broadcast(c, &len, sizeof len, 0);
    char *theirs = xcalloc((size_t)len + 1, 1), *p = theirs;
    if (c->rank == 0)
        for (size_t i = 0; i < n; i++) p = stpcpy(p, values[i]) + 1;
    c->broadcast(c, theirs, (size_t)len, 0);
    char why[AGREE_MESSAGE_MAX] = "";
    p = theirs;
    for (size_t i = 0; i < n && p < theirs + len; i++, p += strlen(p) + 1)
        if (strcmp(p, values[i]) != 0) {
            snprintf(why, sizeof why, "%s differ between ranks: %s is %.200s on rank %d but %.200s on rank 0",
                     what, names[i], values[i], c->rank, p);
            break;
        }
    free(theirs);
    return agree_startup(c, why[0] ? 2 : 0, why);
}
