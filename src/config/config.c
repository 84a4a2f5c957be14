// config.c - defaults, then the YAML file, then `section.key=value` overrides, all through the table in
// config_schema.c; then the rules that tie keys together (presets, cifar10's fixed shape).
//
// The first problem found is the only one reported: one line `FILE:LINE: KEY: what is wrong` (or
// `command line: KEY: ...`) and a return of 2, with the caller's Config left at the defaults.
// Each key remembers where it was set, so a rule between two keys can point at the one the user wrote.
#include "config/config.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_schema.h"
#include "config/yaml_tree.h"
#include "core/image_job.h"

#define CONFIG_EXIT_INVALID 2
#define MESSAGE_MAX 1024
#define NAME_MAX_SHOWN 64  // longest key name or value echoed back in a message
#define KEY_NAME_MAX 96    // "section.key" of a known key, or a suggestion, with room to spare

typedef enum { FROM_DEFAULT, FROM_FILE, FROM_COMMAND_LINE } Origin;

typedef struct {
    Origin origin;
    int line;  // FROM_FILE: 1-based line of the key
} Where;

// One config_load's reading of the defaults, the file and the overrides into cfg.
typedef struct {
    Config cfg;
    Where where[CONFIG_MAX_KEYS];  // parallel to config_keys
    Config file_cfg;               // the settings after the file, before the overrides
    const char *file;              // the config file as the user named it
    FILE *err;
} ConfigReader;

// ---- defaults ----------------------------------------------------------------------------------

static void copy_text(char *dst, size_t size, const char *src) { snprintf(dst, size, "%s", src); }

void config_defaults(Config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    ModelConfig *m = &cfg->model;
    copy_text(m->arch, sizeof m->arch, "custom");
    for (int i = 0; i < 4; i++) m->layers[i] = 1;
    m->cardinality = 4;
    m->base_width = 16;
    m->planes = 16;
    m->num_classes = 10;
    m->image_size = 32;

    DataConfig *d = &cfg->data;
    copy_text(d->source, sizeof d->source, "learnable");
    d->train_size = 2048;
    d->val_size = 512;
    d->batch_size = 32;
    d->augment = 1;
    // ImageNet's statistics, the constants of torchvision's reference scripts.
    const double imagenet_mean[3] = {0.485, 0.456, 0.406}, imagenet_std[3] = {0.229, 0.224, 0.225};
    memcpy(d->mean, imagenet_mean, sizeof d->mean);
    d->crop_scale_min = 0.08;  // torchvision's RandomResizedCrop(scale=(0.08, 1.0))
    d->crop_scale_max = 1.0;
    memcpy(d->std, imagenet_std, sizeof d->std);
    // the sides model.image_size 32 gives; resolve_sides derives the unwritten ones from the final image_size
    d->train_crop = d->val_crop = m->image_size;
    d->val_resize = 37;  // round(32 x 256 / 224)
    copy_text(d->auto_augment, sizeof d->auto_augment, "none");
    copy_text(d->auto_augment_interpolation, sizeof d->auto_augment_interpolation, "nearest");
    d->random_erase = 0;
    d->repeated_aug = 1;
    d->mixup_alpha = 0;
    d->cutmix_alpha = 0;
    d->prefetch = 4;
    copy_text(d->decode, sizeof d->decode, "host");
    d->max_image_pixels = IMAGE_DEFAULT_MAX_PIXELS;
    d->workers = 0;

    TrainConfig *t = &cfg->train;
    t->epochs = 3;
    t->steps = 0;
    t->lr = 0.1;
    t->momentum = 0.9;
    t->weight_decay = 5e-4;
    t->norm_weight_decay = 5e-4;  // train.weight_decay unless written (resolve_norm_weight_decay)
    t->nesterov = 0;
    t->label_smoothing = 0;
    t->clip_grad_norm = 0;
    t->ema_decay = 0;
    t->ema_every = 32;
    copy_text(t->schedule, sizeof t->schedule, "cosine");
    t->warmup_steps = 20;
    t->step_every = 30;
    t->step_gamma = 0.1;
    t->min_lr = 0;
    t->seed = 42;
    t->accum_steps = 1;
    copy_text(t->lr_scaling, sizeof t->lr_scaling, "none");
    copy_text(t->cuda_graph, sizeof t->cuda_graph, "auto");

    AmpConfig *a = &cfg->amp;
    a->enabled = 1;
    copy_text(a->dtype, sizeof a->dtype, "float16");
    a->dynamic = 1;
    a->init_scale = 65536.0;
    a->growth_factor = 2.0;
    a->backoff_factor = 0.5;
    a->growth_interval = 2000;
    a->max_consecutive_skips = 100;
    a->min_scale = 1e-4;

    cfg->log.every = 10;
    copy_text(cfg->log.progress, sizeof cfg->log.progress, "auto");

    cfg->checkpoint.every = 0;
    cfg->checkpoint.keep = 1;

    cfg->dist.bucket_mb = 25;
    cfg->dist.first_bucket_mb = 1;
    cfg->dist.timeout_s = 300;

    copy_text(cfg->backend.device, sizeof cfg->backend.device, "auto");

    cfg->cudnn.workspace_mb = 512;  // 4096 without AMP (apply_workspace_default)
    cfg->cudnn.tf32 = 1;            // PyTorch's defaults: TF32 in cuDNN convolutions, not in matmuls
    cfg->cudnn.matmul_tf32 = 0;
    copy_text(cfg->cudnn.batch_norm, sizeof cfg->cudnn.batch_norm, "auto");
    copy_text(cfg->cudnn.cache, sizeof cfg->cudnn.cache, "auto");
    cfg->debug.inject_step = -1;
    cfg->debug.inject_rank = -1;
    cfg->debug.inject_value = INFINITY;
}

// ---- errors ------------------------------------------------------------------------------------

// The promise is one line: quoted keys and values may carry newlines or tabs, so they become spaces.
static void write_line(FILE *err, char *message) {
    for (char *c = message; *c; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = ' ';
    }
    if (err) {
        fprintf(err, "%s\n", message);
        fflush(err);
    }
}

