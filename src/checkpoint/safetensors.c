// safetensors.c - the safetensors writer (JSON header emitted here, atomic temp + rename) and reader
// (header parsed by yaml_tree, validated in full against the file size before any data is read).
#include "checkpoint/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/check.h"
#include "core/digest.h"
#include "config/yaml_tree.h"

// Tensor bytes go to disk as they lie in memory, and the format is little-endian.
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    [ST_F64] = {"F64", 8}, [ST_F32] = {"F32", 4},   [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2},
    [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4},   [ST_I16] = {"I16", 2}, [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},   [ST_BOOL] = {"BOOL", 1},
};
#define DTYPE_COUNT (sizeof dtype_table / sizeof *dtype_table)

size_t st_dtype_size(StDtype dtype) { return dtype_table[dtype].size; }
const char *st_dtype_name(StDtype dtype) { return dtype_table[dtype].name; }

static int dtype_parse(const char *name, StDtype *dtype) {
    for (size_t i = 0; i < DTYPE_COUNT; i++) {
        if (strcmp(dtype_table[i].name, name) == 0) {
            *dtype = (StDtype)i;
            return 1;
        }
    }
    return 0;
}

static void fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void fail(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(err, err_len, fmt, args);
    va_end(args);
}

// "[64, 3, 7, 7]" into buf, for error messages.
static const char *shape_format(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
    return buf;
}

// Element count of a shape; 0 if it overflows 64 bits.
static int shape_numel(int ndim, const int64_t *shape, uint64_t *numel) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n)) return 0;
    }
    *numel = n;
    return 1;
}

// ---- writing -----------------------------------------------------------------------------------------

typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
    const void *data;
    void *owned;  // the copy behind `data` for st_writer_add_copy, else NULL
} WriterTensor;

struct SafetensorsWriter {
    char *final_path;
    char *temp_path;
    WriterTensor *tensors;
    size_t count, capacity;
    char **meta_keys, **meta_values;
    size_t meta_count, meta_capacity;
};

static char *string_copy(const char *s) {
    size_t len = strlen(s) + 1;
    char *copy = xcalloc(len, 1);
    memcpy(copy, s, len);
    return copy;
}

SafetensorsWriter *st_writer_open(const char *final_path) {
    SafetensorsWriter *w = xcalloc(1, sizeof *w);
    w->final_path = string_copy(final_path);
    size_t len = strlen(final_path) + 32;
    w->temp_path = xcalloc(len, 1);
    snprintf(w->temp_path, len, "%s" ST_TEMP_INFIX "%ld", final_path, (long)getpid());
    return w;
}

static void writer_free(SafetensorsWriter *w) {
    for (size_t i = 0; i < w->count; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].owned);
    }
    for (size_t i = 0; i < w->meta_count; i++) {
        free(w->meta_keys[i]);
        free(w->meta_values[i]);
    }
    free(w->tensors);
    free(w->meta_keys);
    free(w->meta_values);
    free(w->final_path);
    free(w->temp_path);
    free(w);
}

static WriterTensor *writer_push(SafetensorsWriter *w, const char *name, StDtype dtype, int ndim,
                                 const int64_t *shape) {
    AMP_ASSERT(name[0] != '\0' && strcmp(name, "__metadata__") != 0, "st_writer_add: invalid name '%s'",
               name);
    AMP_ASSERT((unsigned)dtype < DTYPE_COUNT, "st_writer_add: '%s': unknown dtype %d", name, (int)dtype);
    AMP_ASSERT(ndim >= 0 && ndim <= ST_MAX_DIMS, "st_writer_add: '%s': ndim %d not in 0..%d", name, ndim,
               ST_MAX_DIMS);
    for (size_t i = 0; i < w->count; i++)
        AMP_ASSERT(strcmp(w->tensors[i].name, name) != 0, "st_writer_add: tensor '%s' added twice", name);
    uint64_t numel;
    AMP_ASSERT(shape_numel(ndim, shape, &numel) &&
                   !__builtin_mul_overflow(numel, (uint64_t)st_dtype_size(dtype), &numel),
               "st_writer_add: '%s': invalid shape", name);
    if (w->count == w->capacity) {
        w->capacity = w->capacity ? 2 * w->capacity : 64;
        WriterTensor *grown = realloc(w->tensors, w->capacity * sizeof *grown);
        AMP_ASSERT(grown, "out of host memory growing the checkpoint's tensor list");
        w->tensors = grown;
    }
    WriterTensor *t = &w->tensors[w->count++];
    *t = (WriterTensor){.name = string_copy(name), .dtype = dtype, .ndim = ndim, .nbytes = numel};
    if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    return t;
}

