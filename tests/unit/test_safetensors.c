// test_safetensors.c - checkpoint files: bitwise roundtrip, byte layout against the format spec, every
// corruption rejected with its own message, shape checks on read, and the atomic replace.
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"
#include "core/digest.h"
#include "tests/test_util.h"

static char err[1024];

// The whole file, malloc'd; *len gets its size.
static unsigned char *file_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc((size_t)size + 1);
    ck_assert_uint_eq(fread(bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *len = (size_t)size;
    return bytes;
}

// A hand-made file: the given length prefix, header text and data bytes, as any writer could produce.
static void write_raw(const char *path, uint64_t declared_len, const char *header, const void *data,
                      size_t data_len) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)(declared_len >> (8 * i));
    ck_assert_uint_eq(fwrite(prefix, 1, 8, f), 8);
    ck_assert_uint_eq(fwrite(header, 1, strlen(header), f), strlen(header));
    if (data_len) ck_assert_uint_eq(fwrite(data, 1, data_len, f), data_len);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_file(const char *path, const char *header, const void *data, size_t data_len) {
    write_raw(path, strlen(header), header, data, data_len);
}

// Number of entries in "." whose name starts with `prefix` and contains ".tmp.".
static int temp_files_left(const char *prefix) {
    DIR *dir = opendir(".");
    ck_assert_ptr_nonnull(dir);
    int found = 0;
    for (struct dirent *e; (e = readdir(dir));)
        found += strncmp(e->d_name, prefix, strlen(prefix)) == 0 && strstr(e->d_name, ".tmp.") != NULL;
    closedir(dir);
    return found;
}

