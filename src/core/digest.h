// digest.h - a 64-bit digest of bytes, for checksums and identities: the bytes are taken as little-endian
// 64-bit words (one multiply per 8 bytes, so a checkpoint's hundreds of MiB cost a fraction of their read),
// the last partial word zero-padded; each word is mixed in as FNV-1a would a byte, with the state rotated
// first (so that high bits reach the low ones), the byte count last, then murmur3's finaliser. Any one
// changed word changes it (every step is a bijection of the state and of the word); it is a check against
// damage and mix-ups, not against someone who means to forge it.
//
// In Python, over bytes b (M = 2**64, rotl(x, r) = ((x << r) | (x >> (64 - r))) % M):
//   h = 0xcbf29ce484222325
//   for i in range(0, len(b), 8): h = ((rotl(h, 27) ^ int.from_bytes(b[i:i+8].ljust(8, b"\0"), "little")) * 0x100000001b3) % M
//   h = ((rotl(h, 27) ^ len(b)) * 0x100000001b3) % M
//   h ^= h >> 33; h = (h * 0xff51afd7ed558ccd) % M; h ^= h >> 33; h = (h * 0xc4ceb9fe1a85ec53) % M; h ^= h >> 33
#ifndef AMPTRAIN_DIGEST_H
#define AMPTRAIN_DIGEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct Digest {
    uint64_t h;
    uint64_t bytes;   // fed so far
    uint8_t tail[8];  // the partial word not yet mixed in
} Digest;

void digest_init(Digest *d);
// Feeds n bytes; the digest is the same however the bytes are split into calls.
void digest_add(Digest *d, const void *data, size_t n);
// A string with its terminating NUL, so ("ab","c") and ("a","bc") differ.
void digest_add_string(Digest *d, const char *s);
uint64_t digest_end(const Digest *d);
// "%016" PRIx64: 16 lowercase hex digits (17 bytes with the NUL).
void digest_hex(uint64_t value, char out[17]);

#endif
