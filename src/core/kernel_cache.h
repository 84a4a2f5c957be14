// kernel_cache.h - the kernel choices a backend makes at start-up (cuDNN's timed algorithm search, the 1x1
// convolutions' GEMM route, the batch-norm pairs), kept in a file (cudnn.cache) so that a later run on the
// same GPU and libraries takes them instead of timing again, and handed from rank 0 to the other ranks so
// that every rank runs the same kernels.
//
// A record maps a key to a choice, both one line of printable ASCII without tabs. The backend writes into
// the key everything the choice depends on (GPU, driver and library versions, the op, its shape, dtype and
// limits) and checks a choice before it runs it: this table only keeps text.
//
// The file:
//     amptrain kernel choices 1
//     KEY<TAB>CHOICE               one line per record, sorted by key
//     checksum HHHHHHHHHHHHHHHH    core/digest.h over every byte before this line, 16 hex digits
// A file that does not read back exactly so (another version, a changed byte, a cut) is trusted in
// nothing: one warning says so and the file is rebuilt from this run's choices. A write goes to a
// temporary file beside it, renamed over it, so a reader sees the old file or the new one; of two writers
// at once the last rename wins. Before writing, the records the file holds now that this run did not
// choose are added, so runs of other shapes sharing the file keep theirs.
#ifndef AMPTRAIN_KERNEL_CACHE_H
#define AMPTRAIN_KERNEL_CACHE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// The file's first line: KERNEL_CACHE_MAGIC, then KERNEL_CACHE_VERSION in decimal.
#define KERNEL_CACHE_MAGIC "amptrain kernel choices "
#define KERNEL_CACHE_VERSION 1

typedef struct KernelCache KernelCache;

typedef struct KernelCacheStats {
    int from_cache;   // choices taken from a record (the file's, or rank 0's)
    int searched;     // choices this process timed
    double search_s;  // the seconds those took
} KernelCacheStats;

// The file cudnn.cache names: NULL for off (or ""), for auto $XDG_CACHE_HOME/amptrain/kernels.cache when that
// variable holds an absolute path, else $HOME/.cache/amptrain/kernels.cache (NULL when HOME is unset too),
// otherwise the setting itself. Written into out (cap bytes); returns out or NULL.
const char *kernel_cache_path_of(const char *setting, char *out, size_t cap);

// A table read from the file at path when it exists; path NULL: in memory only, no file read or written.
// A file that cannot be read (not a regular file, no permission) is warned about and then left alone.
KernelCache *kernel_cache_open(const char *path);
void kernel_cache_close(KernelCache *kc);

// The choice recorded for key, or NULL. Counts nothing: the caller checks the choice, then says what it
// did with kernel_cache_use or kernel_cache_store.
const char *kernel_cache_find(const KernelCache *kc, const char *key);
// The record of key (found above) is taken as it is: counted in from_cache.
void kernel_cache_use(KernelCache *kc, const char *key);
// A choice timed in `seconds`: recorded for key (over an older record), counted in searched.
void kernel_cache_store(KernelCache *kc, const char *key, const char *choice, double seconds);
KernelCacheStats kernel_cache_stats(const KernelCache *kc);

// The records this process used or stored, as the file's record lines (KEY<TAB>CHOICE<LF>), malloc'd and
// NUL-terminated; *len their length.
char *kernel_cache_export(KernelCache *kc, size_t *len);
// Lines as kernel_cache_export writes them (rank 0's), added over this table's records. 0, or -1 when a
// line is malformed (then nothing is added).
int kernel_cache_import(KernelCache *kc, const char *text, size_t len);

// Writes the file when there is one and a record was stored since it was read or written (or it must be
// rebuilt): makes its folder, adds the records the file holds now, renames a complete temporary file over
// it. 0 (written or nothing to write), or -1 after one warning (the run goes on; later saves stay silent).
int kernel_cache_save(KernelCache *kc);

#ifdef __cplusplus
}
#endif

#endif
