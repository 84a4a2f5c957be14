// file_open.h - opening an input that may not be a file: data.path's images and shards, caches, the
// config. A FIFO named photo.jpg would block open(2) until a writer came, and reading a device such as
// /dev/zero never ends; anything but a regular file is refused by its type, before a byte is read.
#ifndef AMPTRAIN_FILE_OPEN_H
#define AMPTRAIN_FILE_OPEN_H

#include <stddef.h>
#include <sys/stat.h>

// What a non-regular file is, for a message ("a FIFO", "a directory", "a device", "a socket", "a
// special file"), or NULL for a regular file.
const char *file_irregular_kind(mode_t mode);

// Opens path read-only (O_NONBLOCK, so a FIFO's open returns at once; O_CLOEXEC; O_NOCTTY) and fstats
// it. A descriptor (>= 0) and *st when it is a regular file; else -1, nothing left open, and why filled
// with one line without the path: strerror's text (errno kept as open(2) set it), or "not a regular
// file (a FIFO)" (errno 0).
int file_open_regular(const char *path, struct stat *st, char *why, size_t why_cap);

#endif