START_TEST(roundtrip_is_bitwise) {
    float w[3 * 4];
    tu_fill_uniform(w, 12, 7, -2.0f, 2.0f);
    w[5] = -0.0f;
    uint16_t h[5] = {0x3c00, 0x7bff, 0x8001, 0x7c00, 0xfe00};  // 1, max, -tiny subnormal, inf, NaN
    int64_t ids[2] = {INT64_MIN, 1234567890123ll};
    int64_t step = 4242;
    const int64_t w_shape[2] = {3, 4}, h_shape[1] = {5}, ids_shape[1] = {2};

    SafetensorsWriter *writer = st_writer_open("rt.safetensors");
    st_writer_add(writer, "layer1.0.conv1.weight", ST_F32, 2, w_shape, w);
    st_writer_add(writer, "fc.weight_fp16", ST_F16, 1, h_shape, h);
    st_writer_add_copy(writer, "sampler.ids", ST_I64, 1, ids_shape, ids);
    st_writer_add(writer, "step", ST_I64, 0, NULL, &step);
    ids[0] = 0;  // add_copy took its own copy
    st_writer_set_meta(writer, "format", "pt");
    st_writer_set_meta(writer, "config", "runs/seed \"a\"\\b\n");
    st_writer_set_meta(writer, "format", "amptrain");
    ck_assert_msg(st_writer_commit(writer, err, sizeof err) == 0, "%s", err);

    SafetensorsFile *f = st_open("rt.safetensors", err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_uint_eq(st_count(f), 4);
    const char *order[] = {"layer1.0.conv1.weight", "fc.weight_fp16", "sampler.ids", "step"};
    for (size_t i = 0; i < 4; i++) ck_assert_str_eq(st_tensor(f, i)->name, order[i]);
    ck_assert_ptr_null(st_tensor(f, 4));

    const StTensor *t = st_find(f, "layer1.0.conv1.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, ST_F32);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], 3);
    ck_assert_int_eq(t->shape[1], 4);
    ck_assert_uint_eq(t->numel, 12);
    ck_assert_uint_eq(t->nbytes, 48);
    ck_assert_ptr_null(st_find(f, "layer1.0.conv1.bias"));
    ck_assert_int_eq(st_find(f, "step")->ndim, 0);
    ck_assert_uint_eq(st_find(f, "step")->nbytes, 8);

    float w_back[12];
    uint16_t h_back[5];
    int64_t ids_back[2], step_back = 0;
    ck_assert_msg(st_read(f, "layer1.0.conv1.weight", ST_F32, 2, w_shape, w_back, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_msg(st_read(f, "fc.weight_fp16", ST_F16, 1, h_shape, h_back, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(st_read(f, "sampler.ids", ST_I64, 1, ids_shape, ids_back, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(st_read(f, "step", ST_I64, 0, NULL, &step_back, err, sizeof err) == 0, "%s", err);
    ck_assert_mem_eq(w_back, w, sizeof w);
    ck_assert_mem_eq(h_back, h, sizeof h);
    ck_assert(ids_back[0] == INT64_MIN && ids_back[1] == 1234567890123ll);
    ck_assert(step_back == 4242);

    ck_assert_str_eq(st_meta(f, "format"), "amptrain");
    ck_assert_str_eq(st_meta(f, "config"), "runs/seed \"a\"\\b\n");
    ck_assert_ptr_null(st_meta(f, "missing"));
    st_close(f);
}
END_TEST

START_TEST(layout_matches_the_spec) {
    const float a[2] = {1.0f, -2.5f};
    const int32_t b[3] = {7, -8, 9};
    const int64_t a_shape[1] = {2}, b_shape[1] = {3};
    SafetensorsWriter *writer = st_writer_open("layout.safetensors");
    st_writer_add(writer, "a", ST_F32, 1, a_shape, a);
    st_writer_add(writer, "b", ST_I32, 1, b_shape, b);
    st_writer_set_meta(writer, "k", "v");
    ck_assert_msg(st_writer_commit(writer, err, sizeof err) == 0, "%s", err);

    size_t len;
    unsigned char *bytes = file_slurp("layout.safetensors", &len);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)bytes[i] << (8 * i);
    // data_checksum: the digest of the 20 data bytes by the formula in core/digest.h, computed in Python
    const char *json = "{\"__metadata__\":{\"k\":\"v\",\"data_checksum\":\"35619fdb178c2919\"},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[8,20]}}";
    size_t json_len = strlen(json);
    ck_assert_uint_eq(n % 8, 0);  // data region 8-byte aligned in the file
    ck_assert_uint_ge(n, json_len);
    ck_assert_uint_lt(n, json_len + 8);
    ck_assert_uint_eq(len, 8 + n + 20);
    ck_assert_mem_eq(bytes + 8, json, json_len);
    for (size_t i = json_len; i < n; i++) ck_assert_int_eq(bytes[8 + i], ' ');
    ck_assert_mem_eq(bytes + 8 + n, a, 8);
    ck_assert_mem_eq(bytes + 8 + n + 8, b, 12);
    free(bytes);
}
END_TEST

// The digest against values of the Python formula in core/digest.h, however the bytes are fed.
START_TEST(digest_matches_its_formula) {
    static const struct {
        const char *bytes;
        size_t len;
        const char *hex;
    } cases[] = {{"", 0, "0ca884aec830c74d"},
                 {"abc", 3, "c516d00fb629a00f"},
                 {"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13", 20,
                  "f9d7a48a54a9ee2c"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t split = 0; split <= cases[i].len; split++) {
            Digest d;
            digest_init(&d);
            digest_add(&d, cases[i].bytes, split);
            digest_add(&d, cases[i].bytes + split, cases[i].len - split);
            char hex[17];
            digest_hex(digest_end(&d), hex);
            ck_assert_msg(!strcmp(hex, cases[i].hex), "case %zu split %zu: %s, want %s", i, split, hex,
                          cases[i].hex);
        }
}
END_TEST

// st_load_checked: a whole file passes; a flipped data byte fails naming both checksums; reads after a check
// come from the checked copy even when the file changes beneath them; a file without a checksum is 1.
START_TEST(checksum_catches_changed_data) {
    const float a[4] = {1, 2, 3, 4};
    const int64_t shape[1] = {4};
    SafetensorsWriter *w = st_writer_open("sum.safetensors");
    st_writer_add(w, "a", ST_F32, 1, shape, a);
    ck_assert_msg(st_writer_commit(w, err, sizeof err) == 0, "%s", err);
    SafetensorsFile *f = st_open("sum.safetensors", err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_int_eq(st_load_checked(f, err, sizeof err), 0);
    size_t len;
    unsigned char *bytes = file_slurp("sum.safetensors", &len);
    bytes[len - 3] ^= 0x10;  // a bit of a[3]
    FILE *out = fopen("sum.safetensors", "r+b");
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(fwrite(bytes, 1, len, out), len);
    fclose(out);
    float back[4];
    ck_assert_int_eq(st_read(f, "a", ST_F32, 1, shape, back, err, sizeof err), 0);
    ck_assert_mem_eq(back, a, sizeof a);  // the checked copy, not the changed file
    st_close(f);
    f = st_open("sum.safetensors", err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_int_eq(st_load_checked(f, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "sum.safetensors: the tensor data's checksum is ") &&
                      strstr(err, "the file is damaged"),
                  "%s", err);
    st_close(f);
    // the key renamed (same length, so the header stays valid): no checksum to compare
    size_t at = 0, key_len = strlen(ST_CHECKSUM_KEY);
    while (at + key_len <= len && memcmp(bytes + at, ST_CHECKSUM_KEY, key_len) != 0) at++;
    ck_assert_uint_lt(at + key_len, len);
    bytes[at] = 'D';
    out = fopen("sum.safetensors", "wb");
    ck_assert_uint_eq(fwrite(bytes, 1, len, out), len);
    fclose(out);
    f = st_open("sum.safetensors", err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_int_eq(st_load_checked(f, err, sizeof err), 1);
    st_close(f);
    free(bytes);
}
END_TEST

START_TEST(reads_files_other_writers_make) {
    // As Python's json.dumps may write it: spaces after separators, a `\/` escape, no padding, and the
    // tensors listed out of data order.
    const char *header = "{\"b\": {\"dtype\": \"F16\", \"shape\": [1, 2], \"data_offsets\": [8, 12]}, "
                         "\"__metadata__\": {\"source\": \"torch\\/vision\"}, "
                         "\"a\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [0, 8]}}";
    unsigned char data[12] = {5, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x3c, 0x00, 0xc0};
    write_file("other.safetensors", header, data, sizeof data);
    SafetensorsFile *f = st_open("other.safetensors", err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_str_eq(st_meta(f, "source"), "torch/vision");
    ck_assert_str_eq(st_tensor(f, 0)->name, "a");
    ck_assert_str_eq(st_tensor(f, 1)->name, "b");
    int64_t a = 0;
    uint16_t b[2];
    const int64_t b_shape[2] = {1, 2};
    ck_assert_msg(st_read(f, "a", ST_I64, 0, NULL, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(st_read(f, "b", ST_F16, 2, b_shape, b, err, sizeof err) == 0, "%s", err);
    ck_assert(a == 5);
    ck_assert_uint_eq(b[0], 0x3c00);  // 1.0
    ck_assert_uint_eq(b[1], 0xc000);  // -2.0
    st_close(f);
}
END_TEST

// Each corrupt file and the words its rejection must contain.
static const struct {
    const char *what, *header;
    size_t data_len;
    const char *expected;
} corrupt_cases[] = {
    {"truncated data", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
     "c.safetensors: tensor 'w': data_offsets [0, 16] exceed the file's data (8 bytes)"},
    {"not JSON", "hello, world!", 0, "c.safetensors: header is not a JSON object"},
    {"JSON syntax", "{\"w\":{\"dtype\":\"F32\",\n\"shape\":[1] \"data_offsets\":[0,4]}}", 4,
     "c.safetensors:2: did not find expected ',' or '}'"},
    {"shape vs offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
     "tensor 'w': shape [3] of F32 is 12 bytes but data_offsets [0, 8] span 8"},
    {"overlap",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     12, "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]"},
    {"gap",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     12, "tensor 'b': data_offsets [8, 12] leave a gap after byte 4"},
    {"uncovered tail", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
     "the tensors cover 8 bytes but the data region has 12"},
    {"wrong dtype", "{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "tensor 'w': dtype 'F33' is not one of"},
    {"dtype not a string", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "tensor 'w': dtype must be a string"},
    {"negative dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
     "tensor 'w': shape[0] '-1' is not a non-negative integer"},
    {"shape not an array", "{\"w\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4,
     "tensor 'w': shape must be an array of integers"},
    {"offsets missing", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
     "tensor 'w': data_offsets must be [begin, end]"},
    {"offsets reversed", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4,
     "tensor 'w': data_offsets must be [begin, end]"},
    {"unknown field", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
     "tensor 'w': unexpected field 'x'"},
    {"duplicate name",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, "c.safetensors:1: duplicate key 'a'"},
    {"metadata not a string", "{\"__metadata__\":{\"step\":12}}", 0,
     "__metadata__ 'step': value must be a string"},
    {"too many dims", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
     "shape has 9 dims, at most 8"},
    {"shape overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
     4, "tensor 'w': shape overflows 64 bits"},
};

START_TEST(corrupt_files_rejected) {
    const unsigned char data[16] = {0};
    for (size_t i = 0; i < sizeof corrupt_cases / sizeof *corrupt_cases; i++) {
        ck_assert_uint_le(corrupt_cases[i].data_len, sizeof data);
        write_file("c.safetensors", corrupt_cases[i].header, data, corrupt_cases[i].data_len);
        err[0] = '\0';
        SafetensorsFile *f = st_open("c.safetensors", err, sizeof err);
        ck_assert_msg(f == NULL, "%s: accepted", corrupt_cases[i].what);
        ck_assert_msg(strstr(err, corrupt_cases[i].expected) != NULL, "%s: error '%s' lacks '%s'",
                      corrupt_cases[i].what, err, corrupt_cases[i].expected);
    }
}
END_TEST

START_TEST(bad_length_prefix_rejected) {
    const char *header = "{}";
    write_raw("len.safetensors", 1000, header, NULL, 0);
    ck_assert_ptr_null(st_open("len.safetensors", err, sizeof err));
    ck_assert_msg(strstr(err, "len.safetensors: header length 1000 exceeds the file (10 bytes)"), "%s", err);

    // A sparse file big enough that the length fits in it, yet over the 100 MB header limit.
    write_raw("len.safetensors", 150000000, header, NULL, 0);
    ck_assert_int_eq(truncate("len.safetensors", 150000008), 0);
    ck_assert_ptr_null(st_open("len.safetensors", err, sizeof err));
    ck_assert_msg(strstr(err, "header length 150000000 exceeds the 100000000-byte limit"), "%s", err);
    unlink("len.safetensors");

    tu_write_file("short.safetensors", "abc");
    ck_assert_ptr_null(st_open("short.safetensors", err, sizeof err));
    ck_assert_msg(strstr(err, "short.safetensors: file is 3 bytes, too short"), "%s", err);

    ck_assert_ptr_null(st_open("absent.safetensors", err, sizeof err));
    ck_assert_msg(strstr(err, "absent.safetensors: cannot open: No such file or directory"), "%s", err);
}
END_TEST

START_TEST(read_refuses_mismatch) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    const int64_t shape[2] = {2, 3}, transposed[2] = {3, 2}, flat[1] = {6};
    SafetensorsWriter *writer = st_writer_open("mismatch.safetensors");
    st_writer_add(writer, "fc.weight", ST_F32, 2, shape, w);
    ck_assert_msg(st_writer_commit(writer, err, sizeof err) == 0, "%s", err);
    SafetensorsFile *f = st_open("mismatch.safetensors", err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);

    float dst[6] = {0};
    ck_assert_int_eq(st_read(f, "fc.weight", ST_F32, 2, transposed, dst, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tensor 'fc.weight' is F32 [2, 3], expected F32 [3, 2]"), "%s", err);
    ck_assert_int_eq(st_read(f, "fc.weight", ST_F32, 1, flat, dst, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is F32 [2, 3], expected F32 [6]"), "%s", err);
    ck_assert_int_eq(st_read(f, "fc.weight", ST_F16, 2, shape, dst, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is F32 [2, 3], expected F16 [2, 3]"), "%s", err);
    ck_assert_int_eq(st_read(f, "fc.bias", ST_F32, 1, flat, dst, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "mismatch.safetensors: no tensor 'fc.bias'"), "%s", err);
    for (int i = 0; i < 6; i++) ck_assert(dst[i] == 0.0f);  // nothing written on refusal
    st_close(f);
}
END_TEST

static void write_single(const char *path, float value) {
    const int64_t shape[1] = {1};
    SafetensorsWriter *writer = st_writer_open(path);
    st_writer_add_copy(writer, "x", ST_F32, 1, shape, &value);
    ck_assert_msg(st_writer_commit(writer, err, sizeof err) == 0, "%s", err);
}

static float read_single(const char *path) {
    const int64_t shape[1] = {1};
    SafetensorsFile *f = st_open(path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    float value = 0;
    ck_assert_msg(st_read(f, "x", ST_F32, 1, shape, &value, err, sizeof err) == 0, "%s", err);
    st_close(f);
    return value;
}

START_TEST(commit_replaces_atomically) {
    write_single("atomic.safetensors", 1.0f);
    ck_assert(read_single("atomic.safetensors") == 1.0f);
    write_single("atomic.safetensors", 2.0f);
    ck_assert(read_single("atomic.safetensors") == 2.0f);
    ck_assert_int_eq(temp_files_left("atomic.safetensors"), 0);
}
END_TEST

START_TEST(abort_leaves_old_file) {
    write_single("keep.safetensors", 3.0f);
    size_t before_len, after_len;
    unsigned char *before = file_slurp("keep.safetensors", &before_len);

    const float big[4] = {9, 9, 9, 9};
    const int64_t shape[1] = {4};
    SafetensorsWriter *writer = st_writer_open("keep.safetensors");
    st_writer_add(writer, "x", ST_F32, 1, shape, big);
    st_writer_set_meta(writer, "step", "99");
    st_writer_abort(writer);

    unsigned char *after = file_slurp("keep.safetensors", &after_len);
    ck_assert_uint_eq(after_len, before_len);
    ck_assert_mem_eq(after, before, before_len);
    ck_assert_int_eq(temp_files_left("keep.safetensors"), 0);
    free(before);
    free(after);
}
END_TEST

START_TEST(failed_commit_cleans_up) {
    const float x = 1.0f;
    const int64_t shape[1] = {1};
    // Renaming a file onto a directory fails after the temp file is complete.
    ck_assert(mkdir("ckdir", 0755) == 0 || tu_file_exists("ckdir"));
    SafetensorsWriter *writer = st_writer_open("ckdir");
    st_writer_add(writer, "x", ST_F32, 1, shape, &x);
    ck_assert_int_eq(st_writer_commit(writer, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "ckdir: rename from 'ckdir.tmp.") && strstr(err, "Is a directory"), "%s", err);
    ck_assert_int_eq(temp_files_left("ckdir"), 0);

    // A missing folder fails at creation and names the path and errno.
    writer = st_writer_open("no_such_dir/ckpt.safetensors");
    st_writer_add(writer, "x", ST_F32, 1, shape, &x);
    ck_assert_int_eq(st_writer_commit(writer, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "no_such_dir/ckpt.safetensors.tmp.") &&
                      strstr(err, "cannot create: No such file or directory"),
                  "%s", err);
}
END_TEST

static Suite *safetensors_suite(void) {
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("format");
    tcase_add_test(tc, roundtrip_is_bitwise);
    tcase_add_test(tc, layout_matches_the_spec);
    tcase_add_test(tc, digest_matches_its_formula);
    tcase_add_test(tc, checksum_catches_changed_data);
    tcase_add_test(tc, reads_files_other_writers_make);
    tcase_add_test(tc, corrupt_files_rejected);
    tcase_add_test(tc, bad_length_prefix_rejected);
    tcase_add_test(tc, read_refuses_mismatch);
    tcase_add_test(tc, commit_replaces_atomically);
    tcase_add_test(tc, abort_leaves_old_file);
    tcase_add_test(tc, failed_commit_cleans_up);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(safetensors_suite(), 1); }
