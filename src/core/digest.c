#include "core/digest.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define DIGEST_OFFSET 0xcbf29ce484222325ull
#define DIGEST_PRIME 0x100000001b3ull

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the digest reads words as little-endian");

static uint64_t mix(uint64_t h, uint64_t w) { return (((h << 27) | (h >> 37)) ^ w) * DIGEST_PRIME; }

void digest_init(Digest *d) { *d = (Digest){.h = DIGEST_OFFSET}; }

void digest_add(Digest *d, const void *data, size_t n) {
    const uint8_t *p = data;
    size_t have = (size_t)(d->bytes % 8);
    d->bytes += n;
    if (have) {
        size_t take = 8 - have < n ? 8 - have : n;
        memcpy(d->tail + have, p, take);
        p += take, n -= take;
        if (have + take < 8) return;
        uint64_t w;
        memcpy(&w, d->tail, 8);
        d->h = mix(d->h, w);
    }
    uint64_t h = d->h;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mix(h, w);
    }
    d->h = h;
    memcpy(d->tail, p, n);
}

void digest_add_string(Digest *d, const char *s) { digest_add(d, s, strlen(s) + 1); }

uint64_t digest_end(const Digest *d) {
    uint64_t h = d->h;
    size_t have = (size_t)(d->bytes % 8);
    if (have) {
        uint8_t word[8] = {0};
        memcpy(word, d->tail, have);
        uint64_t w;
        memcpy(&w, word, 8);
        h = mix(h, w);
    }
    h = mix(h, d->bytes);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

void digest_hex(uint64_t value, char out[17]) { snprintf(out, 17, "%016" PRIx64, value); }
