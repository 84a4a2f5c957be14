// test_yaml_tree.c - the shared YAML/JSON parser: tree shape, quoting, line numbers and the errors
// that configs and checkpoint headers rely on.
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "config/yaml_tree.h"
#include "tests/test_util.h"

static char err[512];

static YtNode *parse(const char *text) {
    err[0] = '\0';
    return yt_parse_buffer(text, strlen(text), "t.yaml", err, sizeof err);
}

// Parsing must fail with an error that contains `expected`.
static void assert_rejects(const char *text, const char *expected) {
    YtNode *root = parse(text);
    ck_assert_msg(root == NULL, "accepted: %s", text);
    ck_assert_msg(strstr(err, expected) != NULL, "error '%s' lacks '%s'", err, expected);
}

START_TEST(nested_block_maps_and_sequences) {
    YtNode *root = parse("model:\n"
                         "  depth: 50\n"
                         "  groups: 32\n"
                         "lr:\n"
                         "  milestones: [30, 60]\n"
                         "  warmup:\n"
                         "    - 1\n"
                         "    - two\n");
    ck_assert_msg(root != NULL, "%s", err);
    ck_assert_int_eq(root->kind, YT_MAP);
    ck_assert_uint_eq(root->count, 2);
    ck_assert_str_eq(root->keys[0], "model");
    ck_assert_str_eq(root->keys[1], "lr");

    const YtNode *model = yt_map_get(root, "model");
    ck_assert_int_eq(model->kind, YT_MAP);
    ck_assert_str_eq(yt_map_get(model, "depth")->scalar, "50");
    ck_assert_str_eq(yt_map_get(model, "groups")->scalar, "32");
    ck_assert_ptr_null(yt_map_get(model, "width"));

    const YtNode *lr = yt_map_get(root, "lr");
    const YtNode *milestones = yt_map_get(lr, "milestones");
    ck_assert_int_eq(milestones->kind, YT_SEQ);
    ck_assert_uint_eq(milestones->count, 2);
    ck_assert_str_eq(milestones->items[1]->scalar, "60");
    const YtNode *warmup = yt_map_get(lr, "warmup");
    ck_assert_int_eq(warmup->kind, YT_SEQ);
    ck_assert_str_eq(warmup->items[1]->scalar, "two");
    ck_assert_ptr_null(yt_map_get(warmup, "two"));  // not a map
    yt_free(root);
}
END_TEST

START_TEST(compact_json_flow_mapping) {
    // A safetensors header as Python's json.dumps writes it, `\/` escape and trailing padding included.
    YtNode *root = parse("{\"a\":{\"shape\":[64,3,7,7],\"dtype\":\"F16\",\"data_offsets\":[0,18816]},"
                         "\"__metadata__\":{\"path\":\"runs\\/seed\"}}   ");
    ck_assert_msg(root != NULL, "%s", err);
    const YtNode *a = yt_map_get(root, "a");
    ck_assert_int_eq(a->kind, YT_MAP);
    const YtNode *shape = yt_map_get(a, "shape");
    ck_assert_int_eq(shape->kind, YT_SEQ);
    ck_assert_uint_eq(shape->count, 4);
    const char *dims[] = {"64", "3", "7", "7"};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_str_eq(shape->items[i]->scalar, dims[i]);
        ck_assert_int_eq(shape->items[i]->quoted, 0);
    }
    ck_assert_str_eq(yt_map_get(a, "dtype")->scalar, "F16");
    ck_assert_int_eq(yt_map_get(a, "dtype")->quoted, 1);
    ck_assert_str_eq(yt_map_get(yt_map_get(root, "__metadata__"), "path")->scalar, "runs/seed");
    yt_free(root);
}
END_TEST

START_TEST(quoted_versus_plain) {
    YtNode *root = parse("a: 1\nb: \"1\"\nc: '1'\nd: 'it''s'\ne: \"tab\\there\"\n");
    ck_assert_msg(root != NULL, "%s", err);
    ck_assert_int_eq(yt_map_get(root, "a")->quoted, 0);
    ck_assert_int_eq(yt_map_get(root, "b")->quoted, 1);
    ck_assert_int_eq(yt_map_get(root, "c")->quoted, 1);
    ck_assert_str_eq(yt_map_get(root, "b")->scalar, "1");
    ck_assert_str_eq(yt_map_get(root, "d")->scalar, "it's");
    ck_assert_str_eq(yt_map_get(root, "e")->scalar, "tab\there");
    yt_free(root);
}
END_TEST

START_TEST(line_numbers_are_one_based) {
    YtNode *root = parse("# comment\n"
                         "train:\n"
                         "  epochs: 3\n"
                         "\n"
                         "  batch: [8,\n"
                         "          16]\n");
    ck_assert_msg(root != NULL, "%s", err);
    ck_assert_int_eq(root->key_lines[0], 2);
    const YtNode *train = yt_map_get(root, "train");
    ck_assert_int_eq(train->line, 3);
    ck_assert_int_eq(train->key_lines[0], 3);
    ck_assert_int_eq(yt_map_get(train, "epochs")->line, 3);
    ck_assert_int_eq(train->key_lines[1], 5);
    const YtNode *batch = yt_map_get(train, "batch");
    ck_assert_int_eq(batch->line, 5);
    ck_assert_int_eq(batch->items[1]->line, 6);
    yt_free(root);
}
END_TEST

