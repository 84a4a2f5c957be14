// yaml_tree.h - one parser for every structured text amptrain reads: the YAML config and the JSON header
// of safetensors checkpoints (libyaml reads compact JSON as a flow mapping, `\/` escapes included).
//
// The document becomes a small tree; every node remembers its 1-based line so errors can say
// `FILE:LINE: KEY: what is wrong`. Anchors/aliases, explicit tags (`!!str`) and multi-document
// streams are rejected.
#ifndef AMPTRAIN_YAML_TREE_H
#define AMPTRAIN_YAML_TREE_H

#include <stddef.h>

typedef enum { YT_SCALAR, YT_MAP, YT_SEQ } YtKind;

typedef struct YtNode YtNode;
struct YtNode {
    YtKind kind;
    int line;        // 1-based line where the node starts
    char *scalar;    // YT_SCALAR: the text (NUL-terminated; may contain no NUL)
    int quoted;      // YT_SCALAR: 1 if written in quotes (so "1" is a string, 1 a number)
    size_t count;    // YT_MAP: pairs; YT_SEQ: items
    char **keys;     // YT_MAP: keys (scalars only), in document order
    int *key_lines;  // YT_MAP: line of each key
    YtNode **items;  // YT_MAP: values; YT_SEQ: items
};

// Parses a whole file / an in-memory buffer. On failure returns NULL and writes
// "NAME:LINE: message" into err. `name` is what error messages call the buffer.
// A file must be a regular file whose size tells its length: a FIFO or a device is refused before
// anything is read (opening does not wait for a FIFO's writer), and a file that holds more than its
// size says (a /proc file reports 0) is refused too: "PATH: cannot read: not a regular file (a FIFO)".
// An empty document parses as an empty map.
YtNode *yt_parse_file(const char *path, char *err, size_t err_len);
YtNode *yt_parse_buffer(const char *data, size_t len, const char *name, char *err, size_t err_len);

// The value under `key` in a map, or NULL (also when `map` is not a map).
const YtNode *yt_map_get(const YtNode *map, const char *key);

void yt_free(YtNode *node);

#endif