void st_writer_add(SafetensorsWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                   const void *data) {
    WriterTensor *t = writer_push(w, name, dtype, ndim, shape);
    AMP_ASSERT(data || t->nbytes == 0, "st_writer_add: '%s': NULL data", name);
    t->data = data;
}

void st_writer_add_copy(SafetensorsWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                        const void *data) {
    WriterTensor *t = writer_push(w, name, dtype, ndim, shape);
    AMP_ASSERT(data || t->nbytes == 0, "st_writer_add_copy: '%s': NULL data", name);
    t->owned = xcalloc(t->nbytes ? t->nbytes : 1, 1);
    if (t->nbytes) memcpy(t->owned, data, t->nbytes);
    t->data = t->owned;
}

void st_writer_set_meta(SafetensorsWriter *w, const char *key, const char *value) {
    for (size_t i = 0; i < w->meta_count; i++) {
        if (strcmp(w->meta_keys[i], key) == 0) {
            free(w->meta_values[i]);
            w->meta_values[i] = string_copy(value);
            return;
        }
    }
    if (w->meta_count == w->meta_capacity) {
        w->meta_capacity = w->meta_capacity ? 2 * w->meta_capacity : 16;
        char **keys = realloc(w->meta_keys, w->meta_capacity * sizeof *keys);
        AMP_ASSERT(keys, "out of host memory growing the checkpoint's metadata");
        w->meta_keys = keys;
        char **values = realloc(w->meta_values, w->meta_capacity * sizeof *values);
        AMP_ASSERT(values, "out of host memory growing the checkpoint's metadata");
        w->meta_values = values;
    }
    w->meta_keys[w->meta_count] = string_copy(key);
    w->meta_values[w->meta_count] = string_copy(value);
    w->meta_count++;
}

// A growing text buffer for the JSON header.
typedef struct {
    char *text;
    size_t len, cap;
} Json;

static void json_raw(Json *j, const char *s, size_t n) {
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 4096;
        while (j->len + n + 1 > cap) cap *= 2;
        char *grown = realloc(j->text, cap);
        AMP_ASSERT(grown, "out of host memory building a checkpoint header (%zu bytes)", cap);
        j->text = grown;
        j->cap = cap;
    }
    memcpy(j->text + j->len, s, n);
    j->len += n;
    j->text[j->len] = '\0';
}

static void json_printf(Json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void json_printf(Json *j, const char *fmt, ...) {
    char piece[128];
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(piece, sizeof piece, fmt, args);
    va_end(args);
    AMP_ASSERT(n >= 0 && (size_t)n < sizeof piece, "json_printf: piece too long");
    json_raw(j, piece, (size_t)n);
}

// A JSON string literal: quotes, backslashes and control bytes escaped, UTF-8 passed through.
static void json_string(Json *j, const char *s) {
    json_raw(j, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char escaped[2] = {'\\', (char)*c};
            json_raw(j, escaped, 2);
        } else if (*c < 0x20) {
            json_printf(j, "\\u%04x", *c);
        } else {
            json_raw(j, (const char *)c, 1);
        }
    }
    json_raw(j, "\"", 1);
}