static int fail_at(const ConfigReader *L, Where at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Prefixes the place: `FILE:LINE: `, `command line: `, or `FILE: ` for the file as a whole.
static int fail_at(const ConfigReader *L, Where at, const char *fmt, ...) {
    char message[MESSAGE_MAX];
    int used;
    if (at.origin == FROM_FILE)
        used = snprintf(message, sizeof message, "%s:%d: ", L->file, at.line);
    else if (at.origin == FROM_COMMAND_LINE)
        used = snprintf(message, sizeof message, "command line: ");
    else
        used = snprintf(message, sizeof message, "%s: ", L->file ? L->file : "defaults");
    if (used < 0 || (size_t)used >= sizeof message) used = 0;
    va_list args;
    va_start(args, fmt);
    vsnprintf(message + used, sizeof message - (size_t)used, fmt, args);
    va_end(args);
    write_line(L->err, message);
    return CONFIG_EXIT_INVALID;
}

// A name or value as it appears in a message: bounded, so a pasted blob does not flood the terminal.
static const char *shown(const char *text, char *buf, size_t size) {
    size_t len = strlen(text);
    if (len < NAME_MAX_SHOWN || size <= NAME_MAX_SHOWN + 4) return text;
    snprintf(buf, size, "%.*s...", NAME_MAX_SHOWN, text);
    return buf;
}

// ---- numbers -----------------------------------------------------------------------------------

// The shortest decimal that reads back as exactly `v`; YAML spellings for inf and NaN.
static void format_double(double v, char *buf, size_t size) {
    if (isnan(v)) {
        snprintf(buf, size, ".nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, size, v < 0 ? "-.inf" : ".inf");
        return;
    }
    // Plain notation where %g would pick "3e+02" for 300; exponents only for very large or small.
    int plain = fabs(v) >= 1e-4 && fabs(v) < 1e15;
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, size, "%.*g", digits, v);
        if (strtod(buf, NULL) == v && !(plain && strchr(buf, 'e'))) return;
    }
}

static int all_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
    }
    return 1;
}

// YAML 1.2 core schema integers, decimal only: [-+]?[0-9]+. Returns 1, 0 (not an integer) or -1
// (an integer beyond long).
static int parse_long(const char *text, long *out) {
    const char *digits = (*text == '-' || *text == '+') ? text + 1 : text;
    if (!all_digits(digits)) return 0;
    errno = 0;
    long v = strtol(text, NULL, 10);
    if (errno == ERANGE) return -1;
    *out = v;
    return 1;
}

// YAML 1.2 core schema floats: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, [-+]?.inf, .nan
// (in the three capitalisations YAML allows). strtod alone would also take "inf", "nan" and hex.
static int parse_double(const char *text, double *out) {
    const char *s = (*text == '-' || *text == '+') ? text + 1 : text;
    double sign = *text == '-' ? -1.0 : 1.0;
    if (!strcmp(s, ".inf") || !strcmp(s, ".Inf") || !strcmp(s, ".INF")) {
        *out = sign * INFINITY;
        return 1;
    }
    if (s == text && (!strcmp(s, ".nan") || !strcmp(s, ".NaN") || !strcmp(s, ".NAN"))) {
        *out = NAN;
        return 1;
    }
    size_t int_digits = strspn(s, "0123456789");
    s += int_digits;
    size_t frac_digits = 0;
    if (*s == '.') {
        frac_digits = strspn(s + 1, "0123456789");
        s += 1 + frac_digits;
    }
    if (int_digits == 0 && frac_digits == 0) return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '-' || *s == '+') s++;
        size_t exp_digits = strspn(s, "0123456789");
        if (exp_digits == 0) return 0;
        s += exp_digits;
    }
    if (*s) return 0;
    errno = 0;
    double v = strtod(text, NULL);
    if (errno == ERANGE && isinf(v)) return 0;
    *out = v;
    return 1;
}

// ---- one value ---------------------------------------------------------------------------------

static void full_name(const ConfigKey *row, char *buf, size_t size) {
    snprintf(buf, size, "%s.%s", row->section, row->key);
}

static const char *kind_name(const YtNode *node) {
    return node->kind == YT_MAP ? "a map" : node->kind == YT_SEQ ? "a list" : "a scalar";
}

// "expected X, got Y" with Y as written: quoted text keeps its quotes, so "5" for an int is explained.
static int fail_expected(const ConfigReader *L, Where at, const char *name, const char *expected,
                         const YtNode *node) {
    char buf[NAME_MAX_SHOWN + 8];
    if (node->kind != YT_SCALAR)
        return fail_at(L, at, "%s: expected %s, got %s", name, expected, kind_name(node));
    if (!node->quoted && node->scalar[0] == '\0')
        return fail_at(L, at, "%s: expected %s, got nothing", name, expected);
    const char *q = node->quoted ? "\"" : "";
    return fail_at(L, at, "%s: expected %s, got %s%s%s", name, expected, q,
                   shown(node->scalar, buf, sizeof buf), q);
}

// `v` is within the row's range; NaN is only in the unbounded range.
static int in_range(const ConfigKey *row, double v) {
    if (row->lo == -INFINITY && row->hi == INFINITY) return 1;
    int lo_ok = row->lo_open ? v > row->lo : v >= row->lo;
    int hi_ok = row->hi_open ? v < row->hi : v <= row->hi;
    return lo_ok && hi_ok;
}

static void describe_range(const ConfigKey *row, char *buf, size_t size) {
    char lo[32], hi[32];
    format_double(row->lo, lo, sizeof lo);
    format_double(row->hi, hi, sizeof hi);
    if (row->hi == INFINITY)
        snprintf(buf, size, "%s %s", row->lo_open ? ">" : ">=", lo);
    else
        snprintf(buf, size, "in %s%s, %s%s", row->lo_open ? "(" : "[", lo, hi, row->hi_open ? ")" : "]");
}

static int fail_range(const ConfigReader *L, Where at, const char *name, const ConfigKey *row, double v) {
    char range[96], got[32];
    describe_range(row, range, sizeof range);
    format_double(v, got, sizeof got);
    return fail_at(L, at, "%s: must be %s (got %s)", name, range, got);
}

