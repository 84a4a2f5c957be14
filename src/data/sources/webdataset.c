// webdataset.c - the shard index and the sample reader behind data.source webdataset (webdataset.h).
//
// A tar archive is a run of 512-byte header blocks, each followed by its member's data padded to a whole
// block, closed by a zero block (writers put two; one is enough here). The header fields read:
//   name[100] @0, size[12] @124 (octal text; base-256 when the first byte has its high bit set, GNU's
//   form past 8 GiB), chksum[8] @148, typeflag @156, magic[6] @257 ("ustar\0" POSIX, "ustar " GNU),
//   prefix[155] @345 (POSIX only: the member is prefix/name).
// A name or size too long for those fields comes in an entry just before the member: a pax header ('x',
// records "LEN path=NAME\n" and "LEN size=N\n"; Python's tarfile writes these by default) or a GNU long
// name ('L', the name as the entry's data). Directories and global pax headers ('g') hold no sample and
// are passed over; links and devices are refused, since their bytes are elsewhere or nowhere.
//
// Opening reads each header and the first data block after it in one pread, so a shard costs one read
// per member, and a .cls label (a few bytes) comes with its header. The index keeps, per sample, the shard,
// the image's offset and size, and the label: 24 bytes, 31 MB for ImageNet's 1.28 million images.
#include "data/sources/webdataset.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/digest.h"
#include "core/file_open.h"

#define TAR_BLOCK 512
#define TAR_NAME_MAX 4096       // the longest member name read (pax or GNU long names)
#define TAR_META_MAX (1 << 20)  // the largest pax header read
#define WDS_LABEL_MAX 32        // a .cls member longer than this holds no label

typedef struct WdsSample {
    long long offset;  // the image member's data in its shard
    long long size;    // its bytes
    int shard;
    int32_t label;
} WdsSample;

typedef struct WdsIndex {
    char **paths;  // (n_shards) shard paths in name order
    int *fds;      // (n_shards) open for pread; -1 not opened
    int n_shards;
    int listed;          // 1 once the folder was read (so "no shards" means none there)
    WdsSample *samples;  // (n_samples) in shard order, then archive order
    int n_samples, cap;
} WdsIndex;

// The sample being assembled from adjacent members that share a key.
typedef struct WdsGroup {
    int open;
    char key[TAR_NAME_MAX];
    long long start;  // the header offset of its first member
    int has_image, has_label;
    WdsSample sample;
} WdsGroup;

// ---- errors and reads ------------------------------------------------------------------------------

// "webdataset: SHARD: offset N: what"; returns 2, the exit code for bad data at start-up. Control
// characters (a member name is any bytes) are written as \xHH, so the message stays one line.
__attribute__((format(printf, 5, 6))) static int wds_fail(char *err, size_t err_cap, const char *path,
                                                          long long offset, const char *fmt, ...) {
    char text[1024];
    int n = snprintf(text, sizeof text, "webdataset: %s: offset %lld: ", path, offset);
    if (n >= 0 && (size_t)n < sizeof text) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
        va_end(ap);
    }
    size_t at = 0;
    for (const unsigned char *c = (const unsigned char *)text; *c && at + 5 < err_cap; c++) {
        if (*c < 0x20 || *c == 0x7f)
            at += (size_t)snprintf(err + at, 5, "\\x%02x", *c);
        else
            err[at++] = (char)*c;
    }
    if (err_cap) err[at] = '\0';
    return 2;
}

// Reads up to n bytes at offset (pread, so threads may share fd); returns the bytes read, which are fewer
// than n only at the end of the file or on an error (errno says which; 0 at the end).
static long long wds_read_at(int fd, void *buf, long long n, long long offset) {
    long long got = 0;
    errno = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, (size_t)(n - got), (off_t)(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += r;
    }
    return got;
}

// ---- tar headers -----------------------------------------------------------------------------------

// A numeric field: octal text (leading spaces, digits, then NUL or space; empty is 0, as Python reads it)
// or GNU base-256. -1 when it is neither or would overflow.
static long long tar_number(const unsigned char *f, int len) {
    if (f[0] & 0x80) {
        if (f[0] == 0xff) return -1;  // base-256 negative
        unsigned long long v = f[0] & 0x7f;
        for (int i = 1; i < len; i++) {
            if (v >> 55) return -1;
            v = v << 8 | f[i];
        }
        return (long long)v;
    }
    int i = 0;
    while (i < len && f[i] == ' ') i++;
    long long v = 0;
    for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) v = v * 8 + (f[i] - '0');
    return i < len && f[i] != ' ' && f[i] != '\0' ? -1 : v;
}