// The header: metadata first, then tensors in the order added, laid end to end. Padded with spaces
// so the data region starts 8-byte aligned in the file, as the reference writer does.
static void writer_header(const SafetensorsWriter *w, Json *j) {
    json_raw(j, "{", 1);
    const char *sep = "";
    if (w->meta_count) {
        json_raw(j, "\"__metadata__\":{", 16);
        for (size_t i = 0; i < w->meta_count; i++) {
            if (i) json_raw(j, ",", 1);
            json_string(j, w->meta_keys[i]);
            json_raw(j, ":", 1);
            json_string(j, w->meta_values[i]);
        }
        json_raw(j, "}", 1);
        sep = ",";
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < w->count; i++) {
        const WriterTensor *t = &w->tensors[i];
        json_raw(j, sep, strlen(sep));
        sep = ",";
        json_string(j, t->name);
        json_printf(j, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) json_printf(j, "%s%" PRId64, d ? "," : "", t->shape[d]);
        json_printf(j, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset, offset + t->nbytes);
        offset += t->nbytes;
    }
    json_raw(j, "}", 1);
    while (j->len % 8) json_raw(j, " ", 1);
}

static int write_all(FILE *f, const void *data, size_t n) { return n == 0 || fwrite(data, 1, n, f) == n; }

// Writes the temp file completely and durably; on failure sets err and leaves removal to the caller.
static int writer_write_temp(const SafetensorsWriter *w, char *err, size_t err_len) {
    FILE *f = fopen(w->temp_path, "wb");
    if (!f) {
        fail(err, err_len, "%s: cannot create: %s", w->temp_path, strerror(errno));
        return 0;
    }
    Json header = {0};
    writer_header(w, &header);
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)header.len >> (8 * i));
    int ok = write_all(f, prefix, sizeof prefix) && write_all(f, header.text, header.len);
    free(header.text);
    for (size_t i = 0; ok && i < w->count; i++) ok = write_all(f, w->tensors[i].data, w->tensors[i].nbytes);
    const char *step = "write";
    if (ok && !(ok = fflush(f) == 0)) step = "fflush";
    if (ok && !(ok = fsync(fileno(f)) == 0)) step = "fsync";
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        step = "fclose";
        saved = errno;
    }
    if (!ok) fail(err, err_len, "%s: %s failed: %s", w->temp_path, step, strerror(saved));
    return ok;
}

// The rename is durable only once the directory entry itself is on disk.
static int directory_sync(const char *path, char *err, size_t err_len) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    AMP_ASSERT(dir, "out of host memory");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int ok = fd >= 0 && fsync(fd) == 0;
    if (!ok) fail(err, err_len, "%s: fsync of directory '%s' failed: %s", path, dir, strerror(errno));
    if (fd >= 0) close(fd);
    free(dir);
    return ok;
}

// The digest of the data region as it will be written: the tensors end to end, in order.
static void writer_set_checksum(SafetensorsWriter *w) {
    Digest d;
    digest_init(&d);
    for (size_t i = 0; i < w->count; i++) digest_add(&d, w->tensors[i].data, w->tensors[i].nbytes);
    char hex[17];
    digest_hex(digest_end(&d), hex);
    st_writer_set_meta(w, ST_CHECKSUM_KEY, hex);
}

int st_writer_commit(SafetensorsWriter *w, char *err, size_t err_len) {
    writer_set_checksum(w);
    int ok = writer_write_temp(w, err, err_len);
    if (ok && rename(w->temp_path, w->final_path) != 0) {
        fail(err, err_len, "%s: rename from '%s' failed: %s", w->final_path, w->temp_path, strerror(errno));
        ok = 0;
    }
    if (!ok) unlink(w->temp_path);
    if (ok) ok = directory_sync(w->final_path, err, err_len);
    writer_free(w);
    return ok ? 0 : -1;
}

