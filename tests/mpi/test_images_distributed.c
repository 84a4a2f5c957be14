// test_images_distributed.c - the JPEG sources over ranks (CPU backend, under mpiexec with 1, 2 and 3
// ranks): for an ImageFolder of JPEG fixtures and the same images packed into WebDataset shards,
//   1. the samples the ranks train on in an epoch are disjoint and cover the split, and each sample's
//      image (crop, flip, resize; then TrivialAugmentWide and erasing) is the one a single reader of the
//      whole split gets for that index and epoch - so the same on any rank count;
//   2. a run resumed from a checkpoint written mid-epoch trains on bitwise the same next batches as an
//      uninterrupted run and ends with bitwise the same weights, momentum and scaler state; the
//      ImageFolder's first run (on a checkpoint.dir it makes) writes its file-list cache, the later read it;
//   3. a file that does not decode is named in the log by the rank that read it (the last rank), once,
//      and by no other rank.
// Rank 0 writes the fixtures into a folder named after the rank count (the 1-, 2- and 3-rank launches
// share this scratch folder), then every rank waits at a barrier. Verdicts are agreed across ranks before
// asserting (as in test_data_parallel.c), so a failure ends the test on every rank at the same point.
#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/check.h"
#include "config/config.h"
#include "data/dataset.h"
#include "data/sources/image_dataset.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "tests/image_fixtures.h"
#include "tests/test_util.h"
#include "train/trainer.h"

static Comm *comm;
static Backend *be;

enum { CLASSES = 3, PER_CLASS = 8, SIZE = CLASSES * PER_CLASS, MAX_RANKS = 16, MAX_OVERRIDES = 32 };

// ---- fixtures -----------------------------------------------------------------------------------------

// <np>ranks/folder: train/<class>/<k>.jpg (PER_CLASS each, sizes 40..75 x 36..71 so that crops and
// resizes differ per image) and val/<class>/0.jpg; <np>ranks/shards: the same packed by tools/pack-shards.
// Folder times are set back (2023) so that the file-list cache may save the list. Made once per job, at
// the first test's start, which every rank reaches before any reads them.
static void make_fixtures(char *base, size_t cap) {
    static int made;
    snprintf(base, cap, "%dranks", comm->size);
    if (made++) return;
    if (comm->rank == 0) {
        char cmd[1024], out[1024], path[512];
        snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", base, base);
        ck_assert_int_eq(tu_run_shell(cmd, out, sizeof out), 0);
        for (int c = 0; c < CLASSES; c++)
            for (int split = 0; split < 2; split++) {
                snprintf(cmd, sizeof cmd, "mkdir -p %s/folder/%s/class%d", base, split ? "val" : "train", c);
                ck_assert_int_eq(tu_run_shell(cmd, out, sizeof out), 0);
                for (int k = 0; k < (split ? 1 : PER_CLASS); k++) {
                    int w = 40 + 5 * k, h = 36 + 5 * ((k + c) % PER_CLASS),
                        seed = c * PER_CLASS + k + 100 * split;
                    uint8_t *pixels = fx_pattern(w, h, 3, seed);
                    size_t len;
                    uint8_t *jpeg = fx_jpeg(pixels, w, h, 3, 90, TJSAMP_420, 0, &len);
                    snprintf(path, sizeof path, "%s/folder/%s/class%d/%d.jpg", base, split ? "val" : "train",
                             c, k);
                    fx_write(path, jpeg, len);
                    free(jpeg), free(pixels);
                }
            }
        snprintf(cmd, sizeof cmd, "python3 %s/tools/pack-shards %s/folder %s/shards --shard-size 5 2>&1",
                 AMPTRAIN_SOURCE_DIR, base, base);
        ck_assert_msg(tu_run_shell(cmd, out, sizeof out) == 0, "%s: %s", cmd, out);
        snprintf(path, sizeof path, "%s/folder", base);
        fx_set_folder_mtimes(path, 1700000000);
    }
    comm->barrier(comm);
}

// ---- set-up -------------------------------------------------------------------------------------------

