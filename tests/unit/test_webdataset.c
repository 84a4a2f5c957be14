// test_webdataset.c - src/data/sources/webdataset.c: the tar shard index and the sample reader, without decoding.
//
// The shards are written by independent writers: tools/pack-shards (Python's tarfile, from an ImageFolder
// this file makes), Python's tarfile in its three formats (ustar with the prefix field, GNU long names,
// pax headers) and GNU tar. Member contents are bytes given by content_byte below, so every read is
// checked byte for byte against what the writer was given, and every label against the class it came from.
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/sources/webdataset.h"
#include "tests/test_util.h"

// Byte j of a fixture member of n bytes with this salt (the same rule as mktar.py's "@n,salt").
static uint8_t content_byte(long j, long salt) { return (uint8_t)((j * 31 + salt) % 251); }

// mktar.py OUT FORMAT SPEC...: a tar written by Python's tarfile. SPEC is KIND|NAME|CONTENT with KIND f
// (a file: CONTENT "@n,salt" for content_byte's bytes, else the text itself), d (a directory) or l (a
// symbolic link to CONTENT).
static const char *const MKTAR_PY =
    "import io, sys, tarfile\n"
    "fmt = {'ustar': tarfile.USTAR_FORMAT, 'gnu': tarfile.GNU_FORMAT, 'pax': tarfile.PAX_FORMAT}[sys.argv[2]]\n"
    "with tarfile.open(sys.argv[1], 'w', format=fmt) as tar:\n"
    "    for spec in sys.argv[3:]:\n"
    "        kind, name, content = spec.split('|', 2)\n"
    "        info = tarfile.TarInfo(name)\n"
    "        if kind == 'd':\n"
    "            info.type = tarfile.DIRTYPE\n"
    "            tar.addfile(info)\n"
    "        elif kind == 'l':\n"
    "            info.type, info.linkname = tarfile.SYMTYPE, content\n"
    "            tar.addfile(info)\n"
    "        else:\n"
    "            if content.startswith('@'):\n"
    "                n, salt = map(int, content[1:].split(','))\n"
    "                data = bytes((j * 31 + salt) % 251 for j in range(n))\n"
    "            else:\n"
    "                data = content.encode()\n"
    "            info.size = len(data)\n"
    "            tar.addfile(info, io.BytesIO(data))\n";

static void run_ok(const char *cmd) {
    char out[8192];
    int rc = tu_run_shell(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "'%s' exited with %d:\n%s", cmd, rc, out);
}

// A fresh empty folder.
static void fresh_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    run_ok(cmd);
}

// dir/name.tar from the specs (see MKTAR_PY), in a format of Python's tarfile.
static void mktar(const char *dir, const char *name, const char *format, const char *specs) {
    tu_write_file("mktar.py", MKTAR_PY);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "python3 mktar.py '%s/%s' %s %s 2>&1", dir, name, format, specs);
    run_ok(cmd);
}

static void write_content(const char *path, long n, long salt) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (long j = 0; j < n; j++) ck_assert_int_ne(fputc(content_byte(j, salt), f), EOF);
    ck_assert_int_eq(fclose(f), 0);
}

// Sample `index` reads back as n bytes of content_byte(., salt) with this label.
static void expect_sample(const EncodedSource *src, int index, long n, long salt, int label) {
    uint8_t *bytes = NULL;
    size_t len = 0;
    int32_t got_label = -1;
    char err[512] = "";
    ck_assert_msg(src->read(src, index, &bytes, &len, &got_label, err, sizeof err) == 0, "sample %d: %s",
                  index, err);
    ck_assert_msg(len == (size_t)n, "sample %d: %zu bytes, expected %ld", index, len, n);
    long j = 0;  // the first wrong byte, found before one assertion (an assertion per byte made the
                 // six-thread test take minutes under the sanitizers)
    while (j < n && bytes[j] == content_byte(j, salt)) j++;
    ck_assert_msg(j == n, "sample %d byte %ld: %d, expected %d", index, j, j < n ? bytes[j] : -1,
                  j < n ? content_byte(j, salt) : -1);
    ck_assert_int_eq(got_label, label);
    free(bytes);
}