void st_writer_abort(SafetensorsWriter *w) {
    unlink(w->temp_path);  // only exists if a commit was interrupted; ENOENT is the normal case
    writer_free(w);
}

// ---- reading -----------------------------------------------------------------------------------------

struct SafetensorsFile {
    char *path;
    FILE *file;
    uint64_t data_start;  // 8 + header length: where the data region begins in the file
    uint64_t data_len;    // bytes in the data region
    StTensor *tensors;    // sorted by data_begin
    size_t count;
    const StTensor **by_name;  // sorted by name, for st_find
    char **meta_keys, **meta_values;
    size_t meta_count;
    uint8_t *data;  // st_load_checked's copy of the data region (data_len bytes), or NULL
};

void st_close(SafetensorsFile *f) {
    if (!f) return;
    if (f->file) fclose(f->file);
    for (size_t i = 0; i < f->count; i++) free((char *)f->tensors[i].name);
    for (size_t i = 0; i < f->meta_count; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->tensors);
    free(f->by_name);
    free(f->meta_keys);
    free(f->meta_values);
    free(f->data);
    free(f->path);
    free(f);
}

// A JSON non-negative integer (plain digits, no sign, no exponent) that fits in int64.
static int parse_u63(const YtNode *node, uint64_t *value) {
    if (node->kind != YT_SCALAR || node->quoted || node->scalar[0] == '\0') return 0;
    uint64_t v = 0;
    for (const char *c = node->scalar; *c; c++) {
        if (*c < '0' || *c > '9') return 0;
        if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, (uint64_t)(*c - '0'), &v))
            return 0;
    }
    if (v > (uint64_t)INT64_MAX) return 0;
    *value = v;
    return 1;
}

static int is_string(const YtNode *node) { return node && node->kind == YT_SCALAR && node->quoted; }

static int read_metadata(SafetensorsFile *f, const YtNode *meta, char *err, size_t err_len) {
    if (meta->kind != YT_MAP) {
        fail(err, err_len, "%s: __metadata__ must be an object of strings", f->path);
        return 0;
    }
    for (size_t i = 0; i < meta->count; i++) {
        if (!is_string(meta->items[i])) {
            fail(err, err_len, "%s: __metadata__ '%s': value must be a string", f->path, meta->keys[i]);
            return 0;
        }
    }
    f->meta_keys = xcalloc(meta->count, sizeof *f->meta_keys);
    f->meta_values = xcalloc(meta->count, sizeof *f->meta_values);
    for (size_t i = 0; i < meta->count; i++) {
        f->meta_keys[i] = string_copy(meta->keys[i]);
        f->meta_values[i] = string_copy(meta->items[i]->scalar);
        f->meta_count++;
    }
    return 1;
}

static int read_shape(const char *path, const char *name, const YtNode *node, StTensor *t, char *err,
                      size_t err_len) {
    if (!node || node->kind != YT_SEQ) {
        fail(err, err_len, "%s: tensor '%s': shape must be an array of integers", path, name);
        return 0;
    }
    if (node->count > ST_MAX_DIMS) {
        fail(err, err_len, "%s: tensor '%s': shape has %zu dims, at most %d are supported", path, name,
             node->count, ST_MAX_DIMS);
        return 0;
    }
    t->ndim = (int)node->count;
    for (size_t d = 0; d < node->count; d++) {
        uint64_t dim;
        if (!parse_u63(node->items[d], &dim)) {
            fail(err, err_len, "%s: tensor '%s': shape[%zu] '%s' is not a non-negative integer", path, name,
                 d, node->items[d]->kind == YT_SCALAR ? node->items[d]->scalar : "(not a number)");
            return 0;
        }
        t->shape[d] = (int64_t)dim;
    }
    if (!shape_numel(t->ndim, t->shape, &t->numel) ||
        __builtin_mul_overflow(t->numel, (uint64_t)st_dtype_size(t->dtype), &t->nbytes)) {
        fail(err, err_len, "%s: tensor '%s': shape overflows 64 bits", path, name);
        return 0;
    }
    return 1;
}

