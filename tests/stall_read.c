// stall_read.c - an LD_PRELOAD library for the stop tests (tests/unit/test_images_stop.c): a pread of the
// file whose path ends in $AMPTRAIN_TEST_STALL never returns, as a read on a hung network file system
// does not; every other read is the C library's. (A FIFO cannot stand in: amptrain opens images with
// O_NONBLOCK and refuses anything but a regular file.)
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef ssize_t (*PreadFn)(int fd, void *buf, size_t count, off_t offset);

// 1 when fd is open on the file to stall on (its path read back from /proc/self/fd).
static int stalls(int fd) {
    const char *suffix = getenv("AMPTRAIN_TEST_STALL");
    if (!suffix || !*suffix) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    size_t len = strlen(suffix);
    if (n < 0 || (size_t)n < len) return 0;
    path[n] = '\0';
    return strcmp(path + n - len, suffix) == 0;
}

static ssize_t pread_through(const char *name, int fd, void *buf, size_t count, off_t offset) {
    if (stalls(fd))
        for (;;) pause();  // a signal handler may run here; the read still never comes back
    PreadFn real = (PreadFn)dlsym(RTLD_NEXT, name);
    return real(fd, buf, count, offset);
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
    return pread_through("pread", fd, buf, count, offset);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    return pread_through("pread64", fd, buf, count, offset);
}
