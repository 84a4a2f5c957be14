// kernel_cache.c - see kernel_cache.h.
#include "core/kernel_cache.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/digest.h"
#include "core/file_open.h"
#include "core/log.h"

// No file amptrain writes comes near this: a ResNeXt-101 run chooses a few hundred records of ~250 bytes.
#define KERNEL_CACHE_MAX_BYTES ((size_t)16 << 20)
#define KERNEL_CACHE_CHECKSUM "checksum "

typedef struct Record {
    char *key, *choice;
    int touched;  // used or stored by this process: what kernel_cache_export hands to the other ranks
} Record;

struct KernelCache {
    char *path;  // NULL: in memory only
    Record *records;
    int count, capacity;
    int dirty;         // stored into since the file was read or written, or the file must be rebuilt
    int write_failed;  // a save warned: later ones stay silent
    KernelCacheStats stats;
};

// ---- the table ----------------------------------------------------------------------------------------

static char *text_copy(const char *s, size_t n) {
    char *copy = xcalloc(n + 1, 1);
    memcpy(copy, s, n);
    return copy;
}

static Record *cache_record(const KernelCache *kc, const char *key, size_t key_len) {
    for (int i = 0; i < kc->count; i++)
        if (strlen(kc->records[i].key) == key_len && !memcmp(kc->records[i].key, key, key_len))
            return &kc->records[i];
    return NULL;
}

// key -> choice (lengths given: they may point into a file's text), over an older record of key.
static Record *cache_put(KernelCache *kc, const char *key, size_t key_len, const char *choice,
                         size_t choice_len) {
    Record *r = cache_record(kc, key, key_len);
    if (r) {
        free(r->choice);
    } else {
        if (kc->count == kc->capacity) {
            kc->capacity = kc->capacity ? 2 * kc->capacity : 64;
            Record *grown = xcalloc((size_t)kc->capacity, sizeof(Record));
            if (kc->count) memcpy(grown, kc->records, (size_t)kc->count * sizeof(Record));
            free(kc->records);
            kc->records = grown;
        }
        r = &kc->records[kc->count++];
        r->key = text_copy(key, key_len);
        r->touched = 0;
    }
    r->choice = text_copy(choice, choice_len);
    return r;
}

static KernelCache *cache_new(const char *path) {
    KernelCache *kc = xcalloc(1, sizeof(KernelCache));
    if (path) kc->path = text_copy(path, strlen(path));
    return kc;
}

static void cache_clear(KernelCache *kc) {
    for (int i = 0; i < kc->count; i++) free(kc->records[i].key), free(kc->records[i].choice);
    kc->count = 0;
}

void kernel_cache_close(KernelCache *kc) {
    if (!kc) return;
    cache_clear(kc);
    free(kc->records);
    free(kc->path);
    free(kc);
}

static int record_order(const void *a, const void *b) {
    return strcmp(((const Record *)a)->key, ((const Record *)b)->key);
}

// Keys and choices: printable ASCII, no tab (the separator), not empty.
static int field_ok(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e) return 0;
    return n > 0;
}

// ---- text ---------------------------------------------------------------------------------------------

// Record lines [p, end) (each KEY<TAB>CHOICE<LF>) into `into`; line numbers in messages count from first_line.
// 0, or -1 with why (into then holds the lines before the bad one).
static int cache_parse_records(KernelCache *into, const char *p, const char *end, int first_line, char *why,
                               size_t cap) {
    for (int line = first_line; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {
            snprintf(why, cap, "line %d: no line break at its end", line);
            return -1;
        }
        const char *tab = memchr(p, '\t', (size_t)(nl - p));
        if (!tab || !field_ok(p, (size_t)(tab - p)) || !field_ok(tab + 1, (size_t)(nl - tab - 1))) {
            snprintf(why, cap, "line %d: not a record (KEY<TAB>CHOICE, printable text)", line);
            return -1;
        }
        if (cache_record(into, p, (size_t)(tab - p))) {
            snprintf(why, cap, "line %d: a key written twice", line);
            return -1;
        }
        cache_put(into, p, (size_t)(tab - p), tab + 1, (size_t)(nl - tab - 1));
        p = nl + 1;
    }
    return 0;
}

