// safetensors.h - checkpoint files in the safetensors format (https://github.com/huggingface/safetensors),
// so `safetensors.torch.load_file` and torchvision read what amptrain writes.
//
// Layout: u64 little-endian N, then N bytes of JSON header
//   {"__metadata__":{"key":"value",...},"name":{"dtype":"F32","shape":[64,3,7,7],"data_offsets":[b,e]},...}
// (space-padded), then the data region; [b, e) are byte offsets into the data region, and the tensors
// tile it exactly: contiguous, no overlap, no gap. Tensor data is little-endian and row-major.
//
// Writing is atomic: everything goes to "PATH.tmp.<pid>", which is fsynced and renamed onto PATH, and
// the directory is fsynced, so a crash leaves either the old checkpoint or the new one. Every file
// written carries ST_CHECKSUM_KEY in its metadata: the digest (core/digest.h) of the data region.
// Reading validates the whole header against the file's size before any tensor data is read.
#ifndef AMPTRAIN_SAFETENSORS_H
#define AMPTRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER_BYTES 100000000ull  // the reference implementation's limit, 100 MB

typedef enum {
    ST_F64,
    ST_F32,
    ST_F16,
    ST_BF16,
    ST_I64,
    ST_I32,
    ST_I16,
    ST_I8,
    ST_U8,
    ST_BOOL,
} StDtype;

size_t st_dtype_size(StDtype dtype);       // bytes per element
const char *st_dtype_name(StDtype dtype);  // "F32", as the header spells it

// ---- writing -----------------------------------------------------------------------------------------

typedef struct SafetensorsWriter SafetensorsWriter;

// The temp file of a commit is "<final path>" ST_TEMP_INFIX "<pid of the writer>".
#define ST_TEMP_INFIX ".tmp."

// Starts a checkpoint that will replace `final_path`; nothing touches the disk before commit.
SafetensorsWriter *st_writer_open(const char *final_path);

// Adds a tensor of ndim (0..8) dims. st_writer_add only references `data` (which must stay alive and
// unchanged until commit); st_writer_add_copy copies it, for data in a scratch buffer. Tensors are laid
// out in the order added. A duplicate or empty name, or the name "__metadata__", is a programming
// error and ends the job.
void st_writer_add(SafetensorsWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                   const void *data);
void st_writer_add_copy(SafetensorsWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                        const void *data);

// The metadata key of the data region's digest (core/digest.h: 64-bit FNV-1a over little-endian words,
// as 16 hex digits). st_writer_commit sets it; a value set by the caller is replaced.
#define ST_CHECKSUM_KEY "data_checksum"

// Sets a "__metadata__" entry (strings, copied); setting a key again replaces its value.
void st_writer_set_meta(SafetensorsWriter *w, const char *key, const char *value);

// Writes the temp file (header + data), fflush, fsync, fclose, rename onto the final path, fsync the
// directory. Frees `w` in every case. Returns 0, or -1 with "PATH: what failed: strerror" in err; on
// failure the temp file is removed and the old file at the final path is untouched.
int st_writer_commit(SafetensorsWriter *w, char *err, size_t err_len);

// Drops the checkpoint: frees `w`, leaves the final path as it was, and no temp file behind.
void st_writer_abort(SafetensorsWriter *w);

// ---- reading -----------------------------------------------------------------------------------------

typedef struct {
    const char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];  // shape[0..ndim)
    uint64_t numel;              // product of the shape (1 for ndim 0)
    uint64_t nbytes;             // numel * st_dtype_size(dtype)
    uint64_t data_begin;         // offset into the data region
} StTensor;

typedef struct SafetensorsFile SafetensorsFile;

// Opens and validates a checkpoint. On failure returns NULL with one line in err naming the file and
// the offending tensor or field, e.g.
//   "ckpt.safetensors: tensor 'fc.weight': data_offsets [0, 100] exceed the file's data (64 bytes)".
SafetensorsFile *st_open(const char *path, char *err, size_t err_len);

// The path it was opened with (for messages).
const char *st_path(const SafetensorsFile *f);

// Tensors in data order, for iteration (the caller's "unexpected tensor" checks): index 0..count-1.
size_t st_count(const SafetensorsFile *f);
const StTensor *st_tensor(const SafetensorsFile *f, size_t index);

// The tensor with this name, or NULL.
const StTensor *st_find(const SafetensorsFile *f, const char *name);

// Reads tensor `name` into dst (nbytes of it) if it has exactly the expected dtype and shape. Returns 0,
// or -1 with a message in err: a missing tensor, or a mismatch naming both dtypes and shapes
// ("... tensor 'fc.weight' is F32 [10, 512], expected F32 [1000, 2048]"), or a read error.
int st_read(SafetensorsFile *f, const char *name, StDtype dtype, int ndim, const int64_t *shape, void *dst,
            char *err, size_t err_len);

// Reads the whole data region into memory and compares its digest with ST_CHECKSUM_KEY; from then on
// st_read copies from that copy, so what was checked is what loads, even when the file is rewritten in
// place meanwhile. Returns 0 when they agree, 1 when the file has no checksum (the data is read, not
// checked), or -1 with one line in err: a read error, or a checksum that differs (a damaged file, or
// one overwritten while it was read).
int st_load_checked(SafetensorsFile *f, char *err, size_t err_len);

// The "__metadata__" value for key, or NULL.
const char *st_meta(const SafetensorsFile *f, const char *key);

void st_close(SafetensorsFile *f);

#endif
