// test_config.c - the config contract users rely on: defaults are valid, every shipped config loads,
// overrides apply and are checked, config_print reads back to identical values, and each kind of bad
// config gets exit value 2 with ONE line naming the file, the line and the key.
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "tests/test_util.h"

#define SHIPPED(name) AMPTRAIN_SOURCE_DIR "/configs/" name

// ---- helpers ---------------------------------------------------------------------------------------

typedef struct {
    int rc;
    char message[2048];  // everything config_load wrote to err
} LoadResult;

static LoadResult load(Config *cfg, const char *path, int n, char **overrides) {
    LoadResult r = {0};
    char *text = NULL;
    size_t len = 0;
    FILE *err = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(err);
    r.rc = config_load(cfg, path, n, overrides, err);
    fclose(err);
    snprintf(r.message, sizeof r.message, "%s", text);
    free(text);
    return r;
}

static void load_ok(Config *cfg, const char *path, int n, char **overrides) {
    LoadResult r = load(cfg, path, n, overrides);
    ck_assert_msg(r.rc == 0, "%s rejected: %s", path ? path : "(no file)", r.message);
    ck_assert_str_eq(r.message, "");
}

// config_print's text; config_print gives every value in full, so equal text means equal values.
static char *printed(const Config *cfg) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(out);
    config_print(cfg, out);
    fclose(out);
    return text;
}

// Field-by-field equality, NaN equal to NaN (inject_value may be .nan); source_path is not compared.
static void assert_same_values(const Config *a, const Config *b) {
    ck_assert_str_eq(a->model.arch, b->model.arch);
    ck_assert_mem_eq(a->model.layers, b->model.layers, sizeof a->model.layers);
    ck_assert_int_eq(a->model.cardinality, b->model.cardinality);
    ck_assert_int_eq(a->model.base_width, b->model.base_width);
    ck_assert_int_eq(a->model.planes, b->model.planes);
    ck_assert_int_eq(a->model.num_classes, b->model.num_classes);
    ck_assert_int_eq(a->model.image_size, b->model.image_size);
    ck_assert_mem_eq(&a->data, &b->data, sizeof a->data);
    ck_assert_int_eq(a->train.epochs, b->train.epochs);
    ck_assert_int_eq(a->train.steps, b->train.steps);
    ck_assert(a->train.lr == b->train.lr);
    ck_assert(a->train.momentum == b->train.momentum);
    ck_assert(a->train.weight_decay == b->train.weight_decay);
    ck_assert_int_eq(a->train.nesterov, b->train.nesterov);
    ck_assert_str_eq(a->train.schedule, b->train.schedule);
    ck_assert_int_eq(a->train.warmup_steps, b->train.warmup_steps);
    ck_assert_int_eq(a->train.step_every, b->train.step_every);
    ck_assert(a->train.step_gamma == b->train.step_gamma);
    ck_assert(a->train.min_lr == b->train.min_lr);
    ck_assert_int_eq(a->train.seed, b->train.seed);
    ck_assert_int_eq(a->train.accum_steps, b->train.accum_steps);
    ck_assert_str_eq(a->train.lr_scaling, b->train.lr_scaling);
    ck_assert_int_eq(a->amp.enabled, b->amp.enabled);
    ck_assert_str_eq(a->amp.dtype, b->amp.dtype);
    ck_assert_int_eq(a->amp.dynamic, b->amp.dynamic);
    ck_assert(a->amp.init_scale == b->amp.init_scale);
    ck_assert(a->amp.growth_factor == b->amp.growth_factor);
    ck_assert(a->amp.backoff_factor == b->amp.backoff_factor);
    ck_assert_int_eq(a->amp.growth_interval, b->amp.growth_interval);
    ck_assert_int_eq(a->log.every, b->log.every);
    ck_assert_str_eq(a->log.metrics, b->log.metrics);
    ck_assert_str_eq(a->log.progress, b->log.progress);
    ck_assert_str_eq(a->checkpoint.dir, b->checkpoint.dir);
    ck_assert_int_eq(a->checkpoint.every, b->checkpoint.every);
    ck_assert_str_eq(a->checkpoint.resume, b->checkpoint.resume);
    ck_assert(a->dist.bucket_mb == b->dist.bucket_mb);
    ck_assert(a->dist.first_bucket_mb == b->dist.first_bucket_mb);
    ck_assert(a->dist.timeout_s == b->dist.timeout_s);
    ck_assert_str_eq(a->backend.device, b->backend.device);
    ck_assert_int_eq(a->cudnn.benchmark, b->cudnn.benchmark);
    ck_assert_int_eq(a->cudnn.tf32, b->cudnn.tf32);
    ck_assert_str_eq(a->cudnn.cache, b->cudnn.cache);
    ck_assert_int_eq(a->debug.inject_step, b->debug.inject_step);
    ck_assert_int_eq(a->debug.inject_rank, b->debug.inject_rank);
    double va = a->debug.inject_value, vb = b->debug.inject_value;
    ck_assert_msg(va == vb || (isnan(va) && isnan(vb)), "inject_value %g != %g", va, vb);
}

// ---- defaults and shipped configs ------------------------------------------------------------------

START_TEST(defaults_are_the_tiny_demo_and_valid) {
    Config d, loaded;
    config_defaults(&d);
    ck_assert_str_eq(d.model.arch, "custom");
    int ones[4] = {1, 1, 1, 1};
    ck_assert_mem_eq(d.model.layers, ones, sizeof ones);
    ck_assert_int_eq(d.model.cardinality, 4);
    ck_assert_int_eq(d.model.base_width, 16);
    ck_assert_int_eq(d.model.planes, 16);
    ck_assert_str_eq(d.data.source, "learnable");
    ck_assert_int_eq(d.data.batch_size, 32);
    ck_assert(d.train.lr == 0.1 && d.train.weight_decay == 5e-4);
    ck_assert_str_eq(d.train.schedule, "cosine");
    ck_assert_str_eq(d.amp.dtype, "float16");
    ck_assert(d.amp.init_scale == 65536.0 && d.amp.growth_factor == 2.0 && d.amp.backoff_factor == 0.5);
    ck_assert_int_eq(d.amp.growth_interval, 2000);
    ck_assert(isinf(d.debug.inject_value) && d.debug.inject_value > 0);
    ck_assert_str_eq(d.cudnn.cache, "auto");
    // No file, no overrides: the defaults pass every rule unchanged.
    load_ok(&loaded, NULL, 0, NULL);
    assert_same_values(&loaded, &d);
}
END_TEST

