// imagefolder.c - torchvision's ImageFolder layout of JPEGs: root/train/<class>/**/*.jpg and
// root/val/<class>/**/*.jpg (docs/data.md).
//
// The order is torchvision's: classes are the sub-folders of the split, sorted by name (byte order, as
// Python sorts str), label = position; within a class, os.walk's folders sorted by path and the files of
// each sorted by name; a file counts when its name ends in .jpg or .jpeg, any case (torchvision's
// extension test lowercases). Files with other extensions are left out and counted in one log line: this
// decoder reads JPEG only. The folder is scanned once, at open, or its list read from the cache a former
// open left in checkpoint.dir (imagefolder_list.h); `read` then opens one file by index.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/digest.h"
#include "core/file_open.h"
#include "core/log.h"
#include "data/dataset.h"
#include "data/sources/image_dataset.h"
#include "data/sources/imagefolder_list.h"

#define IMAGEFOLDER_MAX_FILE_BYTES (256L << 20)  // an encoded image larger than this is refused, not read

// ---- the scan ---------------------------------------------------------------------------------------

// The type (S_IFDIR, S_IFREG, S_IFIFO, ...) of entry e of folder dir, symbolic links followed as
// os.walk(followlinks=True) follows them; 0 when it cannot be stat'ed (a dangling link: read, and
// replaced, like a file that vanished).
static mode_t entry_type(const char *dir, const struct dirent *e) {
    switch (e->d_type) {
    case DT_DIR: return S_IFDIR;
    case DT_REG: return S_IFREG;
    case DT_FIFO: return S_IFIFO;
    case DT_SOCK: return S_IFSOCK;
    case DT_CHR: return S_IFCHR;
    case DT_BLK: return S_IFBLK;
    default: break;
    }
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    return stat(path, &st) == 0 ? st.st_mode & S_IFMT : 0;
}

static int is_jpeg_name(const char *name) {
    size_t n = strlen(name);
    return (n > 4 && !strcasecmp(name + n - 4, ".jpg")) || (n > 5 && !strcasecmp(name + n - 5, ".jpeg"));
}

// The entries of dir: folders into dirs, other entries into files (either may be NULL). 0, or 2 with err.
// With files: a .jpg/.jpeg name that is a FIFO, socket or device is refused here, at start-up, since
// reading one would block a loader thread for ever or never end.
static int list_dir(const char *dir, NameList *dirs, NameList *files, char *err, size_t err_cap) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, err_cap, "imagefolder: cannot open the folder %s: %s", dir, strerror(errno));
        return 2;
    }
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        mode_t type = entry_type(dir, e);
        if (files && type && !S_ISDIR(type) && !S_ISREG(type) && is_jpeg_name(e->d_name)) {
            snprintf(err, err_cap, "imagefolder: %s/%s is not a regular file (%s); an image must be one", dir,
                     e->d_name, file_irregular_kind(type));
            rc = 2;
        }
        NameList *into = S_ISDIR(type) ? dirs : files;
        if (!rc && into) names_add(into, e->d_name);
    }
    closedir(d);
    return rc;
}

// Joins a and b with '/' into out; 0, or 2 with err when the path does not fit.
static int path_join(char *out, size_t cap, const char *a, const char *b, char *err, size_t err_cap) {
    if ((size_t)snprintf(out, cap, "%s/%s", a, b) < cap) return 0;
    snprintf(err, err_cap, "imagefolder: the path %s/%s is longer than %zu characters", a, b, cap - 1);
    return 2;
}

// Sorted class folders of split_dir; 0, or 2 with err (missing, or no class folder at all).
static int list_classes(const char *split_dir, NameList *classes, char *err, size_t err_cap) {
    int rc = list_dir(split_dir, classes, NULL, err, err_cap);
    if (rc) return rc;
    if (classes->count == 0) {
        snprintf(err, err_cap, "imagefolder: %s has no class folders (expected %s/<class>/*.jpg)", split_dir,
                 split_dir);
        return 2;
    }
    names_sort(classes);
    return 0;
}

