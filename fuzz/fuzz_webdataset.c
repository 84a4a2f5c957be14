// fuzz_webdataset.c - libFuzzer target for the tar-shard index of data.source webdataset: any bytes as
// train-000000.tar. webdataset_open must refuse it with a message or index samples whose every byte range
// lies in the file and whose labels lie in [0, classes); then every sample is read back and described.
#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#include "data/sources/webdataset.h"
#include "fuzz/fuzz_input.h"

enum { FUZZ_CLASSES = 1000 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[4096];
    strncpy(dir, fuzz_input_write("train-000000.tar", data, size), sizeof dir - 1);
    dir[sizeof dir - 1] = 0;
    char err[512] = "";
    EncodedSource *src = NULL;
    if (webdataset_open(dirname(dir), "train", FUZZ_CLASSES, 0, &src, err, sizeof err) != 0) {
        if (!err[0] || src) __builtin_trap();  // a refusal always says why, and hands out nothing
        return 0;
    }
    if (!src || src->size <= 0) __builtin_trap();  // not optional: a success has samples
    for (int i = 0; i < src->size; i++) {
        uint8_t *bytes = NULL;
        size_t len = 0;
        int32_t label = -1;
        if (src->read(src, i, &bytes, &len, &label, err, sizeof err) == 0) {
            if (len > size || label < 0 || label >= FUZZ_CLASSES) __builtin_trap();
            free(bytes);
        } else if (!err[0]) {
            __builtin_trap();
        }
        char what[512];
        if (src->describe) src->describe(src, i, what, sizeof what);
    }
    src->destroy(src);
    return 0;
}