START_TEST(empty_document_is_empty_map) {
    const char *empties[] = {"", "# only a comment\n", "---\n", "--- \n...\n"};
    for (size_t i = 0; i < sizeof empties / sizeof *empties; i++) {
        YtNode *root = parse(empties[i]);
        ck_assert_msg(root != NULL, "'%s': %s", empties[i], err);
        ck_assert_int_eq(root->kind, YT_MAP);
        ck_assert_uint_eq(root->count, 0);
        yt_free(root);
    }
}
END_TEST

START_TEST(duplicate_keys_rejected) {
    assert_rejects("a: 1\nb: 2\na: 3\n", "t.yaml:3: duplicate key 'a' (first at line 1)");
    assert_rejects("{\"w\":{\"x\":1},\"w\":{\"x\":2}}", "t.yaml:1: duplicate key 'w'");
    assert_rejects("outer:\n  k: 1\n  k: 2\n", "t.yaml:3: duplicate key 'k'");
}
END_TEST

START_TEST(syntax_error_names_line) {
    assert_rejects("a: 1\nb: [1, 2\nc: 3\n", "t.yaml:");
    assert_rejects("a: 1\nb: 2\n  c: 3\n", "t.yaml:3: mapping values are not allowed in this context");
    assert_rejects("{\"a\":1,\n\"b\" 2}", "t.yaml:2: ");
}
END_TEST

START_TEST(unsupported_constructs_rejected) {
    assert_rejects("base: &b {x: 1}\nother: *b\n", "t.yaml:1: anchors are not supported");
    assert_rejects("a: 1\n---\nb: 2\n", "t.yaml:2: only one document is allowed");
    assert_rejects("? [1, 2]\n: x\n", "t.yaml:1: map keys must be scalars");
    assert_rejects("{[1]: 2}", "map keys must be scalars");
    assert_rejects("a: \"nul\\0inside\"\n", "t.yaml:1: NUL character in a scalar");
}
END_TEST

// A tag changes what a scalar means (`!!str 0.1` is text, not a number); none is honoured, all refused.
START_TEST(explicit_tags_rejected) {
    assert_rejects("a: 1\nlr: !!str 0.1\n", "t.yaml:2: explicit tags (!!str) are not supported");
    assert_rejects("lr: !!float 1\n", "t.yaml:1: explicit tags (!!float)");
    assert_rejects("lr: !custom 1\n", "t.yaml:1: explicit tags (!custom)");
    assert_rejects("a: !!map {b: 1}\n", "explicit tags (!!map)");
    assert_rejects("a: !!seq [1]\n", "explicit tags (!!seq)");
    assert_rejects("!!str a: 1\n", "t.yaml:1: explicit tags (!!str)");
    // the same characters quoted are a plain string
    YtNode *root = parse("lr: \"!!str 0.1\"\n");
    ck_assert_msg(root != NULL, "%s", err);
    ck_assert_str_eq(yt_map_get(root, "lr")->scalar, "!!str 0.1");
    yt_free(root);
}
END_TEST

START_TEST(deep_nesting_rejected) {
    char text[201];
    memset(text, '[', 100);
    memset(text + 100, ']', 100);
    text[200] = '\0';
    assert_rejects(text, "nesting deeper than 64 levels");
}
END_TEST

START_TEST(parse_file_reports_missing_file) {
    char message[256];
    YtNode *root = yt_parse_file("no_such_config.yaml", message, sizeof message);
    ck_assert_ptr_null(root);
    ck_assert_msg(strstr(message, "no_such_config.yaml: cannot read: No such file") != NULL, "%s", message);
}
END_TEST

START_TEST(parse_file_reads_whole_file) {
    ck_assert_ptr_nonnull(tu_write_file("cfg.yaml", "seed: 7\nname: \"x\"\n"));
    char message[256];
    YtNode *root = yt_parse_file("cfg.yaml", message, sizeof message);
    ck_assert_msg(root != NULL, "%s", message);
    ck_assert_str_eq(yt_map_get(root, "seed")->scalar, "7");
    ck_assert_str_eq(yt_map_get(root, "name")->scalar, "x");
    yt_free(root);

    ck_assert_ptr_nonnull(tu_write_file("bad.yaml", "seed: 7\nseed: 8\n"));
    root = yt_parse_file("bad.yaml", message, sizeof message);
    ck_assert_ptr_null(root);
    ck_assert_msg(strstr(message, "bad.yaml:2: duplicate key 'seed'") != NULL, "%s", message);
}
END_TEST

static Suite *yaml_tree_suite(void) {
    Suite *s = suite_create("yaml_tree");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, nested_block_maps_and_sequences);
    tcase_add_test(tc, compact_json_flow_mapping);
    tcase_add_test(tc, quoted_versus_plain);
    tcase_add_test(tc, line_numbers_are_one_based);
    tcase_add_test(tc, empty_document_is_empty_map);
    tcase_add_test(tc, duplicate_keys_rejected);
    tcase_add_test(tc, syntax_error_names_line);
    tcase_add_test(tc, unsupported_constructs_rejected);
    tcase_add_test(tc, explicit_tags_rejected);
    tcase_add_test(tc, deep_nesting_rejected);
    tcase_add_test(tc, parse_file_reports_missing_file);
    tcase_add_test(tc, parse_file_reads_whole_file);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(yaml_tree_suite(), 1); }
