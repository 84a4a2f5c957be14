// cifar10.c - the CIFAR-10 binary version (cifar-10-binary.tar.gz, folder cifar-10-batches-bin).
//
// Files: data_batch_1.bin .. data_batch_5.bin (training, 10000 records each, in that order) and
// test_batch.bin (validation). A record is 3073 bytes: the label (0..9), then the 32x32 red plane, the
// green plane and the blue plane, each row-major. All records stay in memory as bytes (150 MB for the
// training split, a quarter of the float32 size) and `get` writes each sample's bytes HWC, so the three
// channels of a pixel are adjacent; the device normalises them with the CIFAR-10 constants in dataset.h:
//   value = (byte / 255 - mean[ch]) / std[ch]
// Augmentation (training, data.augment): torchvision's RandomCrop(32, padding=4) then
// RandomHorizontalFlip(0.5), both before Normalize: the image is padded by 4 black pixels (byte 0, which
// normalises to -mean/std, not to 0) and a 32x32 window at offset (dy, dx) in [0,8]^2 is cut out, then
// mirrored left-right with probability 1/2. The numbers are drawn in the order dy, dx, flip from the
// sample's rng.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/digest.h"
#include "core/file_open.h"
#include "data/dataset.h"

#define CIFAR10_PIXELS (CIFAR10_SIDE * CIFAR10_SIDE)
#define CIFAR10_PAD 4

typedef struct Cifar10 {
    uint8_t *records;  // (size, 3073) bytes, as in the files
} Cifar10;

static const char *const cifar10_train_files[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                                  "data_batch_4.bin", "data_batch_5.bin"};
static const char *const cifar10_val_files[] = {"test_batch.bin"};

static void cifar10_get(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng) {
    const Cifar10 *c = ds->impl;
    const uint8_t *rec = c->records + (size_t)index * CIFAR10_RECORD_BYTES;
    *label = rec[0];
    const uint8_t *planes = rec + 1;
    int dy = CIFAR10_PAD, dx = CIFAR10_PAD, flip = 0;  // no augmentation: the centre window, unflipped
    if (rng) {
        dy = (int)rng_below(rng, 2 * CIFAR10_PAD + 1);
        dx = (int)rng_below(rng, 2 * CIFAR10_PAD + 1);
        flip = (int)rng_below(rng, 2);
    }
    for (int y = 0; y < CIFAR10_SIDE; y++) {
        int sy = y + dy - CIFAR10_PAD;
        for (int x = 0; x < CIFAR10_SIDE; x++) {
            int sx = (flip ? CIFAR10_SIDE - 1 - x : x) + dx - CIFAR10_PAD;
            uint8_t *out = img + ((size_t)y * CIFAR10_SIDE + x) * 3;
            int inside = sy >= 0 && sy < CIFAR10_SIDE && sx >= 0 && sx < CIFAR10_SIDE;
            for (int ch = 0; ch < 3; ch++)
                out[ch] = inside ? planes[ch * CIFAR10_PIXELS + sy * CIFAR10_SIDE + sx] : 0;
        }
    }
}

static void cifar10_destroy(Dataset *ds) {
    Cifar10 *c = ds->impl;
    free(c->records);
    free(c);
    free(ds);
}

// Opens one file of the split: its descriptor and size (a positive whole number of records), or -1
// with err filled (missing, not a regular file, or a size no CIFAR-10 file has).
static int cifar10_file_open(const char *path, long *size, char *err, size_t err_cap) {
    struct stat st;
    char why[96];
    int fd = file_open_regular(path, &st, why, sizeof why);
    if (fd < 0) {
        snprintf(err, err_cap,
                 "cifar10: cannot open %s: %s (data.path must be the folder with "
                 "data_batch_1..5.bin and test_batch.bin, i.e. cifar-10-batches-bin)",
                 path, why);
        return -1;
    }
    if (st.st_size == 0 || st.st_size % CIFAR10_RECORD_BYTES != 0) {
        snprintf(err, err_cap,
                 "cifar10: %s is %lld bytes, not a positive multiple of the %d-byte record "
                 "(truncated, or not the binary version?)",
                 path, (long long)st.st_size, CIFAR10_RECORD_BYTES);
        close(fd);
        return -1;
    }
    *size = (long)st.st_size;
    return fd;
}

// Reads the files one after another into one buffer; checks every label.
static int cifar10_read(const char *dir, const char *const *names, int n_files, uint8_t **records, int *count,
                        char *err, size_t err_cap) {
    char path[CONFIG_PATH_MAX + 32];
    long sizes[5], total = 0;
    int fds[5], rc = 0, opened = 0;
    for (; !rc && opened < n_files; opened++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[opened]);
        fds[opened] = cifar10_file_open(path, &sizes[opened], err, err_cap);
        if (fds[opened] < 0)
            rc = 2;
        else
            total += sizes[opened];
    }
    uint8_t *buf = rc ? NULL : xcalloc((size_t)total, 1);
    long at = 0;
    for (int f = 0; !rc && f < n_files; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        long got = 0;
        ssize_t n;
        while (got < sizes[f] &&
               (n = pread(fds[f], buf + at + got, (size_t)(sizes[f] - got), (off_t)got)) > 0)
            got += n;
        if (got != sizes[f]) {
            snprintf(err, err_cap, "cifar10: %s: read %ld of %ld bytes", path, got, sizes[f]);
            rc = 2;
        }
        for (long r = 0; !rc && r < sizes[f] / CIFAR10_RECORD_BYTES; r++) {
            uint8_t label = buf[at + r * CIFAR10_RECORD_BYTES];
            if (label >= CIFAR10_CLASSES) {
                snprintf(err, err_cap, "cifar10: %s: record %ld has label %d, not 0..9", path, r, label);
                rc = 2;
            }
        }
        at += sizes[f];
    }
    for (int f = 0; f < opened; f++)
        if (fds[f] >= 0) close(fds[f]);
    if (rc) {
        free(buf);
        return rc;
    }
    *records = buf;
    *count = (int)(total / CIFAR10_RECORD_BYTES);
    return 0;
}

int dataset_cifar10_open(const char *dir, int train, int augment, long seed, Dataset **out, char *err,
                         size_t err_cap) {
    *out = NULL;
    uint8_t *records;
    int count;
    int rc = train ? cifar10_read(dir, cifar10_train_files, 5, &records, &count, err, err_cap)
                   : cifar10_read(dir, cifar10_val_files, 1, &records, &count, err, err_cap);
    if (rc) return rc;
    Cifar10 *c = xcalloc(1, sizeof *c);
    c->records = records;
    Dataset *ds = xcalloc(1, sizeof *ds);
    ds->norm = (PixelNorm){{CIFAR10_MEAN_R, CIFAR10_MEAN_G, CIFAR10_MEAN_B},
                           {CIFAR10_STD_R, CIFAR10_STD_G, CIFAR10_STD_B}};
    ds->name = "cifar10";
    ds->size = count;
    ds->side = CIFAR10_SIDE;
    ds->classes = CIFAR10_CLASSES;
    ds->seed = (uint64_t)seed;
    ds->augment = train && augment;
    ds->get = cifar10_get;
    ds->destroy = cifar10_destroy;
    ds->impl = c;
    Digest d;
    digest_init(&d);
    digest_add(&d, records, (size_t)count * CIFAR10_RECORD_BYTES);
    ds->list_digest = digest_end(&d);
    *out = ds;
    return 0;
}
