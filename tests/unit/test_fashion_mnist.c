// test_fashion_mnist.c - a real dataset end to end on the CPU: tools/fashion-mnist converts the first 2,000
// training and 1,000 test images of Fashion-MNIST (Debian's dataset-fashion-mnist) into an ImageFolder of
// JPEGs and into tar shards; the imagefolder and webdataset sources must then hand out the same bytes for
// every sample (augmented or not), and configs/fashion_mnist.yaml, shrunk to the CPU demo's model, must
// learn: test top-1 >= 70% in the metrics file's last evaluation record (chance is 10%; the run takes about
// 20 s on 2 cores and reaches about 83%).
//
// Without the Debian dataset, without Pillow for /usr/bin/python3 (Debian: python3-pil) or without
// libjpeg-turbo in this build, the suite says which and exits 77, which ctest reports as Skipped.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "data/dataset.h"
#include "image/image_decode.h"
#include "tests/test_util.h"

#define PYTHON "/usr/bin/python3"
#define IDX_DIR "/usr/share/datasets/fashion-mnist"
#define N_TRAIN 2000
#define N_VAL 1000
#define MIN_TOP1 0.70

// Made once, before the suite (the forked tests share the scratch folder).
#define FOLDER "fm"
#define SHARDS "fm-shards"

static void open_split(const char *source, const char *path, int augment, int train, Dataset **ds) {
    char source_kv[64], path_kv[256], augment_kv[64];
    snprintf(source_kv, sizeof source_kv, "data.source=%s", source);
    snprintf(path_kv, sizeof path_kv, "data.path=%s", path);
    snprintf(augment_kv, sizeof augment_kv, "data.augment=%s", augment ? "true" : "false");
    const char *const overrides[] = {
        source_kv, path_kv, augment_kv, "model.image_size=32", "model.num_classes=10", NULL};
    Config cfg;
    tu_config(&cfg, overrides);
    char err[512] = "";
    int rc = train ? dataset_open_train(&cfg.data, &cfg.model, cfg.train.seed, NULL, ds, err, sizeof err)
                   : dataset_open_val(&cfg.data, &cfg.model, cfg.train.seed, NULL, ds, err, sizeof err);
    ck_assert_msg(rc == 0 && *ds, "%s %s: %s", source, train ? "train" : "val", err);
}

// Every sample of both sources, in batches, for the given epoch: equal bytes and labels.
static long compare_sources(const Dataset *a, const Dataset *b, int epoch, uint8_t *first_epoch_images) {
    ck_assert_int_eq(a->size, b->size);
    size_t bytes = dataset_image_bytes(a);
    enum { BATCH = 100 };
    uint8_t *ia = malloc(BATCH * bytes), *ib = malloc(BATCH * bytes);
    int32_t idx[BATCH], la[BATCH], lb[BATCH];
    long differ_from_first = 0;
    for (int at = 0; at < a->size; at += BATCH) {
        int n = a->size - at < BATCH ? a->size - at : BATCH;
        for (int k = 0; k < n; k++) idx[k] = at + k;
        dataset_get_batch(a, idx, n, epoch, ia, la);
        dataset_get_batch(b, idx, n, epoch, ib, lb);
        ck_assert_msg(memcmp(ia, ib, (size_t)n * bytes) == 0, "images %d..%d differ (epoch %d)", at,
                      at + n - 1, epoch);
        ck_assert_mem_eq(la, lb, (size_t)n * sizeof(int32_t));
        for (int k = 0; k < n; k++) {
            ck_assert(la[k] >= 0 && la[k] < 10);
            uint8_t *first = first_epoch_images + (size_t)(at + k) * bytes;
            if (epoch == 0)
                memcpy(first, ia + (size_t)k * bytes, bytes);
            else
                differ_from_first += memcmp(first, ia + (size_t)k * bytes, bytes) != 0;
        }
    }
    free(ia);
    free(ib);
    return differ_from_first;
}