typedef struct Folder {
    char split_dir[PATH_MAX];  // root/train or root/val
    const char *split;         // "train" or "val": the cache file's suffix
    ImageList list;
    // A walk whose cache folder did not exist yet (a fresh run's checkpoint.dir, made after the data is
    // opened): what the cache needs, kept until folder_save_list writes it.
    int list_unsaved;
    NameList classes;
    struct timespec walk_start;
    long loops;  // folder links the walk passed over: each led back to a folder above it
    char loop_example[PATH_MAX];
} Folder;

// A folder being walked and the folders above it, up to the split folder: their identities, so that a
// symbolic link back to one of them (a loop, which os.walk(followlinks=True) would follow until the path
// grew too long) is passed over instead of walked again.
typedef struct FolderChain {
    dev_t dev;
    ino_t ino;
    const struct FolderChain *up;
} FolderChain;

static int chain_holds(const FolderChain *c, const struct stat *st) {
    for (; c; c = c->up)
        if (c->dev == st->st_dev && c->ino == st->st_ino) return 1;
    return 0;
}

// Relative folders under rel (itself included), in the order sorted(os.walk(...)) visits them once
// sorted: every folder path sorted as a string. Each folder's mtime, taken before it is listed, goes to
// the list for its cache (imagefolder_list.h). A folder that is one of those above it (up) is left out
// and counted in f->loops. 0, or 2 with err.
static int walk_dirs(Folder *f, const char *rel, const FolderChain *up, NameList *out, char *err,
                     size_t err_cap) {
    char dir[PATH_MAX], sub[PATH_MAX];
    int rc = path_join(dir, sizeof dir, f->split_dir, rel, err, err_cap);
    struct stat st;
    if (!rc && stat(dir, &st) != 0) {
        snprintf(err, err_cap, "imagefolder: cannot open the folder %s: %s", dir, strerror(errno));
        rc = 2;
    }
    if (rc) return rc;
    if (chain_holds(up, &st)) {
        if (f->loops++ == 0) snprintf(f->loop_example, sizeof f->loop_example, "%s", dir);
        return 0;
    }
    const FolderChain here = {st.st_dev, st.st_ino, up};
    names_add(out, rel);
    image_list_add_dir(&f->list, rel, st.st_mtim);
    NameList subs = {0};
    rc = list_dir(dir, &subs, NULL, err, err_cap);
    names_sort(&subs);
    for (int i = 0; !rc && i < subs.count; i++) {
        rc = path_join(sub, sizeof sub, rel, subs.items[i], err, err_cap);
        if (!rc) rc = walk_dirs(f, sub, &here, out, err, err_cap);
    }
    names_free(&subs);
    return rc;
}

// Appends class c's JPEGs to f. 0, or 2 with err (unreadable, or no JPEG in the class at all).
static int scan_class(Folder *f, const char *class_name, int c, const FolderChain *top, char *err,
                      size_t err_cap) {
    NameList dirs = {0};
    int rc = walk_dirs(f, class_name, top, &dirs, err, err_cap);
    names_sort(&dirs);
    ImageList *l = &f->list;
    int before = l->files.count;
    char dir[PATH_MAX], rel[PATH_MAX];
    for (int d = 0; !rc && d < dirs.count; d++) {
        NameList files = {0};
        rc = path_join(dir, sizeof dir, f->split_dir, dirs.items[d], err, err_cap);
        if (!rc) rc = list_dir(dir, NULL, &files, err, err_cap);
        names_sort(&files);
        for (int i = 0; !rc && i < files.count; i++) {
            rc = path_join(rel, sizeof rel, dirs.items[d], files.items[i], err, err_cap);
            if (rc) break;
            if (!is_jpeg_name(files.items[i])) {
                if (l->other_files++ == 0) snprintf(l->other_example, sizeof l->other_example, "%s", rel);
                continue;
            }
            if (l->files.count == INT_MAX) {
                snprintf(err, err_cap, "imagefolder: %s holds more than %d images", f->split_dir, INT_MAX);
                rc = 2;
                break;
            }
            image_list_add_file(l, rel, c);
        }
        names_free(&files);
    }
    names_free(&dirs);
    if (!rc && l->files.count == before) {
        snprintf(err, err_cap, "imagefolder: the class folder %s/%s has no .jpg/.jpeg images", f->split_dir,
                 class_name);
        rc = 2;
    }
    return rc;
}