// A tiny ResNeXt on 32x32 crops of the fixtures, augmentation on, then the test's own overrides.
static void make_config(Config *cfg, const char *source, const char *base, const char *const *extra) {
    char src[64], path[256];
    snprintf(src, sizeof src, "data.source=%s", source);
    snprintf(path, sizeof path, "data.path=%s/%s", base, strcmp(source, "webdataset") ? "folder" : "shards");
    const char *base_overrides[] = {
        "model.arch=custom",
        "model.layers=[1,1,1,1]",
        "model.planes=8",
        "model.base_width=16",
        "model.cardinality=2",
        "model.image_size=32",
        "model.num_classes=10",
        src,
        path,
        "data.augment=true",
        "data.batch_size=2",
        "data.prefetch=0",
        "train.schedule=constant",
        "train.warmup_steps=0",
        "train.lr=0.05",
        "amp.init_scale=256",
        "log.metrics=",
        "log.progress=never",
        "checkpoint.dir=",
    };
    const char *all[MAX_OVERRIDES + 1];
    int n = 0;
    for (size_t i = 0; i < sizeof base_overrides / sizeof base_overrides[0]; i++)
        all[n++] = base_overrides[i];
    for (; extra && *extra; extra++) {
        ck_assert_int_lt(n, MAX_OVERRIDES);
        all[n++] = *extra;
    }
    all[n] = NULL;
    tu_config(cfg, all);
}

static void trainer_start(Trainer *t, const Config *cfg) {
    ck_assert_int_eq(trainer_init(t, cfg, be, comm, comm), 0);
}

// Digest of one sample as `get` made it: image bytes and label.
static uint64_t sample_digest(const uint8_t *img, size_t bytes, int32_t label) {
    return tu_fnv1a(tu_fnv1a(TU_FNV_OFFSET, img, bytes), &label, sizeof label);
}

// Digests (SIZE) of every sample of epoch `epoch` as one reader of the whole split makes them, batch
// after batch of 5 (another batching than the trainer's), from a dataset opened on its own.
static void one_reader_digests(const Config *cfg, int epoch, uint64_t *digest) {
    Dataset *ds;
    char err[512] = "";
    ck_assert_msg(dataset_open_train(&cfg->data, &cfg->model, cfg->train.seed, NULL, &ds, err, sizeof err) ==
                      0,
                  "%s", err);
    ck_assert_int_eq(ds->size, SIZE);
    size_t bytes = dataset_image_bytes(ds);
    uint8_t *images = xcalloc(5 * bytes, 1);
    int32_t indices[5], labels[5];
    for (int start = 0; start < SIZE; start += 5) {
        int count = SIZE - start < 5 ? SIZE - start : 5;
        for (int k = 0; k < count; k++) indices[k] = SIZE - 1 - (start + k);  // backwards, for a change
        dataset_get_batch(ds, indices, count, epoch, images, labels);
        for (int k = 0; k < count; k++)
            digest[indices[k]] = sample_digest(images + k * bytes, bytes, labels[k]);
    }
    free(images);
    dataset_close(ds);
}

// ---- 1. disjoint shards, and the same image for an index on any rank count ------------------------------

static void check_epoch_shards(const char *source, const char *const *extra) {
    char base[64];
    make_fixtures(base, sizeof base);
    static Config cfg;
    make_config(&cfg, source, base, extra);
    Trainer t;
    trainer_start(&t, &cfg);
    ck_assert_int_eq(t.train_set->size, SIZE);
    size_t bytes = dataset_image_bytes(t.train_set);
    uint8_t *images = xcalloc(2 * bytes, 1);
    int32_t indices[2], labels[2];
    uint64_t mine[SIZE], all[MAX_RANKS][SIZE], want[SIZE], epoch0[SIZE];
    ck_assert_int_le(comm->size, MAX_RANKS);
    for (int epoch = 0; epoch < 2; epoch++) {
        memset(mine, 0, sizeof mine);  // 0: this rank did not read the sample
        for (int step = 0; step < t.steps_per_epoch; step++) {
            int count = sampler_block(&t.sampler, epoch, step, 0, indices);
            dataset_get_batch(t.train_set, indices, count, epoch, images, labels);
            for (int k = 0; k < count; k++) {
                ck_assert_msg(mine[indices[k]] == 0, "rank %d read sample %d twice", comm->rank, indices[k]);
                mine[indices[k]] = sample_digest(images + k * bytes, bytes, labels[k]);
            }
        }
        tu_gather_bytes(comm, mine, sizeof mine, all);
        one_reader_digests(&cfg, epoch, want);
        int readers_ok = 1, images_ok = 1;
        for (int i = 0; i < SIZE; i++) {
            int readers = 0;
            uint64_t got = 0;
            for (int r = 0; r < comm->size; r++)
                if (all[r][i]) readers++, got = all[r][i];
            readers_ok &= readers == 1;
            images_ok &= got == want[i];
            ck_assert_msg(readers_ok, "%s epoch %d: sample %d read by %d of %d ranks", source, epoch, i,
                          readers, comm->size);
            ck_assert_msg(images_ok, "%s epoch %d: sample %d differs from the single reader's", source, epoch,
                          i);
        }
        if (epoch == 0) memcpy(epoch0, want, sizeof want);
    }
    // Not vacuous: the augmentation is live (another epoch crops and flips the samples differently).
    int changed = 0;
    for (int i = 0; i < SIZE; i++) changed += epoch0[i] != want[i];
    ck_assert_msg(changed > SIZE / 2, "%s: only %d of %d samples changed between epochs", source, changed,
                  SIZE);
    free(images);
    trainer_free(&t);
}