// A whole file's text (len bytes) into `into`: its version line, records and checksum. 0, or -1 with why.
static int cache_parse_file(KernelCache *into, const char *text, size_t len, char *why, size_t cap) {
    char version[64];
    const size_t version_len =
        (size_t)snprintf(version, sizeof version, "%s%d", KERNEL_CACHE_MAGIC, KERNEL_CACHE_VERSION);
    const size_t magic_len = strlen(KERNEL_CACHE_MAGIC);
    const char *end = text + len, *first_nl = memchr(text, '\n', len);
    const size_t first_len = first_nl ? (size_t)(first_nl - text) : 0;
    if (!first_nl || first_len != version_len || memcmp(text, version, version_len) != 0) {
        if (first_nl && first_len > magic_len && !memcmp(text, KERNEL_CACHE_MAGIC, magic_len))
            snprintf(why, cap, "format version %.*s, where this amptrain reads %d",
                     (int)(first_len - magic_len), text + magic_len, KERNEL_CACHE_VERSION);
        else
            snprintf(why, cap, "its first line is not \"%s\"", version);
        return -1;
    }
    if (end[-1] != '\n') {
        snprintf(why, cap, "cut short (its last line has no line break)");
        return -1;
    }
    const char *last = end - 1;  // the start of the last line
    while (last > text && last[-1] != '\n') last--;
    const size_t checksum_len = strlen(KERNEL_CACHE_CHECKSUM);
    if (last == text || (size_t)(end - last) != checksum_len + 17 ||
        memcmp(last, KERNEL_CACHE_CHECKSUM, checksum_len) != 0) {
        snprintf(why, cap, "no checksum line at its end (cut short, or not written by amptrain)");
        return -1;
    }
    char want[17];
    Digest d;
    digest_init(&d);
    digest_add(&d, text, (size_t)(last - text));
    digest_hex(digest_end(&d), want);
    if (memcmp(last + checksum_len, want, 16) != 0) {
        snprintf(why, cap, "its checksum does not match its contents (a changed or damaged file)");
        return -1;
    }
    return cache_parse_records(into, first_nl + 1, last, 2, why, cap);
}

// ---- the interface ------------------------------------------------------------------------------------

const char *kernel_cache_path_of(const char *setting, char *out, size_t cap) {
    if (!setting || !setting[0] || !strcmp(setting, "off")) return NULL;
    int n;
    if (strcmp(setting, "auto") != 0) {
        n = snprintf(out, cap, "%s", setting);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && xdg[0] == '/')  // the XDG base directory spec: a relative value is to be ignored
            n = snprintf(out, cap, "%s/amptrain/kernels.cache", xdg);
        else if (home && home[0])
            n = snprintf(out, cap, "%s/.cache/amptrain/kernels.cache", home);
        else
            return NULL;
    }
    return n > 0 && (size_t)n < cap ? out : NULL;
}

KernelCache *kernel_cache_open(const char *path) {
    KernelCache *kc = cache_new(path);
    if (!path) return kc;
    char *text = NULL, why[256];
    size_t len = 0;
    const int got =
        file_read_regular(path, KERNEL_CACHE_MAX_BYTES, "kernel-choice file", &text, &len, why, sizeof why);
    if (got == -1) {
        log_warn("kernel-choice cache %s: cannot be read (%s); the kernel choices are timed and not kept",
                 path, why);
        free(kc->path);
        kc->path = NULL;
        return kc;
    }
    if (got == 0) return kc;
    if (got == -2 || cache_parse_file(kc, text, len, why, sizeof why) != 0) {
        log_warn(
            "kernel-choice cache %s: %s; nothing in it is trusted, the kernel choices are timed again and "
            "the file rebuilt",
            path, why);
        cache_clear(kc);
        kc->dirty = 1;
    }
    free(text);
    return kc;
}

const char *kernel_cache_find(const KernelCache *kc, const char *key) {
    const Record *r = cache_record(kc, key, strlen(key));
    return r ? r->choice : NULL;
}

void kernel_cache_use(KernelCache *kc, const char *key) {
    Record *r = cache_record(kc, key, strlen(key));
    AMP_ASSERT(r, "kernel cache: no record of %s to use", key);
    r->touched = 1;
    kc->stats.from_cache++;
}