// The run computes in fp32 (the loss scale, the learning rate, factors on fp32 weights), so a bounded
// float key holds 0 or a normal fp32 magnitude: 1e-320 passes "> 0" yet is 0 as a float (a loss scale
// of 0 turns every loss into NaN), and 1e39 is inf. Only the unbounded rows (debug.inject_value) take
// anything.
static int is_float_normal(const ConfigKey *row, double v) {
    if (row->lo == -INFINITY && row->hi == INFINITY) return 1;
    return v == 0 || (fabs(v) >= FLT_MIN && fabs(v) <= FLT_MAX);
}

static int fail_not_normal(const ConfigReader *L, Where at, const char *name, double v) {
    char got[32], lo[32], hi[32];
    format_double(v, got, sizeof got);
    format_double(FLT_MIN, lo, sizeof lo);
    format_double(FLT_MAX, hi, sizeof hi);
    return fail_at(L, at, "%s: %s is not a normal fp32 number (0, or a magnitude in [%s, %s])", name, got, lo,
                   hi);
}

// An integer in the row's range, into *out; 0 on success, else the error has been reported.
static int read_integer(const ConfigReader *L, Where at, const char *name, const ConfigKey *row,
                        const YtNode *node, long lo, long hi, long *out) {
    long v = 0;
    int parsed = node->kind == YT_SCALAR && !node->quoted ? parse_long(node->scalar, &v) : 0;
    if (parsed == 0) return fail_expected(L, at, name, "an integer", node);
    if (parsed < 0 || v < lo || v > hi) {
        char buf[NAME_MAX_SHOWN + 8];
        return fail_at(L, at, "%s: %s is too large for an integer", name,
                       shown(node->scalar, buf, sizeof buf));
    }
    if (!in_range(row, (double)v)) return fail_range(L, at, name, row, (double)v);
    *out = v;
    return 0;
}

static int read_list(const ConfigReader *L, Where at, const char *name, const ConfigKey *row,
                     const YtNode *node, int *out) {
    if (node->kind != YT_SEQ)
        return fail_expected(L, at, name, "a list of 4 integers like [3, 4, 6, 3]", node);
    if (node->count != CONFIG_LIST_LEN)
        return fail_at(L, at, "%s: expected a list of 4 integers, got %zu", name, node->count);
    int values[CONFIG_LIST_LEN];
    for (size_t i = 0; i < CONFIG_LIST_LEN; i++) {
        char item_name[KEY_NAME_MAX + 8];  // the key name plus "[i]"
        snprintf(item_name, sizeof item_name, "%s[%zu]", name, i);
        Where item_at = at;
        if (at.origin == FROM_FILE) item_at.line = node->items[i]->line;
        long v;
        int rc = read_integer(L, item_at, item_name, row, node->items[i], INT_MIN, INT_MAX, &v);
        if (rc) return rc;
        values[i] = (int)v;
    }
    memcpy(out, values, sizeof values);
    return 0;
}

// Three numbers, one per channel, each in the row's range and a normal fp32 value (they become floats).
static int read_channels(const ConfigReader *L, Where at, const char *name, const ConfigKey *row,
                         const YtNode *node, double *out) {
    if (node->kind != YT_SEQ || node->count != CONFIG_CHANNELS)
        return node->kind == YT_SEQ
                   ? fail_at(L, at, "%s: expected a list of 3 numbers (R, G, B), got %zu", name, node->count)
                   : fail_expected(L, at, name, "a list of 3 numbers (R, G, B) like [0.485, 0.456, 0.406]",
                                   node);
    double values[CONFIG_CHANNELS];
    for (size_t i = 0; i < CONFIG_CHANNELS; i++) {
        char item_name[KEY_NAME_MAX + 8];
        snprintf(item_name, sizeof item_name, "%s[%zu]", name, i);
        Where item_at = at;
        if (at.origin == FROM_FILE) item_at.line = node->items[i]->line;
        const YtNode *item = node->items[i];
        if (item->kind != YT_SCALAR || item->quoted || !parse_double(item->scalar, &values[i]))
            return fail_expected(L, item_at, item_name, "a number", item);
        if (!in_range(row, values[i])) return fail_range(L, item_at, item_name, row, values[i]);
        if (!is_float_normal(row, values[i])) return fail_not_normal(L, item_at, item_name, values[i]);
    }
    memcpy(out, values, sizeof values);
    return 0;
}