// One header entry: exactly dtype, shape and data_offsets, consistent with each other and the file.
static int read_tensor(SafetensorsFile *f, const char *name, const YtNode *entry, StTensor *t, char *err,
                       size_t err_len) {
    if (entry->kind != YT_MAP) {
        fail(err, err_len, "%s: tensor '%s': entry must be an object", f->path, name);
        return 0;
    }
    for (size_t i = 0; i < entry->count; i++) {
        const char *field = entry->keys[i];
        if (strcmp(field, "dtype") && strcmp(field, "shape") && strcmp(field, "data_offsets")) {
            fail(err, err_len, "%s: tensor '%s': unexpected field '%s'", f->path, name, field);
            return 0;
        }
    }
    const YtNode *dtype = yt_map_get(entry, "dtype");
    if (!is_string(dtype)) {
        fail(err, err_len, "%s: tensor '%s': dtype must be a string", f->path, name);
        return 0;
    }
    if (!dtype_parse(dtype->scalar, &t->dtype)) {
        fail(err, err_len,
             "%s: tensor '%s': dtype '%s' is not one of F64, F32, F16, BF16, I64, I32, I16, I8, "
             "U8, BOOL",
             f->path, name, dtype->scalar);
        return 0;
    }
    if (!read_shape(f->path, name, yt_map_get(entry, "shape"), t, err, err_len)) return 0;
    const YtNode *offsets = yt_map_get(entry, "data_offsets");
    uint64_t begin, end;
    if (!offsets || offsets->kind != YT_SEQ || offsets->count != 2 || !parse_u63(offsets->items[0], &begin) ||
        !parse_u63(offsets->items[1], &end) || begin > end) {
        fail(err, err_len, "%s: tensor '%s': data_offsets must be [begin, end] with 0 <= begin <= end",
             f->path, name);
        return 0;
    }
    char shape_text[160];
    if (end - begin != t->nbytes) {
        fail(err, err_len,
             "%s: tensor '%s': shape %s of %s is %" PRIu64 " bytes but data_offsets [%" PRIu64 ", %" PRIu64
             "] span %" PRIu64,
             f->path, name, shape_format(t->ndim, t->shape, shape_text, sizeof shape_text),
             st_dtype_name(t->dtype), t->nbytes, begin, end, end - begin);
        return 0;
    }
    if (end > f->data_len) {
        fail(err, err_len,
             "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] exceed the file's data (%" PRIu64
             " bytes)",
             f->path, name, begin, end, f->data_len);
        return 0;
    }
    t->data_begin = begin;
    t->name = string_copy(name);
    return 1;
}

static int tensor_by_offset(const void *a, const void *b) {
    const StTensor *ta = a, *tb = b;
    if (ta->data_begin != tb->data_begin) return ta->data_begin < tb->data_begin ? -1 : 1;
    return (ta->nbytes > tb->nbytes) - (ta->nbytes < tb->nbytes);
}

static int tensor_by_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

// Sorted by offset, the tensors must tile the data region: each begins where the previous ended.
static int check_tiling(const SafetensorsFile *f, char *err, size_t err_len) {
    uint64_t covered = 0;
    for (size_t i = 0; i < f->count; i++) {
        const StTensor *t = &f->tensors[i];
        uint64_t end = t->data_begin + t->nbytes;
        if (t->data_begin < covered) {
            const StTensor *prev = &f->tensors[i - 1];
            fail(err, err_len,
                 "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor '%s' [%" PRIu64
                 ", %" PRIu64 "]",
                 f->path, t->name, t->data_begin, end, prev->name, prev->data_begin,
                 prev->data_begin + prev->nbytes);
            return 0;
        }
        if (t->data_begin > covered) {
            fail(err, err_len,
                 "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] leave a gap after byte %" PRIu64
                 " of the data",
                 f->path, t->name, t->data_begin, end, covered);
            return 0;
        }
        covered = end;
    }
    if (covered != f->data_len) {
        fail(err, err_len, "%s: the tensors cover %" PRIu64 " bytes but the data region has %" PRIu64,
             f->path, covered, f->data_len);
        return 0;
    }
    return 1;
}