void kernel_cache_store(KernelCache *kc, const char *key, const char *choice, double seconds) {
    AMP_ASSERT(field_ok(key, strlen(key)) && field_ok(choice, strlen(choice)),
               "kernel cache: a record must be printable text without tabs: '%s' -> '%s'", key, choice);
    cache_put(kc, key, strlen(key), choice, strlen(choice))->touched = 1;
    kc->stats.searched++;
    kc->stats.search_s += seconds;
    kc->dirty = 1;
}

KernelCacheStats kernel_cache_stats(const KernelCache *kc) { return kc->stats; }

// The records (all, or only the touched ones) as record lines, sorted by key, into f.
static void cache_print_records(KernelCache *kc, FILE *f, int touched_only) {
    qsort(kc->records, (size_t)kc->count, sizeof(Record), record_order);
    for (int i = 0; i < kc->count; i++)
        if (!touched_only || kc->records[i].touched)
            fprintf(f, "%s\t%s\n", kc->records[i].key, kc->records[i].choice);
}

char *kernel_cache_export(KernelCache *kc, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    AMP_ASSERT(f, "kernel cache: open_memstream: %s", strerror(errno));
    cache_print_records(kc, f, 1);
    STDIO_CHECK(fclose(f) == 0);
    return text;
}

int kernel_cache_import(KernelCache *kc, const char *text, size_t len) {
    KernelCache *given = cache_new(NULL);
    char why[128];
    const int rc = cache_parse_records(given, text, text + len, 1, why, sizeof why);
    for (int i = 0; rc == 0 && i < given->count; i++) {
        const Record *r = &given->records[i];
        cache_put(kc, r->key, strlen(r->key), r->choice, strlen(r->choice));
    }
    kernel_cache_close(given);
    return rc;
}

// mkdir -p of the folder that holds path. 0, or -1 with errno set.
static int cache_make_folder(const char *path) {
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return errno = ENAMETOOLONG, -1;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = '\0';
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) return 0;
    if (errno != ENOENT || cache_make_folder(dir) != 0) return -1;
    return mkdir(dir, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

int kernel_cache_save(KernelCache *kc) {
    if (!kc || !kc->path || !kc->dirty || kc->write_failed) return 0;
    // What another run wrote since this one read the file: kept where this run has no record of its own.
    char *text = NULL, why[256];
    size_t len = 0;
    if (file_read_regular(kc->path, KERNEL_CACHE_MAX_BYTES, "kernel-choice file", &text, &len, why,
                          sizeof why) == 1) {
        KernelCache *now = cache_new(NULL);
        if (cache_parse_file(now, text, len, why, sizeof why) == 0)
            for (int i = 0; i < now->count; i++) {
                const Record *r = &now->records[i];
                if (!kernel_cache_find(kc, r->key))
                    cache_put(kc, r->key, strlen(r->key), r->choice, strlen(r->choice));
            }
        kernel_cache_close(now);
        free(text);
    }
    text = NULL;
    FILE *f = open_memstream(&text, &len);
    AMP_ASSERT(f, "kernel cache: open_memstream: %s", strerror(errno));
    fprintf(f, "%s%d\n", KERNEL_CACHE_MAGIC, KERNEL_CACHE_VERSION);
    cache_print_records(kc, f, 0);
    STDIO_CHECK(fflush(f) == 0);
    Digest d;
    digest_init(&d);
    digest_add(&d, text, len);
    char sum[17];
    digest_hex(digest_end(&d), sum);
    fprintf(f, "%s%s\n", KERNEL_CACHE_CHECKSUM, sum);
    STDIO_CHECK(fclose(f) == 0);
    const char *step = "make its folder";
    const int rc = cache_make_folder(kc->path) != 0 ? -1 : file_write_atomic(kc->path, text, len, &step);
    free(text);
    if (rc != 0) {
        log_warn("kernel-choice cache %s: cannot write it (%s: %s); the kernel choices are not kept",
                 kc->path, step, strerror(errno));
        kc->write_failed = 1;
        return -1;
    }
    kc->dirty = 0;
    return 0;
}
