// test_conv_choice.c - a convolution direction's kernel-choice record (core/conv_choice.h): every route,
// padded or not, written and read back to the same choice; every text the rules do not allow refused, so a
// damaged or foreign record is searched again rather than run.
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/conv_choice.h"
#include "tests/test_util.h"

static void expect_round_trip(ConvChoice c, const char *text) {
    char out[CONV_CHOICE_TEXT_MAX];
    ck_assert_str_eq(conv_choice_format(&c, out), text);
    ConvChoice back;
    ck_assert_msg(conv_choice_parse(text, &back) == 0, "'%s' refused", text);
    ck_assert_int_eq(back.route, c.route);
    ck_assert_int_eq(back.padded, c.padded);
    if (c.route == CONV_ROUTE_CUDNN) {
        ck_assert_int_eq(back.algo, c.algo);
        ck_assert_str_eq(back.math, c.math);
        ck_assert_uint_eq(back.workspace, c.workspace);
    }
}

START_TEST(test_every_route_written_and_read_back) {
    ConvChoice c = {CONV_ROUTE_GEMM, 0, "", 0, 0};
    expect_round_trip(c, "gemm");
    c.padded = 4;
    expect_round_trip(c, "gemm padded=4");
    ConvChoice own = {CONV_ROUTE_OWN, 0, "", 0, 0};
    expect_round_trip(own, "own");
    ConvChoice cudnn = {CONV_ROUTE_CUDNN, 1, "tensor-op", 205520896, 0};
    expect_round_trip(cudnn, "cudnn algo=1 math=tensor-op workspace=205520896");
    cudnn.padded = 8;
    expect_round_trip(cudnn, "cudnn algo=1 math=tensor-op workspace=205520896 padded=8");
    ConvChoice huge = {CONV_ROUTE_CUDNN, 7, "tensor-op-conversion", SIZE_MAX, 0};
    char text[CONV_CHOICE_TEXT_MAX];
    snprintf(text, sizeof text, "cudnn algo=7 math=tensor-op-conversion workspace=%zu", (size_t)SIZE_MAX);
    expect_round_trip(huge, text);
}
END_TEST

START_TEST(test_texts_outside_the_rules_refused) {
    static const char *const refused[] = {
        "",
        "gemm ",
        " gemm",
        "GEMM",
        "gemmx",
        "gemm padded=",
        "gemm padded=0",
        "gemm padded=-4",
        "gemm padded=+4",
        "gemm padded=4x",
        "gemm padded=4 padded=8",
        "gemm padded=99999999999",
        "own padded=4",
        "own extra",
        "cudnn",
        "cudnn algo=1",
        "cudnn algo=1 math=tensor-op",
        "cudnn algo=1 math=tensor-op workspace=",
        "cudnn algo=-1 math=tensor-op workspace=0",
        "cudnn algo= 1 math=tensor-op workspace=0",
        "cudnn algo=1 math= workspace=0",
        "cudnn algo=1 math=Tensor-Op workspace=0",
        "cudnn algo=1 math=tensor_op workspace=0",
        "cudnn algo=1 math=abcdefghijklmnopqrstuvwxyzabcdef workspace=0",
        "cudnn algo=1 math=tensor-op workspace=-5",
        "cudnn algo=1 math=tensor-op workspace=99999999999999999999999",
        "cudnn algo=99999999999 math=tensor-op workspace=0",
        "cudnn algo=1 math=tensor-op workspace=12 extra",
        "cudnn algo=1 math=tensor-op workspace=12\t",
        "cudnn algo=1  math=tensor-op workspace=12",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        ConvChoice c;
        ck_assert_msg(conv_choice_parse(refused[i], &c) == -1, "'%s' was taken", refused[i]);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("conv_choice");
    TCase *tc = tcase_create("records");
    tcase_add_test(tc, test_every_route_written_and_read_back);
    tcase_add_test(tc, test_texts_outside_the_rules_refused);
    suite_add_tcase(s, tc);
    return tu_run_suite(s, 1);
}