START_TEST(imagefolder_epochs_are_disjoint_shards_of_the_same_images) {
    check_epoch_shards("imagefolder", NULL);
}
END_TEST

START_TEST(webdataset_epochs_are_disjoint_shards_of_the_same_images) {
    check_epoch_shards("webdataset", NULL);
}
END_TEST

START_TEST(trivial_augment_and_erasing_are_the_same_on_any_rank_count) {
    const char *const augment[] = {"data.auto_augment=ta_wide", "data.random_erase=0.5", NULL};
    check_epoch_shards("imagefolder", augment);
}
END_TEST

// ---- 2. resume mid-epoch onto the same batches ------------------------------------------------------------

// Masters, momentum and the scaler's state of this rank.
static uint64_t state_digest(Trainer *t) {
    size_t n = t->model.params.padded_numel;
    float *host = xcalloc(n, sizeof(float));
    be->to_host(be, host, t->model.master, n * sizeof(float));
    uint64_t h = tu_fnv1a(TU_FNV_OFFSET, host, n * sizeof(float));
    be->to_host(be, host, t->opt.momentum, n * sizeof(float));
    h = tu_fnv1a(h, host, n * sizeof(float));
    ScalerState s = scaler_read(&t->scaler, be);
    free(host);
    return tu_fnv1a(h, &s, sizeof s);
}

static int cache_files(const char *dir) {
    char cmd[256], out[64];
    snprintf(cmd, sizeof cmd, "ls %s/imagefolder-*-train.list 2>/dev/null | wc -l", dir);
    ck_assert_int_eq(tu_run_shell(cmd, out, sizeof out), 0);
    return atoi(out);
}

