// file_open.h - opening an input that may not be a file: data.path's images and shards, caches, the
// config; and the whole-file reads and atomic writes of the caches and the run folder. A FIFO named photo.jpg would block open(2) until a writer came, and reading a device such as
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

// A regular file's bytes, read whole through file_open_regular: *data (malloc'd, a NUL after the bytes) and
// *len. 1 read; 0 no file there (ENOENT); -1 with why (one line without the path): not readable, not a
// regular file, or shorter than its size said; -2 with why ("N bytes, more than any <what>"): more than
// max_bytes (for the caches, a damaged file: no file they write is that large).
int file_read_regular(const char *path, size_t max_bytes, const char *what, char **data, size_t *len,
                      char *why, size_t why_cap);

// len bytes to path through a temporary file beside it (a name of this call's own, mkstemp) made 0644,
// fsync'd and renamed over path: a reader sees the old file or the new one, and of two writers at once the
// last rename wins. The folder must exist. 0, or -1 with errno set and *step naming what failed ("create a
// temporary file", "write", "chmod", "fsync", "close", "rename"); no temporary file is left behind.
int file_write_atomic(const char *path, const void *data, size_t len, const char **step);

#endif