static int read_header_tree(SafetensorsFile *f, const YtNode *root, char *err, size_t err_len) {
    if (root->kind != YT_MAP) {
        fail(err, err_len, "%s: header is not a JSON object", f->path);
        return 0;
    }
    f->tensors = xcalloc(root->count, sizeof *f->tensors);
    for (size_t i = 0; i < root->count; i++) {
        if (strcmp(root->keys[i], "__metadata__") == 0) {
            if (!read_metadata(f, root->items[i], err, err_len)) return 0;
        } else {
            if (!read_tensor(f, root->keys[i], root->items[i], &f->tensors[f->count], err, err_len)) return 0;
            f->count++;
        }
    }
    qsort(f->tensors, f->count, sizeof *f->tensors, tensor_by_offset);
    if (!check_tiling(f, err, err_len)) return 0;
    // Names are unique already: yaml_tree rejects duplicate keys.
    f->by_name = xcalloc(f->count, sizeof *f->by_name);
    for (size_t i = 0; i < f->count; i++) f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, f->count, sizeof *f->by_name, tensor_by_name);
    return 1;
}

// Reads the length prefix and the header bytes, bounded by the file size; returns the header or NULL.
static char *read_header_bytes(SafetensorsFile *f, uint64_t *header_len, char *err, size_t err_len) {
    struct stat st;
    if (fstat(fileno(f->file), &st) != 0 || !S_ISREG(st.st_mode)) {
        fail(err, err_len, "%s: not a regular file", f->path);
        return NULL;
    }
    uint64_t file_size = (uint64_t)st.st_size;
    unsigned char prefix[8];
    if (file_size < 8 || fread(prefix, 1, 8, f->file) != 8) {
        fail(err, err_len, "%s: file is %" PRIu64 " bytes, too short for the 8-byte header length", f->path,
             file_size);
        return NULL;
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)prefix[i] << (8 * i);
    if (n > file_size - 8) {
        fail(err, err_len, "%s: header length %" PRIu64 " exceeds the file (%" PRIu64 " bytes)", f->path, n,
             file_size);
        return NULL;
    }
    if (n > ST_MAX_HEADER_BYTES) {
        fail(err, err_len, "%s: header length %" PRIu64 " exceeds the %llu-byte limit", f->path, n,
             ST_MAX_HEADER_BYTES);
        return NULL;
    }
    if (n < 2) {
        fail(err, err_len, "%s: header length %" PRIu64 " is too short for a JSON object", f->path, n);
        return NULL;
    }
    char *header = xcalloc(n + 1, 1);
    if (fread(header, 1, n, f->file) != n) {
        fail(err, err_len, "%s: cannot read the %" PRIu64 "-byte header: %s", f->path, n,
             ferror(f->file) ? strerror(errno) : "file shrank while reading");
        free(header);
        return NULL;
    }
    *header_len = n;
    f->data_start = 8 + n;
    f->data_len = file_size - 8 - n;
    return header;
}

