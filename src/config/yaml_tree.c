// yaml_tree.c - libyaml's event stream folded into a YtNode tree (see yaml_tree.h).
//
// The tree is built by recursive descent over yaml_parser_parse events. Every error path frees what
// was built so far; the first error wins and is the only one reported.
#include "config/yaml_tree.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "core/file_open.h"

// Deeper nesting than this is no config or checkpoint header we write; the limit keeps a hostile
// `[[[[...` header from exhausting the stack.
#define YT_MAX_DEPTH 64

typedef struct {
    yaml_parser_t parser;
    const char *name;
    char *err;
    size_t err_len;
} YtParse;

static void parse_fail(YtParse *p, size_t line0, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// Writes "NAME:LINE: message"; `line0` is libyaml's 0-based line.
static void parse_fail(YtParse *p, size_t line0, const char *fmt, ...) {
    if (!p->err || p->err_len == 0) return;
    int used = snprintf(p->err, p->err_len, "%s:%zu: ", p->name, line0 + 1);
    if (used < 0 || (size_t)used >= p->err_len) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(p->err + used, p->err_len - (size_t)used, fmt, args);
    va_end(args);
}

// Pulls the next event; a libyaml error becomes "NAME:LINE: <problem>", plus where the construct it
// was parsing began, since an unclosed `[` is only noticed lines later.
static int parse_next(YtParse *p, yaml_event_t *event) {
    if (yaml_parser_parse(&p->parser, event)) return 1;
    const yaml_parser_t *parser = &p->parser;
    const char *problem = parser->problem ? parser->problem : "malformed document";
    if (parser->context && parser->context_mark.line != parser->problem_mark.line) {
        parse_fail(p, parser->problem_mark.line, "%s (%s at line %zu)", problem, parser->context,
                   parser->context_mark.line + 1);
    } else {
        parse_fail(p, parser->problem_mark.line, "%s", problem);
    }
    return 0;
}

static YtNode *node_new(YtKind kind, size_t line0) {
    YtNode *node = calloc(1, sizeof *node);
    if (!node) return NULL;
    node->kind = kind;
    node->line = (int)(line0 + 1);
    return node;
}

void yt_free(YtNode *node) {
    if (!node) return;
    free(node->scalar);
    for (size_t i = 0; i < node->count; i++) {
        if (node->keys) free(node->keys[i]);
        yt_free(node->items[i]);
    }
    free(node->keys);
    free(node->key_lines);
    free(node->items);
    free(node);
}

// Makes room for one more entry in a map or sequence (capacity doubles).
static int node_reserve(YtNode *node, size_t *capacity) {
    if (node->count < *capacity) return 1;
    size_t grown = *capacity ? *capacity * 2 : 8;
    YtNode **items = realloc(node->items, grown * sizeof *items);
    if (!items) return 0;
    node->items = items;
    if (node->kind == YT_MAP) {
        char **keys = realloc(node->keys, grown * sizeof *keys);
        if (!keys) return 0;
        node->keys = keys;
        int *key_lines = realloc(node->key_lines, grown * sizeof *key_lines);
        if (!key_lines) return 0;
        node->key_lines = key_lines;
    }
    *capacity = grown;
    return 1;
}

// Copies a scalar's text; NUL bytes (from "\0" escapes) are refused since callers use C strings.
static char *scalar_copy(YtParse *p, const yaml_event_t *event) {
    const char *value = (const char *)event->data.scalar.value;
    size_t length = event->data.scalar.length;
    if (memchr(value, '\0', length)) {
        parse_fail(p, event->start_mark.line, "NUL character in a scalar");
        return NULL;
    }
    char *copy = malloc(length + 1);
    if (!copy) {
        parse_fail(p, event->start_mark.line, "out of memory");
        return NULL;
    }
    memcpy(copy, value, length);
    copy[length] = '\0';
    return copy;
}

// The anchor (&a) and the tag (!!str) a node event carries, NULL where it has none.
static void event_marks(const yaml_event_t *event, const yaml_char_t **anchor, const yaml_char_t **tag) {
    *anchor = *tag = NULL;
    if (event->type == YAML_SCALAR_EVENT)
        *anchor = event->data.scalar.anchor, *tag = event->data.scalar.tag;
    else if (event->type == YAML_SEQUENCE_START_EVENT)
        *anchor = event->data.sequence_start.anchor, *tag = event->data.sequence_start.tag;
    else if (event->type == YAML_MAPPING_START_EVENT)
        *anchor = event->data.mapping_start.anchor, *tag = event->data.mapping_start.tag;
}

// Explicit tags are refused rather than honoured: `lr: !!str 0.1` must never read as a number, and
// no value of ours needs a tag. The message spells the tag as written (libyaml expands `!!x` to
// `tag:yaml.org,2002:x`).
static void fail_tag(YtParse *p, const yaml_event_t *event, const yaml_char_t *written) {
    static const char core[] = "tag:yaml.org,2002:";
    const char *tag = (const char *)written;
    int is_core = strncmp(tag, core, sizeof core - 1) == 0;
    parse_fail(p, event->start_mark.line,
               "explicit tags (%s%.40s) are not supported: write the value plainly, in quotes for a string",
               is_core ? "!!" : "", is_core ? tag + sizeof core - 1 : tag);
}

static YtNode *parse_node(YtParse *p, yaml_event_t *first, int depth);

static YtNode *parse_scalar(YtParse *p, const yaml_event_t *event) {
    YtNode *node = node_new(YT_SCALAR, event->start_mark.line);
    if (!node) {
        parse_fail(p, event->start_mark.line, "out of memory");
        return NULL;
    }
    node->scalar = scalar_copy(p, event);
    if (!node->scalar) {
        free(node);
        return NULL;
    }
    node->quoted = event->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                   event->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    return node;
}

static YtNode *parse_sequence(YtParse *p, const yaml_event_t *start, int depth) {
    YtNode *node = node_new(YT_SEQ, start->start_mark.line);
    if (!node) {
        parse_fail(p, start->start_mark.line, "out of memory");
        return NULL;
    }
    size_t capacity = 0;
    for (;;) {
        yaml_event_t event;
        if (!parse_next(p, &event)) break;
        if (event.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&event);
            return node;
        }
        if (!node_reserve(node, &capacity)) {
            parse_fail(p, event.start_mark.line, "out of memory");
            yaml_event_delete(&event);
            break;
        }
        YtNode *item = parse_node(p, &event, depth + 1);
        if (!item) break;
        node->items[node->count++] = item;
    }
    yt_free(node);
    return NULL;
}