// The stored checksum equals the byte sum of the header with the checksum field read as spaces (unsigned,
// or signed as some old writers summed).
static int tar_checksum_ok(const unsigned char *h) {
    long long stored = tar_number(h + 148, 8);
    long long sum_unsigned = 0, sum_signed = 0;
    for (int i = 0; i < TAR_BLOCK; i++) {
        unsigned char c = i >= 148 && i < 156 ? ' ' : h[i];
        sum_unsigned += c;
        sum_signed += (signed char)c;
    }
    return stored == sum_unsigned || stored == sum_signed;
}

static int tar_is_zero_block(const unsigned char *h) {
    for (int i = 0; i < TAR_BLOCK; i++)
        if (h[i]) return 0;
    return 1;
}

// The name in the header itself: prefix/name in POSIX ustar, name alone otherwise. name: TAR_NAME_MAX.
static void tar_header_name(const unsigned char *h, char *name) {
    size_t n = strnlen((const char *)h, 100);
    size_t p = memcmp(h + 257, "ustar\0", 6) == 0 ? strnlen((const char *)h + 345, 155) : 0;
    if (p) {
        memcpy(name, h + 345, p);
        name[p++] = '/';
    }
    memcpy(name + p, h, n);
    name[p + n] = '\0';
}

// pax records "LEN key=value\n" (LEN counts the whole record); takes path and size, the keys that change
// where the next member's bytes are. 0, or -1 when a record is malformed.
static int pax_parse(const char *d, size_t n, char *name, long long *size) {
    size_t at = 0;
    while (at < n) {
        size_t len = 0, i = at;
        for (; i < n && d[i] >= '0' && d[i] <= '9' && len <= n; i++) len = len * 10 + (size_t)(d[i] - '0');
        if (i == at || i >= n || d[i] != ' ' || len > n - at || len < i - at + 3 || d[at + len - 1] != '\n')
            return -1;
        const char *kv = d + i + 1;
        size_t kv_len = at + len - 1 - (i + 1);
        const char *eq = memchr(kv, '=', kv_len);
        if (!eq) return -1;
        size_t key_len = (size_t)(eq - kv), value_len = kv_len - key_len - 1;
        if (key_len == 4 && memcmp(kv, "path", 4) == 0) {
            if (value_len == 0 || value_len >= TAR_NAME_MAX) return -1;
            memcpy(name, eq + 1, value_len);
            name[value_len] = '\0';
        } else if (key_len == 4 && memcmp(kv, "size", 4) == 0) {
            long long v = 0;
            if (value_len == 0 || value_len > 18) return -1;
            for (size_t k = 1; k <= value_len; k++) {
                if (eq[k] < '0' || eq[k] > '9') return -1;
                v = v * 10 + (eq[k] - '0');
            }
            *size = v;
        }
        at += len;
    }
    return 0;
}

// ---- samples ---------------------------------------------------------------------------------------

// WebDataset's rule: the key is the name up to the first dot of its last component, the extension what
// follows. NULL (not part of any sample) when the last component has no dot or starts with one.
static const char *wds_extension_dot(const char *name) {
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    return dot && dot > base ? dot : NULL;
}

// A .cls member's text: an optional minus sign and decimal digits, with ASCII spaces or newlines around
// (what Python's int() reads from str(label)). 0 and *label, or -1.
static int wds_parse_label(const unsigned char *d, long long n, long long *label) {
    long long i = 0, v = 0;
    while (i < n && (d[i] == ' ' || d[i] == '\n' || d[i] == '\r' || d[i] == '\t')) i++;
    int negative = i < n && d[i] == '-';
    i += negative;
    long long first = i;
    for (; i < n && d[i] >= '0' && d[i] <= '9' && i - first < 12; i++) v = v * 10 + (d[i] - '0');
    if (i == first) return -1;
    while (i < n && (d[i] == ' ' || d[i] == '\n' || d[i] == '\r' || d[i] == '\t')) i++;
    if (i != n) return -1;
    *label = negative ? -v : v;
    return 0;
}

