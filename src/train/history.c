#include "train/history.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"

#define STEP_PREFIX "step-"
#define STEP_SUFFIX ".safetensors"

void history_path(char *out, size_t cap, const char *dir, long step) {
    snprintf(out, cap, "%s/" STEP_PREFIX "%08ld" STEP_SUFFIX, dir, step);
}

int history_link(const char *dir, const char *last, long step) {
    char path[4096];
    history_path(path, sizeof path, dir, step);
    unlink(path);  // a run resumed from an earlier checkpoint passes this step again
    return link(last, path);
}

// The step of a step file's name, or -1 for any other name.
static long step_of(const char *name) {
    size_t n = strlen(name), pre = strlen(STEP_PREFIX), suf = strlen(STEP_SUFFIX);
    if (n <= pre + suf || strncmp(name, STEP_PREFIX, pre) != 0 || strcmp(name + n - suf, STEP_SUFFIX) != 0)
        return -1;
    char *end;
    long step = strtol(name + pre, &end, 10);
    return end == name + n - suf && step >= 0 ? step : -1;
}

static int by_step(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int history_prune(const char *dir, int keep) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t count = 0, cap = 16;
    long *steps = xcalloc(cap, sizeof *steps);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        long step = step_of(e->d_name);
        if (step < 0) continue;
        if (count == cap) {
            long *grown = xcalloc(cap * 2, sizeof *grown);
            memcpy(grown, steps, cap * sizeof *steps);
            free(steps);
            steps = grown, cap *= 2;
        }
        steps[count++] = step;
    }
    closedir(d);
    qsort(steps, count, sizeof *steps, by_step);
    int removed = 0;
    for (size_t i = 0; keep >= 0 && i + (size_t)keep < count; i++) {
        char path[4096];
        history_path(path, sizeof path, dir, steps[i]);
        removed += unlink(path) == 0;
    }
    free(steps);
    return removed;
}
