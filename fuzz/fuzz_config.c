// fuzz_config.c - libFuzzer target for the YAML config reader: any bytes as a config file. config_load
// must accept them or refuse them with one line and 2, and what it accepts must print (config_print);
// ASan/UBSan in the build turn any memory or arithmetic fault on the way into a crash the fuzzer keeps.
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *sink;
    if (!sink) sink = fopen("/dev/null", "w");
    const char *path = fuzz_input_write("config.yaml", data, size);
    Config cfg;
    int rc = config_load(&cfg, path, 0, NULL, sink);
    if (rc != 0 && rc != 2) __builtin_trap();  // the contract: 0 valid, 2 refused
    if (rc == 0) config_print(&cfg, sink);
    return 0;
}
