// fuzz_input.h - the file a fuzz target hands to a reader that takes a path: the fuzzer's bytes are
// written to one file in a private temporary folder (made once, removed at exit), rewritten per input.
#ifndef AMPTRAIN_FUZZ_INPUT_H
#define AMPTRAIN_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

// Writes data to the input file (named `name` in the private folder) and returns its path.
const char *fuzz_input_write(const char *name, const uint8_t *data, size_t size);

#endif
