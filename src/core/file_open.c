// file_open.c - see file_open.h.
#include "core/file_open.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"

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

int file_read_regular(const char *path, size_t max_bytes, const char *what, char **data, size_t *len,
                      char *why, size_t why_cap) {
    struct stat st;
    const int fd = file_open_regular(path, &st, why, why_cap);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    if ((size_t)st.st_size > max_bytes) {
        snprintf(why, why_cap, "%lld bytes, more than any %s", (long long)st.st_size, what);
        close(fd);
        return -2;
    }
    char *buf = xcalloc((size_t)st.st_size + 1, 1);
    size_t have = 0;
    ssize_t got = 0;
    while (have < (size_t)st.st_size && (got = read(fd, buf + have, (size_t)st.st_size - have)) != 0) {
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) break;
        have += (size_t)got;
    }
    const int saved = errno;
    close(fd);
    if (have != (size_t)st.st_size) {
        if (got < 0)
            snprintf(why, why_cap, "%s", strerror(saved));
        else
            snprintf(why, why_cap, "read %zu of its %lld bytes", have, (long long)st.st_size);
        free(buf);
        return -1;
    }
    *data = buf;
    *len = have;
    return 1;
}

int file_write_atomic(const char *path, const void *data, size_t len, const char **step) {
    char temp[PATH_MAX + 16];
    *step = "create a temporary file";
    if (snprintf(temp, sizeof temp, "%s.XXXXXX", path) >= (int)sizeof temp) return errno = ENAMETOOLONG, -1;
    const int fd = mkstemp(temp);
    if (fd < 0) return -1;
    const char *p = data;
    size_t done = 0;
    *step = "write";
    int ok = 1;
    while (ok && done < len) {
        const ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = EIO;
            ok = 0;
        } else {
            done += (size_t)n;
        }
    }
    if (ok && !(ok = fchmod(fd, 0644) == 0)) *step = "chmod";
    if (ok && !(ok = fsync(fd) == 0)) *step = "fsync";
    if (close(fd) != 0 && ok) ok = 0, *step = "close";
    if (ok && !(ok = rename(temp, path) == 0)) *step = "rename";
    if (ok) return 0;
    const int saved = errno;
    unlink(temp);
    errno = saved;
    return -1;
}
