// config_schema.h - the table behind config.c: one row per `section.key`, with its type, where it
// lives in Config, its allowed range or choices and a one-line meaning (docs/config.md mirrors it).
//
// config.c reads, validates and prints through this table alone, so adding a key is adding a row
// (plus its default in config_defaults and its line in docs/config.md).
#ifndef AMPTRAIN_CONFIG_SCHEMA_H
#define AMPTRAIN_CONFIG_SCHEMA_H

#include <stddef.h>

typedef enum {
    CK_INT,       // int
    CK_LONG,      // long
    CK_FLOAT,     // double; YAML floats (.inf, .nan, 1e-3) and integers
    CK_BOOL,      // int 0/1; YAML true/false
    CK_STRING,    // char[size]
    CK_ENUM,      // char[size], one of `choices`
    CK_INT_LIST,  // int[4]
    CK_FLOAT3,    // double[3]; one value per colour channel (R, G, B)
} ConfigKeyType;

#define CONFIG_LIST_LEN 4
#define CONFIG_CHANNELS 3
#define CONFIG_MAX_CHOICES 6
#define CONFIG_MAX_KEYS 128  // config.c keeps per-key state in arrays of this size

typedef struct ConfigKey {
    const char *section;
    const char *key;
    ConfigKeyType type;
    size_t offset;  // offsetof(Config, ...)
    size_t size;    // CK_STRING / CK_ENUM: the array's size, terminating NUL included
    // Numbers (list items too) must lie between lo and hi; an `_open` end excludes the bound.
    // lo = -inf and hi = +inf together mean "any value, inf and NaN included".
    double lo, hi;
    int lo_open, hi_open;
    const char *choices[CONFIG_MAX_CHOICES];  // CK_ENUM; unused slots are NULL
    const char *doc;
} ConfigKey;

extern const ConfigKey config_keys[];
extern const size_t config_key_count;

extern const char *const config_sections[];
extern const size_t config_section_count;

// The row for `section.key`, or NULL.
const ConfigKey *config_schema_find(const char *section, const char *key);

// 1 if `section` names a section of the table.
int config_schema_has_section(const char *section);

// The known `section.key` (or section, when `key` is NULL) closest to what was written, or NULL when
// nothing is close enough to be a plausible typo. Writes the suggestion into out.
const char *config_schema_suggest(const char *section, const char *key, char *out, size_t out_len);

#endif