// Opening dir's split fails with exit code 2 and a message holding each of the fragments (NULL-ended).
static void expect_refused(const char *dir, const char *split, int classes, const char *const *fragments) {
    EncodedSource *src = (EncodedSource *)1;
    char err[1024] = "";
    ck_assert_int_eq(webdataset_open(dir, split, classes, 0, &src, err, sizeof err), 2);
    ck_assert_ptr_null(src);
    for (const char *const *f = fragments; *f; f++)
        ck_assert_msg(strstr(err, *f), "message '%s' lacks '%s'", err, *f);
}

// ---- an ImageFolder through tools/pack-shards ------------------------------------------------------

// The fixture in torchvision's ImageFolder order: classes sorted (a_cat, b_dog, c_eel), files sorted by
// path within a class (so "10.jpg" before "9.jpg", the subfolder after the files beside it), notes.txt
// left out. Sizes straddle the 512-byte block.
typedef struct FolderFile {
    const char *path;  // under the split's folder
    long size;
    int label;
} FolderFile;

static const FolderFile TRAIN_FILES[] = {
    {"a_cat/10.jpg", 513, 0},  {"a_cat/9.JPEG", 0, 0},    {"a_cat/x.jpg", 512, 0},   {"a_cat/z/1.jpg", 1, 0},
    {"b_dog/1.jpg", 70001, 1}, {"c_eel/a.b.jpg", 511, 2}, {"c_eel/b.jpeg", 3000, 2},
};
static const FolderFile VAL_FILES[] = {
    {"a_cat/v.jpg", 100, 0}, {"b_dog/v.jpg", 200, 1}, {"c_eel/v.jpg", 300, 2}};
#define N_TRAIN ((int)(sizeof TRAIN_FILES / sizeof TRAIN_FILES[0]))
#define N_VAL ((int)(sizeof VAL_FILES / sizeof VAL_FILES[0]))

static void folder_write(const char *root, const char *split, const FolderFile *files, int n, long salt0) {
    char path[512], cmd[1024];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s/%s", root, split, files[i].path);
        snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
        run_ok(cmd);
        write_content(path, files[i].size, salt0 + i);
    }
    snprintf(path, sizeof path, "%s/%s/a_cat/notes.txt", root, split);
    tu_write_file(path, "not an image\n");
}

static void pack(const char *root, const char *out, int shard_size) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 %s/tools/pack-shards '%s' '%s' --shard-size %d 2>&1",
             AMPTRAIN_SOURCE_DIR, root, out, shard_size);
    run_ok(cmd);
}

