// test_images_recipe.c - configs/resnext50_32x4d_torchvision_v2.yaml holds torchvision's recipe for
// ResNeXt50_32X4D_Weights.IMAGENET1K_V2 (its reference train.py's flags, written out in the file's header):
// --print-config shows every value, and --dry-run starts it on a small ImageFolder of fixture JPEGs (the
// model at 176 for training and 224 for evaluation) and leaves nothing behind.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/image_fixtures.h"
#include "tests/test_util.h"

#define RECIPE AMPTRAIN_SOURCE_DIR "/configs/resnext50_32x4d_torchvision_v2.yaml"

static char out[1 << 16];

// The value printed for section.key in --print-config's output (the rest of its line).
static void printed_value(const char *section, const char *key, char *value, size_t cap) {
    char header[64], line[96];
    snprintf(header, sizeof header, "\n%s:\n", section);
    snprintf(line, sizeof line, "\n  %s: ", key);
    const char *at = strstr(out, header);
    ck_assert_msg(at != NULL, "no section %s in:\n%s", section, out);
    const char *end = strstr(at + 1, "\n\n");
    const char *k = strstr(at, line);
    ck_assert_msg(k != NULL && (!end || k < end), "no %s.%s in:\n%s", section, key, out);
    k += strlen(line);
    snprintf(value, cap, "%.*s", (int)strcspn(k, "\n"), k);
}

static const struct {
    const char *section, *key, *value;
} recipe[] = {
    {"model", "arch", "resnext50_32x4d"},
    {"model", "num_classes", "1000"},
    {"model", "image_size", "224"},
    {"data", "source", "imagefolder"},
    {"data", "batch_size", "128"},
    {"data", "augment", "true"},
    {"data", "crop_scale_min", "0.08"},
    {"data", "crop_scale_max", "1"},
    {"data", "train_crop", "176"},
    {"data", "val_resize", "232"},
    {"data", "val_crop", "224"},
    {"data", "auto_augment", "ta_wide"},
    {"data", "auto_augment_interpolation", "bilinear"},
    {"data", "random_erase", "0.1"},
    {"data", "repeated_aug", "4"},
    {"data", "decode", "host"},
    {"data", "mean", "[0.485, 0.456, 0.406]"},
    {"data", "std", "[0.229, 0.224, 0.225]"},
    {"train", "epochs", "600"},
    {"train", "lr", "0.5"},
    {"train", "lr_scaling", "none"},
    {"train", "momentum", "0.9"},
    {"train", "weight_decay", "2e-05"},
    {"train", "nesterov", "false"},
    {"train", "schedule", "cosine"},
    {"train", "min_lr", "0"},
    // 5 epochs x floor(1281167 / 256) x 256 / (8 x 128)
    {"train", "warmup_steps", "6255"},
    {"train", "accum_steps", "1"},
    {"amp", "enabled", "true"},
    {"amp", "dynamic", "true"},
    {"data", "mixup_alpha", "0.2"},
    {"data", "cutmix_alpha", "1"},
    {"train", "label_smoothing", "0.1"},
    {"train", "norm_weight_decay", "0"},
    {"train", "ema_decay", "0.99998"},
    {"train", "ema_every", "32"},
    {"train", "clip_grad_norm", "0"},
    {"checkpoint", "every", "1251"},
    {"checkpoint", "resume", "\"auto\""},
};

START_TEST(recipe_has_torchvisions_values) {
    int rc = tu_run_cli("--print-config " RECIPE, out, sizeof out);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    for (size_t i = 0; i < sizeof recipe / sizeof recipe[0]; i++) {
        char value[128];
        printed_value(recipe[i].section, recipe[i].key, value, sizeof value);
        ck_assert_msg(!strcmp(value, recipe[i].value), "%s.%s is %s, the recipe's is %s", recipe[i].section,
                      recipe[i].key, value, recipe[i].value);
    }
    ck_assert_int_eq(5 * (1281167 / 256 * 256) / (8 * 128), 6255);
    ck_assert_int_eq(1281167 / 256 * 256 % (8 * 128), 0);  // whole steps: 1251 an epoch
}
END_TEST

START_TEST(recipe_dry_run_on_an_image_folder) {
    tu_run_shell("rm -rf recipe_images recipe_run && mkdir -p recipe_images/train/a recipe_images/train/b "
                 "recipe_images/val/a recipe_images/val/b",
                 NULL, 0);
    const char *split[] = {"train", "val"}, *cls[] = {"a", "b"};
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < 3; i++) {
                char path[128];
                snprintf(path, sizeof path, "recipe_images/%s/%s/%d.jpg", split[s], cls[c], i);
                fx_write_solid(path, 300 + 10 * i, 250, (uint8_t)(60 * c + i), 90, 120);
            }
    int rc = tu_run_cli("--dry-run " RECIPE " data.path=recipe_images checkpoint.dir=recipe_run "
                        "log.metrics=recipe_run/metrics.jsonl",
                        out, sizeof out);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    ck_assert_msg(
        strstr(out,
               "model        resnext50_32x4d: layers [3,4,6,3], cardinality 32, base width 4, planes 64, "
               "1000 classes, 176x176 input (evaluation 224x224)") &&
            strstr(out, "parameters   25028904 (161 tensors)") &&
            strstr(out, "precision    AMP: fp16 activations"),
        "%s", out);
    ck_assert_msg(!tu_file_exists("recipe_run"), "--dry-run left recipe_run:\n%s", out);
}
END_TEST

static Suite *recipe_suite(void) {
    Suite *s = suite_create("recipe");
    TCase *tc = tcase_create("torchvision_v2");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, recipe_has_torchvisions_values);
    tcase_add_test(tc, recipe_dry_run_on_an_image_folder);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(recipe_suite(), 1); }
