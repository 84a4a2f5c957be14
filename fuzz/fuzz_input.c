#include "fuzz/fuzz_input.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char folder[PATH_MAX], path[PATH_MAX + 64];

static void fuzz_input_remove(void) {
    if (path[0]) unlink(path);
    if (folder[0]) rmdir(folder);
}

const char *fuzz_input_write(const char *name, const uint8_t *data, size_t size) {
    if (!folder[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(folder, sizeof folder, "%s/amptrain-fuzz.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(folder)) {
            perror(folder);
            abort();
        }
        snprintf(path, sizeof path, "%s/%s", folder, name);
        atexit(fuzz_input_remove);
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}