START_TEST(tiny_yaml_is_the_defaults_written_out) {
    Config d, tiny;
    config_defaults(&d);
    load_ok(&tiny, SHIPPED("tiny.yaml"), 0, NULL);
    ck_assert_str_eq(tiny.log.metrics, "runs/tiny/metrics.jsonl");
    ck_assert_str_eq(tiny.checkpoint.dir, "runs/tiny");
    ck_assert_str_eq(tiny.source_path, SHIPPED("tiny.yaml"));
    tiny.log.metrics[0] = '\0';
    tiny.checkpoint.dir[0] = '\0';
    assert_same_values(&tiny, &d);
}
END_TEST

START_TEST(every_shipped_config_loads) {
    DIR *dir = opendir(AMPTRAIN_SOURCE_DIR "/configs");
    ck_assert_ptr_nonnull(dir);
    int loaded = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".yaml") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/configs/%s", AMPTRAIN_SOURCE_DIR, e->d_name);
        Config cfg;
        load_ok(&cfg, path, 0, NULL);
        loaded++;
    }
    closedir(dir);
    ck_assert_int_ge(loaded, 5);
}
END_TEST

START_TEST(seed_config_is_the_seed_experiment) {
    Config c;
    load_ok(&c, SHIPPED("seed_resnext50.yaml"), 0, NULL);
    int layers[4] = {3, 4, 6, 3};
    ck_assert_str_eq(c.model.arch, "resnext50_32x4d");
    ck_assert_mem_eq(c.model.layers, layers, sizeof layers);
    ck_assert_int_eq(c.model.cardinality, 32);
    ck_assert_int_eq(c.model.base_width, 4);
    ck_assert_int_eq(c.model.planes, 64);
    ck_assert_int_eq(c.model.num_classes, 1000);
    ck_assert_int_eq(c.model.image_size, 224);
    ck_assert_str_eq(c.data.source, "synthetic");
    ck_assert_int_eq(c.data.train_size, 50 * 70);
    ck_assert_int_eq(c.data.batch_size, 70);
    ck_assert_int_eq(c.train.epochs, 3);
    ck_assert_int_eq(c.train.steps, 0);
    ck_assert_int_eq(c.train.accum_steps, 1);
    // plain SGD, as the seed: lr 0.001, no momentum, no weight decay
    ck_assert(c.train.lr == 0.001 && c.train.momentum == 0 && c.train.weight_decay == 0 && !c.train.nesterov);
    ck_assert_str_eq(c.train.schedule, "constant");
    ck_assert_int_eq(c.train.warmup_steps, 0);
    ck_assert_int_eq(c.amp.enabled, 1);
    char *fp32[] = {"amp.enabled=false"};
    load_ok(&c, SHIPPED("seed_resnext50.yaml"), 1, fp32);
    ck_assert_int_eq(c.amp.enabled, 0);
}
END_TEST

START_TEST(imagenet_and_cifar_configs_have_their_shapes) {
    Config c;
    int layers101[4] = {3, 4, 23, 3};
    load_ok(&c, SHIPPED("resnext101_32x8d_imagenet.yaml"), 0, NULL);
    ck_assert_mem_eq(c.model.layers, layers101, sizeof layers101);
    ck_assert_int_eq(c.model.base_width, 8);
    ck_assert_int_eq(c.data.batch_size, 256);
    ck_assert_str_eq(c.train.lr_scaling, "linear");
    ck_assert(c.train.weight_decay == 1e-4);
    load_ok(&c, SHIPPED("cifar10.yaml"), 0, NULL);
    ck_assert_str_eq(c.data.source, "cifar10");
    ck_assert_str_eq(c.data.path, "data/cifar-10-batches-bin");
    ck_assert_int_eq(c.model.num_classes, 10);
    ck_assert_int_eq(c.model.image_size, 32);
}
END_TEST

// ---- values and overrides ----------------------------------------------------------------------------

START_TEST(yaml_floats_parse) {
    tu_write_file("floats.yaml", "amp:\n  init_scale: 65536\n  growth_factor: 2.5e0\n"
                                 "train:\n  lr: 1e-3\n  min_lr: .5e-4\n  momentum: +0.\n"
                                 "debug:\n  inject_value: -.Inf\n");
    Config c;
    load_ok(&c, "floats.yaml", 0, NULL);
    ck_assert(c.amp.init_scale == 65536.0);
    ck_assert(c.amp.growth_factor == 2.5);
    ck_assert(c.train.lr == 1e-3);
    ck_assert(c.train.min_lr == 0.5e-4);
    ck_assert(c.train.momentum == 0.0);
    ck_assert(isinf(c.debug.inject_value) && c.debug.inject_value < 0);
    char *nan[] = {"debug.inject_value=.nan"};
    load_ok(&c, "floats.yaml", 1, nan);
    ck_assert(isnan(c.debug.inject_value));
    char *big[] = {"debug.inject_value=40000"};
    load_ok(&c, NULL, 1, big);
    ck_assert(c.debug.inject_value == 40000.0);
}
END_TEST