typedef struct {
    const char *key;
    size_t index;
} KeyRef;

// Orders keys by text, then by position, so a duplicate's second occurrence follows its first.
static int key_ref_compare(const void *a, const void *b) {
    const KeyRef *ka = a, *kb = b;
    int by_text = strcmp(ka->key, kb->key);
    if (by_text) return by_text;
    return ka->index < kb->index ? -1 : ka->index > kb->index;
}

// Sorting keeps the duplicate check O(n log n): safetensors headers carry thousands of keys.
static int map_check_unique(YtParse *p, const YtNode *map) {
    if (map->count < 2) return 1;
    KeyRef *refs = malloc(map->count * sizeof *refs);
    if (!refs) {
        parse_fail(p, (size_t)map->line - 1, "out of memory");
        return 0;
    }
    for (size_t i = 0; i < map->count; i++) refs[i] = (KeyRef){map->keys[i], i};
    qsort(refs, map->count, sizeof *refs, key_ref_compare);
    int unique = 1;
    for (size_t i = 1; i < map->count && unique; i++) {
        if (strcmp(refs[i - 1].key, refs[i].key) == 0) {
            size_t first = refs[i - 1].index, again = refs[i].index;
            parse_fail(p, (size_t)map->key_lines[again] - 1, "duplicate key '%s' (first at line %d)",
                       map->keys[again], map->key_lines[first]);
            unique = 0;
        }
    }
    free(refs);
    return unique;
}