// Ends the sample being assembled: it needs an image and a label.
static int wds_group_close(WdsIndex *ix, WdsGroup *g, const char *path, char *err, size_t err_cap) {
    if (!g->open) return 0;
    g->open = 0;
    if (!g->has_image)
        return wds_fail(err, err_cap, path, g->start, "sample '%s' has no .jpg or .jpeg member", g->key);
    if (!g->has_label)
        return wds_fail(err, err_cap, path, g->start, "sample '%s' has no .cls member (its label)", g->key);
    if (ix->n_samples == INT_MAX)
        return wds_fail(err, err_cap, path, g->start, "more than %d samples in the split", INT_MAX);
    if (ix->n_samples == ix->cap) {
        ix->cap = ix->cap ? (ix->cap > INT_MAX / 2 ? INT_MAX : 2 * ix->cap) : 1024;
        ix->samples = realloc(ix->samples, (size_t)ix->cap * sizeof *ix->samples);
        AMP_ASSERT(ix->samples, "webdataset: out of memory for %d samples", ix->cap);
    }
    ix->samples[ix->n_samples++] = g->sample;
    return 0;
}

// A regular member at header offset `at`, data [data, data + size): joins the current sample when it
// shares its key, else closes it and starts the next. first: the data's first bytes (at least
// min(size, 512) of them).
static int wds_add_member(WdsIndex *ix, WdsGroup *g, int shard, int classes, const char *name, long long at,
                          long long data, long long size, const unsigned char *first, char *err,
                          size_t err_cap) {
    const char *path = ix->paths[shard];
    const char *dot = wds_extension_dot(name);
    if (!dot) return 0;
    size_t key_len = (size_t)(dot - name);
    if (!g->open || strlen(g->key) != key_len || memcmp(g->key, name, key_len) != 0) {
        int rc = wds_group_close(ix, g, path, err, err_cap);
        if (rc) return rc;
        memset(g, 0, sizeof *g);
        g->open = 1;
        memcpy(g->key, name, key_len);
        g->start = at;
        g->sample.shard = shard;
    }
    const char *ext = dot + 1;
    if (strcasecmp(ext, "jpg") == 0 || strcasecmp(ext, "jpeg") == 0) {
        if (g->has_image)
            return wds_fail(err, err_cap, path, at, "sample '%s' has a second image, '%s'", g->key, name);
        g->has_image = 1;
        g->sample.offset = data;
        g->sample.size = size;
    } else if (strcasecmp(ext, "cls") == 0) {
        long long label;
        if (g->has_label)
            return wds_fail(err, err_cap, path, at, "sample '%s' has a second label, '%s'", g->key, name);
        if (size > WDS_LABEL_MAX || wds_parse_label(first, size, &label) != 0)
            return wds_fail(err, err_cap, path, at, "'%s' (%lld bytes) is not an ASCII integer label", name,
                            size);
        if (label < 0 || label >= classes)
            return wds_fail(err, err_cap, path, at,
                            "'%s' holds label %lld, outside [0, %d) (model.num_classes)", name, label,
                            classes);
        g->has_label = 1;
        g->sample.label = (int32_t)label;
    }
    return 0;
}

// ---- one shard -------------------------------------------------------------------------------------

// Reads an entry's data (a pax header or a GNU long name, at most cap bytes) as a NUL-terminated string.
static char *wds_read_meta(int fd, long long data, long long size, long long cap) {
    if (size > cap) return NULL;
    char *text = xcalloc((size_t)size + 1, 1);
    if (wds_read_at(fd, text, size, data) != size) {
        free(text);
        return NULL;
    }
    return text;
}