START_TEST(overrides_apply_after_the_file) {
    char *overrides[] = {"train.lr=0.01",           "model.layers=[2, 3, 4, 5]",
                         "amp.enabled=false",       "log.metrics=out/m.jsonl",
                         "data.source=cifar10",     "data.path=\"with space\"",
                         "train.seed=123456789012", "train.lr=0.02",
                         "checkpoint.dir="};
    Config c;
    load_ok(&c, SHIPPED("tiny.yaml"), 9, overrides);
    ck_assert(c.train.lr == 0.02);  // the last one wins
    int layers[4] = {2, 3, 4, 5};
    ck_assert_mem_eq(c.model.layers, layers, sizeof layers);
    ck_assert_int_eq(c.amp.enabled, 0);
    ck_assert_str_eq(c.log.metrics, "out/m.jsonl");
    ck_assert_str_eq(c.data.path, "with space");
    ck_assert_int_eq(c.train.seed, 123456789012L);
    ck_assert_str_eq(c.checkpoint.dir, "");
    // A preset chosen on the command line fills the shape the file left alone.
    char *preset[] = {"model.arch=resnext101_32x4d"};
    load_ok(&c, SHIPPED("seed_resnext50.yaml"), 1, preset);
    ck_assert_int_eq(c.model.layers[2], 23);
    ck_assert_int_eq(c.model.base_width, 4);
}
END_TEST

// cudnn.workspace_mb unset follows amp.enabled (fp32 needs 1 GiB for its fast algorithms); set, it stays.
START_TEST(workspace_default_follows_precision) {
    Config c;
    load_ok(&c, NULL, 0, NULL);
    ck_assert_int_eq(c.amp.enabled, 1);
    ck_assert_int_eq(c.cudnn.workspace_mb, 512);
    char *fp32[] = {"amp.enabled=false"};
    load_ok(&c, NULL, 1, fp32);
    ck_assert_int_eq(c.cudnn.workspace_mb, 4096);
    char *set[] = {"amp.enabled=false", "cudnn.workspace_mb=64"};
    load_ok(&c, NULL, 2, set);
    ck_assert_int_eq(c.cudnn.workspace_mb, 64);
    char *zero[] = {"cudnn.workspace_mb=0"};
    load_ok(&c, NULL, 1, zero);
    ck_assert_int_eq(c.cudnn.workspace_mb, 0);
}
END_TEST

START_TEST(print_reads_back_to_identical_values) {
    char *overrides[] = {"train.lr=0.0123456789012345",
                         "train.momentum=0.3",
                         "debug.inject_value=.nan",
                         "train.seed=9007199254740993",
                         "log.metrics=\"q\\\"uote\\\\back\\nline: #x\"",
                         "dist.timeout_s=1e-7",
                         "amp.init_scale=3e38",
                         "train.nesterov=true",
                         "cudnn.tf32=true",
                         "cudnn.cache=/scratch/my kernels.cache",
                         "model.arch=resnext50_32x4d"};
    Config a, b;
    load_ok(&a, SHIPPED("seed_resnext50.yaml"), 11, overrides);
    ck_assert_str_eq(a.cudnn.cache, "/scratch/my kernels.cache");
    ck_assert_str_eq(a.log.metrics, "q\"uote\\back\nline: #x");
    char *text_a = printed(&a);
    tu_write_file("printed.yaml", text_a);
    load_ok(&b, "printed.yaml", 0, NULL);
    assert_same_values(&a, &b);
    char *text_b = printed(&b);
    // Only the header's "from FILE" differs.
    ck_assert_str_eq(strchr(text_a, '\n'), strchr(text_b, '\n'));
    free(text_a);
    free(text_b);

    // The defaults and a custom model too (the preset's shape is printed commented out above).
    config_defaults(&a);
    text_a = printed(&a);
    tu_write_file("printed_defaults.yaml", text_a);
    load_ok(&b, "printed_defaults.yaml", 0, NULL);
    assert_same_values(&a, &b);
    free(text_a);

    // An image folder without augmentation: the keys it does not read are printed commented out, with the
    // reason.
    load_ok(&a, SHIPPED("fashion_mnist.yaml"), 0, NULL);
    text_a = printed(&a);
    ck_assert_ptr_nonnull(strstr(text_a, "\n  # train_size: 2048   (not read: only synthetic and learnable"));
    ck_assert_ptr_nonnull(
        strstr(text_a, "\n  # crop_scale_min: 0.08   (not read: imagefolder with data.augment: false"));
    ck_assert_ptr_nonnull(strstr(text_a, "\n  mean: [0.286, 0.286, 0.286]\n"));
    tu_write_file("printed_folder.yaml", text_a);
    load_ok(&b, "printed_folder.yaml", 0, NULL);
    assert_same_values(&a, &b);
    free(text_a);
}
END_TEST

// A command-line data.source replaces the file's: the file's keys for its own source are dropped (back to
// their defaults), the file's keys that the new source reads stay, and a command-line key is judged by the
// source the run uses.
START_TEST(command_line_source_drops_the_files_keys_for_its_source) {
    Config c, d;
    config_defaults(&d);
    char *folder[] = {"data.source=imagefolder", "data.path=x"};
    load_ok(&c, SHIPPED("resnext50_32x4d_imagenet.yaml"), 2, folder);  // the file writes train_size
    ck_assert_int_eq(c.data.train_size, d.data.train_size);
    ck_assert_int_eq(c.data.val_size, d.data.val_size);
    ck_assert_int_eq(c.data.batch_size, 256);

    char *generated[] = {"data.source=synthetic"};
    load_ok(&c, SHIPPED("fashion_mnist.yaml"), 1, generated);  // path, augment, mean and std are dropped
    ck_assert_str_eq(c.data.path, "");
    ck_assert_int_eq(c.data.augment, d.data.augment);
    ck_assert_mem_eq(c.data.mean, d.data.mean, sizeof c.data.mean);
    ck_assert_mem_eq(c.data.std, d.data.std, sizeof c.data.std);

    char *shards[] = {"data.source=webdataset"};
    load_ok(&c, SHIPPED("fashion_mnist.yaml"), 1, shards);  // the JPEG keys stay
    ck_assert(c.data.mean[0] == 0.2860 && c.data.std[2] == 0.3530 && !c.data.augment);

    // crop_scale_min that the file's augment: false leaves unread, read once the command line augments
    tu_write_file("center_crop_then_augment.yaml",
                  "data:\n  source: imagefolder\n  path: x\n  augment: false\n  crop_scale_min: 0.5\n");
    char *augment[] = {"data.augment=true"};
    load_ok(&c, "center_crop_then_augment.yaml", 1, augment);
    ck_assert(c.data.crop_scale_min == 0.5);
}
END_TEST