// The first name in a that b lacks (both sorted), or NULL.
static const char *first_missing(const NameList *a, const NameList *b) {
    for (int i = 0, j = 0; i < a->count; i++) {
        while (j < b->count && strcmp(b->items[j], a->items[i]) < 0) j++;
        if (j == b->count || strcmp(b->items[j], a->items[i]) != 0) return a->items[i];
    }
    return NULL;
}

// ---- the EncodedSource ------------------------------------------------------------------------------

static int folder_read(const EncodedSource *src, int index, uint8_t **bytes, size_t *len, int32_t *label,
                       char *err, size_t err_cap) {
    const Folder *f = src->impl;
    char path[PATH_MAX];
    *label = f->list.labels[index];
    if (path_join(path, sizeof path, f->split_dir, f->list.files.items[index], err, err_cap)) return 1;
    struct stat st;
    char why[96];
    int fd = file_open_regular(path, &st, why, sizeof why);
    if (fd < 0) {
        snprintf(err, err_cap, "cannot open: %s", why);
        return 1;
    }
    if (st.st_size > IMAGEFOLDER_MAX_FILE_BYTES) {
        snprintf(err, err_cap, "%lld bytes, more than the %ld MiB an image may have", (long long)st.st_size,
                 IMAGEFOLDER_MAX_FILE_BYTES >> 20);
        close(fd);
        return 1;
    }
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    int saved = errno;
    close(fd);
    if (!buf || got != (size_t)st.st_size) {
        snprintf(err, err_cap, "read %zu of %lld bytes: %s", got, (long long)st.st_size,
                 buf ? strerror(saved) : "out of memory");
        free(buf);
        return 1;
    }
    *bytes = buf;
    *len = got;
    return 0;
}

static void folder_describe(const EncodedSource *src, int index, char *out, size_t out_cap) {
    const Folder *f = src->impl;
    snprintf(out, out_cap, "%s/%s", f->split_dir, f->list.files.items[index]);
}

// The list's identity: every file's path under the split folder and its label, in order.
static uint64_t list_digest(const ImageList *l) {
    Digest d;
    digest_init(&d);
    for (int i = 0; i < l->files.count; i++) {
        digest_add_string(&d, l->files.items[i]);
        digest_add(&d, &l->labels[i], sizeof l->labels[i]);
    }
    return digest_end(&d);
}

static void folder_destroy(EncodedSource *src) {
    Folder *f = src->impl;
    image_list_free(&f->list);
    names_free(&f->classes);
    free(f);
    free(src);
}

// ---- the list, from the cache or a walk -----------------------------------------------------------------