// Reads a key from its event and deletes the event; NULL on error.
static char *parse_map_key(YtParse *p, yaml_event_t *event) {
    char *key = NULL;
    if (event->type == YAML_ALIAS_EVENT) {
        parse_fail(p, event->start_mark.line, "aliases are not supported");
    } else if (event->type != YAML_SCALAR_EVENT) {
        parse_fail(p, event->start_mark.line, "map keys must be scalars");
    } else if (event->data.scalar.anchor) {
        parse_fail(p, event->start_mark.line, "anchors are not supported");
    } else if (event->data.scalar.tag) {
        fail_tag(p, event, event->data.scalar.tag);
    } else {
        key = scalar_copy(p, event);
    }
    yaml_event_delete(event);
    return key;
}

static YtNode *parse_mapping(YtParse *p, const yaml_event_t *start, int depth) {
    YtNode *node = node_new(YT_MAP, start->start_mark.line);
    if (!node) {
        parse_fail(p, start->start_mark.line, "out of memory");
        return NULL;
    }
    size_t capacity = 0;
    for (;;) {
        yaml_event_t event;
        if (!parse_next(p, &event)) break;
        if (event.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&event);
            if (map_check_unique(p, node)) return node;
            break;
        }
        if (!node_reserve(node, &capacity)) {
            parse_fail(p, event.start_mark.line, "out of memory");
            yaml_event_delete(&event);
            break;
        }
        int key_line = (int)event.start_mark.line + 1;
        char *key = parse_map_key(p, &event);
        if (!key) break;
        yaml_event_t value_event;
        YtNode *value = parse_next(p, &value_event) ? parse_node(p, &value_event, depth + 1) : NULL;
        if (!value) {
            free(key);
            break;
        }
        node->keys[node->count] = key;
        node->key_lines[node->count] = key_line;
        node->items[node->count++] = value;
    }
    yt_free(node);
    return NULL;
}

// Builds the node that starts with `first` and deletes `first`.
static YtNode *parse_node(YtParse *p, yaml_event_t *first, int depth) {
    YtNode *node = NULL;
    size_t line0 = first->start_mark.line;
    const yaml_char_t *anchor, *tag;
    event_marks(first, &anchor, &tag);
    if (depth > YT_MAX_DEPTH) {
        parse_fail(p, line0, "nesting deeper than %d levels", YT_MAX_DEPTH);
    } else if (first->type == YAML_ALIAS_EVENT) {
        parse_fail(p, line0, "aliases are not supported");
    } else if (anchor) {
        parse_fail(p, line0, "anchors are not supported");
    } else if (tag) {
        fail_tag(p, first, tag);
    } else if (first->type == YAML_SCALAR_EVENT) {
        node = parse_scalar(p, first);
    } else if (first->type == YAML_SEQUENCE_START_EVENT) {
        node = parse_sequence(p, first, depth);
    } else if (first->type == YAML_MAPPING_START_EVENT) {
        node = parse_mapping(p, first, depth);
    } else {
        parse_fail(p, line0, "unexpected YAML event %d", (int)first->type);
    }
    yaml_event_delete(first);
    return node;
}

// Expects the event stream to continue with `type`; `what` names it in the error.
static int parse_expect(YtParse *p, yaml_event_type_t type, const char *what) {
    yaml_event_t event;
    if (!parse_next(p, &event)) return 0;
    int ok = event.type == type;
    if (!ok) parse_fail(p, event.start_mark.line, "%s", what);
    yaml_event_delete(&event);
    return ok;
}