// config_print's text of c holds `expect`, and read back from `file` it gives c's values.
static void assert_prints_back(const Config *c, const char *file, const char *expect) {
    Config back;
    char *text = printed(c);
    ck_assert_msg(strstr(text, expect) != NULL, "'%s' not in:\n%s", expect, text);
    tu_write_file(file, text);
    load_ok(&back, file, 0, NULL);
    assert_same_values(c, &back);
    free(text);
}

// amp.dtype bfloat16 trains unscaled: the scaler's keys resolve to a static scale of 1. The file's scaling
// keys (written for its float16) are dropped when the command line switches to bfloat16, and the file's
// amp.dtype when the command line turns AMP off; config_print comments out what the run does not read, so
// the printed config reads back.
START_TEST(bfloat16_runs_unscaled_and_drops_the_files_scaling_keys) {
    Config c, d;
    config_defaults(&d);
    char *bf16[] = {"amp.dtype=bfloat16"};
    load_ok(&c, NULL, 1, bf16);
    ck_assert_str_eq(c.amp.dtype, "bfloat16");
    ck_assert_int_eq(c.amp.dynamic, 0);
    ck_assert(c.amp.init_scale == 1.0);

    load_ok(&c, SHIPPED("tiny.yaml"), 1, bf16);  // the file writes dynamic, init_scale, growth_factor, ...
    ck_assert_int_eq(c.amp.dynamic, 0);
    ck_assert(c.amp.init_scale == 1.0);
    ck_assert(c.amp.growth_factor == d.amp.growth_factor && c.amp.growth_interval == d.amp.growth_interval);
    assert_prints_back(&c, "printed_bf16.yaml",
                       "\n  # init_scale: 1   (not read: amp.dtype bfloat16 trains without loss scaling");

    tu_write_file("bf16.yaml", "amp:\n  enabled: true\n  dtype: bfloat16\n");
    char *fp32[] = {"amp.enabled=false"};
    load_ok(&c, "bf16.yaml", 1, fp32);  // the fp32 baseline of a bfloat16 config
    ck_assert_int_eq(c.amp.enabled, 0);
    ck_assert_str_eq(c.amp.dtype, "float16");
    assert_prints_back(&c, "printed_fp32.yaml", "\n  # dtype: float16   (not read: amp.enabled is false");
}
END_TEST