static int wds_index_shard(WdsIndex *ix, int shard, int classes, char *err, size_t err_cap) {
    const char *path = ix->paths[shard];
    int fd = ix->fds[shard];
    struct stat st;
    if (fstat(fd, &st) != 0) return wds_fail(err, err_cap, path, 0, "cannot stat: %s", strerror(errno));
    long long end = st.st_size, at = 0;
    unsigned char block[2 * TAR_BLOCK];  // a header and the first block of its data
    char name[TAR_NAME_MAX];
    char long_name[TAR_NAME_MAX] = "";  // from a pax or GNU entry, for the next member only
    long long long_size = -1;
    WdsGroup *g = xcalloc(1, sizeof *g);
    int rc = 0;
    for (;;) {
        if (end - at < TAR_BLOCK) {
            rc = wds_fail(err, err_cap, path, at < end ? at : end,
                          at > end    ? "the file ends inside the padding of the last member (truncated)"
                          : at == end ? "the archive ends without its end-of-archive block (truncated?)"
                                      : "the file ends inside a header block (truncated)");
            break;
        }
        long long want = end - at < (long long)sizeof block ? end - at : (long long)sizeof block;
        if (wds_read_at(fd, block, want, at) != want) {
            rc = wds_fail(err, err_cap, path, at, "read failed: %s", errno ? strerror(errno) : "short read");
            break;
        }
        if (tar_is_zero_block(block)) break;
        if (!tar_checksum_ok(block)) {
            rc = wds_fail(err, err_cap, path, at,
                          "not a tar header (checksum mismatch): corrupt, or not a tar file");
            break;
        }
        char type = (char)block[156];
        int meta = type == 'x' || type == 'L' || type == 'g';
        long long size = meta || long_size < 0 ? tar_number(block + 124, 12) : long_size;
        if (long_name[0] && !meta)
            strcpy(name, long_name);
        else
            tar_header_name(block, name);
        long long data = at + TAR_BLOCK;
        if (size < 0) {
            rc = wds_fail(err, err_cap, path, at, "member '%s' has an unreadable size field", name);
            break;
        }
        if (size > end - data) {
            rc = wds_fail(err, err_cap, path, at,
                          "member '%s' needs %lld bytes, the file has %lld left (truncated)", name, size,
                          end - data);
            break;
        }
        if (type == 'x' || type == 'L') {
            char *text = wds_read_meta(fd, data, size, type == 'x' ? TAR_META_MAX : TAR_NAME_MAX - 1);
            int bad = !text || (type == 'x' ? pax_parse(text, (size_t)size, long_name, &long_size) != 0
                                            : snprintf(long_name, sizeof long_name, "%s", text) <= 0);
            free(text);
            if (bad) {
                rc = wds_fail(err, err_cap, path, at, "unreadable %s entry of %lld bytes",
                              type == 'x' ? "pax header" : "GNU long-name", size);
                break;
            }
        } else if (type == '0' || type == '7' || (type == '\0' && name[0] && name[strlen(name) - 1] != '/')) {
            rc = wds_add_member(ix, g, shard, classes, name, at, data, size, block + TAR_BLOCK, err, err_cap);
            if (rc) break;
        } else if (type != '5' && type != 'g' && type != '\0') {
            rc = wds_fail(err, err_cap, path, at,
                          "member '%s' is of type '%c': only regular files, directories "
                          "and pax or GNU name entries belong in a shard",
                          name, isprint((unsigned char)type) ? type : '?');
            break;
        }
        if (!meta) long_name[0] = '\0', long_size = -1;
        at = data + (size + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
    }
    if (!rc) rc = wds_group_close(ix, g, path, err, err_cap);
    free(g);
    return rc;
}

// ---- the split -------------------------------------------------------------------------------------

static int wds_compare_paths(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void wds_index_free(WdsIndex *ix) {
    for (int s = 0; s < ix->n_shards; s++) {
        if (ix->fds[s] >= 0) close(ix->fds[s]);
        free(ix->paths[s]);
    }
    free(ix->paths);
    free(ix->fds);
    free(ix->samples);
    free(ix);
}

// Fills ix->paths with dir/<split>-*.tar in name order and opens each.
static int wds_list_shards(WdsIndex *ix, const char *dir, const char *split, char *err, size_t err_cap) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, err_cap,
                 "webdataset: cannot open folder '%s': %s (data.path must hold train-*.tar and "
                 "val-*.tar shards)",
                 dir, strerror(errno));
        return 2;
    }
    size_t prefix_len = strlen(split) + 1;
    int cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < prefix_len + 4 || strncmp(e->d_name, split, prefix_len - 1) != 0 ||
            e->d_name[prefix_len - 1] != '-' || strcmp(e->d_name + len - 4, ".tar") != 0)
            continue;
        if (ix->n_shards == cap) {
            cap = cap ? 2 * cap : 64;
            ix->paths = realloc(ix->paths, (size_t)cap * sizeof *ix->paths);
            AMP_ASSERT(ix->paths, "webdataset: out of memory for %d shard names", cap);
        }
        size_t n = strlen(dir) + len + 2;
        ix->paths[ix->n_shards] = xcalloc(n, 1);
        snprintf(ix->paths[ix->n_shards++], n, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    ix->listed = 1;
    if (ix->n_shards == 0) {
        snprintf(err, err_cap, "webdataset: no %s-*.tar shards in '%s' (data.path)", split, dir);
        return 2;
    }
    qsort(ix->paths, (size_t)ix->n_shards, sizeof *ix->paths, wds_compare_paths);
    ix->fds = xcalloc((size_t)ix->n_shards, sizeof *ix->fds);
    for (int s = 0; s < ix->n_shards; s++) ix->fds[s] = -1;
    for (int s = 0; s < ix->n_shards; s++) {
        struct stat st;
        char why[96];
        ix->fds[s] = file_open_regular(ix->paths[s], &st, why, sizeof why);
        if (ix->fds[s] < 0) {
            snprintf(err, err_cap, "webdataset: cannot open shard '%s': %s%s", ix->paths[s], why,
                     errno == EMFILE
                         ? " (one descriptor per shard stays open: raise `ulimit -n`, or pack fewer, "
                           "larger shards)"
                         : "");
            return 2;
        }
    }
    return 0;
}