// Walks every class folder of f->split_dir into f->list; 0, or 2 with err. A link that loops back is
// named in one warning.
static int walk_split(Folder *f, const NameList *classes, char *err, size_t err_cap) {
    struct stat root_st, split_st;
    char root[PATH_MAX];
    int rc = path_join(root, sizeof root, f->split_dir, "..", err, err_cap);
    if (!rc && (stat(root, &root_st) != 0 || stat(f->split_dir, &split_st) != 0)) {
        snprintf(err, err_cap, "imagefolder: cannot open the folder %s: %s", f->split_dir, strerror(errno));
        rc = 2;
    }
    if (rc) return rc;
    // data.path and the split folder are above every class folder: a link to either is a loop too.
    const FolderChain data_root = {root_st.st_dev, root_st.st_ino, NULL};
    const FolderChain top = {split_st.st_dev, split_st.st_ino, &data_root};
    for (int c = 0; !rc && c < classes->count; c++)
        rc = scan_class(f, classes->items[c], c, &top, err, err_cap);
    if (!rc && f->loops)
        log_warn(
            "imagefolder: %s: passed over %ld folder links that lead back to a folder above them (a loop), "
            "e.g. %s",
            f->split_dir, f->loops, f->loop_example);
    return rc;
}

// Saves f->list as the cache at path unless a folder changed too recently to trust its mtime. A cache
// that cannot be written costs the next start a walk, not this run: one warning.
static void cache_save(const Folder *f, const char *path, const char *split_abs, const NameList *classes,
                       struct timespec walk_start) {
    const char *unsettled = image_list_unsettled_dir(&f->list, walk_start);
    char why[PATH_MAX + 128];
    if (unsettled)
        log_info("imagefolder: file list of %s not cached: %s/%s changed less than %d s before the walk",
                 f->split_dir, f->split_dir, unsettled, IMAGE_LIST_SETTLE_S);
    else if (image_list_save(path, split_abs, classes, &f->list, why, sizeof why))
        log_warn("imagefolder: file-list cache: %s (the next start walks %s again)", why, f->split_dir);
    else
        log_info("imagefolder: file list of %s cached in %s", f->split_dir, path);
}

// The split folder's absolute path and its cache file in cache_dir (image_list_cache_path); 0, or 1
// after one warning.
static int cache_file_of(const Folder *f, const char *cache_dir, char *split_abs, char *path,
                         size_t path_cap) {
    if (realpath(f->split_dir, split_abs) &&
        !image_list_cache_path(cache_dir, split_abs, f->split, path, path_cap))
        return 0;
    log_warn("imagefolder: file list of %s not cached: no cache path for it in %s", f->split_dir, cache_dir);
    return 1;
}

// f->list for f->split: read from its cache in cache_dir when that holds (imagefolder_list.h), else
// walked (and then cached). cache_dir NULL or "": always walked, nothing written. A cache_dir that does
// not exist yet: walked, and the list kept for folder_save_list. 0, or 2 with err.
static int list_split(Folder *f, const NameList *classes, const char *cache_dir, char *err, size_t err_cap) {
    char split_abs[PATH_MAX], path[PATH_MAX], why[2 * PATH_MAX];
    struct stat st;
    int wanted = cache_dir && cache_dir[0];
    int dir_exists = wanted && stat(cache_dir, &st) == 0 && S_ISDIR(st.st_mode);
    int cached = dir_exists && cache_file_of(f, cache_dir, split_abs, path, sizeof path) == 0;
    if (cached) {
        if (image_list_load(path, split_abs, classes, &f->list, why, sizeof why) == 0) {
            log_info("imagefolder: file list of %s read from %s (%d images)", f->split_dir, path,
                     f->list.files.count);
            return 0;
        }
        log_info("imagefolder: file-list cache not used: %s; walking %s", why, f->split_dir);
    }
    struct timespec walk_start;
    clock_gettime(CLOCK_REALTIME, &walk_start);
    int rc = walk_split(f, classes, err, err_cap);
    if (!rc && cached) cache_save(f, path, split_abs, classes, walk_start);
    if (!rc && wanted && !dir_exists) {
        f->list_unsaved = 1;
        f->walk_start = walk_start;
        for (int c = 0; c < classes->count; c++) names_add(&f->classes, classes->items[c]);
    }
    return rc;
}

