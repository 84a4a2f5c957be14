// imagefolder_list.c - see imagefolder_list.h.
//
// The cache file (native byte order; it is a cache of this machine's scan, not an exchange format):
//   IMAGE_LIST_MAGIC, u64 payload bytes, payload, u64 FNV-1a 64 of the payload
//   payload: str split_abs | u32 classes, str each | u32 folders, {str rel, i64 sec, i64 nsec} each |
//            u32 files, {str rel, i32 label} each | i64 other_files, str other_example
//   str: u32 length, then the bytes (no NUL)
#include "data/sources/imagefolder_list.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/file_open.h"

#define IMAGE_LIST_MAGIC "amptrain imagefolder list v1\n"
#define IMAGE_LIST_MAGIC_LEN (sizeof IMAGE_LIST_MAGIC - 1)
#define IMAGE_LIST_MAX_BYTES (1L << 32)  // a cache larger than this is not read (ImageNet's is about 60 MB)

// ---- names ------------------------------------------------------------------------------------------

void names_add(NameList *l, const char *name) {
    if (l->count == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        char **grown = realloc(l->items, (size_t)l->cap * sizeof *grown);
        AMP_ASSERT(grown, "imagefolder: out of memory listing %d names", l->count);
        l->items = grown;
    }
    l->items[l->count] = strdup(name);
    AMP_ASSERT(l->items[l->count], "imagefolder: out of memory");
    l->count++;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void names_sort(NameList *l) {
    if (l->count > 1) qsort(l->items, (size_t)l->count, sizeof *l->items, name_cmp);
}

void names_free(NameList *l) {
    for (int i = 0; i < l->count; i++) free(l->items[i]);
    free(l->items);
    *l = (NameList){0};
}

// ---- the list ---------------------------------------------------------------------------------------

void image_list_add_file(ImageList *l, const char *rel, int32_t label) {
    names_add(&l->files, rel);
    if (l->labels_cap < l->files.cap) {
        l->labels_cap = l->files.cap;
        l->labels = realloc(l->labels, (size_t)l->labels_cap * sizeof *l->labels);
        AMP_ASSERT(l->labels, "imagefolder: out of memory");
    }
    l->labels[l->files.count - 1] = label;
}

void image_list_add_dir(ImageList *l, const char *rel, struct timespec mtime) {
    names_add(&l->dirs, rel);
    if (l->mtimes_cap < l->dirs.cap) {
        l->mtimes_cap = l->dirs.cap;
        l->mtimes = realloc(l->mtimes, (size_t)l->mtimes_cap * sizeof *l->mtimes);
        AMP_ASSERT(l->mtimes, "imagefolder: out of memory");
    }
    l->mtimes[l->dirs.count - 1] = mtime;
}

void image_list_free(ImageList *l) {
    names_free(&l->files);
    names_free(&l->dirs);
    free(l->labels);
    free(l->mtimes);
    *l = (ImageList){0};
}

const char *image_list_unsettled_dir(const ImageList *l, struct timespec walk_start) {
    for (int i = 0; i < l->dirs.count; i++)
        if (l->mtimes[i].tv_sec >= walk_start.tv_sec - IMAGE_LIST_SETTLE_S) return l->dirs.items[i];
    return NULL;
}

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int image_list_cache_path(const char *cache_dir, const char *split_abs, const char *split, char *out,
                          size_t cap) {
    uint64_t h = fnv1a64((const uint8_t *)split_abs, strlen(split_abs));
    return (size_t)snprintf(out, cap, "%s/imagefolder-%016llx-%s.list", cache_dir, (unsigned long long)h,
                            split) >= cap;
}

// ---- writing ----------------------------------------------------------------------------------------

typedef struct Buf {
    uint8_t *p;
    size_t len, cap;
} Buf;

static void put(Buf *b, const void *data, size_t n) {
    if (b->len + n > b->cap) {
        while (b->len + n > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
        b->p = realloc(b->p, b->cap);
        AMP_ASSERT(b->p, "imagefolder: out of memory writing the file-list cache");
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void put_u32(Buf *b, uint32_t v) { put(b, &v, sizeof v); }
static void put_i64(Buf *b, int64_t v) { put(b, &v, sizeof v); }

static void put_str(Buf *b, const char *s) {
    size_t n = strlen(s);
    put_u32(b, (uint32_t)n);
    put(b, s, n);
}

static void put_names(Buf *b, const NameList *l) {
    put_u32(b, (uint32_t)l->count);
    for (int i = 0; i < l->count; i++) put_str(b, l->items[i]);
}

// Writes all n bytes to fd; 0, or errno.
int image_list_save(const char *path, const char *split_abs, const NameList *classes, const ImageList *l,
                    char *err, size_t err_cap) {
    Buf payload = {0}, file = {0};
    put_str(&payload, split_abs);
    put_names(&payload, classes);
    put_u32(&payload, (uint32_t)l->dirs.count);
    for (int i = 0; i < l->dirs.count; i++) {
        put_str(&payload, l->dirs.items[i]);
        put_i64(&payload, (int64_t)l->mtimes[i].tv_sec);
        put_i64(&payload, (int64_t)l->mtimes[i].tv_nsec);
    }
    put_u32(&payload, (uint32_t)l->files.count);
    for (int i = 0; i < l->files.count; i++) {
        put_str(&payload, l->files.items[i]);
        put(&payload, &l->labels[i], sizeof l->labels[i]);
    }
    put_i64(&payload, (int64_t)l->other_files);
    put_str(&payload, l->other_example);
    put(&file, IMAGE_LIST_MAGIC, IMAGE_LIST_MAGIC_LEN);
    put_i64(&file, (int64_t)payload.len);
    put(&file, payload.p, payload.len);
    put_i64(&file, (int64_t)fnv1a64(payload.p, payload.len));
    free(payload.p);

    // The temporary name is this call's own: ranks that save the same cache at once do not collide.
    const char *step = "";
    const int rc = file_write_atomic(path, file.p, file.len, &step);
    const int saved = errno;
    free(file.p);
    if (rc != 0) {
        snprintf(err, err_cap, "cannot write %s: %s: %s", path, step, strerror(saved));
        return 1;
    }
    return 0;
}

// ---- reading ----------------------------------------------------------------------------------------

typedef struct Cursor {
    const uint8_t *p, *end;
    int bad;  // 1 once a read ran past the end
} Cursor;

static void take(Cursor *c, void *out, size_t n) {
    if (c->bad || (size_t)(c->end - c->p) < n) {
        c->bad = 1;
        memset(out, 0, n);
        return;
    }
    memcpy(out, c->p, n);
    c->p += n;
}

static uint32_t take_u32(Cursor *c) {
    uint32_t v;
    take(c, &v, sizeof v);
    return v;
}

static int64_t take_i64(Cursor *c) {
    int64_t v;
    take(c, &v, sizeof v);
    return v;
}

// A string of at most PATH_MAX - 1 bytes into out[PATH_MAX]; an overlong one marks the cursor bad.
static void take_str(Cursor *c, char *out) {
    uint32_t n = take_u32(c);
    if (n >= PATH_MAX) c->bad = 1;
    if (c->bad) {
        out[0] = '\0';
        return;
    }
    take(c, out, n);
    out[c->bad ? 0 : n] = '\0';
}

// Reads the whole file; 0, or 1 with why.
static int read_file(const char *path, uint8_t **data, size_t *len, char *why, size_t why_cap) {
    char read_why[128] = "";
    char *text = NULL;
    const int got = file_read_regular(path, IMAGE_LIST_MAX_BYTES, "list this writes", &text, len, read_why,
                                      sizeof read_why);
    if (got != 1) {
        snprintf(why, why_cap, "%s: %s", path, got == 0 ? strerror(ENOENT) : read_why);
        return 1;
    }
    *data = (uint8_t *)text;
    return 0;
}

// 0 when every folder of l still has its recorded mtime; 1 with why naming the first that does not.
static int folders_unchanged(const char *split_abs, const ImageList *l, char *why, size_t why_cap) {
    char path[PATH_MAX];
    for (int i = 0; i < l->dirs.count; i++) {
        snprintf(path, sizeof path, "%s/%s", split_abs, l->dirs.items[i]);
        struct stat st;
        if (stat(path, &st) != 0) {
            snprintf(why, why_cap, "the folder %s is gone", path);
            return 1;
        }
        if (st.st_mtim.tv_sec != l->mtimes[i].tv_sec || st.st_mtim.tv_nsec != l->mtimes[i].tv_nsec) {
            snprintf(why, why_cap, "the folder %s changed since the list was made", path);
            return 1;
        }
    }
    return 0;
}

// The length of rel's first component when every component of rel is a name (none empty, "." or ".."),
// so that rel, taken under a folder, stays inside it; 0 otherwise (an absolute path among them).
static size_t plain_path_head(const char *rel) {
    size_t head = 0;
    for (const char *p = rel;; p++) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return 0;
        if (!head) head = n;
        p += n;
        if (!*p) return head;
    }
}

static int name_ptr_cmp(const void *key, const void *item) { return strcmp(key, *(char *const *)item); }

// The index of the class folder named by rel's first `head` bytes in classes (sorted), or -1.
static int class_of(const NameList *classes, const char *rel, size_t head) {
    char name[PATH_MAX];
    memcpy(name, rel, head);
    name[head] = '\0';
    char **hit = bsearch(name, classes->items, (size_t)classes->count, sizeof *classes->items, name_ptr_cmp);
    return hit ? (int)(hit - classes->items) : -1;
}

// 0 when every entry of l is one a walk of the split folder could have made: each folder a plain
// relative path inside a class folder, each file a plain relative path inside the class folder of its
// label, in one of the folders l lists (whose mtimes vouch for it). 1 with why naming the first that is
// not: a hand-edited list must not make the run read outside data.path or relabel images.
static int entries_inside(const NameList *classes, const ImageList *l, char *why, size_t why_cap) {
    for (int i = 0; i < l->dirs.count; i++) {
        const char *rel = l->dirs.items[i];
        size_t head = plain_path_head(rel);
        if (head == 0 || class_of(classes, rel, head) < 0) {
            snprintf(why, why_cap, "the folder '%s' is not inside a class folder", rel);
            return 1;
        }
    }
    char **dirs = xcalloc((size_t)l->dirs.count + 1, sizeof *dirs);
    memcpy(dirs, l->dirs.items, (size_t)l->dirs.count * sizeof *dirs);
    qsort(dirs, (size_t)l->dirs.count, sizeof *dirs, name_cmp);
    int rc = 0;
    char parent[PATH_MAX];
    for (int i = 0; !rc && i < l->files.count; i++) {
        const char *rel = l->files.items[i], *slash = strrchr(rel, '/');
        size_t head = plain_path_head(rel);
        const char *label_class = classes->items[l->labels[i]];
        if (head == 0 || !slash || head != strlen(label_class) || memcmp(rel, label_class, head) != 0) {
            snprintf(why, why_cap, "the file '%s' is not inside the folder of its class %d (%s)", rel,
                     l->labels[i], label_class);
            rc = 1;
        } else {
            snprintf(parent, sizeof parent, "%.*s", (int)(slash - rel), rel);
            if (!bsearch(parent, dirs, (size_t)l->dirs.count, sizeof *dirs, name_ptr_cmp)) {
                snprintf(why, why_cap, "the file '%s' is in a folder the list does not track", rel);
                rc = 1;
            }
        }
    }
    free(dirs);
    return rc;
}

// Parses the payload into out; 0, or 1 with why (corrupt, or about another folder or other classes).
static int parse_payload(Cursor *c, const char *split_abs, const NameList *classes, ImageList *out, char *why,
                         size_t why_cap) {
    char s[PATH_MAX];
    take_str(c, s);
    if (!c->bad && strcmp(s, split_abs) != 0) {
        snprintf(why, why_cap, "it lists %s, not %s", s, split_abs);
        return 1;
    }
    uint32_t n = take_u32(c);
    int same_classes = !c->bad && n == (uint32_t)classes->count;
    for (uint32_t i = 0; same_classes && i < n; i++) {
        take_str(c, s);
        same_classes = !c->bad && strcmp(s, classes->items[i]) == 0;
    }
    if (!c->bad && !same_classes) {
        snprintf(why, why_cap, "the class folders changed since the list was made");
        return 1;
    }
    n = take_u32(c);
    for (uint32_t i = 0; !c->bad && i < n; i++) {
        take_str(c, s);
        struct timespec t;
        t.tv_sec = (time_t)take_i64(c);
        t.tv_nsec = (long)take_i64(c);
        if (!c->bad) image_list_add_dir(out, s, t);
    }
    n = take_u32(c);
    for (uint32_t i = 0; !c->bad && i < n; i++) {
        take_str(c, s);
        int32_t label;
        take(c, &label, sizeof label);
        if (label < 0 || label >= classes->count) c->bad = 1;
        if (!c->bad) image_list_add_file(out, s, label);
    }
    out->other_files = (long)take_i64(c);
    take_str(c, out->other_example);
    if (c->bad || c->p != c->end || out->files.count == 0) {
        snprintf(why, why_cap, "its contents do not parse");
        return 1;
    }
    return entries_inside(classes, out, why, why_cap);
}

int image_list_load(const char *path, const char *split_abs, const NameList *classes, ImageList *out,
                    char *why, size_t why_cap) {
    *out = (ImageList){0};
    uint8_t *data;
    size_t len;
    if (read_file(path, &data, &len, why, why_cap)) return 1;
    Cursor c = {data, data + len, 0};
    char magic[IMAGE_LIST_MAGIC_LEN];
    take(&c, magic, sizeof magic);
    int64_t payload_len = take_i64(&c);
    int rc = 0;
    if (c.bad || memcmp(magic, IMAGE_LIST_MAGIC, IMAGE_LIST_MAGIC_LEN) != 0 || payload_len < 0 ||
        (uint64_t)payload_len + sizeof(uint64_t) != (uint64_t)(c.end - c.p)) {
        snprintf(why, why_cap, "%s is not a whole file-list cache of this version", path);
        rc = 1;
    }
    uint64_t sum = 0;
    if (!rc) memcpy(&sum, c.p + payload_len, sizeof sum);
    if (!rc && sum != fnv1a64(c.p, (size_t)payload_len)) {
        snprintf(why, why_cap, "%s fails its checksum (corrupt)", path);
        rc = 1;
    }
    char reason[2 * PATH_MAX] = "";
    if (!rc) {
        Cursor payload = {c.p, c.p + payload_len, 0};
        rc = parse_payload(&payload, split_abs, classes, out, reason, sizeof reason);
        if (!rc) rc = folders_unchanged(split_abs, out, reason, sizeof reason);
        if (rc) snprintf(why, why_cap, "%s: %s", path, reason);
    }
    free(data);
    if (rc) image_list_free(out);
    return rc;
}