// The JPEG sources' sides: unwritten ones follow model.image_size (validation resized by round(x 256 / 224),
// Python's round), written ones stand alone; torchvision's V2 recipe (train 176, resize 232, crop 224), the
// augmentation keys, MixUp, CutMix and label smoothing print and read back as they are.
START_TEST(image_sides_follow_image_size_unless_written) {
    Config c, b;
    load_ok(&c, NULL, 0, NULL);
    ck_assert(c.data.train_crop == 32 && c.data.val_crop == 32 && c.data.val_resize == 37);
    ck_assert(!strcmp(c.data.auto_augment, "none") && c.data.random_erase == 0 && c.data.repeated_aug == 1);
    ck_assert(c.data.mixup_alpha == 0 && c.data.cutmix_alpha == 0 && c.train.label_smoothing == 0);
    const struct {
        const char *overrides[3];
        int train_crop, val_resize, val_crop;
    } cases[] = {
        {{"model.image_size=224"}, 224, 256, 224},
        {{"model.image_size=224", "data.train_crop=176", "data.val_resize=232"}, 176, 232, 224},
        {{"model.image_size=176", "data.val_crop=224"}, 176, 256, 224},
        {{"data.val_crop=160"}, 32, 183, 160},  // 182.857 rounds up
        {{"model.image_size=112"}, 112, 128, 112},
        {{"model.image_size=49"}, 49, 56, 49},  // 56.0 exactly
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *ov[5] = {"data.source=imagefolder", "data.path=x"};
        int n = 2;
        for (int k = 0; k < 3 && cases[i].overrides[k]; k++) ov[n++] = (char *)cases[i].overrides[k];
        load_ok(&c, NULL, n, ov);
        ck_assert_msg(c.data.train_crop == cases[i].train_crop && c.data.val_resize == cases[i].val_resize &&
                          c.data.val_crop == cases[i].val_crop,
                      "case %zu: train %d, resize %d, crop %d", i, c.data.train_crop, c.data.val_resize,
                      c.data.val_crop);
    }
    char *v2[] = {"data.source=imagefolder",
                  "data.path=x",
                  "model.image_size=224",
                  "data.train_crop=176",
                  "data.val_resize=232",
                  "data.auto_augment=ta_wide",
                  "data.auto_augment_interpolation=bilinear",
                  "data.random_erase=0.1",
                  "data.repeated_aug=4",
                  "data.mixup_alpha=0.2",
                  "data.cutmix_alpha=1.0",
                  "train.label_smoothing=0.1"};
    load_ok(&c, NULL, 12, v2);
    char *text = printed(&c);
    ck_assert_ptr_nonnull(
        strstr(text, "\n  train_crop: 176\n  val_resize: 232\n  val_crop: 224\n  auto_augment: ta_wide\n"
                     "  auto_augment_interpolation: bilinear\n  random_erase: 0.1\n  repeated_aug: 4\n"
                     "  mixup_alpha: 0.2\n  cutmix_alpha: 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "\n  label_smoothing: 0.1\n"));
    tu_write_file("printed_v2.yaml", text);
    load_ok(&b, "printed_v2.yaml", 0, NULL);
    assert_same_values(&c, &b);
    free(text);
    // CIFAR-10 augments: TrivialAugmentWide and erasing apply; its sides are its 32 whatever is written
    char *cifar[] = {"data.source=cifar10", "data.path=x", "data.auto_augment=ta_wide",
                     "data.random_erase=0.25"};
    load_ok(&c, NULL, 4, cifar);
    ck_assert(c.data.train_crop == 32 && c.data.val_crop == 32 && c.data.random_erase == 0.25);
    text = printed(&c);
    ck_assert_ptr_nonnull(
        strstr(text, "\n  # train_crop: 32   (not read: only imagefolder and webdataset resize"));
    free(text);
    // the device decoder applies TrivialAugmentWide and erasing as drawn by the loader
    char *device[] = {"data.source=webdataset", "data.path=x", "data.decode=device",
                      "data.auto_augment=ta_wide", "data.random_erase=0.25"};
    load_ok(&c, NULL, 5, device);
    ck_assert(!strcmp(c.data.decode, "device") && !strcmp(c.data.auto_augment, "ta_wide") &&
              c.data.random_erase == 0.25);
}
END_TEST

START_TEST(cifar10_fixes_classes_and_image_size) {
    tu_write_file("cifar_shape.yaml", "data:\n  source: cifar10\n  path: somewhere\n");
    char *keep[] = {"model.num_classes=10", "model.image_size=32"};
    Config c;
    load_ok(&c, "cifar_shape.yaml", 2, keep);
    ck_assert_int_eq(c.model.num_classes, 10);
    ck_assert_int_eq(c.model.image_size, 32);
}
END_TEST

// The largest values the bounds allow load (the refusals one past them are in bad_configs); the run
// length counts steps at one rank, so 2147483647 steps load and one epoch more does not.
START_TEST(bounds_take_their_largest_values) {
    Config c;
    char *largest[] = {"data.train_size=16777216", "data.val_size=16777216", "dist.timeout_s=604800",
                       "dist.bucket_mb=1048576", "data.batch_size=65536"};
    load_ok(&c, NULL, 5, largest);
    ck_assert_int_eq(c.data.train_size, 16777216);
    ck_assert(c.dist.timeout_s == 604800);
    char *steps[] = {"train.epochs=2147483647", "train.steps=100"};
    load_ok(&c, NULL, 2, steps);
    ck_assert_int_eq(c.train.epochs, 2147483647);
    // 2048 samples in batches of 32: 64 steps an epoch; 33554431 epochs are 2147483584 steps.
    char *epochs[] = {"train.epochs=33554431"};
    load_ok(&c, NULL, 1, epochs);
    char *one_more[] = {"train.epochs=33554432"};
    Config d;
    LoadResult r = load(&d, NULL, 1, one_more);
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.message, "command line: train.epochs: 33554432 epochs of 64 steps") == r.message,
                  "%s", r.message);
    tu_write_file("pixels_ok.yaml",
                  "data:\n  source: webdataset\n  path: x\n  max_image_pixels: 1073741824\n");
    load_ok(&c, "pixels_ok.yaml", 0, NULL);
    ck_assert_int_eq(c.data.max_image_pixels, 1073741824L);
    load_ok(&c, NULL, 0, NULL);
    ck_assert_int_eq(c.data.max_image_pixels, 89478485L);  // Pillow's Image.MAX_IMAGE_PIXELS
}
END_TEST

// ---- errors --------------------------------------------------------------------------------------------

typedef struct {
    const char *file;  // written into the test's folder; NULL: no file
    const char *text;
    const char *override;  // NULL: none
    const char *expected;  // the line must contain this (file, line and key included)
} BadConfig;