// K steps by trainer_run (its loader) with a checkpoint at the end, mid-epoch on any of 1-3 ranks (24
// samples, 2 per rank: 12, 6 or 4 steps an epoch); then from that file to N steps, against N steps
// straight. N crosses an epoch boundary on 2 and 3 ranks.
static void check_resume(const char *source) {
    enum { K = 3, N = 7 };
    char base[64], dir[128], dir_key[160], resume_key[192];
    make_fixtures(base, sizeof base);
    snprintf(dir, sizeof dir, "%s/ckpt_%s", base, source);
    snprintf(dir_key, sizeof dir_key, "checkpoint.dir=%s", dir);
    snprintf(resume_key, sizeof resume_key, "checkpoint.resume=%s/last.safetensors", dir);
    static Config first_cfg, resumed_cfg, straight_cfg;
    char steps_k[32], steps_n[32];
    snprintf(steps_k, sizeof steps_k, "train.steps=%d", K);
    snprintf(steps_n, sizeof steps_n, "train.steps=%d", N);
    int imagefolder = strcmp(source, "imagefolder") == 0;

    // The first run opens the data before its checkpoint.dir exists; it walks the folder and caches the
    // list once the folder is made.
    make_config(&first_cfg, source, base, (const char *const[]){steps_k, dir_key, NULL});
    Trainer first;
    trainer_start(&first, &first_cfg);
    ck_assert_int_eq(trainer_run(&first, NULL), 0);
    ck_assert_int_lt(first.step_in_epoch, first.steps_per_epoch);
    ck_assert_int_ne(first.step_in_epoch, 0);  // mid-epoch
    trainer_free(&first);
    comm->barrier(comm);  // rank 0 wrote the checkpoint
    ck_assert_msg(tu_on_every_rank(comm, !imagefolder || cache_files(dir) == 1),
                  "the first run cached no list");

    // The resumed run and the straight run read that cache: their batches are compared with those of the
    // first run's walked list (the state the resumed run starts from).
    make_config(&resumed_cfg, source, base, (const char *const[]){steps_n, dir_key, resume_key, NULL});
    Trainer resumed;
    trainer_start(&resumed, &resumed_cfg);
    ck_assert_int_eq(resumed.step, K);
    make_config(&straight_cfg, source, base, (const char *const[]){steps_n, dir_key, NULL});
    Trainer straight;
    trainer_start(&straight, &straight_cfg);
    ck_assert_int_eq(straight.train_set->size, SIZE);
    uint64_t resumed_at = state_digest(&resumed);
    for (int s = 0; s < K; s++) tu_train_step(&straight);
    ck_assert_int_eq(straight.epoch, resumed.epoch);
    ck_assert_int_eq(straight.step_in_epoch, resumed.step_in_epoch);
    ck_assert_msg(tu_on_every_rank(comm, state_digest(&straight) == resumed_at),
                  "%s: the state loaded from the checkpoint differs from %d straight steps", source, K);
    uint64_t previous = 0;
    for (int s = K; s < N; s++) {
        uint64_t want = tu_train_step(&straight), got = tu_train_step(&resumed);
        ck_assert_msg(tu_on_every_rank(comm, got == want),
                      "%s: step %d of the resumed run trained on another batch", source, s);
        ck_assert_msg(want != previous, "%s: steps %d and %d trained on the same batch", source, s - 1, s);
        previous = want;
    }
    uint64_t end = state_digest(&resumed);
    ck_assert_msg(tu_on_every_rank(comm, end == state_digest(&straight)),
                  "%s: the resumed run ends with other weights", source);
    ck_assert_msg(tu_on_every_rank(comm, end != resumed_at), "%s: the resumed steps did not train", source);
    trainer_free(&resumed), trainer_free(&straight);
}

// ---- 2b. the backend's decoder over ranks -----------------------------------------------------------------

// data.decode=device (the CPU backend's reference decoder on each rank's decode thread, fed its loader's jobs)
// trains bitwise as data.decode=host over 1-3 ranks, across an epoch boundary on 2 and 3 ranks.
static void check_device_decode(const char *source) {
    char base[64];
    make_fixtures(base, sizeof base);
    static Config host_cfg, device_cfg;
    make_config(&host_cfg, source, base, (const char *const[]){"train.steps=7", "data.decode=host", NULL});
    make_config(&device_cfg, source, base,
                (const char *const[]){"train.steps=7", "data.decode=device", "data.prefetch=2",
                                      "data.workers=2", NULL});
    Trainer host, device;
    trainer_start(&host, &host_cfg);
    ck_assert_int_eq(trainer_run(&host, NULL), 0);
    trainer_start(&device, &device_cfg);
    ck_assert(device.input.device_decode && !host.input.device_decode);
    ck_assert_int_eq(trainer_run(&device, NULL), 0);
    ck_assert_int_eq(device.step, 7);
    ck_assert_msg(tu_on_every_rank(comm, state_digest(&device) == state_digest(&host)),
                  "%s: data.decode=device trained to other weights than data.decode=host", source);
    trainer_free(&host), trainer_free(&device);
}

START_TEST(imagefolder_device_decode_trains_as_host_decode) { check_device_decode("imagefolder"); }
END_TEST

START_TEST(webdataset_device_decode_trains_as_host_decode) { check_device_decode("webdataset"); }
END_TEST

START_TEST(imagefolder_resume_mid_epoch_trains_on_the_same_batches) { check_resume("imagefolder"); }
END_TEST

START_TEST(webdataset_resume_mid_epoch_trains_on_the_same_batches) { check_resume("webdataset"); }
END_TEST

// ---- 3. a bad file named by the rank that read it ----------------------------------------------------------

// <base>/badfolder/train/class0: good.jpg and broken.jpg (text, not a JPEG). Rank 0 writes it; all wait.
static void make_bad_folder(const char *base, char *root, size_t cap) {
    snprintf(root, cap, "%s/badfolder", base);
    if (comm->rank == 0) {
        char cmd[512], out[256], path[512];
        snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s/train/class0", root, root);
        ck_assert_int_eq(tu_run_shell(cmd, out, sizeof out), 0);
        snprintf(path, sizeof path, "%s/train/class0/good.jpg", root);
        fx_write_solid(path, 40, 40, 200, 100, 50);
        snprintf(path, sizeof path, "%s/train/class0/broken.jpg", root);
        fx_write(path, "not a jpeg\n", 11);
    }
    comm->barrier(comm);
}