// Plain `~`, `null` and nothing at all are YAML's null: for a path that means "none", i.e. "".
static const char *string_value(const YtNode *node) {
    if (node->quoted) return node->scalar;
    const char *s = node->scalar;
    if (!strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL")) return "";
    return s;
}

static int read_enum(const ConfigReader *L, Where at, const char *name, const ConfigKey *row,
                     const YtNode *node, char *dst) {
    char choices[160] = "";
    for (int i = 0; i < CONFIG_MAX_CHOICES && row->choices[i]; i++) {
        if (node->kind == YT_SCALAR && !strcmp(node->scalar, row->choices[i])) {
            copy_text(dst, row->size, row->choices[i]);
            return 0;
        }
        size_t used = strlen(choices);
        snprintf(choices + used, sizeof choices - used, "%s%s", i ? ", " : "", row->choices[i]);
    }
    char expected[200];
    snprintf(expected, sizeof expected, "one of %s", choices);
    return fail_expected(L, at, name, expected, node);
}

// Checks `node` against the row and stores it into L->cfg; 0 on success.
static int apply_value(ConfigReader *L, const ConfigKey *row, const YtNode *node, Where at) {
    char name[KEY_NAME_MAX];
    full_name(row, name, sizeof name);
    char *field = (char *)&L->cfg + row->offset;
    int rc = 0;
    long v;
    double d;
    switch (row->type) {
    case CK_INT:
        rc = read_integer(L, at, name, row, node, INT_MIN, INT_MAX, &v);
        if (!rc) *(int *)field = (int)v;
        break;
    case CK_LONG:
        rc = read_integer(L, at, name, row, node, LONG_MIN, LONG_MAX, &v);
        if (!rc) *(long *)field = v;
        break;
    case CK_FLOAT:
        if (node->kind != YT_SCALAR || node->quoted || !parse_double(node->scalar, &d))
            rc = fail_expected(L, at, name, "a number", node);
        else if (!in_range(row, d))
            rc = fail_range(L, at, name, row, d);
        else if (!is_float_normal(row, d))
            rc = fail_not_normal(L, at, name, d);
        else
            *(double *)field = d;
        break;
    case CK_BOOL: {
        const char *s = node->kind == YT_SCALAR && !node->quoted ? node->scalar : "";
        int is_true = !strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE");
        int is_false = !strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE");
        if (is_true || is_false)
            *(int *)field = is_true;
        else
            rc = fail_expected(L, at, name, "true or false", node);
        break;
    }
    case CK_STRING:
        if (node->kind != YT_SCALAR)
            rc = fail_expected(L, at, name, "a string", node);
        else if (strlen(string_value(node)) >= row->size)
            rc = fail_at(L, at, "%s: longer than %zu characters", name, row->size - 1);
        else
            copy_text(field, row->size, string_value(node));
        break;
    case CK_ENUM: rc = read_enum(L, at, name, row, node, field); break;
    case CK_INT_LIST: rc = read_list(L, at, name, row, node, (int *)field); break;
    case CK_FLOAT3: rc = read_channels(L, at, name, row, node, (double *)field); break;
    }
    if (!rc) L->where[row - config_keys] = at;
    return rc;
}

// ---- unknown names -----------------------------------------------------------------------------

static int fail_unknown(const ConfigReader *L, Where at, const char *section, const char *key) {
    char written[2 * NAME_MAX_SHOWN + 16], buf_s[NAME_MAX_SHOWN + 8], buf_k[NAME_MAX_SHOWN + 8];
    char hint[128] = "", suggestion[KEY_NAME_MAX];
    if (config_schema_suggest(section, key, suggestion, sizeof suggestion))
        snprintf(hint, sizeof hint, " (did you mean %s?)", suggestion);
    if (!key) {
        return fail_at(L, at, "%s: unknown section%s", shown(section, buf_s, sizeof buf_s),
                       hint[0] ? hint : " (see docs/config.md)");
    }
    snprintf(written, sizeof written, "%s.%s", shown(section, buf_s, sizeof buf_s),
             shown(key, buf_k, sizeof buf_k));
    return fail_at(L, at, "%s: unknown key%s", written, hint[0] ? hint : " (see docs/config.md)");
}

// ---- the file ----------------------------------------------------------------------------------

static int apply_section(ConfigReader *L, const char *section, const YtNode *map) {
    for (size_t i = 0; i < map->count; i++) {
        Where at = {FROM_FILE, map->key_lines[i]};
        const ConfigKey *row = config_schema_find(section, map->keys[i]);
        if (!row) return fail_unknown(L, at, section, map->keys[i]);
        int rc = apply_value(L, row, map->items[i], at);
        if (rc) return rc;
    }
    return 0;
}

static int apply_document(ConfigReader *L, const YtNode *root) {
    if (root->kind != YT_MAP)
        return fail_at(L, (Where){FROM_FILE, root->line},
                       "the document must be a map of sections (model:, data:, train:, ...), got %s",
                       kind_name(root));
    for (size_t i = 0; i < root->count; i++) {
        const char *section = root->keys[i];
        const YtNode *value = root->items[i];
        Where at = {FROM_FILE, root->key_lines[i]};
        if (!config_schema_has_section(section)) return fail_unknown(L, at, section, NULL);
        // `train:` with nothing under it is an empty section, not an error.
        if (value->kind == YT_SCALAR && !value->quoted && value->scalar[0] == '\0') continue;
        if (value->kind != YT_MAP)
            return fail_at(L, at, "%s: a section must be a map of `key: value` lines, got %s", section,
                           kind_name(value));
        int rc = apply_section(L, section, value);
        if (rc) return rc;
    }
    return 0;
}

static int apply_file(ConfigReader *L, const char *path) {
    char message[MESSAGE_MAX];
    YtNode *root = yt_parse_file(path, message, sizeof message);
    if (!root) {
        // yt_parse_file's message already reads "FILE:LINE: what" or "FILE: cannot read: why".
        write_line(L->err, message);
        return CONFIG_EXIT_INVALID;
    }
    int rc = apply_document(L, root);
    yt_free(root);
    return rc;
}

// ---- overrides ---------------------------------------------------------------------------------

// The value is YAML too, so `model.layers=[1,1,1,1]` is a list and `log.metrics="a b"` a string.
static YtNode *parse_override_value(const ConfigReader *L, const char *name, const char *value) {
    char message[MESSAGE_MAX];
    YtNode *node = yt_parse_buffer(value, strlen(value), "value", message, sizeof message);
    if (!node) {
        // Drop yt's "value:LINE: " prefix: the value is a single command-line argument.
        const char *why = strstr(message, ": ");
        fail_at(L, (Where){FROM_COMMAND_LINE, 0}, "%s: cannot parse the value: %s", name,
                why ? why + 2 : message);
    }
    return node;
}

static int apply_override(ConfigReader *L, const char *text) {
    Where at = {FROM_COMMAND_LINE, 0};
    char name[2 * NAME_MAX_SHOWN + 2], buf[NAME_MAX_SHOWN + 8];
    const char *eq = strchr(text, '=');
    size_t name_len = eq ? (size_t)(eq - text) : strlen(text);
    while (name_len && text[name_len - 1] == ' ') name_len--;
    if (name_len >= sizeof name)
        return fail_at(L, at, "%s: unknown key (see docs/config.md)", shown(text, buf, sizeof buf));
    memcpy(name, text, name_len);
    name[name_len] = '\0';
    char *dot = strchr(name, '.');
    if (!eq || !dot || dot == name || !dot[1]) {
        char hint[128] = "", suggestion[KEY_NAME_MAX];
        if (!dot && config_schema_suggest(NULL, name, suggestion, sizeof suggestion))
            snprintf(hint, sizeof hint, " (did you mean %s=%s?)", suggestion, eq ? eq + 1 : "...");
        const char *written = name[0] ? name : shown(text, buf, sizeof buf);
        return fail_at(L, at, "%s: expected section.key=value%s", written, hint);
    }
    *dot = '\0';
    const char *section = name, *key = dot + 1;
    const ConfigKey *row = config_schema_find(section, key);
    if (!row) return fail_unknown(L, at, section, key);
    *dot = '.';
    // `key=` is YAML's empty plain scalar (an empty path, a missing number), not the empty map
    // yt_parse_buffer makes of an empty document.
    YtNode nothing = {.kind = YT_SCALAR, .line = 1, .scalar = (char[]){""}};
    YtNode *node = eq[1] ? parse_override_value(L, name, eq + 1) : &nothing;
    if (!node) return CONFIG_EXIT_INVALID;
    int rc = apply_value(L, row, node, at);
    if (node != &nothing) yt_free(node);
    return rc;
}

// ---- rules between keys ------------------------------------------------------------------------

typedef struct {
    const char *arch;
    int layers[CONFIG_LIST_LEN];
    int cardinality, base_width, planes;
} ArchPreset;

// torchvision.models.resnext*: the same shapes, so checkpoints load there by parameter name.
static const ArchPreset arch_presets[] = {
    {"resnext50_32x4d", {3, 4, 6, 3}, 32, 4, 64},
    {"resnext101_32x4d", {3, 4, 23, 3}, 32, 4, 64},
    {"resnext101_32x8d", {3, 4, 23, 3}, 32, 8, 64},
};

// The model keys a preset decides.
static const char *const preset_keys[] = {"layers", "cardinality", "base_width", "planes"};

static int is_preset_key(const ConfigKey *row) {
    if (strcmp(row->section, "model") != 0) return 0;
    for (size_t i = 0; i < sizeof preset_keys / sizeof preset_keys[0]; i++) {
        if (!strcmp(row->key, preset_keys[i])) return 1;
    }
    return 0;
}

static Where where_set(const ConfigReader *L, const char *section, const char *key) {
    return L->where[config_schema_find(section, key) - config_keys];
}

static int was_written(const ConfigReader *L, const char *section, const char *key) {
    return where_set(L, section, key).origin != FROM_DEFAULT;
}

static int apply_arch_preset(ConfigReader *L) {
    ModelConfig *m = &L->cfg.model;
    const ArchPreset *p = NULL;
    for (size_t i = 0; i < sizeof arch_presets / sizeof arch_presets[0]; i++) {
        if (!strcmp(m->arch, arch_presets[i].arch)) p = &arch_presets[i];
    }
    if (!p) return 0;  // custom: the four keys are the user's
    for (size_t i = 0; i < sizeof preset_keys / sizeof preset_keys[0]; i++) {
        if (!was_written(L, "model", preset_keys[i])) continue;
        return fail_at(L, where_set(L, "model", preset_keys[i]),
                       "model.%s: model.arch %s fixes layers [%d, %d, %d, %d], cardinality %d, "
                       "base_width %d, planes %d; use `model.arch: custom` to choose them",
                       preset_keys[i], p->arch, p->layers[0], p->layers[1], p->layers[2], p->layers[3],
                       p->cardinality, p->base_width, p->planes);
    }
    memcpy(m->layers, p->layers, sizeof m->layers);
    m->cardinality = p->cardinality;
    m->base_width = p->base_width;
    m->planes = p->planes;
    return 0;
}

// torchvision's bottleneck width is int(planes * base_width / 64) * cardinality; 0 is no network.
static int check_group_width(const ConfigReader *L) {
    const ModelConfig *m = &L->cfg.model;
    if (m->planes * m->base_width / 64 >= 1) return 0;
    const char *blamed = was_written(L, "model", "base_width") ? "base_width" : "planes";
    return fail_at(L, where_set(L, "model", blamed),
                   "model.%s: the group width planes x base_width / 64 must be at least 1 (got %d x %d / 64)",
                   blamed, m->planes, m->base_width);
}

// CIFAR-10 is 32x32 images of 10 classes: what the files hold, whatever the config says.
static int apply_cifar10_shape(ConfigReader *L) {
    Config *c = &L->cfg;
    if (strcmp(c->data.source, "cifar10") != 0) return 0;
    if (!c->data.path[0])
        return fail_at(L, where_set(L, "data", "source"),
                       "data.source: cifar10 needs data.path (the folder with data_batch_1..5.bin)");
    if (was_written(L, "model", "num_classes") && c->model.num_classes != 10)
        return fail_at(L, where_set(L, "model", "num_classes"),
                       "model.num_classes: data.source cifar10 has 10 classes (got %d)",
                       c->model.num_classes);
    if (was_written(L, "model", "image_size") && c->model.image_size != 32)
        return fail_at(L, where_set(L, "model", "image_size"),
                       "model.image_size: data.source cifar10 images are 32x32 (got %d)",
                       c->model.image_size);
    c->model.num_classes = 10;
    c->model.image_size = 32;
    return 0;
}

// The JPEG sources read a folder: without data.path there is nothing to read.
static int check_image_source(const ConfigReader *L) {
    const DataConfig *d = &L->cfg.data;
    if ((strcmp(d->source, "imagefolder") != 0 && strcmp(d->source, "webdataset") != 0) || d->path[0])
        return 0;
    return fail_at(L, where_set(L, "data", "source"), "data.source: %s needs data.path (%s)", d->source,
                   !strcmp(d->source, "imagefolder")
                       ? "the root folder with train/<class>/*.jpg and val/<class>/*.jpg"
                       : "the folder of train-*.tar and val-*.tar shards");
}

static int check_optimizer(const ConfigReader *L) {
    const TrainConfig *t = &L->cfg.train;
    char lr[32], min_lr[32];
    format_double(t->lr, lr, sizeof lr);
    format_double(t->min_lr, min_lr, sizeof min_lr);
    // PyTorch's SGD refuses the same combination ("Nesterov momentum requires a momentum").
    if (t->nesterov && t->momentum == 0)
        return fail_at(L, where_set(L, "train", "nesterov"), "train.nesterov: needs train.momentum > 0");
    if (t->min_lr > t->lr) {
        if (was_written(L, "train", "min_lr"))
            return fail_at(L, where_set(L, "train", "min_lr"),
                           "train.min_lr: must not exceed train.lr (%s > %s)", min_lr, lr);
        return fail_at(L, where_set(L, "train", "lr"), "train.lr: must not be below train.min_lr (%s < %s)",
                       lr, min_lr);
    }
    return 0;
}

// torchvision's --norm-weight-decay left unset puts the normalisation layers' parameters in the one group
// of --weight-decay: unwritten, it is train.weight_decay.
static void resolve_norm_weight_decay(ConfigReader *L) {
    if (!was_written(L, "train", "norm_weight_decay"))
        L->cfg.train.norm_weight_decay = L->cfg.train.weight_decay;
}

static int check_crop_scale(const ConfigReader *L) {
    const DataConfig *d = &L->cfg.data;
    if (d->crop_scale_min <= d->crop_scale_max) return 0;
    char lo[32], hi[32];
    format_double(d->crop_scale_min, lo, sizeof lo);
    format_double(d->crop_scale_max, hi, sizeof hi);
    const char *key = was_written(L, "data", "crop_scale_min") ? "crop_scale_min" : "crop_scale_max";
    return fail_at(L, where_set(L, "data", key), "data.%s: crop_scale_min %s exceeds crop_scale_max %s", key,
                   lo, hi);
}

static int check_checkpoint(const ConfigReader *L) {
    const CheckpointConfig *k = &L->cfg.checkpoint;
    if (k->every > 0 && !k->dir[0])
        return fail_at(L, where_set(L, "checkpoint", "every"),
                       "checkpoint.every: needs checkpoint.dir (where the checkpoints go)");
    if (!strcmp(k->resume, "auto") && !k->dir[0])
        return fail_at(L, where_set(L, "checkpoint", "resume"),
                       "checkpoint.resume: auto needs checkpoint.dir (the folder it looks in)");
    if (k->overwrite && k->resume[0])
        return fail_at(
            L, where_set(L, "checkpoint", "overwrite"),
            "checkpoint.overwrite: true starts over, checkpoint.resume '%s' continues a run: set one of them",
            k->resume);
    return 0;
}

// ---- data keys that only some sources read -------------------------------------------------------
//
// A data key that the run's source does not read would be ignored, so writing one is an error. A key in
// the file is judged by the file's own data settings too: a command line that switches the source
// (`configs/resnext50_32x4d_imagenet.yaml data.source=imagefolder`) drops the file's keys for the file's
// source (they return to their defaults) instead of refusing the file. A key that neither the file's
// settings nor the run's read, or a command-line key the run does not read, is refused.

static int is_generated_source(const char *source) {
    return !strcmp(source, "synthetic") || !strcmp(source, "learnable");
}

static int is_jpeg_source(const char *source) {
    return !strcmp(source, "imagefolder") || !strcmp(source, "webdataset");
}

// 1 when the data settings `d` do not read data.`key`, with the reason in why[size]; 0 when they read it.
// data.path "" is no path, so it is read (as nothing) by every source.
static int data_key_unread(const char *key, const DataConfig *d, char *why, size_t size) {
    const char *s = d->source;
    if (!strcmp(key, "train_size") || !strcmp(key, "val_size")) {
        if (is_generated_source(s)) return 0;
        snprintf(why, size,
                 "only synthetic and learnable data have a size to choose; %s's comes from its files", s);
    } else if (!strcmp(key, "path")) {
        if (!is_generated_source(s) || !d->path[0]) return 0;
        snprintf(why, size, "%s data is generated, not read from files", s);
    } else if (!strcmp(key, "augment")) {
        if (!is_generated_source(s)) return 0;
        snprintf(why, size, "%s data is never augmented (only cifar10, imagefolder and webdataset are)", s);
    } else if (!strcmp(key, "mean") || !strcmp(key, "std")) {
        if (is_jpeg_source(s)) return 0;
        snprintf(why, size,
                 "only imagefolder and webdataset are normalised by data.mean and data.std; %s has its own",
                 s);
    } else if (!strcmp(key, "decode") || !strcmp(key, "max_image_pixels")) {
        if (is_jpeg_source(s)) return 0;
        snprintf(why, size, "only imagefolder and webdataset hold JPEGs to decode; %s does not", s);
    } else if (!strcmp(key, "train_crop") || !strcmp(key, "val_resize") || !strcmp(key, "val_crop")) {
        if (is_jpeg_source(s)) return 0;
        snprintf(why, size,
                 "only imagefolder and webdataset resize and crop; %s images are model.image_size "
                 "as they are",
                 s);
    } else if (!strcmp(key, "auto_augment") || !strcmp(key, "random_erase") ||
               !strcmp(key, "auto_augment_interpolation")) {
        if (is_generated_source(s))
            snprintf(why, size, "%s data is never augmented (only cifar10, imagefolder and webdataset are)",
                     s);
        else if (!d->augment)
            snprintf(why, size,
                     "data.augment: false leaves training images unaugmented, so there is nothing to "
                     "add this to");
        else if (!strcmp(key, "auto_augment_interpolation") && strcmp(d->auto_augment, "ta_wide") != 0)
            snprintf(why, size,
                     "only data.auto_augment: ta_wide resamples (its shears, translations and rotations)");
        else
            return 0;
    } else if (!strcmp(key, "crop_scale_min") || !strcmp(key, "crop_scale_max")) {
        if (is_jpeg_source(s) && d->augment) return 0;
        if (is_jpeg_source(s))
            snprintf(why, size, "%s with data.augment: false crops no random area (Resize + CenterCrop)", s);
        else
            snprintf(why, size,
                     "only imagefolder and webdataset with data.augment crop a random area; %s does not", s);
    } else {
        return 0;  // batch_size, mixup_alpha, cutmix_alpha, prefetch, workers, drop_last, source: every source
                   // reads them
    }
    return 1;
}

// Bytes of the field a row describes in Config.
static size_t field_size(const ConfigKey *row) {
    switch (row->type) {
    case CK_INT:
    case CK_BOOL: return sizeof(int);
    case CK_LONG: return sizeof(long);
    case CK_FLOAT: return sizeof(double);
    case CK_STRING:
    case CK_ENUM: return row->size;
    case CK_INT_LIST: return CONFIG_LIST_LEN * sizeof(int);
    case CK_FLOAT3: return CONFIG_CHANNELS * sizeof(double);
    }
    return 0;
}

// The key goes back to its default, as if it had not been written.
static void reset_to_default(ConfigReader *L, const ConfigKey *row) {
    Config defaults;
    config_defaults(&defaults);
    memcpy((char *)&L->cfg + row->offset, (const char *)&defaults + row->offset, field_size(row));
    L->where[row - config_keys] = (Where){FROM_DEFAULT, 0};
}

// ---- amp keys that only some precisions read --------------------------------------------------------
//
// As the data keys: amp.dtype is read only with amp.enabled, the loss-scaling keys only under float16
// (bfloat16 trains unscaled, as torch.autocast(dtype=torch.bfloat16) without a GradScaler: bf16 has fp32's
// exponent range, so small gradients do not underflow). A key the file wrote for the file's own amp settings
// returns to its default when the command line changes them (`amp.enabled=false` for the fp32 baseline,
// `amp.dtype=bfloat16`); one that neither reads, or a command-line key the run does not read, is refused.

static int is_bfloat16(const AmpConfig *a) { return a->enabled && !strcmp(a->dtype, "bfloat16"); }

// The keys the loss scaler reads.
static const char *const loss_scale_keys[] = {"dynamic",        "init_scale",      "growth_factor",
                                              "backoff_factor", "growth_interval", "min_scale"};

static int is_loss_scale_key(const char *key) {
    for (size_t i = 0; i < sizeof loss_scale_keys / sizeof loss_scale_keys[0]; i++)
        if (!strcmp(key, loss_scale_keys[i])) return 1;
    return 0;
}

// 1 when the amp settings `a` do not read amp.`key`, with the reason in why[size]; 0 when they read it.
static int amp_key_unread(const char *key, const AmpConfig *a, char *why, size_t size) {
    if (!strcmp(key, "dtype") && !a->enabled) {
        snprintf(why, size,
                 "amp.enabled is false, so everything trains in fp32; set amp.enabled: true for %s",
                 a->dtype);
        return 1;
    }
    if (is_loss_scale_key(key) && is_bfloat16(a)) {
        snprintf(why, size,
                 "amp.dtype bfloat16 trains without loss scaling (bf16 has fp32's exponent range; the scale "
                 "stays 1): use amp.dtype: float16 to scale the loss");
        return 1;
    }
    return 0;
}

// 1 when the run `c` does not read row's key (a data or amp key: data_key_unread, amp_key_unread), with the
// reason in why[size].
static int key_unread(const ConfigKey *row, const Config *c, char *why, size_t size) {
    if (!strcmp(row->section, "data")) return data_key_unread(row->key, &c->data, why, size);
    if (!strcmp(row->section, "amp")) return amp_key_unread(row->key, &c->amp, why, size);
    return 0;
}

// Every written key the run does not read: dropped when the file wrote it for the file's own settings, which
// the command line changed; refused otherwise.
static int check_keys_read(ConfigReader *L) {
    for (size_t i = 0; i < config_key_count; i++) {
        const ConfigKey *row = &config_keys[i];
        Where at = L->where[i];
        if (at.origin == FROM_DEFAULT) continue;
        char why[256];
        if (!key_unread(row, &L->cfg, why, sizeof why)) continue;  // the run reads it
        if (at.origin == FROM_FILE && !key_unread(row, &L->file_cfg, why, sizeof why)) {
            reset_to_default(L, row);  // written for the file's settings, which the command line replaced
            continue;
        }
        return fail_at(L, at, "%s.%s: %s", row->section, row->key, why);
    }
    return 0;
}

// Under bfloat16 the scaler's settings are the unscaled run's: a static scale of 1.
static void resolve_bfloat16_scale(ConfigReader *L) {
    if (!is_bfloat16(&L->cfg.amp)) return;
    L->cfg.amp.dynamic = 0;
    L->cfg.amp.init_scale = 1.0;
}

// The sides a key left unwritten takes: training and validation at model.image_size, validation resized
// to round(val_crop x 256 / 224) (torchvision's 256 for 224), Python's round. Then the rule between them:
// CenterCrop needs the resized image at least as large as the crop (torchvision would pad it).
static int resolve_sides(ConfigReader *L) {
    DataConfig *d = &L->cfg.data;
    if (!was_written(L, "data", "train_crop")) d->train_crop = L->cfg.model.image_size;
    if (!was_written(L, "data", "val_crop")) d->val_crop = L->cfg.model.image_size;
    if (!was_written(L, "data", "val_resize")) d->val_resize = (int)rint(d->val_crop * 256.0 / 224.0);
    if (d->val_resize >= d->val_crop) return 0;
    const char *key = was_written(L, "data", "val_resize") ? "val_resize" : "val_crop";
    return fail_at(
        L, where_set(L, "data", key),
        "data.%s: val_resize %d is smaller than val_crop %d (the centre crop must fit in the resized image)",
        key, d->val_resize, d->val_crop);
}

// data.decode: device hands the loader's threads nothing decoded; the decode jobs carry each sample's
// geometry and augmentation draws, not which repetition it is, so repeated augmentation is refused rather
// than skipped.
static int check_device_decode(const ConfigReader *L) {
    const DataConfig *d = &L->cfg.data;
    if (!is_jpeg_source(d->source) || strcmp(d->decode, "device") != 0 || d->repeated_aug <= 1) return 0;
    return fail_at(
        L, where_set(L, "data", "repeated_aug"),
        "data.repeated_aug: not available with data.decode: device (the device's decode jobs do not "
        "say which repetition a sample is); use data.decode: host");
}

// cudnn.workspace_mb left unset follows the precision: what measured fastest without exceeding PyTorch's
// memory (bench/RESULTS.md). AMP: 512 MiB (1 GiB cost 490 MiB more for no speed); fp32: 4 GiB (exact fp32
// at batch 256 ran 2.8x faster than at 1 GiB, still below PyTorch's memory).
static void apply_workspace_default(ConfigReader *L) {
    if (!was_written(L, "cudnn", "workspace_mb")) L->cfg.cudnn.workspace_mb = L->cfg.amp.enabled ? 512 : 4096;
}

// The trainer counts a run's steps in an int. Generated data fixes the steps per epoch here (at one rank,
// the most there can be), so train.epochs without train.steps must not count past INT_MAX; train.steps
// > 0 bounds the run itself.
static int check_run_length(const ConfigReader *L) {
    const Config *c = &L->cfg;
    if (c->train.steps > 0 || !is_generated_source(c->data.source)) return 0;
    long global = (long)c->data.batch_size * c->train.accum_steps;
    long per_epoch = (c->data.train_size + global - 1) / global;
    if ((long)c->train.epochs * per_epoch <= INT_MAX) return 0;
    return fail_at(
        L, where_set(L, "train", "epochs"),
        "train.epochs: %d epochs of %ld steps are more than the %d steps a run can count; set train.steps",
        c->train.epochs, per_epoch, INT_MAX);
}

static int apply_rules(ConfigReader *L) {
    apply_workspace_default(L);
    resolve_norm_weight_decay(L);
    int rc = apply_arch_preset(L);
    if (!rc) rc = check_group_width(L);
    if (!rc) rc = apply_cifar10_shape(L);
    if (!rc) rc = check_image_source(L);
    if (!rc) rc = check_keys_read(L);
    if (!rc) resolve_bfloat16_scale(L);
    if (!rc) rc = resolve_sides(L);
    if (!rc) rc = check_device_decode(L);
    if (!rc) rc = check_optimizer(L);
    if (!rc) rc = check_checkpoint(L);
    if (!rc) rc = check_crop_scale(L);
    if (!rc) rc = check_run_length(L);
    return rc;
}

// ---- public ------------------------------------------------------------------------------------

int config_load(Config *cfg, const char *path, int n_overrides, char **overrides, FILE *err) {
    ConfigReader L = {.file = path, .err = err};
    config_defaults(&L.cfg);
    config_defaults(cfg);
    L.file_cfg = L.cfg;
    int rc = 0;
    if (path && strlen(path) >= sizeof L.cfg.source_path) {
        rc = fail_at(&L, (Where){FROM_DEFAULT, 0}, "cannot read: the path is longer than %zu characters",
                     sizeof L.cfg.source_path - 1);
    } else if (path) {
        copy_text(L.cfg.source_path, sizeof L.cfg.source_path, path);
        rc = apply_file(&L, path);
        L.file_cfg = L.cfg;
    }
    for (int i = 0; i < n_overrides && !rc; i++) rc = apply_override(&L, overrides[i]);
    if (!rc) rc = apply_rules(&L);
    if (!rc) *cfg = L.cfg;
    return rc;
}

// Double-quoted YAML: every string reads back as written, whatever characters it holds.
static void print_quoted(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void print_value(FILE *out, const ConfigKey *row, const Config *cfg) {
    const char *field = (const char *)cfg + row->offset;
    char number[32];
    switch (row->type) {
    case CK_INT: fprintf(out, "%d", *(const int *)field); break;
    case CK_LONG: fprintf(out, "%ld", *(const long *)field); break;
    case CK_FLOAT:
        format_double(*(const double *)field, number, sizeof number);
        fputs(number, out);
        break;
    case CK_BOOL: fputs(*(const int *)field ? "true" : "false", out); break;
    case CK_STRING: print_quoted(out, field); break;
    case CK_ENUM: fputs(field, out); break;
    case CK_INT_LIST: {
        const int *v = (const int *)field;
        fprintf(out, "[%d, %d, %d, %d]", v[0], v[1], v[2], v[3]);
        break;
    }
    case CK_FLOAT3: {
        const double *v = (const double *)field;
        for (int i = 0; i < CONFIG_CHANNELS; i++) {
            format_double(v[i], number, sizeof number);
            fprintf(out, "%s%s", i ? ", " : "[", number);
        }
        fputc(']', out);
        break;
    }
    }
}

size_t config_value_count(void) { return config_key_count; }

void config_value_text(const Config *cfg, size_t i, char *name, size_t name_len, char *value,
                       size_t value_len) {
    full_name(&config_keys[i], name, name_len);
    value[0] = '\0';
    FILE *out = fmemopen(value, value_len, "w");
    if (!out) return;
    print_value(out, &config_keys[i], cfg);
    fclose(out);
}

void config_print(const Config *cfg, FILE *out) {
    fputs("# amptrain configuration (docs/config.md describes every key)", out);
    if (cfg->source_path[0]) {
        fputs(" from ", out);
        for (const char *c = cfg->source_path; *c; c++) fputc((unsigned char)*c < 0x20 ? '?' : *c, out);
    }
    fputc('\n', out);
    const char *section = NULL;
    int custom = !strcmp(cfg->model.arch, "custom");
    for (size_t i = 0; i < config_key_count; i++) {
        const ConfigKey *row = &config_keys[i];
        if (!section || strcmp(section, row->section) != 0) {
            fprintf(out, "%s%s:\n", section ? "\n" : "", row->section);
            section = row->section;
        }
        // A preset's shape, and a data or amp key the run does not read, are printed for the reader but
        // commented out: writing them is an error.
        char unread[256];
        int fixed = !custom && is_preset_key(row);
        int unread_key = key_unread(row, cfg, unread, sizeof unread);
        fprintf(out, fixed || unread_key ? "  # %s: " : "  %s: ", row->key);
        print_value(out, row, cfg);
        if (fixed)
            fputs("   (fixed by model.arch)\n", out);
        else if (unread_key)
            fprintf(out, "   (not read: %s)\n", unread);
        else
            fputc('\n', out);
    }
}