// The packer puts sample i of the folder at index i of the shards: the two sources agree bitwise, with
// augmentation (which does change the images from one epoch to the next) and without.
START_TEST(test_imagefolder_and_shards_agree) {
    for (int augment = 0; augment < 2; augment++) {
        Dataset *folder, *shards;
        open_split("imagefolder", FOLDER, augment, 1, &folder);
        open_split("webdataset", SHARDS, augment, 1, &shards);
        ck_assert_int_eq(folder->size, N_TRAIN);
        uint8_t *first = malloc((size_t)folder->size * dataset_image_bytes(folder));
        compare_sources(folder, shards, 0, first);
        long changed = compare_sources(folder, shards, 1, first);
        if (augment)
            ck_assert_msg(changed > N_TRAIN / 2, "only %ld of %d images changed between epochs", changed,
                          N_TRAIN);
        else
            ck_assert_int_eq(changed, 0);
        free(first);
        dataset_close(folder);
        dataset_close(shards);
    }
    Dataset *folder, *shards;
    open_split("imagefolder", FOLDER, 1, 0, &folder);
    open_split("webdataset", SHARDS, 1, 0, &shards);
    ck_assert_int_eq(folder->size, N_VAL);
    uint8_t *first = malloc((size_t)folder->size * dataset_image_bytes(folder));
    compare_sources(folder, shards, 0, first);
    free(first);
    dataset_close(folder);
    dataset_close(shards);
}
END_TEST

// The top1 of the last {"eval":true,...} record of a metrics file, or -1.
static double last_eval_top1(const char *path) {
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no metrics file %s", path);
    char line[4096];
    double top1 = -1;
    while (fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "\"top1\":");
        if (strncmp(line, "{\"eval\":true", 12) == 0 && at) top1 = strtod(at + 7, NULL);
    }
    fclose(f);
    return top1;
}

// configs/fashion_mnist.yaml with the CPU demo's model (tiny.yaml's) on the shards.
START_TEST(test_training_learns) {
    char cmd[2048], out[16384];
    snprintf(
        cmd, sizeof cmd,
        "%s/configs/fashion_mnist.yaml backend.device=cpu data.source=webdataset data.path=" SHARDS " "
        "'model.layers=[1,1,1,1]' model.cardinality=4 model.base_width=16 model.planes=16 model.image_size=32 "
        "data.batch_size=32 train.epochs=6 train.lr=0.05 train.warmup_steps=20 log.every=10 "
        "log.metrics=run/metrics.jsonl checkpoint.dir= 2>&1",
        AMPTRAIN_SOURCE_DIR);
    unlink("run/metrics.jsonl");
    int rc = tu_run_cli(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "amptrain exited with %d:\n%s", rc, out);
    double top1 = last_eval_top1("run/metrics.jsonl");
    printf("fashion-mnist, %d training images, 6 epochs on the CPU: test top-1 %.2f%%\n", N_TRAIN,
           100 * top1);
    ck_assert_msg(top1 >= MIN_TOP1, "test top-1 %.4f < %.2f:\n%s", top1, MIN_TOP1, out);
}
END_TEST

// Why the suite cannot run here, or NULL.
static const char *missing_prerequisite(void) {
    if (!image_decode_available()) return "this build has no libjpeg-turbo (Debian: libturbojpeg0-dev)";
    if (access(IDX_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
        return "no Fashion-MNIST in " IDX_DIR " (Debian: dataset-fashion-mnist)";
    char out[256];
    if (tu_run_shell(PYTHON " -c 'import PIL' 2>&1", out, sizeof out) != 0)
        return "no Pillow for " PYTHON " (Debian: python3-pil)";
    return NULL;
}

static void convert(void) {
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd,
             "rm -rf " FOLDER " " SHARDS " && " PYTHON " %s/tools/fashion-mnist " FOLDER " --limit-train %d "
             "--limit-val %d --shards " SHARDS " --shard-size 500 2>&1",
             AMPTRAIN_SOURCE_DIR, N_TRAIN, N_VAL);
    int rc = tu_run_shell(cmd, out, sizeof out);
    printf("%s", out);
    if (rc != 0) {
        fprintf(stderr, "test_fashion_mnist: the conversion failed (exit %d)\n", rc);
        exit(1);
    }
}

int main(void) {
    const char *why = missing_prerequisite();
    if (why) return tu_skip("test_fashion_mnist", "%s", why);
    convert();
    Suite *suite = suite_create("fashion_mnist");
    TCase *tc = tcase_create("end_to_end");
    tcase_set_timeout(tc, 480);  // about 25 s here; sanitizer builds (CI) run the CPU backend ~8x slower
    tcase_add_test(tc, test_imagefolder_and_shards_agree);
    tcase_add_test(tc, test_training_learns);
    suite_add_tcase(suite, tc);
    return tu_run_suite(suite, 1);
}