static int wds_read(const EncodedSource *src, int index, uint8_t **bytes, size_t *len, int32_t *label,
                    char *err, size_t err_cap) {
    const WdsIndex *ix = src->impl;
    const WdsSample *s = &ix->samples[index];
    uint8_t *buf = xcalloc(s->size ? (size_t)s->size : 1, 1);
    long long got = wds_read_at(ix->fds[s->shard], buf, s->size, s->offset);
    if (got != s->size) {
        snprintf(err, err_cap, "read %lld of %lld bytes: %s", got, s->size,
                 errno ? strerror(errno) : "end of file");
        free(buf);
        return 1;
    }
    *bytes = buf;
    *len = (size_t)s->size;
    *label = s->label;
    return 0;
}

static void wds_describe(const EncodedSource *src, int index, char *out, size_t out_cap) {
    const WdsIndex *ix = src->impl;
    const WdsSample *s = &ix->samples[index];
    snprintf(out, out_cap, "%s: the image at offset %lld (sample %d)", ix->paths[s->shard], s->offset, index);
}

static void wds_destroy(EncodedSource *src) {
    wds_index_free(src->impl);
    free(src);
}

// The index's identity: every shard's file name (not its folder: the data may move), then each sample's
// shard, offset, size and label, in order.
static uint64_t index_digest(const WdsIndex *ix) {
    Digest d;
    digest_init(&d);
    for (int s = 0; s < ix->n_shards; s++) {
        const char *slash = strrchr(ix->paths[s], '/');
        digest_add_string(&d, slash ? slash + 1 : ix->paths[s]);
    }
    for (int i = 0; i < ix->n_samples; i++) {
        const WdsSample *s = &ix->samples[i];
        const int64_t fields[] = {s->shard, s->offset, s->size, s->label};
        digest_add(&d, fields, sizeof fields);
    }
    return digest_end(&d);
}

int webdataset_open(const char *dir, const char *split, int classes, int optional, EncodedSource **out,
                    char *err, size_t err_cap) {
    *out = NULL;
    WdsIndex *ix = xcalloc(1, sizeof *ix);
    int rc = wds_list_shards(ix, dir, split, err, err_cap);
    if (rc && optional && ix->n_shards == 0 && ix->listed) {
        wds_index_free(ix);
        return 0;
    }
    for (int s = 0; !rc && s < ix->n_shards; s++) rc = wds_index_shard(ix, s, classes, err, err_cap);
    if (!rc && ix->n_samples == 0) {
        snprintf(err, err_cap, "webdataset: the %d %s-*.tar shards in '%s' hold no samples", ix->n_shards,
                 split, dir);
        rc = 2;
    }
    if (rc) {
        wds_index_free(ix);
        return rc;
    }
    EncodedSource *src = xcalloc(1, sizeof *src);
    src->size = ix->n_samples;
    src->classes = classes;
    src->read = wds_read;
    src->describe = wds_describe;
    src->destroy = wds_destroy;
    src->impl = ix;
    src->list_digest = index_digest(ix);
    snprintf(src->name, sizeof src->name, "webdataset");
    *out = src;
    return 0;
}