// What this process writes to stderr while it reads samples `indices` in epochs 0 and 1 (two meetings of
// each), into text[cap].
static void read_capturing_stderr(const Dataset *ds, const int32_t *indices, int count, char *text,
                                  size_t cap) {
    char path[64];
    snprintf(path, sizeof path, "stderr_rank%d_of_%d.txt", comm->rank, comm->size);
    fflush(stderr);
    int saved = dup(STDERR_FILENO), file = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    ck_assert(saved >= 0 && file >= 0);
    ck_assert_int_ge(dup2(file, STDERR_FILENO), 0);
    uint8_t *images = xcalloc((size_t)count, dataset_image_bytes(ds));
    int32_t labels[4];
    for (int epoch = 0; epoch < 2; epoch++) dataset_get_batch(ds, indices, count, epoch, images, labels);
    free(images);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    ssize_t n = pread(file, text, cap - 1, 0);
    close(file);
    text[n > 0 ? n : 0] = '\0';
}

START_TEST(bad_file_is_named_by_the_rank_that_read_it) {
    char base[64], root[128], path_key[160];
    make_fixtures(base, sizeof base);
    make_bad_folder(base, root, sizeof root);
    snprintf(path_key, sizeof path_key, "data.path=%s", root);
    static Config cfg;
    make_config(&cfg, "imagefolder", base, (const char *const[]){path_key, NULL});
    Dataset *ds;
    char err[512] = "";
    ck_assert_msg(dataset_open_train(&cfg.data, &cfg.model, cfg.train.seed, NULL, &ds, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(ds->size, 2);
    const EncodedSource *src = image_dataset_source(ds);
    char name[512];
    src->describe(src, 0, name, sizeof name);
    int32_t broken = strstr(name, "broken.jpg") ? 0 : 1, good = 1 - broken;

    // The last rank reads the broken file (twice), every other rank the good one (rank 0 among them when
    // there are several: the rank-0-only warning would not name the file at all).
    int reader = comm->size - 1, reads_broken = comm->rank == reader;
    char text[4096];
    read_capturing_stderr(ds, reads_broken ? &broken : &good, 1, text, sizeof text);
    long skipped = image_dataset_skipped(ds);
    dataset_close(ds);

    const char *first = strstr(text, "broken.jpg");
    int named_once = first && !strstr(first + 1, "broken.jpg");
    char prefix[32] = "warning: imagefolder: ";
    if (comm->size > 1) snprintf(prefix, sizeof prefix, "[rank %d] warning: ", comm->rank);
    int prefixed = strstr(text, prefix) == text;
    int ok = reads_broken ? named_once && prefixed && skipped == 2 : text[0] == '\0' && skipped == 0;
    ck_assert_msg(tu_on_every_rank(comm, ok),
                  "rank %d of %d (the broken file's reader: %d): skipped %ld, stderr '%s'", comm->rank,
                  comm->size, reader, skipped, text);
}
END_TEST

static Suite *images_distributed_suite(void) {
    Suite *s = suite_create("images_distributed");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, imagefolder_epochs_are_disjoint_shards_of_the_same_images);
    tcase_add_test(tc, webdataset_epochs_are_disjoint_shards_of_the_same_images);
    tcase_add_test(tc, trivial_augment_and_erasing_are_the_same_on_any_rank_count);
    tcase_add_test(tc, imagefolder_resume_mid_epoch_trains_on_the_same_batches);
    tcase_add_test(tc, webdataset_resume_mid_epoch_trains_on_the_same_batches);
    tcase_add_test(tc, bad_file_is_named_by_the_rank_that_read_it);
    tcase_add_test(tc, imagefolder_device_decode_trains_as_host_decode);
    tcase_add_test(tc, webdataset_device_decode_trains_as_host_decode);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) {
    comm = comm_init(&argc, &argv, 120.0);
    be = cpu_backend_create();
    int rc = tu_run_suite(images_distributed_suite(), 0);
    be->destroy(be);
    comm->destroy(comm);
    comm_finalize();
    return rc;
}