START_TEST(test_packed_folder_reads_back_in_imagefolder_order) {
    fresh_dir("pk");
    folder_write("pk/folder", "train", TRAIN_FILES, N_TRAIN, 0);
    folder_write("pk/folder", "val", VAL_FILES, N_VAL, 100);
    pack("pk/folder", "pk/shards", 3);
    // 7 training samples at 3 a shard: 3 shards; 3 validation samples: 1.
    ck_assert(tu_file_exists("pk/shards/train-000002.tar") && !tu_file_exists("pk/shards/train-000003.tar"));
    ck_assert(tu_file_exists("pk/shards/val-000000.tar") && !tu_file_exists("pk/shards/val-000001.tar"));
    char err[512] = "";
    EncodedSource *train = NULL, *val = NULL;
    ck_assert_msg(webdataset_open("pk/shards", "train", 3, 0, &train, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(webdataset_open("pk/shards", "val", 3, 0, &val, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(train->size, N_TRAIN);
    ck_assert_int_eq(val->size, N_VAL);
    ck_assert_int_eq(train->classes, 3);
    ck_assert_str_eq(train->name, "webdataset");
    for (int i = N_TRAIN - 1; i >= 0; i--)
        expect_sample(train, i, TRAIN_FILES[i].size, i, TRAIN_FILES[i].label);
    for (int i = 0; i < N_VAL; i++) expect_sample(val, i, VAL_FILES[i].size, 100 + i, VAL_FILES[i].label);
    train->destroy(train);
    val->destroy(val);
    // Labels are checked against the model's class count.
    expect_refused("pk/shards", "train", 2,
                   (const char *const[]){"train-000001.tar", "'00000005.cls' holds label 2", "[0, 2)", NULL});
    // The packer refuses to mix its shards with an earlier run's.
    char cmd[1024], out[2048];
    snprintf(cmd, sizeof cmd, "python3 %s/tools/pack-shards pk/folder pk/shards 2>&1", AMPTRAIN_SOURCE_DIR);
    ck_assert_int_eq(tu_run_shell(cmd, out, sizeof out), 2);
    ck_assert_msg(strstr(out, "already holds shards"), "%s", out);
}
END_TEST

// The packer's output is a function of the folder's contents: packing twice gives the same bytes.
START_TEST(test_pack_is_reproducible) {
    fresh_dir("rp");
    folder_write("rp/folder", "train", TRAIN_FILES, N_TRAIN, 0);
    folder_write("rp/folder", "val", VAL_FILES, N_VAL, 100);
    pack("rp/folder", "rp/one", 4);
    run_ok("touch rp/folder/train/b_dog/1.jpg");
    pack("rp/folder", "rp/two", 4);
    run_ok(
        "cmp rp/one/train-000000.tar rp/two/train-000000.tar && cmp rp/one/train-000001.tar rp/two/train-000001.tar");
}
END_TEST

// The packer refuses what the imagefolder source refuses, and then writes nothing.
START_TEST(test_pack_refusals) {
    static const struct {
        const char *setup;
        const char *message;
    } cases[] = {
        {"mkdir -p pr/folder/train/b_dog && touch pr/folder/train/b_dog/readme.txt",
         "class folder 'pr/folder/train/b_dog' holds no .jpg or .jpeg file"},
        {"mkdir -p pr/folder/val/d_fox && touch pr/folder/val/d_fox/1.jpg",
         "train and val must hold the same classes"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fresh_dir("pr");
        folder_write("pr/folder", "train", TRAIN_FILES, 1, 0);  // a_cat only
        folder_write("pr/folder", "val", VAL_FILES, 1, 100);
        run_ok(cases[c].setup);
        char cmd[1024], out[2048];
        snprintf(cmd, sizeof cmd, "python3 %s/tools/pack-shards pr/folder pr/shards 2>&1",
                 AMPTRAIN_SOURCE_DIR);
        ck_assert_int_eq(tu_run_shell(cmd, out, sizeof out), 2);
        ck_assert_msg(strstr(out, cases[c].message), "%s", out);
        ck_assert(!tu_file_exists("pr/shards/train-000000.tar"));
    }
}
END_TEST

// ---- the tar dialects ------------------------------------------------------------------------------

// Samples keyed by names that need the ustar prefix field (> 100 characters; two of them differ only
// there) and, in GNU and pax format,
// one whose last component needs a long-name entry (> 100), written by Python's tarfile in each format
// with a directory entry, a member without a key and an extra field in between: the same samples come back.
START_TEST(test_python_tar_formats) {
    char deep[300] = "", long_base[160], specs[4096];
    for (int i = 0; i < 12; i++) strcat(deep, "directory/");  // 120 characters
    memset(long_base, 'k', 150);
    long_base[150] = '\0';
    int n = snprintf(
        specs, sizeof specs,
        "'d|top|' 'f|top/s0.jpg|@700,1' 'f|top/s0.cls|1' 'f|top/s0.json|{}' "
        "'f|top/nokey|x' 'f|a/%ss.jpg|@1024,2' 'f|a/%ss.cls| 0\n' 'f|b/%ss.jpg|@9,4' 'f|b/%ss.cls|1'",
        deep, deep, deep, deep);
    static const char *const formats[] = {"ustar", "gnu", "pax"};
    for (int f = 0; f < 3; f++) {
        char dir[32];
        snprintf(dir, sizeof dir, "py_%s", formats[f]);
        fresh_dir(dir);
        if (f > 0)
            snprintf(specs + n, sizeof specs - (size_t)n, " 'f|%s.jpeg|@5,3' 'f|%s.cls|2'", long_base,
                     long_base);
        else
            specs[n] = '\0';
        mktar(dir, "train-0.tar", formats[f], specs);
        char err[512] = "";
        EncodedSource *src = NULL;
        ck_assert_msg(webdataset_open(dir, "train", 3, 0, &src, err, sizeof err) == 0, "%s: %s", formats[f],
                      err);
        ck_assert_int_eq(src->size, f == 0 ? 3 : 4);
        expect_sample(src, 0, 700, 1, 1);
        expect_sample(src, 1, 1024, 2, 0);
        expect_sample(src, 2, 9, 4, 1);
        if (f) expect_sample(src, 3, 5, 3, 2);
        src->destroy(src);
    }
    // ustar held the 130-character name in its prefix field (the name field has 100).
    run_ok("python3 -c \"d = open('py_ustar/train-0.tar', 'rb').read(); assert any(d[i + 257:i + 265] == "
           "b'ustar\\\\x0000' and d[i + 345] for i in range(0, len(d), 512))\"");
}
END_TEST

// GNU tar, in its own format and in pax, over a tree with long paths: "./" names, directory entries.
START_TEST(test_gnu_tar) {
    char deep[300] = "gt/tree/", path[512];
    fresh_dir("gt");
    for (int i = 0; i < 14; i++) strcat(deep, "level_dir/");  // > 100 characters below the tree
    snprintf(path, sizeof path, "mkdir -p '%s'", deep);
    run_ok(path);
    write_content("gt/tree/a.jpg", 2049, 7);
    tu_write_file("gt/tree/a.cls", "4\n");
    snprintf(path, sizeof path, "%sb.jpg", deep);
    write_content(path, 10, 8);
    snprintf(path, sizeof path, "%sb.cls", deep);
    tu_write_file(path, "0");
    fresh_dir("gt/gnu");
    fresh_dir("gt/pax");
    run_ok("tar --format=gnu --sort=name -cf gt/gnu/train-a.tar -C gt/tree . && "
           "tar --format=pax --sort=name -cf gt/pax/train-a.tar -C gt/tree .");
    static const char *const dirs[] = {"gt/gnu", "gt/pax"};
    for (int d = 0; d < 2; d++) {
        char err[512] = "";
        EncodedSource *src = NULL;
        ck_assert_msg(webdataset_open(dirs[d], "train", 5, 0, &src, err, sizeof err) == 0, "%s: %s", dirs[d],
                      err);
        ck_assert_int_eq(src->size, 2);
        expect_sample(src, 0, 2049, 7, 4);
        expect_sample(src, 1, 10, 8, 0);
        src->destroy(src);
    }
}
END_TEST

// Many threads read at once (pread on shared descriptors) and each gets every sample right.
static void *read_all(void *arg) {
    const EncodedSource *src = arg;
    for (int round = 0; round < 20; round++)
        for (int i = 0; i < N_TRAIN; i++)
            expect_sample(src, (i * 3 + round) % N_TRAIN, TRAIN_FILES[(i * 3 + round) % N_TRAIN].size,
                          (i * 3 + round) % N_TRAIN, TRAIN_FILES[(i * 3 + round) % N_TRAIN].label);
    return NULL;
}

START_TEST(test_concurrent_reads) {
    fresh_dir("cr");
    folder_write("cr/folder", "train", TRAIN_FILES, N_TRAIN, 0);
    folder_write("cr/folder", "val", VAL_FILES, N_VAL, 100);
    pack("cr/folder", "cr/shards", 2);
    char err[512] = "";
    EncodedSource *src = NULL;
    ck_assert_msg(webdataset_open("cr/shards", "train", 3, 0, &src, err, sizeof err) == 0, "%s", err);
    pthread_t threads[6];
    for (int t = 0; t < 6; t++) ck_assert_int_eq(pthread_create(&threads[t], NULL, read_all, src), 0);
    for (int t = 0; t < 6; t++) ck_assert_int_eq(pthread_join(threads[t], NULL), 0);
    src->destroy(src);
}
END_TEST

// ---- refusals ----------------------------------------------------------------------------------------

// One good sample first: its image's 1000 bytes sit at 512..1512, padded to 1536, where the .cls header
// is (its data at 2048); the second sample's first header is at 2560.
#define GOOD_SAMPLE "'f|00000000.jpg|@1000,1' 'f|00000000.cls|0'"

START_TEST(test_refuses_missing_or_empty) {
    fresh_dir("rf_empty");
    expect_refused("rf_empty", "train", 10,
                   (const char *const[]){"no train-*.tar shards in 'rf_empty'", NULL});
    // An optional split without shards is no split; a missing folder is still an error.
    EncodedSource *src = (EncodedSource *)1;
    char err[512] = "";
    ck_assert_int_eq(webdataset_open("rf_empty", "val", 10, 1, &src, err, sizeof err), 0);
    ck_assert_ptr_null(src);
    ck_assert_int_eq(webdataset_open("rf_absent", "val", 10, 1, &src, err, sizeof err), 2);
    expect_refused("rf_absent", "train", 10, (const char *const[]){"cannot open folder 'rf_absent'", NULL});
    mktar("rf_empty", "train-0.tar", "pax", "'d|a|'");
    expect_refused("rf_empty", "train", 10, (const char *const[]){"hold no samples", NULL});
    mktar("rf_empty", "val-0.tar", "pax", GOOD_SAMPLE);  // the val split is there; train is still empty
    expect_refused("rf_empty", "train", 10, (const char *const[]){"hold no samples", NULL});
}
END_TEST

// A FIFO named like a shard: opening one for reading would wait for a writer for ever; it is refused by
// its type at open, and so is a folder of that name. A FIFO under another name is not a shard at all.
START_TEST(test_refuses_a_fifo_shard_without_blocking) {
    fresh_dir("rf_fifo");
    mktar("rf_fifo", "train-0.tar", "pax", GOOD_SAMPLE);
    ck_assert_int_eq(mkfifo("rf_fifo/notes.jpg", 0644), 0);
    EncodedSource *src = NULL;
    char err[512] = "";
    ck_assert_msg(webdataset_open("rf_fifo", "train", 10, 0, &src, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(src->size, 1);
    src->destroy(src);
    ck_assert_int_eq(mkfifo("rf_fifo/train-1.tar", 0644), 0);
    expect_refused(
        "rf_fifo", "train", 10,
        (const char *const[]){"cannot open shard 'rf_fifo/train-1.tar': not a regular file (a FIFO)", NULL});
    ck_assert_int_eq(unlink("rf_fifo/train-1.tar"), 0);
    ck_assert_int_eq(mkdir("rf_fifo/train-1.tar", 0755), 0);
    expect_refused("rf_fifo", "train", 10, (const char *const[]){"not a regular file (a directory)", NULL});
}
END_TEST

START_TEST(test_refuses_truncated_and_corrupt) {
    fresh_dir("rf_cut");
    mktar("rf_cut", "train-0.tar", "pax", GOOD_SAMPLE " 'f|00000001.jpg|@10,2' 'f|00000001.cls|1'");
    run_ok("cp rf_cut/train-0.tar rf_cut/good.bin");
    // Cut inside the first image's data.
    ck_assert_int_eq(truncate("rf_cut/train-0.tar", 1500), 0);
    expect_refused("rf_cut", "train", 10,
                   (const char *const[]){"rf_cut/train-0.tar: offset 0:",
                                         "'00000000.jpg' "
                                         "needs 1000 bytes, the file has 988 left (truncated)",
                                         NULL});
    // Cut inside the second sample's header, and right after the last member (no end-of-archive block).
    run_ok("head -c 2660 rf_cut/good.bin > rf_cut/train-0.tar");
    expect_refused("rf_cut", "train", 10,
                   (const char *const[]){"offset 2560: the file ends inside a header block", NULL});
    run_ok("head -c 4200 rf_cut/good.bin > rf_cut/train-0.tar");  // inside the last .cls member's padding
    expect_refused("rf_cut", "train", 10,
                   (const char *const[]){"offset 4200: the file ends inside the padding", NULL});
    run_ok("head -c 4608 rf_cut/good.bin > rf_cut/train-0.tar");  // two samples: 4 members in 9 blocks
    expect_refused("rf_cut", "train", 10,
                   (const char *const[]){"offset 4608: the archive ends without its "
                                         "end-of-archive block",
                                         NULL});
    // A damaged header (a byte of the .cls member's name).
    run_ok("cp rf_cut/good.bin rf_cut/train-0.tar && printf 'X' | dd of=rf_cut/train-0.tar bs=1 seek=1538 "
           "conv=notrunc 2>/dev/null");
    expect_refused("rf_cut", "train", 10,
                   (const char *const[]){"offset 1536: not a tar header (checksum mismatch)", NULL});
    // Not a tar file at all.
    tu_write_file("rf_cut/train-0.tar", "hello");
    expect_refused("rf_cut", "train", 10,
                   (const char *const[]){"offset 0: the file ends inside a header block", NULL});
}
END_TEST

START_TEST(test_refuses_incomplete_samples) {
    static const struct {
        const char *specs;
        const char *fragment;
    } cases[] = {
        {GOOD_SAMPLE " 'f|00000001.jpg|@10,2'", "offset 2560: sample '00000001' has no .cls member"},
        {GOOD_SAMPLE " 'f|line\nbreak.jpg|@10,2'", "offset 2560: sample 'line\\x0abreak' has no .cls member"},
        {GOOD_SAMPLE " 'f|00000001.cls|3'", "offset 2560: sample '00000001' has no .jpg or .jpeg member"},
        {GOOD_SAMPLE " 'f|00000001.jpg|@10,2' 'f|00000001.cls|10'",
         "'00000001.cls' holds label 10, outside [0, 10)"},
        {GOOD_SAMPLE " 'f|00000001.jpg|@10,2' 'f|00000001.cls|-1'", "holds label -1, outside [0, 10)"},
        {GOOD_SAMPLE " 'f|00000001.jpg|@10,2' 'f|00000001.cls|cat'",
         "'00000001.cls' (3 bytes) is not an ASCII integer"},
        {GOOD_SAMPLE " 'f|00000001.jpg|@10,2' 'f|00000001.jpeg|@10,2'",
         "sample '00000001' has a second image"},
        {GOOD_SAMPLE " 'l|00000001.jpg|00000000.jpg'", "offset 2560: member '00000001.jpg' is of type '2'"},
        // A key that comes back after another sample is a new sample, as in WebDataset's grouping.
        {GOOD_SAMPLE " 'f|00000001.jpg|@10,2' 'f|00000001.cls|1' 'f|00000000.cls|0'",
         "sample '00000000' has no .jpg or .jpeg member"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fresh_dir("rf_sample");
        mktar("rf_sample", "train-0.tar", "pax", cases[c].specs);
        expect_refused("rf_sample", "train", 10,
                       (const char *const[]){"rf_sample/train-0.tar", cases[c].fragment, NULL});
    }
}
END_TEST

// A shard that shrinks after the index was made: the read fails with one line naming shard and offset.
START_TEST(test_read_of_a_shrunk_shard_fails) {
    fresh_dir("rd");
    mktar("rd", "train-0.tar", "pax", GOOD_SAMPLE);
    char err[512] = "";
    EncodedSource *src = NULL;
    ck_assert_msg(webdataset_open("rd", "train", 10, 0, &src, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(truncate("rd/train-0.tar", 600), 0);
    uint8_t *bytes = NULL;
    size_t len = 0;
    int32_t label;
    ck_assert_int_eq(src->read(src, 0, &bytes, &len, &label, err, sizeof err), 1);
    ck_assert_ptr_null(bytes);
    ck_assert_str_eq(err, "read 88 of 1000 bytes: end of file");
    char what[256];
    src->describe(src, 0, what, sizeof what);
    ck_assert_str_eq(what, "rd/train-0.tar: the image at offset 512 (sample 0)");
    src->destroy(src);
}
END_TEST

static Suite *webdataset_suite(void) {
    Suite *suite = suite_create("webdataset");
    TCase *read = tcase_create("read");
    tcase_set_timeout(read, 60);
    tcase_add_test(read, test_packed_folder_reads_back_in_imagefolder_order);
    tcase_add_test(read, test_pack_is_reproducible);
    tcase_add_test(read, test_pack_refusals);
    tcase_add_test(read, test_python_tar_formats);
    tcase_add_test(read, test_gnu_tar);
    tcase_add_test(read, test_concurrent_reads);
    suite_add_tcase(suite, read);
    TCase *refuse = tcase_create("refuse");
    tcase_set_timeout(refuse, 60);
    tcase_add_test(refuse, test_refuses_missing_or_empty);
    tcase_add_test(refuse, test_refuses_a_fifo_shard_without_blocking);
    tcase_add_test(refuse, test_refuses_truncated_and_corrupt);
    tcase_add_test(refuse, test_refuses_incomplete_samples);
    tcase_add_test(refuse, test_read_of_a_shrunk_shard_fails);
    suite_add_tcase(suite, refuse);
    return suite;
}

int main(void) { return tu_run_suite(webdataset_suite(), 1); }
