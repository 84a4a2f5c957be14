// fuzz_safetensors.c - libFuzzer target for the safetensors reader (checkpoints, the parity file): any
// bytes as a file. st_open must refuse it with a message or return tensors whose every byte range lies
// in the file; then every tensor is read back in its own dtype and shape, from the file and again from
// st_load_checked's copy (whose refusal must say why), and the metadata looked up.
#include <stdint.h>
#include <stdlib.h>

#include "fuzz/fuzz_input.h"
#include "checkpoint/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_write("input.safetensors", data, size);
    char err[512];
    SafetensorsFile *f = st_open(path, err, sizeof err);
    if (!f) {
        if (!err[0]) __builtin_trap();  // a refusal always says why
        return 0;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < st_count(f); i++) {
            const StTensor *t = st_tensor(f, i);
            if (t->nbytes > size) __builtin_trap();  // validated against the file size
            void *dst = malloc(t->nbytes ? t->nbytes : 1);
            st_read(f, t->name, t->dtype, t->ndim, t->shape, dst, err, sizeof err);
            free(dst);
        }
        err[0] = '\0';
        if (pass == 0 && st_load_checked(f, err, sizeof err) < 0 && !err[0]) __builtin_trap();
    }
    st_meta(f, "format");
    st_meta(f, "step");
    st_close(f);
    return 0;
}