SafetensorsFile *st_open(const char *path, char *err, size_t err_len) {
    SafetensorsFile *f = xcalloc(1, sizeof *f);
    f->path = string_copy(path);
    // O_NONBLOCK: a FIFO would block the open until a writer came; read_header_bytes refuses it instead.
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    f->file = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f->file) {
        if (fd >= 0) close(fd);
        fail(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        st_close(f);
        return NULL;
    }
    uint64_t header_len;
    char *header = read_header_bytes(f, &header_len, err, err_len);
    if (!header) {
        st_close(f);
        return NULL;
    }
    // A YAML block mapping would parse too; the format says JSON, so the header must open an object.
    size_t first = strspn(header, " \t\r\n");
    if (header[first] != '{') {
        fail(err, err_len, "%s: header is not a JSON object (it starts with '%.16s')", path, header + first);
        free(header);
        st_close(f);
        return NULL;
    }
    YtNode *root = yt_parse_buffer(header, header_len, path, err, err_len);
    free(header);
    int ok = root && read_header_tree(f, root, err, err_len);
    yt_free(root);
    if (!ok) {
        st_close(f);
        return NULL;
    }
    return f;
}

size_t st_count(const SafetensorsFile *f) { return f->count; }

const StTensor *st_tensor(const SafetensorsFile *f, size_t index) {
    return index < f->count ? &f->tensors[index] : NULL;
}

const StTensor *st_find(const SafetensorsFile *f, const char *name) {
    StTensor key = {.name = name};
    const StTensor *key_ptr = &key;
    const StTensor **hit = bsearch(&key_ptr, f->by_name, f->count, sizeof *f->by_name, tensor_by_name);
    return hit ? *hit : NULL;
}

const char *st_path(const SafetensorsFile *f) { return f->path; }

const char *st_meta(const SafetensorsFile *f, const char *key) {
    for (size_t i = 0; i < f->meta_count; i++) {
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    }
    return NULL;
}

int st_read(SafetensorsFile *f, const char *name, StDtype dtype, int ndim, const int64_t *shape, void *dst,
            char *err, size_t err_len) {
    const StTensor *t = st_find(f, name);
    if (!t) {
        fail(err, err_len, "%s: no tensor '%s'", f->path, name);
        return -1;
    }
    int same = t->dtype == dtype && t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char found[160], expected[160];
        fail(err, err_len, "%s: tensor '%s' is %s %s, expected %s %s", f->path, name, st_dtype_name(t->dtype),
             shape_format(t->ndim, t->shape, found, sizeof found), st_dtype_name(dtype),
             shape_format(ndim, shape, expected, sizeof expected));
        return -1;
    }
    if (t->nbytes == 0) return 0;
    if (f->data) {
        memcpy(dst, f->data + t->data_begin, t->nbytes);
        return 0;
    }
    if (fseeko(f->file, (off_t)(f->data_start + t->data_begin), SEEK_SET) != 0 ||
        fread(dst, 1, t->nbytes, f->file) != t->nbytes) {
        fail(err, err_len, "%s: tensor '%s': cannot read %" PRIu64 " bytes: %s", f->path, name, t->nbytes,
             ferror(f->file) ? strerror(errno) : "file shrank since it was opened");
        clearerr(f->file);
        return -1;
    }
    return 0;
}

int st_load_checked(SafetensorsFile *f, char *err, size_t err_len) {
    if (!f->data) {
        uint8_t *data = xcalloc(f->data_len ? f->data_len : 1, 1);
        if (fseeko(f->file, (off_t)f->data_start, SEEK_SET) != 0 ||
            fread(data, 1, f->data_len, f->file) != f->data_len) {
            fail(err, err_len, "%s: cannot read its %" PRIu64 " bytes of tensor data: %s", f->path,
                 f->data_len, ferror(f->file) ? strerror(errno) : "file shrank since it was opened");
            clearerr(f->file);
            free(data);
            return -1;
        }
        f->data = data;
    }
    const char *want = st_meta(f, ST_CHECKSUM_KEY);
    if (!want) return 1;
    Digest d;
    digest_init(&d);
    digest_add(&d, f->data, f->data_len);
    char got[17];
    digest_hex(digest_end(&d), got);
    if (strcmp(got, want) == 0) return 0;
    fail(err, err_len,
         "%s: the tensor data's checksum is %s, its metadata says %s: the file is damaged or was "
         "overwritten while it was read",
         f->path, got, want);
    return -1;
}