// An empty document ("" or a lone "---") is an empty map, so an empty config means "all defaults".
static YtNode *parse_empty_map(YtParse *p, size_t line0) {
    YtNode *node = node_new(YT_MAP, line0);
    if (!node) parse_fail(p, line0, "out of memory");
    return node;
}

static int is_null_scalar(const YtNode *node) {
    return node->kind == YT_SCALAR && !node->quoted && node->scalar[0] == '\0';
}

static YtNode *parse_stream(YtParse *p) {
    if (!parse_expect(p, YAML_STREAM_START_EVENT, "expected the start of a stream")) return NULL;
    yaml_event_t event;
    if (!parse_next(p, &event)) return NULL;
    if (event.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&event);
        return parse_empty_map(p, 0);
    }
    if (event.type != YAML_DOCUMENT_START_EVENT) {
        parse_fail(p, event.start_mark.line, "expected the start of a document");
        yaml_event_delete(&event);
        return NULL;
    }
    yaml_event_delete(&event);
    if (!parse_next(p, &event)) return NULL;
    YtNode *root = parse_node(p, &event, 0);
    if (!root) return NULL;
    if (is_null_scalar(root)) {
        int line = root->line;
        yt_free(root);
        root = parse_empty_map(p, (size_t)line - 1);
        if (!root) return NULL;
    }
    if (!parse_expect(p, YAML_DOCUMENT_END_EVENT, "expected the end of the document") ||
        !parse_expect(p, YAML_STREAM_END_EVENT, "only one document is allowed")) {
        yt_free(root);
        return NULL;
    }
    return root;
}

YtNode *yt_parse_buffer(const char *data, size_t len, const char *name, char *err, size_t err_len) {
    YtParse p = {.name = name, .err = err, .err_len = err_len};
    if (err && err_len) err[0] = '\0';
    if (!yaml_parser_initialize(&p.parser)) {
        parse_fail(&p, 0, "cannot initialize libyaml (out of memory)");
        return NULL;
    }
    yaml_parser_set_input_string(&p.parser, (const unsigned char *)data, len);
    YtNode *root = parse_stream(&p);
    yaml_parser_delete(&p.parser);
    return root;
}

static void file_fail(char *err, size_t err_len, const char *path, const char *why) {
    if (err && err_len) snprintf(err, err_len, "%s: cannot read: %s", path, why);
}

YtNode *yt_parse_file(const char *path, char *err, size_t err_len) {
    struct stat st;
    char why_open[96];
    int fd = file_open_regular(path, &st, why_open, sizeof why_open);
    if (fd < 0) {
        file_fail(err, err_len, path, why_open);
        return NULL;
    }
    // The file's size bounds the read: whatever the content, no more than st_size bytes are taken,
    // and one byte beyond them means the size lies (a /proc file reports 0).
    size_t size = (size_t)st.st_size;
    char *data = malloc(size + 1);
    if (!data) {
        file_fail(err, err_len, path, "out of memory");
        close(fd);
        return NULL;
    }
    size_t got = 0;
    ssize_t n = 0;
    while (got < size + 1 && (n = read(fd, data + got, size + 1 - got)) > 0) got += (size_t)n;
    const char *why = n < 0        ? strerror(errno)
                      : got < size ? "file shrank while reading"
                      : got > size ? "not a regular file (it holds more than the size it reports, "
                                     "like a /proc file)"
                                   : NULL;
    close(fd);
    if (why) {
        file_fail(err, err_len, path, why);
        free(data);
        return NULL;
    }
    YtNode *root = yt_parse_buffer(data, size, path, err, err_len);
    free(data);
    return root;
}

const YtNode *yt_map_get(const YtNode *map, const char *key) {
    if (!map || map->kind != YT_MAP) return NULL;
    for (size_t i = 0; i < map->count; i++) {
        if (strcmp(map->keys[i], key) == 0) return map->items[i];
    }
    return NULL;
}