// EncodedSource.save_list: the list walked while cache_dir did not exist, cached there now.
static void folder_save_list(const EncodedSource *src, const char *cache_dir) {
    Folder *f = src->impl;
    char split_abs[PATH_MAX], path[PATH_MAX];
    struct stat st;
    if (!f->list_unsaved || !cache_dir || !cache_dir[0]) return;
    f->list_unsaved = 0;
    if (stat(cache_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        log_info("imagefolder: file list of %s not cached: the folder %s does not exist", f->split_dir,
                 cache_dir);
    else if (cache_file_of(f, cache_dir, split_abs, path, sizeof path) == 0)
        cache_save(f, path, split_abs, &f->classes, f->walk_start);
}

// ---- open ---------------------------------------------------------------------------------------------

int dataset_imagefolder_open(const char *root, const char *cache_dir, int train, int augment, int side,
                             int max_classes, long seed, PixelNorm norm, Dataset **out, char *err,
                             size_t err_cap) {
    *out = NULL;
    struct stat st;
    int missing = stat(root, &st) != 0;
    if (missing || !S_ISDIR(st.st_mode)) {
        snprintf(err, err_cap, "imagefolder: data.path %s: %s (expected %s/train/<class>/*.jpg)", root,
                 missing ? strerror(errno) : "not a folder", root);
        return 2;
    }
    char train_dir[PATH_MAX], val_dir[PATH_MAX];
    int rc = path_join(train_dir, sizeof train_dir, root, "train", err, err_cap);
    if (!rc) rc = path_join(val_dir, sizeof val_dir, root, "val", err, err_cap);
    if (rc) return rc;
    if (!train && stat(val_dir, &st) != 0) {
        log_info("imagefolder: no %s folder: no evaluation", val_dir);
        return 0;
    }
    NameList train_classes = {0}, val_classes = {0};
    rc = list_classes(train_dir, &train_classes, err, err_cap);
    if (!rc && train_classes.count > max_classes) {
        snprintf(err, err_cap, "imagefolder: %s has %d class folders, more than model.num_classes %d",
                 train_dir, train_classes.count, max_classes);
        rc = 2;
    }
    // The validation labels are only right if both splits number the same classes the same way.
    if (!rc && stat(val_dir, &st) == 0) {
        rc = list_classes(val_dir, &val_classes, err, err_cap);
        const char *only_train = rc ? NULL : first_missing(&train_classes, &val_classes);
        const char *only_val = rc ? NULL : first_missing(&val_classes, &train_classes);
        if (only_train || only_val) {
            snprintf(err, err_cap, "imagefolder: the class folders of %s and %s differ: %s is only in %s",
                     train_dir, val_dir, only_train ? only_train : only_val,
                     only_train ? train_dir : val_dir);
            rc = 2;
        }
    }
    Folder *f = xcalloc(1, sizeof *f);
    snprintf(f->split_dir, sizeof f->split_dir, "%s", train ? train_dir : val_dir);
    f->split = train ? "train" : "val";
    if (!rc) rc = list_split(f, &train_classes, cache_dir, err, err_cap);
    EncodedSource *src = NULL;
    if (!rc) {
        if (f->list.other_files)
            log_info("imagefolder: %s: left out %ld files that are not .jpg/.jpeg (e.g. %s)", f->split_dir,
                     f->list.other_files, f->list.other_example);
        src = xcalloc(1, sizeof *src);
        *src = (EncodedSource){.size = f->list.files.count,
                               .classes = train_classes.count,
                               .read = folder_read,
                               .destroy = folder_destroy,
                               .impl = f,
                               .describe = folder_describe,
                               .save_list = folder_save_list,
                               .list_digest = list_digest(&f->list)};
        snprintf(src->name, sizeof src->name, "imagefolder");
    }
    names_free(&train_classes);
    names_free(&val_classes);
    if (rc) {
        image_list_free(&f->list);
        names_free(&f->classes);
        free(f);
        return rc;
    }
    *out = image_dataset_create(src, side, train, augment, seed, norm);
    return 0;
}