static const BadConfig bad_configs[] = {
    {"unknown_key.yaml", "model:\n  planes: 16\ntrain:\n  epochs: 1\n  lerning_rate: 0.1\n", NULL,
     "unknown_key.yaml:5: train.lerning_rate: unknown key (did you mean train.lr?)"},
    {"wrong_section.yaml", "train:\n  batch_size: 8\n", NULL,
     "wrong_section.yaml:2: train.batch_size: unknown key (did you mean data.batch_size?)"},
    {"unknown_section.yaml", "model:\n  planes: 16\ntrian:\n  lr: 0.1\n", NULL,
     "unknown_section.yaml:3: trian: unknown section (did you mean train?)"},
    {"string_for_int.yaml", "data:\n  batch_size: \"abc\"\n", NULL,
     "string_for_int.yaml:2: data.batch_size: expected an integer, got \"abc\""},
    {"float_for_int.yaml", "train:\n  lr: 0.1\n  epochs: 3.5\n", NULL,
     "float_for_int.yaml:3: train.epochs: expected an integer, got 3.5"},
    {"map_for_scalar.yaml", "train:\n  lr:\n    value: 0.1\n", NULL,
     "map_for_scalar.yaml:2: train.lr: expected a number, got a map"},
    {"bad_bool.yaml", "amp:\n  enabled: yes\n", NULL,
     "bad_bool.yaml:2: amp.enabled: expected true or false, got yes"},
    {"lr_zero.yaml", "train:\n  lr: 0\n", NULL, "lr_zero.yaml:2: train.lr: must be > 0 (got 0)"},
    {"momentum_one.yaml", "train:\n  momentum: 1.0\n", NULL,
     "momentum_one.yaml:2: train.momentum: must be in [0, 1) (got 1)"},
    {"backoff.yaml", "amp:\n  dynamic: true\n  backoff_factor: 1.5\n", NULL,
     "backoff.yaml:3: amp.backoff_factor: must be in (0, 1) (got 1.5)"},
    {"growth.yaml", "amp:\n  growth_factor: 1\n", NULL,
     "growth.yaml:2: amp.growth_factor: must be > 1 (got 1)"},
    {"batch_zero.yaml", "data:\n  batch_size: 0\n", NULL,
     "batch_zero.yaml:2: data.batch_size: must be in [1, 65536] (got 0)"},
    {"small_image.yaml", "model:\n  image_size: 16\n", NULL,
     "small_image.yaml:2: model.image_size: must be in [32, 1024] (got 16)"},
    {"nan_scale.yaml", "amp:\n  init_scale: .nan\n", NULL,
     "nan_scale.yaml:2: amp.init_scale: must be > 0 (got .nan)"},
    {"bad_enum.yaml", "train:\n  schedule: cosinus\n", NULL,
     "bad_enum.yaml:2: train.schedule: expected one of constant, step, cosine, got cosinus"},
    {"bad_layers.yaml", "model:\n  layers:\n    - 1\n    - 0\n    - 1\n    - 1\n", NULL,
     "bad_layers.yaml:4: model.layers[1]: must be in [1, 64] (got 0)"},
    {"short_layers.yaml", "model:\n  layers: [1, 1, 1]\n", NULL,
     "short_layers.yaml:2: model.layers: expected a list of 4 integers, got 3"},
    {"section_scalar.yaml", "model:\n  planes: 16\ntrain: 0.1\n", NULL,
     "section_scalar.yaml:3: train: a section must be a map"},
    {"root_list.yaml", "- model\n- train\n", NULL,
     "root_list.yaml:1: the document must be a map of sections"},
    {"syntax.yaml", "train:\n  lr: 0.1\n  epochs: [1, 2\n", NULL, "syntax.yaml:4: "},
    {"preset_layers.yaml", "model:\n  arch: resnext50_32x4d\n  num_classes: 1000\n  layers: [3, 4, 6, 3]\n",
     NULL, "preset_layers.yaml:4: model.layers: model.arch resnext50_32x4d fixes layers [3, 4, 6, 3]"},
    {"preset_width.yaml", "model:\n  base_width: 8\n  arch: resnext101_32x4d\n", NULL,
     "preset_width.yaml:2: model.base_width: model.arch resnext101_32x4d fixes"},
    {"cifar_no_path.yaml", "model:\n  planes: 16\ndata:\n  source: cifar10\n", NULL,
     "cifar_no_path.yaml:4: data.source: cifar10 needs data.path"},
    {"cifar_classes.yaml", "model:\n  num_classes: 100\ndata:\n  source: cifar10\n  path: x\n", NULL,
     "cifar_classes.yaml:2: model.num_classes: data.source cifar10 has 10 classes (got 100)"},
    {"warmup.yaml", "train:\n  warmup_steps: -1\n", NULL, "warmup.yaml:2: train.warmup_steps: must be >= 0"},
    {"inject_rank.yaml", "debug:\n  inject_rank: -2\n", NULL,
     "inject_rank.yaml:2: debug.inject_rank: must be >= -1"},
    {"nesterov.yaml", "train:\n  momentum: 0\n  nesterov: true\n", NULL,
     "nesterov.yaml:3: train.nesterov: needs train.momentum > 0"},
    {"tag_str.yaml", "train:\n  lr: !!str 0.1\n", NULL,
     "tag_str.yaml:2: explicit tags (!!str) are not supported"},
    {"tag_float.yaml", "amp:\n  init_scale: !!float 1\n", NULL, "tag_float.yaml:2: explicit tags (!!float)"},
    {"denormal_scale.yaml", "amp:\n  init_scale: 1e-320\n", NULL,
     "denormal_scale.yaml:2: amp.init_scale: 1e-320 is not a normal fp32 number"},
    {NULL, NULL, NULL, "no_such_dir/x.yaml: cannot read: No such file or directory"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "train.lr", "command line: train.lr: expected section.key=value"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "train.lerning_rate=0.1",
     "command line: train.lerning_rate: unknown key (did you mean train.lr?)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "lr=0.5",
     "command line: lr: expected section.key=value (did you mean train.lr=0.5?)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "train.lr=abc", "command line: train.lr: expected a number, got abc"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "train.lr=!!str 0.1",
     "command line: train.lr: cannot parse the value: explicit tags (!!str)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "amp.init_scale=1e-40",
     "command line: amp.init_scale: 1e-40 is not a normal fp32 number"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "train.lr=1e39", "command line: train.lr: 1e+39 is not a normal fp32"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "dist.timeout_s=4e-324",
     "command line: dist.timeout_s: 5e-324 is not a normal fp32"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "amp.growth_interval=0",
     "command line: amp.growth_interval: must be >= 1 (got 0)"},
    // amp.dtype: only with AMP on; bfloat16 has no loss scale to set
    {"dtype_fp32.yaml", "amp:\n  enabled: false\n  dtype: bfloat16\n", NULL,
     "dtype_fp32.yaml:3: amp.dtype: amp.enabled is false, so everything trains in fp32; set amp.enabled: true "
     "for bfloat16"},
    {"dtype_fp32.yaml", "amp:\n  enabled: false\n", "amp.dtype=float16",
     "command line: amp.dtype: amp.enabled is false"},
    {"bad_dtype.yaml", "amp:\n  dtype: fp8\n", NULL,
     "bad_dtype.yaml:2: amp.dtype: expected one of float16, bfloat16, got fp8"},
    {"bf16_scale.yaml", "amp:\n  dtype: bfloat16\n  init_scale: 1024\n", NULL,
     "bf16_scale.yaml:3: amp.init_scale: amp.dtype bfloat16 trains without loss scaling (bf16 has fp32's "
     "exponent range; the scale stays 1): use amp.dtype: float16 to scale the loss"},
    {"bf16_dynamic.yaml", "amp:\n  dynamic: false\n  dtype: bfloat16\n", NULL,
     "bf16_dynamic.yaml:2: amp.dynamic: amp.dtype bfloat16 trains without loss scaling"},
    {"bf16_file.yaml", "amp:\n  dtype: bfloat16\n", "amp.min_scale=0",
     "command line: amp.min_scale: amp.dtype bfloat16 trains without loss scaling"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "model.layers=[1, 1,",
     "command line: model.layers: cannot parse the value"},
    {"preset.yaml", "model:\n  arch: resnext50_32x4d\n", "model.planes=64",
     "command line: model.planes: model.arch resnext50_32x4d fixes"},
    // bounds that keep a value inside what the code computes with (config_schema.c)
    {"huge_size.yaml", "data:\n  train_size: 2147483647\n", NULL,
     "huge_size.yaml:2: data.train_size: must be in [1, 16777216] (got 2147483647)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "data.val_size=16777217",
     "command line: data.val_size: must be in [0, 16777216] (got 16777217)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "data.batch_size=65537",
     "command line: data.batch_size: must be in [1, 65536] (got 65537)"},
    {"timeout.yaml", "dist:\n  bucket_mb: 25\n  timeout_s: 9.3e9\n", NULL,
     "timeout.yaml:3: dist.timeout_s: must be in (0, 604800] (got 9300000000)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "dist.timeout_s=604800.5",
     "command line: dist.timeout_s: must be in (0, 604800] (got 604800.5)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "dist.bucket_mb=1e30",
     "command line: dist.bucket_mb: must be in (0, 1048576] (got 1e+30)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "dist.first_bucket_mb=2e6",
     "command line: dist.first_bucket_mb: must be in (0, 1048576] (got 2000000)"},
    {"epochs.yaml", "train:\n  epochs: 2147483647\n", NULL,
     "epochs.yaml:2: train.epochs: 2147483647 epochs of 64 steps are more than the 2147483647 steps a run can "
     "count; set train.steps"},
    {"pixels.yaml", "data:\n  source: imagefolder\n  path: x\n  max_image_pixels: 0\n", NULL,
     "pixels.yaml:4: data.max_image_pixels: must be in [1, 1073741824] (got 0)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "data.max_image_pixels=1000",
     "command line: data.max_image_pixels: only imagefolder and webdataset hold JPEGs to decode; learnable"},
    // data keys the source does not read
    {"folder_size.yaml", "data:\n  source: imagefolder\n  path: x\n  train_size: 100\n", NULL,
     "folder_size.yaml:4: data.train_size: only synthetic and learnable data have a size to choose; "
     "imagefolder's comes from its files"},
    {"folder.yaml", "data:\n  source: imagefolder\n  path: x\n", "data.train_size=25600",
     "command line: data.train_size: only synthetic and learnable data have a size to choose; imagefolder's"},
    {"cifar_val_size.yaml", "data:\n  val_size: 0\n  source: cifar10\n  path: x\n", NULL,
     "cifar_val_size.yaml:2: data.val_size: only synthetic and learnable data have a size to choose; cifar10's"},
    {"shards.yaml", "data:\n  source: webdataset\n  path: x\n", "data.val_size=10",
     "command line: data.val_size: only synthetic and learnable data have a size to choose; webdataset's"},
    {"learnable_path.yaml", "data:\n  path: somewhere\n", NULL,
     "learnable_path.yaml:2: data.path: learnable data is generated, not read from files"},
    {"synthetic_augment.yaml", "data:\n  source: synthetic\n  augment: false\n", NULL,
     "synthetic_augment.yaml:3: data.augment: synthetic data is never augmented"},
    {"cifar_mean.yaml", "data:\n  source: cifar10\n  path: x\n  mean: [0.5, 0.5, 0.5]\n", NULL,
     "cifar_mean.yaml:4: data.mean: only imagefolder and webdataset are normalised by data.mean and data.std; "
     "cifar10 has its own"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "data.std=[1, 1, 1]",
     "command line: data.std: only imagefolder and webdataset are normalised by data.mean and data.std; learnable"},
    {"center_crop.yaml", "data:\n  source: imagefolder\n  path: x\n  augment: false\n  crop_scale_min: 0.5\n",
     NULL,
     "center_crop.yaml:5: data.crop_scale_min: imagefolder with data.augment: false crops no random area"},
    {"cifar.yaml", "data:\n  source: cifar10\n  path: x\n", "data.crop_scale_max=0.5",
     "command line: data.crop_scale_max: only imagefolder and webdataset with data.augment crop a random area; "
     "cifar10 does not"},
    // sides and augmentation
    {"small_resize.yaml", "data:\n  source: imagefolder\n  path: x\n  val_crop: 64\n  val_resize: 40\n", NULL,
     "small_resize.yaml:5: data.val_resize: val_resize 40 is smaller than val_crop 64"},
    {"folder.yaml", "data:\n  source: imagefolder\n  path: x\n", "data.val_crop=1025",
     "command line: data.val_crop: must be in [32, 1024] (got 1025)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "data.auto_augment=ta_wide",
     "command line: data.auto_augment: learnable data is never augmented (only cifar10, imagefolder and webdataset"},
    {"center_crop_erase.yaml",
     "data:\n  source: imagefolder\n  path: x\n  augment: false\n  random_erase: 0.1\n", NULL,
     "center_crop_erase.yaml:5: data.random_erase: data.augment: false leaves training images unaugmented"},
    {"folder.yaml", "data:\n  source: imagefolder\n  path: x\n", "data.auto_augment_interpolation=bilinear",
     "command line: data.auto_augment_interpolation: only data.auto_augment: ta_wide resamples"},
    {"cifar.yaml", "data:\n  source: cifar10\n  path: x\n", "data.train_crop=28",
     "command line: data.train_crop: must be in [32, 1024] (got 28)"},
    {"cifar.yaml", "data:\n  source: cifar10\n  path: x\n", "data.val_crop=32",
     "command line: data.val_crop: only imagefolder and webdataset resize and crop; cifar10 images are "
     "model.image_size as they are"},
    {"device_ra.yaml", "data:\n  source: imagefolder\n  path: x\n  decode: device\n  repeated_aug: 4\n", NULL,
     "device_ra.yaml:5: data.repeated_aug: not available with data.decode: device (the device's decode jobs do "
     "not say which repetition a sample is)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "data.repeated_aug=0",
     "command line: data.repeated_aug: must be in [1, 16]"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "data.auto_augment=ta",
     "command line: data.auto_augment: expected one of "
     "none, ta_wide, got ta"},
    {"cifar.yaml", "data:\n  source: cifar10\n  path: x\n", "data.random_erase=1.5",
     "command line: data.random_erase: must be in [0, 1] (got 1.5)"},
    // the loss side of the recipe
    {"smoothing.yaml", "train:\n  label_smoothing: 1.5\n", NULL,
     "smoothing.yaml:2: train.label_smoothing: must be in [0, 1] (got 1.5)"},
    {"ok.yaml", "train:\n  lr: 0.1\n", "data.mixup_alpha=-0.2",
     "command line: data.mixup_alpha: must be >= 0 (got -0.2)"},
    {"mix.yaml", "data:\n  cutmix_alpha: -1\n", NULL, "mix.yaml:2: data.cutmix_alpha: must be >= 0 (got -1)"},
    // a file key that neither the file's source nor the command line's reads
    {"folder_size.yaml", "data:\n  source: imagefolder\n  path: x\n  train_size: 100\n",
     "data.source=cifar10",
     "folder_size.yaml:4: data.train_size: only synthetic and learnable data have a size to choose; imagefolder's"},
};

