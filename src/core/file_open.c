// file_open.c - see file_open.h.
#include "core/file_open.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *file_irregular_kind(mode_t mode) {
    if (S_ISREG(mode)) return NULL;
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    if (S_ISSOCK(mode)) return "a socket";
    return "a special file";
}

int file_open_regular(const char *path, struct stat *st, char *why, size_t why_cap) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int saved = errno;
        snprintf(why, why_cap, "%s", strerror(saved));
        errno = saved;
        return -1;
    }
    const char *kind = fstat(fd, st) != 0 ? "its type unknown (fstat failed)"
                                          : file_irregular_kind(st->st_mode);
    if (kind) {
        snprintf(why, why_cap, "not a regular file (%s)", kind);
        close(fd);
        errno = 0;
        return -1;
    }
    return fd;
}
