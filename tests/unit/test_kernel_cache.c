// test_kernel_cache.c - the kernel-choice cache (core/kernel_cache.h), on the CPU: a file written and read
// back, keys that differ in one version field missing, a damaged, cut or foreign file trusted in nothing and
// rebuilt after one warning, the folder made, `off` touching no file, racing writers leaving a whole file,
// and rank 0's records handed to another table.
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/digest.h"
#include "core/kernel_cache.h"
#include "tests/test_util.h"

// A key as the CUDA backend writes one: the GPU and library versions, then the op and its shape.
static const char *key_of(char *buf, size_t cap, long cudnn_version, int c_out) {
    snprintf(
        buf, cap,
        "NVIDIA H200 sm_90 132 SMs driver 13000 runtime 13000 cudnn %ld cublas 130100 | conv forward n=256 "
        "h=56 w=56 c_in=64 c_out=%d k=1x1 stride=1 pad=0 groups=1 fp16 tf32=0 workspace_cap=536870912",
        cudnn_version, c_out);
    return buf;
}

// ---- stderr into a file, for the warnings -----------------------------------------------------------

static int stderr_saved = -1;

static void stderr_capture(const char *path) {
    fflush(stderr);
    stderr_saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert(stderr_saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
}

// What went to stderr since stderr_capture (malloc'd).
static char *stderr_release(const char *path) {
    fflush(stderr);
    dup2(stderr_saved, 2);
    close(stderr_saved);
    char *text = tu_read_file(path, NULL);
    ck_assert_ptr_nonnull(text);
    return text;
}

static int line_count(const char *text) {
    int n = 0;
    for (; *text; text++) n += *text == '\n';
    return n;
}

// Opens path with stderr captured; *warning (malloc'd) what it printed.
static KernelCache *open_watching(const char *path, char **warning) {
    stderr_capture("stderr.txt");
    KernelCache *kc = kernel_cache_open(path);
    *warning = stderr_release("stderr.txt");
    return kc;
}

// ---- the file, checked apart from the reader ---------------------------------------------------------

// The file's text is its version line, record lines and a checksum line over everything before it.
static void assert_well_formed(const char *path, int records) {
    size_t len = 0;
    char *text = tu_read_file(path, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(!strncmp(text, "amptrain kernel choices 1\n", 26), "first line of:\n%s", text);
    ck_assert(len > 26 && text[len - 1] == '\n');
    const char *last = text + len - 1;
    while (last[-1] != '\n') last--;
    ck_assert_int_eq((int)(text + len - last), 9 + 16 + 1);
    ck_assert(!strncmp(last, "checksum ", 9));
    Digest d;
    digest_init(&d);
    digest_add(&d, text, (size_t)(last - text));
    char want[17];
    digest_hex(digest_end(&d), want);
    ck_assert_msg(!strncmp(last + 9, want, 16), "checksum %.16s, want %s", last + 9, want);
    if (records >= 0) ck_assert_int_eq(line_count(text), records + 2);
    free(text);
}

// Three records written to path by a fresh table.
static void write_three(const char *path) {
    char key[512];
    unlink(path);
    KernelCache *kc = kernel_cache_open(path);
    kernel_cache_store(kc, key_of(key, sizeof key, 91400, 64), "cudnn algo=1 math=tensor-op workspace=0",
                       0.5);
    kernel_cache_store(kc, key_of(key, sizeof key, 91400, 128), "gemm", 0.25);
    kernel_cache_store(kc, "NVIDIA H200 | bn rows=802816 c=64 fp16 residual=0 relu=1", "own+cudnn", 0.125);
    ck_assert_int_eq(kernel_cache_save(kc), 0);
    kernel_cache_close(kc);
}

START_TEST(choices_read_back_as_written) {
    char key[512], *warning;
    write_three("round.cache");
    assert_well_formed("round.cache", 3);
    KernelCache *kc = open_watching("round.cache", &warning);
    ck_assert_str_eq(warning, "");
    ck_assert_str_eq(kernel_cache_find(kc, key_of(key, sizeof key, 91400, 64)),
                     "cudnn algo=1 math=tensor-op workspace=0");
    ck_assert_str_eq(kernel_cache_find(kc, key_of(key, sizeof key, 91400, 128)), "gemm");
    ck_assert_str_eq(kernel_cache_find(kc, "NVIDIA H200 | bn rows=802816 c=64 fp16 residual=0 relu=1"),
                     "own+cudnn");
    KernelCacheStats st = kernel_cache_stats(kc);
    ck_assert(st.from_cache == 0 && st.searched == 0 && st.search_s == 0);
    // taking a record is counted; a run that only took records leaves the file as it was
    kernel_cache_use(kc, key);
    ck_assert_int_eq(kernel_cache_stats(kc).from_cache, 1);
    char *before = tu_read_file("round.cache", NULL);
    ck_assert_int_eq(kernel_cache_save(kc), 0);
    char *after = tu_read_file("round.cache", NULL);
    ck_assert_str_eq(before, after);
    free(before), free(after), free(warning);
    kernel_cache_close(kc);
}
END_TEST

START_TEST(a_changed_version_field_misses) {
    char key[512], *warning;
    write_three("versions.cache");
    KernelCache *kc = open_watching("versions.cache", &warning);
    ck_assert_str_eq(warning, "");
    ck_assert_ptr_null(kernel_cache_find(kc, key_of(key, sizeof key, 91500, 64)));  // another cuDNN
    ck_assert_ptr_nonnull(kernel_cache_find(kc, key_of(key, sizeof key, 91400, 64)));
    kernel_cache_close(kc);
    free(warning);
    // the file's own format version: another one is rebuilt, its records (checksum right) not trusted
    size_t len = 0;
    char *text = tu_read_file("versions.cache", &len);
    text[24] = '2';
    char *last = text + len - 1;
    while (last[-1] != '\n') last--;
    Digest d;
    digest_init(&d);
    digest_add(&d, text, (size_t)(last - text));
    digest_hex(digest_end(&d), last + 9);
    last[25] = '\n';
    tu_write_file("versions.cache", text);
    free(text);
    kc = open_watching("versions.cache", &warning);
    ck_assert_int_eq(line_count(warning), 1);
    ck_assert_msg(strstr(warning, "versions.cache: format version 2, where this amptrain reads 1") &&
                      strstr(warning, "rebuilt"),
                  "%s", warning);
    ck_assert_ptr_null(kernel_cache_find(kc, key_of(key, sizeof key, 91400, 64)));
    free(warning);
    kernel_cache_close(kc);
}
END_TEST

// A damaged file: nothing of it is found, one warning says it is rebuilt, and the next save writes only
// what this run chose.
static void assert_rebuilt(const char *path, const char *said) {
    char key[512], *warning;
    KernelCache *kc = open_watching(path, &warning);
    ck_assert_msg(line_count(warning) == 1 && strstr(warning, path) && strstr(warning, said) &&
                      strstr(warning, "nothing in it is trusted") && strstr(warning, "rebuilt"),
                  "warning for %s:\n%s", path, warning);
    free(warning);
    ck_assert_ptr_null(kernel_cache_find(kc, key_of(key, sizeof key, 91400, 64)));
    ck_assert_ptr_null(kernel_cache_find(kc, key_of(key, sizeof key, 91400, 128)));
    ck_assert_ptr_null(kernel_cache_find(kc, "NVIDIA H200 | bn rows=802816 c=64 fp16 residual=0 relu=1"));
    kernel_cache_store(kc, key_of(key, sizeof key, 91400, 256), "cudnn algo=6 math=default workspace=4096",
                       1);
    ck_assert_int_eq(kernel_cache_save(kc), 0);
    kernel_cache_close(kc);
    assert_well_formed(path, 1);
    kc = open_watching(path, &warning);
    ck_assert_str_eq(warning, "");
    ck_assert_str_eq(kernel_cache_find(kc, key), "cudnn algo=6 math=default workspace=4096");
    ck_assert_ptr_null(kernel_cache_find(kc, key_of(key, sizeof key, 91400, 64)));
    free(warning);
    kernel_cache_close(kc);
}

START_TEST(a_damaged_file_is_rebuilt_and_trusted_in_nothing) {
    // one byte of a choice: algo=1 becomes algo=7
    write_three("damaged.cache");
    size_t len = 0;
    char *text = tu_read_file("damaged.cache", &len);
    char *algo = strstr(text, "algo=1");
    ck_assert_ptr_nonnull(algo);
    algo[5] = '7';
    tu_write_file("damaged.cache", text);
    assert_rebuilt("damaged.cache", "checksum does not match");
    // cut short: the last 20 bytes gone
    write_three("cut.cache");
    char *whole = tu_read_file("cut.cache", &len);
    whole[len - 20] = '\0';
    tu_write_file("cut.cache", whole);
    assert_rebuilt("cut.cache", "cut short");
    // a foreign file
    tu_write_file("foreign.cache", "conv forward 1\n");
    assert_rebuilt("foreign.cache", "first line is not \"amptrain kernel choices 1\"");
    // a line that is no record, under a checksum that matches
    const char *body = "amptrain kernel choices 1\nno tab on this line\n";
    Digest d;
    digest_init(&d);
    digest_add(&d, body, strlen(body));
    char sum[17], file[256];
    digest_hex(digest_end(&d), sum);
    snprintf(file, sizeof file, "%schecksum %s\n", body, sum);
    tu_write_file("no_record.cache", file);
    assert_rebuilt("no_record.cache", "line 2: not a record");
    // far larger than any such file
    tu_write_file("huge.cache", "amptrain kernel choices 1\n");
    ck_assert_int_eq(truncate("huge.cache", (off_t)17 << 20), 0);
    assert_rebuilt("huge.cache", "17825792 bytes, more than any kernel-choice file");
    free(text), free(whole);
}
END_TEST

START_TEST(a_missing_folder_is_made) {
    ck_assert_int_eq(system("rm -rf made"), 0);
    KernelCache *kc = kernel_cache_open("made/deeper/still/kernels.cache");
    ck_assert(!tu_file_exists("made"));  // opening reads only
    kernel_cache_store(kc, "k", "v", 0);
    ck_assert_int_eq(kernel_cache_save(kc), 0);
    kernel_cache_close(kc);
    assert_well_formed("made/deeper/still/kernels.cache", 1);
    // a path under a file: one warning when it is read, and none after
    tu_write_file("a_file", "not a folder\n");
    char *warning;
    kc = open_watching("a_file/kernels.cache", &warning);
    ck_assert_msg(line_count(warning) == 1 &&
                      strstr(warning, "a_file/kernels.cache: cannot be read (Not a directory)"),
                  "%s", warning);
    free(warning);
    kernel_cache_store(kc, "k", "v", 0);
    ck_assert_int_eq(kernel_cache_save(kc), 0);
    kernel_cache_close(kc);
    // a folder that turns out not to be one when the file is written: one warning, the run goes on, later
    // saves stay silent
    unlink("later_file");
    kc = kernel_cache_open("later_file/kernels.cache");
    tu_write_file("later_file", "not a folder\n");
    kernel_cache_store(kc, "k", "v", 0);
    stderr_capture("stderr.txt");
    ck_assert_int_eq(kernel_cache_save(kc), -1);
    kernel_cache_store(kc, "k2", "v", 0);
    ck_assert_int_eq(kernel_cache_save(kc), 0);
    warning = stderr_release("stderr.txt");
    ck_assert_msg(line_count(warning) == 1 &&
                      strstr(warning, "later_file/kernels.cache: cannot write it (") &&
                      strstr(warning, "Not a directory"),
                  "%s", warning);
    free(warning);
    kernel_cache_close(kc);
}
END_TEST

static int folder_entries(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

START_TEST(off_touches_no_file) {
    char out[512];
    ck_assert_ptr_null(kernel_cache_path_of("off", out, sizeof out));
    ck_assert_ptr_null(kernel_cache_path_of("", out, sizeof out));
    setenv("XDG_CACHE_HOME", ".", 1);
    setenv("HOME", ".", 1);
    const int before = folder_entries(".");
    KernelCache *kc = kernel_cache_open(kernel_cache_path_of("off", out, sizeof out));
    kernel_cache_store(kc, "k", "v", 2.5);
    ck_assert_str_eq(kernel_cache_find(kc, "k"), "v");  // kept in memory for the other ranks
    ck_assert_int_eq(kernel_cache_save(kc), 0);
    kernel_cache_close(kc);
    ck_assert_int_eq(folder_entries("."), before);
    ck_assert(!tu_file_exists("amptrain") && !tu_file_exists(".cache"));
}
END_TEST

START_TEST(auto_follows_the_xdg_cache_folder) {
    char out[512];
    setenv("XDG_CACHE_HOME", "/var/cache/me", 1);
    setenv("HOME", "/home/me", 1);
    ck_assert_str_eq(kernel_cache_path_of("auto", out, sizeof out), "/var/cache/me/amptrain/kernels.cache");
    setenv("XDG_CACHE_HOME", "relative", 1);  // the XDG spec: ignored
    ck_assert_str_eq(kernel_cache_path_of("auto", out, sizeof out), "/home/me/.cache/amptrain/kernels.cache");
    unsetenv("XDG_CACHE_HOME");
    ck_assert_str_eq(kernel_cache_path_of("auto", out, sizeof out), "/home/me/.cache/amptrain/kernels.cache");
    unsetenv("HOME");
    ck_assert_ptr_null(kernel_cache_path_of("auto", out, sizeof out));
    ck_assert_str_eq(kernel_cache_path_of("my/choices.cache", out, sizeof out), "my/choices.cache");
    ck_assert_ptr_null(kernel_cache_path_of("my/choices.cache", out, 8));  // does not fit
}
END_TEST

#define WRITERS 4
#define ROUNDS 40

// Writers racing on one file: each round opens it, stores a record of its own and saves. The file left is
// whole and holds only records some writer stored (a record another writer's rename overtook is lost: the
// last rename wins), and no temporary file stays behind.
START_TEST(racing_writers_leave_a_whole_file) {
    ck_assert_int_eq(system("rm -rf race && mkdir race"), 0);
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        ck_assert_int_ge(pids[w], 0);
        if (pids[w] == 0) {
            for (int round = 0; round < ROUNDS; round++) {
                char key[64], choice[64];
                snprintf(key, sizeof key, "writer %d round %d", w, round);
                snprintf(choice, sizeof choice, "cudnn algo=%d math=fma workspace=%d", w, round);
                KernelCache *kc = kernel_cache_open("race/kernels.cache");
                kernel_cache_store(kc, key, choice, 0);
                if (kernel_cache_save(kc) != 0) _exit(1);
                kernel_cache_close(kc);
            }
            _exit(0);
        }
    }
    for (int w = 0; w < WRITERS; w++) {
        int status;
        ck_assert_int_eq(waitpid(pids[w], &status, 0), pids[w]);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    ck_assert_int_eq(folder_entries("race"), 3);  // ., .., kernels.cache
    assert_well_formed("race/kernels.cache", -1);
    char *warning;
    KernelCache *kc = open_watching("race/kernels.cache", &warning);
    ck_assert_str_eq(warning, "");
    free(warning);
    int found = 0;
    for (int w = 0; w < WRITERS; w++)
        for (int round = 0; round < ROUNDS; round++) {
            char key[64], choice[64];
            snprintf(key, sizeof key, "writer %d round %d", w, round);
            snprintf(choice, sizeof choice, "cudnn algo=%d math=fma workspace=%d", w, round);
            const char *got = kernel_cache_find(kc, key);
            if (!got) continue;
            ck_assert_str_eq(got, choice);
            found++;
        }
    ck_assert_int_ge(found, 1);
    size_t len = 0;
    char *text = tu_read_file("race/kernels.cache", &len);
    ck_assert_int_eq(line_count(text), found + 2);  // and nothing else
    free(text);
    kernel_cache_close(kc);
}
END_TEST

START_TEST(a_save_keeps_what_another_run_wrote_meanwhile) {
    unlink("shared.cache");
    KernelCache *mine = kernel_cache_open("shared.cache"), *theirs = kernel_cache_open("shared.cache");
    kernel_cache_store(theirs, "their shape", "gemm", 0);
    kernel_cache_store(theirs, "both shapes", "cudnn algo=0 math=fma workspace=0", 0);
    ck_assert_int_eq(kernel_cache_save(theirs), 0);
    kernel_cache_store(mine, "my shape", "cudnn algo=1 math=fma workspace=0", 0);
    kernel_cache_store(mine, "both shapes", "cudnn algo=5 math=fma workspace=0", 0);
    ck_assert_int_eq(kernel_cache_save(mine), 0);
    kernel_cache_close(mine), kernel_cache_close(theirs);
    assert_well_formed("shared.cache", 3);
    KernelCache *kc = kernel_cache_open("shared.cache");
    ck_assert_str_eq(kernel_cache_find(kc, "their shape"), "gemm");
    ck_assert_str_eq(kernel_cache_find(kc, "my shape"), "cudnn algo=1 math=fma workspace=0");
    ck_assert_str_eq(kernel_cache_find(kc, "both shapes"), "cudnn algo=5 math=fma workspace=0");  // the last
    kernel_cache_close(kc);
}
END_TEST

// Rank 0 hands the records it used or timed (not the rest of its file) to the other ranks' tables.
START_TEST(rank_0s_choices_reach_another_table) {
    char key[512];
    write_three("ranks.cache");
    KernelCache *rank0 = kernel_cache_open("ranks.cache");
    kernel_cache_use(rank0, key_of(key, sizeof key, 91400, 64));
    kernel_cache_store(rank0, "timed now", "own+own", 1.5);
    kernel_cache_store(rank0, "timed again", "cudnn+own", 2.0);
    KernelCacheStats st = kernel_cache_stats(rank0);
    ck_assert(st.from_cache == 1 && st.searched == 2 && st.search_s == 3.5);
    size_t len = 0;
    char *text = kernel_cache_export(rank0, &len);
    ck_assert_int_eq(len, strlen(text));
    ck_assert_int_eq(line_count(text), 3);
    KernelCache *rank1 = kernel_cache_open(NULL);
    ck_assert_int_eq(kernel_cache_import(rank1, text, len), 0);
    ck_assert_str_eq(kernel_cache_find(rank1, key), "cudnn algo=1 math=tensor-op workspace=0");
    ck_assert_str_eq(kernel_cache_find(rank1, "timed now"), "own+own");
    ck_assert_str_eq(kernel_cache_find(rank1, "timed again"), "cudnn+own");
    ck_assert_ptr_null(kernel_cache_find(rank1, key_of(key, sizeof key, 91400, 128)));  // not used
    st = kernel_cache_stats(rank1);
    ck_assert(st.from_cache == 0 && st.searched == 0);
    // a malformed hand-over adds nothing
    const char *bad = "fine\tchoice\nno tab\n";
    KernelCache *rank2 = kernel_cache_open(NULL);
    ck_assert_int_eq(kernel_cache_import(rank2, bad, strlen(bad)), -1);
    ck_assert_ptr_null(kernel_cache_find(rank2, "fine"));
    free(text);
    kernel_cache_close(rank0), kernel_cache_close(rank1), kernel_cache_close(rank2);
}
END_TEST

static Suite *kernel_cache_suite(void) {
    Suite *s = suite_create("kernel_cache");
    TCase *tc = tcase_create("file");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, choices_read_back_as_written);
    tcase_add_test(tc, a_changed_version_field_misses);
    tcase_add_test(tc, a_damaged_file_is_rebuilt_and_trusted_in_nothing);
    tcase_add_test(tc, a_missing_folder_is_made);
    tcase_add_test(tc, off_touches_no_file);
    tcase_add_test(tc, auto_follows_the_xdg_cache_folder);
    tcase_add_test(tc, racing_writers_leave_a_whole_file);
    tcase_add_test(tc, a_save_keeps_what_another_run_wrote_meanwhile);
    tcase_add_test(tc, rank_0s_choices_reach_another_table);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(kernel_cache_suite(), 1); }