// Each bad config: exit value 2, exactly one line that names the place and the key, Config untouched.
START_TEST(bad_config_is_one_line_and_exit_2) {
    const BadConfig *bad = &bad_configs[_i];
    const char *path = "no_such_dir/x.yaml";
    if (bad->file) path = tu_write_file(bad->file, bad->text);
    ck_assert_ptr_nonnull(path);
    char *override = bad->override ? strdup(bad->override) : NULL;
    Config c, d;
    LoadResult r = load(&c, path, override ? 1 : 0, &override);
    free(override);
    ck_assert_msg(r.rc == 2, "%s: returned %d", bad->expected, r.rc);
    ck_assert_msg(strstr(r.message, bad->expected) == r.message, "got '%s', expected '%s...'", r.message,
                  bad->expected);
    char *newline = strchr(r.message, '\n');
    ck_assert_msg(newline && newline[1] == '\0', "not one line: '%s'", r.message);
    config_defaults(&d);
    assert_same_values(&c, &d);
}
END_TEST

// Quoted keys and values may hold newlines; the message still is one line.
START_TEST(control_characters_stay_on_one_line) {
    tu_write_file("newline_key.yaml", "train:\n  \"a\\nb\": 1\n");
    Config c;
    LoadResult r = load(&c, "newline_key.yaml", 0, NULL);
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.message, "newline_key.yaml:2: train.a b: unknown key") == r.message, "%s",
                  r.message);
    ck_assert_ptr_eq(strchr(r.message, '\n'), r.message + strlen(r.message) - 1);
}
END_TEST

