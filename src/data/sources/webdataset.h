// webdataset.h - data.source webdataset: JPEG samples in POSIX tar shards, as WebDataset writes them.
//
// data.path holds train-*.tar and val-*.tar (ustar, GNU or pax tar, as Python's tarfile and `tar` write
// them). A sample is the run of adjacent members sharing a key, the member name up to the first dot of its
// last component: `<key>.jpg` (or `.jpeg`) holds the encoded image, `<key>.cls` the label as an ASCII
// integer; other members (`.json`, `.txt`, ...) are ignored, as WebDataset's decoders ignore fields nobody
// asks for. Shards are taken in name order and their samples in archive order: sample i of the split is
// the i-th sample of that walk, so `tools/pack-shards` puts the images of an ImageFolder at the same
// indices as the imagefolder source does.
//
// Every rank indexes every shard at open (one pread per member header) and then reads the samples its
// sampler gives it by offset (pread, so any number of loader threads may read at once). WebDataset
// streams instead, one shard per rank and worker; indexing keeps amptrain's rule that sample i, its crop
// and its flip depend on (seed, epoch, i) only, so a run is the same on any rank count and resumes
// mid-epoch onto the same images, at the price of random reads (cheap from local disk or the page cache,
// not from object storage).
#ifndef AMPTRAIN_WEBDATASET_H
#define AMPTRAIN_WEBDATASET_H

#include <stddef.h>

#include "data/sources/image_dataset.h"

// Indexes dir/<split>-*.tar (split: "train" or "val"); labels must lie in [0, classes). Returns 0 and sets
// *out, or returns 2 (the CLI's exit code for bad input) with *out = NULL and one line in err naming the
// problem: no shards (unless optional: then 0 and *out = NULL), an unreadable shard, a truncated or corrupt
// one (the shard and the byte offset), a sample without an image or without a label, a label that is not
// an integer or is out of range. A failed read names the shard and offset through src->describe.
int webdataset_open(const char *dir, const char *split, int classes, int optional, EncodedSource **out,
                    char *err, size_t err_cap);

#endif
