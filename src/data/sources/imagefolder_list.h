// imagefolder_list.h - the scanned file list of one ImageFolder split, and its cache file.
//
// imagefolder.c walks root/<split>/<class>/** once per open; on ImageNet that is 1.28 million directory
// entries in 1,000 folders, every start and on every rank. The list it builds (the JPEGs' relative paths
// and labels, in torchvision's order) is saved to <cache_dir>/imagefolder-<hash>-<split>.list, the hash
// over the split folder's absolute path (realpath), and read back by the next open instead of walking the
// tree, when it is still true:
//   - the file is whole: magic and version, lengths inside the file, a checksum (FNV-1a 64) over it all;
//   - it is about the same folder (the absolute path stored in it) and the same class folders;
//   - every folder the walk listed still has the modification time it had when it was listed (a file
//     added, removed or renamed in a folder changes that folder's mtime; so does a sub-folder made);
//   - the file count and labels agree with what it says;
//   - every entry is one a walk could have made: a relative path of plain names (none absolute, empty,
//     "." or ".."), a folder inside a class folder, a file inside its label's class folder and in a
//     folder the list tracks. The checksum only finds damage: a list edited by hand with a checksum made
//     to match must still not make the run read outside data.path or relabel images.
// A cache that fails any of these is named in one log line and rebuilt by a new walk, never trusted.
// A folder modified less than IMAGE_LIST_SETTLE_S before the walk began is not cached: a change made in
// the same timestamp tick as the walk's listing would leave its mtime unchanged (git's "racy" entries).
// Saving is atomic (a temporary file of this process, fsync, rename), so ranks that save at once and a
// crash mid-save leave either no file or a whole one.
#ifndef AMPTRAIN_IMAGEFOLDER_LIST_H
#define AMPTRAIN_IMAGEFOLDER_LIST_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define IMAGE_LIST_SETTLE_S 2

// A growable list of names (malloc'd strings).
typedef struct NameList {
    char **items;
    int count, cap;
} NameList;

void names_add(NameList *l, const char *name);
void names_sort(NameList *l);  // byte order (strcmp), as Python sorts str
void names_free(NameList *l);

typedef struct ImageList {
    NameList files;   // (count) JPEG paths relative to the split folder: "<class>/<sub>/<file>"
    int32_t *labels;  // (files.count) int32 class index
    int labels_cap;
    NameList dirs;            // every folder the walk listed, relative to the split folder, in walk order
    struct timespec *mtimes;  // (dirs.count) each folder's mtime, taken before it was listed
    int mtimes_cap;
    long other_files;  // non-JPEG files left out
    char other_example[PATH_MAX];
} ImageList;

void image_list_add_file(ImageList *l, const char *rel, int32_t label);
void image_list_add_dir(ImageList *l, const char *rel, struct timespec mtime);
void image_list_free(ImageList *l);

// The cache file of split ("train"/"val") of the ImageFolder whose split folder has the absolute path
// split_abs, in cache_dir. 0, or 1 when the name does not fit in cap.
int image_list_cache_path(const char *cache_dir, const char *split_abs, const char *split, char *out,
                          size_t cap);

// Reads the cache at path for split_abs with the current class folders `classes` and checks it (above).
// 0 and *out filled when it holds; 1 with one line in why (missing, corrupt, stale: what and where).
int image_list_load(const char *path, const char *split_abs, const NameList *classes, ImageList *out,
                    char *why, size_t why_cap);

// Writes l atomically to path. 0, or 1 with one line in err (nothing is left at path but a whole file).
int image_list_save(const char *path, const char *split_abs, const NameList *classes, const ImageList *l,
                    char *err, size_t err_cap);

// The first folder of l modified less than IMAGE_LIST_SETTLE_S before walk_start (or after it), or NULL.
const char *image_list_unsettled_dir(const ImageList *l, struct timespec walk_start);

#endif