// Files that are not regular are refused before a byte is read: a FIFO with no writer would block a
// reader forever (the test's timeout catches a hang), a /proc file reports size 0 but has content.
START_TEST(special_files_are_refused) {
    unlink("fifo.yaml");
    ck_assert_int_eq(mkfifo("fifo.yaml", 0600), 0);
    const struct {
        const char *path, *expected;
    } cases[] = {
        {"fifo.yaml", "fifo.yaml: cannot read: not a regular file (a FIFO)"},
        {"/proc/self/status", "/proc/self/status: cannot read: not a regular file (it holds more than"},
        {"/dev/null", "/dev/null: cannot read: not a regular file (a device)"},
        {".", ".: cannot read: not a regular file (a directory)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c;
        LoadResult r = load(&c, cases[i].path, 0, NULL);
        ck_assert_int_eq(r.rc, 2);
        ck_assert_msg(strstr(r.message, cases[i].expected) == r.message, "got '%s', expected '%s'", r.message,
                      cases[i].expected);
    }
    unlink("fifo.yaml");
}
END_TEST

static Suite *config_suite(void) {
    Suite *s = suite_create("config");
    TCase *good = tcase_create("valid");
    tcase_add_test(good, defaults_are_the_tiny_demo_and_valid);
    tcase_add_test(good, workspace_default_follows_precision);
    tcase_add_test(good, tiny_yaml_is_the_defaults_written_out);
    tcase_add_test(good, every_shipped_config_loads);
    tcase_add_test(good, seed_config_is_the_seed_experiment);
    tcase_add_test(good, imagenet_and_cifar_configs_have_their_shapes);
    tcase_add_test(good, yaml_floats_parse);
    tcase_add_test(good, overrides_apply_after_the_file);
    tcase_add_test(good, print_reads_back_to_identical_values);
    tcase_add_test(good, command_line_source_drops_the_files_keys_for_its_source);
    tcase_add_test(good, bfloat16_runs_unscaled_and_drops_the_files_scaling_keys);
    tcase_add_test(good, cifar10_fixes_classes_and_image_size);
    tcase_add_test(good, image_sides_follow_image_size_unless_written);
    tcase_add_test(good, bounds_take_their_largest_values);
    suite_add_tcase(s, good);
    TCase *bad = tcase_create("invalid");
    tcase_add_loop_test(bad, bad_config_is_one_line_and_exit_2, 0,
                        (int)(sizeof bad_configs / sizeof bad_configs[0]));
    tcase_add_test(bad, control_characters_stay_on_one_line);
    tcase_add_test(bad, special_files_are_refused);
    suite_add_tcase(s, bad);
    return s;
}

int main(void) { return tu_run_suite(config_suite(), 1); }
