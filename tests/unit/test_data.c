// test_data.c - src/data: the sampler's order rule (with and without repeated augmentation), the generated
// and CIFAR-10 datasets (with TrivialAugmentWide and erasing), the loader.
//
// The CIFAR-10 tests write their own small files (a few records with bytes given by cifar_byte below)
// into folders under the test's scratch directory, so expected pixel values are computed here from the
// bytes and the published constants, independently of the reader.
#include <check.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "image/image_augment.h"
#include "tests/test_util.h"

// ---- sampler -------------------------------------------------------------------------------------

// Walks one epoch of every simulated rank in (step, micro, rank) order and checks the order rule:
// the concatenated blocks are exactly the epoch's permutation (so each sample once), step totals match
// the blocks and sum to size, and every rank computed the same permutation.
static void check_epoch(int size, int batch, int world, int accum, int epoch) {
    Sampler ranks[3];
    for (int r = 0; r < world; r++) sampler_init(&ranks[r], size, batch, world, r, accum, 0, 1234);
    int32_t *order = calloc((size_t)size, sizeof(int32_t));
    int32_t *other = calloc((size_t)size, sizeof(int32_t));
    int32_t *seen = calloc((size_t)size, sizeof(int32_t));
    int32_t *block = calloc((size_t)batch, sizeof(int32_t));
    sampler_epoch_order(&ranks[0], epoch, order);
    for (int r = 1; r < world; r++) {
        sampler_epoch_order(&ranks[r], epoch, other);
        ck_assert_mem_eq(order, other, (size_t)size * sizeof(int32_t));
    }
    int steps = sampler_steps_per_epoch(&ranks[0]);
    long global = (long)batch * world * accum;
    ck_assert_int_eq(steps, (int)((size + global - 1) / global));
    int at = 0;
    long total = 0;
    for (int s = 0; s < steps; s++) {
        int in_step = 0;
        for (int m = 0; m < accum; m++) {
            for (int r = 0; r < world; r++) {
                int n = sampler_block(&ranks[r], epoch, s, m, block);
                ck_assert(n >= 0 && n <= batch);
                for (int i = 0; i < n; i++) {
                    ck_assert_int_eq(block[i], order[at + i]);
                    ck_assert(block[i] >= 0 && block[i] < size);
                    seen[block[i]]++;
                }
                at += n;
                in_step += n;
            }
        }
        ck_assert_int_eq(sampler_step_total(&ranks[0], epoch, s), in_step);
        ck_assert_int_eq(sampler_step_total(&ranks[world - 1], epoch, s), in_step);
        if (s < steps - 1) ck_assert_int_eq(in_step, global);
        total += in_step;
    }
    ck_assert_int_eq(at, size);
    ck_assert_int_eq(total, size);
    for (int i = 0; i < size; i++) ck_assert_int_eq(seen[i], 1);
    for (int r = 0; r < world; r++) sampler_free(&ranks[r]);
    free(order);
    free(other);
    free(seen);
    free(block);
}

START_TEST(test_sampler_covers_each_sample_once) {
    const int batch = 4;
    for (int world = 1; world <= 3; world++) {
        for (int accum = 1; accum <= 2; accum++) {
            int global = batch * world * accum;
            int sizes[] = {5 * global, 5 * global + 3, global - 1, 1};
            for (int k = 0; k < 4; k++)
                for (int epoch = 0; epoch < 2; epoch++) check_epoch(sizes[k], batch, world, accum, epoch);
        }
    }
}
END_TEST

START_TEST(test_sampler_epochs_differ_and_repeat) {
    const int size = 100;
    Sampler a, b;
    sampler_init(&a, size, 4, 2, 0, 1, 0, 7);
    sampler_init(&b, size, 4, 2, 1, 1, 0, 7);
    int32_t e0[100], e1[100], again[100], is_identity = 1;
    sampler_epoch_order(&a, 0, e0);
    sampler_epoch_order(&a, 1, e1);
    sampler_epoch_order(&b, 0, again);
    ck_assert_mem_eq(e0, again, sizeof e0);
    ck_assert(memcmp(e0, e1, sizeof e0) != 0);
    for (int i = 0; i < size; i++) is_identity &= e0[i] == i;
    ck_assert(!is_identity);
    // Another seed, another order.
    Sampler c;
    sampler_init(&c, size, 4, 2, 0, 1, 0, 8);
    sampler_epoch_order(&c, 0, again);
    ck_assert(memcmp(e0, again, sizeof e0) != 0);
    // sampler_block after a different epoch recomputes its cached order.
    int32_t block0[4], block1[4], block0_again[4];
    sampler_block(&a, 0, 2, 0, block0);
    sampler_block(&a, 1, 2, 0, block1);
    sampler_block(&a, 0, 2, 0, block0_again);
    ck_assert_mem_eq(block0, block0_again, sizeof block0);
    ck_assert_mem_eq(block0, e0 + 2 * 8, sizeof block0);
    ck_assert_mem_eq(block1, e1 + 2 * 8, sizeof block1);
    sampler_free(&a);
    sampler_free(&b);
    sampler_free(&c);
}
END_TEST

// W=2 ranks x batch b reads, step by step, the same samples as W=1 x batch b x accum 2.
START_TEST(test_sampler_two_ranks_equal_accum_two) {
    const int size = 37, batch = 4;
    Sampler r0, r1, acc;
    sampler_init(&r0, size, batch, 2, 0, 1, 0, 99);
    sampler_init(&r1, size, batch, 2, 1, 1, 0, 99);
    sampler_init(&acc, size, batch, 1, 0, 2, 0, 99);
    ck_assert_int_eq(sampler_steps_per_epoch(&r0), sampler_steps_per_epoch(&acc));
    for (int epoch = 0; epoch < 3; epoch++) {
        for (int s = 0; s < sampler_steps_per_epoch(&acc); s++) {
            int32_t ranks[8], micros[8];
            int n = sampler_block(&r0, epoch, s, 0, ranks);
            n += sampler_block(&r1, epoch, s, 0, ranks + n);
            int m = sampler_block(&acc, epoch, s, 0, micros);
            m += sampler_block(&acc, epoch, s, 1, micros + m);
            ck_assert_int_eq(n, m);
            ck_assert_mem_eq(ranks, micros, (size_t)n * sizeof(int32_t));
            ck_assert_int_eq(sampler_step_total(&r0, epoch, s), sampler_step_total(&acc, epoch, s));
        }
    }
    sampler_free(&r0);
    sampler_free(&r1);
    sampler_free(&acc);
}
END_TEST

START_TEST(test_sampler_resume_position) {
    const int size = 100;
    Sampler w2, w4, w3;
    sampler_init(&w2, size, 4, 2, 0, 1, 0, 5);  // global batch 8
    sampler_init(&w4, size, 4, 4, 0, 1, 0, 5);  // global batch 16
    sampler_init(&w3, size, 4, 3, 0, 1, 0, 5);  // global batch 12
    int epoch, step;
    ck_assert_int_eq(sampler_samples_before(&w2, 4), 32);
    ck_assert_int_eq(sampler_samples_before(&w2, 13), 100);
    // Same rank count: always exact.
    ck_assert_int_eq(sampler_resume(&w2, 3, sampler_samples_before(&w2, 5), &epoch, &step), 1);
    ck_assert_int_eq(epoch, 3);
    ck_assert_int_eq(step, 5);
    // 4 steps of 8 = 2 steps of 16: exact, and the next samples are the same ones.
    ck_assert_int_eq(sampler_resume(&w4, 3, 32, &epoch, &step), 1);
    ck_assert_int_eq(epoch, 3);
    ck_assert_int_eq(step, 2);
    int32_t from_w2[4], from_w4[4];
    sampler_block(&w2, 3, 4, 0, from_w2);
    sampler_block(&w4, 3, 2, 0, from_w4);
    ck_assert_mem_eq(from_w2, from_w4, sizeof from_w2);
    // 40 is not a multiple of 12: the next epoch.
    ck_assert_int_eq(sampler_resume(&w3, 3, 40, &epoch, &step), 0);
    ck_assert_int_eq(epoch, 4);
    ck_assert_int_eq(step, 0);
    // A finished epoch continues with the next one, exactly.
    ck_assert_int_eq(sampler_resume(&w3, 3, 100, &epoch, &step), 1);
    ck_assert_int_eq(epoch, 4);
    ck_assert_int_eq(step, 0);
    sampler_free(&w2);
    sampler_free(&w4);
    sampler_free(&w3);
}
END_TEST

// drop_last: floor(size / G) full steps reading the first steps*G samples of the epoch's order; resuming
// after the last full step starts the next epoch; an epoch shorter than G has no step at all.
START_TEST(test_sampler_drop_last_takes_only_full_steps) {
    Sampler ranks[2];
    for (int r = 0; r < 2; r++) sampler_init(&ranks[r], 23, 4, 2, r, 1, 1, 9);  // G = 8: 2 steps, 7 skipped
    ck_assert_int_eq(sampler_steps_per_epoch(&ranks[0]), 2);
    int32_t order[23], block[4];
    sampler_epoch_order(&ranks[0], 3, order);
    for (int step = 0; step < 2; step++) {
        ck_assert_int_eq(sampler_step_total(&ranks[0], 3, step), 8);
        for (int r = 0; r < 2; r++) {
            ck_assert_int_eq(sampler_block(&ranks[r], 3, step, 0, block), 4);
            ck_assert_mem_eq(block, order + (step * 2 + r) * 4, sizeof block);
        }
    }
    int epoch, step;
    ck_assert_int_eq(sampler_resume(&ranks[0], 3, 16, &epoch, &step), 1);
    ck_assert_int_eq(epoch, 4);
    ck_assert_int_eq(step, 0);
    ck_assert_int_eq(sampler_resume(&ranks[0], 3, 8, &epoch, &step), 1);
    ck_assert_int_eq(epoch, 3);
    ck_assert_int_eq(step, 1);
    // the same split keeping the partial step: a third step with 4 + 3 samples
    Sampler keep;
    sampler_init(&keep, 23, 4, 2, 0, 1, 0, 9);
    ck_assert_int_eq(sampler_steps_per_epoch(&keep), 3);
    ck_assert_int_eq(sampler_block_count(&keep, 2, 0, 0), 4);
    ck_assert_int_eq(sampler_block_count(&keep, 2, 0, 1), 3);
    Sampler short_epoch;
    sampler_init(&short_epoch, 5, 4, 2, 0, 1, 1, 9);
    ck_assert_int_eq(sampler_steps_per_epoch(&short_epoch), 0);
    for (int r = 0; r < 2; r++) sampler_free(&ranks[r]);
    sampler_free(&keep);
    sampler_free(&short_epoch);
}
END_TEST

START_TEST(test_sampler_validation_shards) {
    for (int world = 1; world <= 3; world++) {
        for (int size = 1; size <= 11; size++) {
            int seen[11] = {0}, total = 0;
            for (int r = 0; r < world; r++) {
                int n = sampler_val_count(size, world, r), got = 0;
                int32_t idx[3];
                for (int j = 0; got < n; j++) {
                    int c = sampler_val_block(size, world, r, 3, j, idx);
                    ck_assert(c > 0);
                    for (int i = 0; i < c; i++) {
                        ck_assert_int_eq(idx[i], r + (got + i) * world);
                        seen[idx[i]]++;
                    }
                    got += c;
                }
                ck_assert_int_eq(got, n);
                total += n;
            }
            ck_assert_int_eq(total, size);
            for (int i = 0; i < size; i++) ck_assert_int_eq(seen[i], 1);
        }
    }
}
END_TEST

// ---- repeated augmentation ------------------------------------------------------------------------

// One epoch of every simulated rank, entries in (step, micro, rank) order: indices and repetitions; returns
// how many.
static int read_repeated_epoch(int size, int batch, int world, int accum, int repeats, int epoch,
                               int32_t *idx, uint8_t *rep) {
    Sampler ranks[3];
    for (int r = 0; r < world; r++) {
        sampler_init(&ranks[r], size, batch, world, r, accum, 0, 77);
        sampler_set_repeats(&ranks[r], repeats);
    }
    int at = 0, steps = sampler_steps_per_epoch(&ranks[0]);
    long global = (long)batch * world * accum;
    ck_assert_int_eq(steps, (int)((size / 256 * 256 + global - 1) / global));
    for (int s = 0; s < steps; s++) {
        int in_step = 0;
        for (int m = 0; m < accum; m++)
            for (int r = 0; r < world; r++) {
                int n = sampler_block(&ranks[r], epoch, s, m, idx + at);
                ck_assert_int_eq(sampler_block_repetitions(&ranks[r], s, m, rep + at), n);
                at += n, in_step += n;
            }
        ck_assert_int_eq(sampler_step_total(&ranks[0], epoch, s), in_step);
    }
    for (int r = 0; r < world; r++) sampler_free(&ranks[r]);
    return at;
}

// torchvision's RASampler reads floor(size / 256) * 256 entries an epoch over all ranks, each sample up to R
// times, its repetitions on different ranks. Here: the same entries, in the same global order, for 1, 2 and
// 3 ranks with or without accumulation (so the union over ranks is one multiset); each (sample, repetition)
// once; R consecutive blocks of b the same b samples of the epoch's permutation in order, block j
// repetition j; with as many ranks as repetitions, each rank its own repetition of the same samples.
START_TEST(test_sampler_repeats_like_rasampler) {
    const int sizes[] = {256, 700, 1000};
    for (size_t k = 0; k < 3; k++)
        for (int repeats = 2; repeats <= 4; repeats++)
            for (int batch = 4; batch <= 5; batch++) {
                int size = sizes[k], epoch_size = size / 256 * 256, epoch = (int)k + repeats;
                int32_t *idx0 = calloc((size_t)epoch_size, sizeof(int32_t)),
                        *idx = calloc((size_t)epoch_size, sizeof(int32_t));
                uint8_t *rep0 = calloc((size_t)epoch_size, 1), *rep = calloc((size_t)epoch_size, 1);
                ck_assert_int_eq(read_repeated_epoch(size, batch, 1, 1, repeats, epoch, idx0, rep0),
                                 epoch_size);
                for (int world = 1; world <= 3; world++)
                    for (int accum = 1; accum <= 2; accum++) {
                        ck_assert_int_eq(
                            read_repeated_epoch(size, batch, world, accum, repeats, epoch, idx, rep),
                            epoch_size);
                        ck_assert_mem_eq(idx, idx0, (size_t)epoch_size * sizeof(int32_t));
                        ck_assert_mem_eq(rep, rep0, (size_t)epoch_size);
                    }
                int *seen = calloc((size_t)size * repeats, sizeof(int));
                for (int p = 0; p < epoch_size; p++) {
                    ck_assert(idx0[p] >= 0 && idx0[p] < size && rep0[p] < repeats);
                    ck_assert_int_eq(seen[idx0[p] * repeats + rep0[p]]++, 0);
                }
                Sampler s;
                sampler_init(&s, size, batch, 1, 0, 1, 0, 77);
                int32_t *order = calloc((size_t)size, sizeof(int32_t));
                sampler_epoch_order(&s, epoch, order);
                for (int p = 0; p < epoch_size; p++) {
                    int chunk = p / (repeats * batch), j = p % (repeats * batch) / batch, t = p % batch;
                    ck_assert_int_eq(rep0[p], j);
                    ck_assert_int_eq(idx0[p], order[chunk * batch + t]);
                }
                sampler_free(&s);
                free(order), free(seen), free(idx0), free(idx), free(rep0), free(rep);
            }
    // world = R: in every micro-step the ranks read the same samples, rank r repetition r (768 samples: every
    // step full)
    for (int repeats = 2; repeats <= 3; repeats++) {
        Sampler ranks[3];
        int32_t blocks[3][4];
        uint8_t reps[3][4];
        for (int r = 0; r < repeats; r++) {
            sampler_init(&ranks[r], 768, 4, repeats, r, 1, 0, 5);
            sampler_set_repeats(&ranks[r], repeats);
        }
        for (int step = 0; step < sampler_steps_per_epoch(&ranks[0]); step++)
            for (int r = 0; r < repeats; r++) {
                int n = sampler_block(&ranks[r], 1, step, 0, blocks[r]);
                sampler_block_repetitions(&ranks[r], step, 0, reps[r]);
                ck_assert_int_eq(n, 4);
                ck_assert_mem_eq(blocks[r], blocks[0], sizeof blocks[0]);
                for (int i = 0; i < n; i++) ck_assert_int_eq(reps[r][i], r);
            }
        for (int r = 0; r < repeats; r++) sampler_free(&ranks[r]);
    }
    // Without repeats: every repetition 0, the epoch the whole dataset; fewer than 256 samples: no epoch
    Sampler s;
    sampler_init(&s, 300, 4, 1, 0, 1, 0, 5);
    uint8_t reps[4];
    ck_assert_int_eq(sampler_steps_per_epoch(&s), 75);
    ck_assert_int_eq(sampler_block_repetitions(&s, 3, 0, reps), 4);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(reps[i], 0);
    sampler_set_repeats(&s, 3);
    ck_assert_int_eq(sampler_steps_per_epoch(&s), 64);
    sampler_free(&s);
    sampler_init(&s, 255, 4, 1, 0, 1, 0, 5);
    sampler_set_repeats(&s, 2);
    ck_assert_int_eq(sampler_steps_per_epoch(&s), 0);
    sampler_free(&s);
}
END_TEST

// ---- generated datasets --------------------------------------------------------------------------

// Sample i as the network sees it: the dataset's bytes, normalised with its norm (what the device's
// input_normalize computes), so the value tests below read normalised floats.
static void normalise(const Dataset *ds, const uint8_t *raw, size_t n, float *x) {
    for (size_t k = 0; k < n; k++)
        x[k] = ((float)raw[k] / 255.0f - ds->norm.mean[k % 3]) / ds->norm.std[k % 3];
}

static void get_normalised(const Dataset *ds, int index, float *x, int32_t *label, Rng *rng) {
    size_t n = dataset_image_bytes(ds);
    uint8_t *raw = malloc(n);
    dataset_get(ds, index, raw, label, rng);
    normalise(ds, raw, n, x);
    free(raw);
}

static void get_batch_normalised(const Dataset *ds, const int32_t *indices, int count, int epoch, float *x,
                                 int32_t *labels) {
    size_t n = (size_t)count * dataset_image_bytes(ds);
    uint8_t *raw = malloc(n);
    dataset_get_batch(ds, indices, count, epoch, raw, labels);
    normalise(ds, raw, n, x);
    free(raw);
}

START_TEST(test_synthetic_is_a_function_of_seed_and_index) {
    const int side = 8, n = side * side * 3;
    Dataset *a = dataset_synthetic_create(50, side, 10, 3, 0);
    Dataset *b = dataset_synthetic_create(50, side, 10, 3, 0);
    Dataset *val = dataset_synthetic_create(50, side, 10, 3, 1);
    float x[192], y[192];
    int32_t lx, ly;
    double sum = 0, sum2 = 0;
    int differs_from_val = 0;
    for (int i = 0; i < 50; i++) {
        get_normalised(a, i, x, &lx, NULL);
        get_normalised(b, i, y, &ly, NULL);
        ck_assert_mem_eq(x, y, sizeof x);
        ck_assert_int_eq(lx, ly);
        ck_assert(lx >= 0 && lx < 10);
        get_normalised(val, i, y, &ly, NULL);
        differs_from_val += memcmp(x, y, sizeof x) != 0;
        for (int k = 0; k < n; k++) {
            sum += x[k];
            sum2 += (double)x[k] * x[k];
        }
    }
    ck_assert_int_ge(differs_from_val, 49);
    double mean = sum / (50.0 * n), var = sum2 / (50.0 * n) - mean * mean;
    ck_assert_double_lt(fabs(mean), 0.05);
    ck_assert_double_lt(fabs(var - 1.0), 0.1);
    dataset_close(a);
    dataset_close(b);
    dataset_close(val);
}
END_TEST

enum { L_SIDE = 8, L_FLOATS = L_SIDE * L_SIDE * 3, L_CLASSES = 10 };

START_TEST(test_learnable_same_index_same_image) {
    Dataset *a = dataset_learnable_create(100, L_SIDE, L_CLASSES, 11, 0);
    Dataset *b = dataset_learnable_create(100, L_SIDE, L_CLASSES, 11, 0);
    float x[L_FLOATS], y[L_FLOATS];
    int32_t lx, ly;
    for (int i = 0; i < 100; i += 7) {
        get_normalised(a, i, x, &lx, NULL);
        get_normalised(b, i, y, &ly, NULL);
        ck_assert_mem_eq(x, y, sizeof x);
        ck_assert_int_eq(lx, ly);
    }
    dataset_close(a);
    dataset_close(b);
}
END_TEST

// Class means from 4000 training samples, then nearest-mean classification of 200 validation samples.
// The noise (5x the templates' std) is strong on purpose, so the demo's loss falls visibly over epochs
// instead of in the first steps; averaging ~400 samples per class brings it down to 0.25.
START_TEST(test_learnable_is_learnable) {
    Dataset *train = dataset_learnable_create(4000, L_SIDE, L_CLASSES, 11, 0);
    Dataset *val = dataset_learnable_create(200, L_SIDE, L_CLASSES, 11, 1);
    static double means[L_CLASSES][L_FLOATS];
    int per_class[L_CLASSES] = {0};
    float x[L_FLOATS];
    int32_t label;
    for (int i = 0; i < 4000; i++) {
        get_normalised(train, i, x, &label, NULL);
        ck_assert(label >= 0 && label < L_CLASSES);
        per_class[label]++;
        for (int k = 0; k < L_FLOATS; k++) means[label][k] += x[k];
    }
    for (int c = 0; c < L_CLASSES; c++) {
        ck_assert_int_ge(per_class[c], 5);  // labels are spread over the classes
        for (int k = 0; k < L_FLOATS; k++) means[c][k] /= per_class[c];
    }
    // Different classes' templates differ by far more than the noise left in a class mean.
    for (int c = 0; c < L_CLASSES; c++) {
        for (int d = c + 1; d < L_CLASSES; d++) {
            double dist2 = 0;
            for (int k = 0; k < L_FLOATS; k++)
                dist2 += (means[c][k] - means[d][k]) * (means[c][k] - means[d][k]);
            ck_assert_double_gt(sqrt(dist2 / L_FLOATS), 0.3);
        }
    }
    int correct = 0;
    for (int i = 0; i < 200; i++) {
        get_normalised(val, i, x, &label, NULL);
        int best = -1;
        double best_d = INFINITY;
        for (int c = 0; c < L_CLASSES; c++) {
            double d = 0;
            for (int k = 0; k < L_FLOATS; k++) d += (x[k] - means[c][k]) * (x[k] - means[c][k]);
            if (d < best_d) best_d = d, best = c;
        }
        correct += best == label;
    }
    ck_assert_int_gt(correct, 150);  // 75%; chance is 10%
    dataset_close(train);
    dataset_close(val);
}
END_TEST

START_TEST(test_factory_generated_splits) {
    DataConfig data;
    ModelConfig model;
    memset(&data, 0, sizeof data);
    memset(&model, 0, sizeof model);
    strcpy(data.source, "learnable");
    data.train_size = 64;
    data.val_size = 0;
    model.image_size = 8;
    model.num_classes = 5;
    char err[512] = "";
    Dataset *ds = NULL;
    ck_assert_int_eq(dataset_open_train(&data, &model, 1, NULL, &ds, err, sizeof err), 0);
    ck_assert_ptr_nonnull(ds);
    ck_assert_int_eq(ds->size, 64);
    ck_assert_int_eq(ds->side, 8);
    ck_assert_int_eq(ds->classes, 5);
    dataset_close(ds);
    ck_assert_int_eq(dataset_open_val(&data, &model, 1, NULL, &ds, err, sizeof err), 0);
    ck_assert_ptr_null(ds);
    data.val_size = 16;
    strcpy(data.source, "synthetic");
    ck_assert_int_eq(dataset_open_val(&data, &model, 1, NULL, &ds, err, sizeof err), 0);
    ck_assert_ptr_nonnull(ds);
    ck_assert_int_eq(ds->size, 16);
    dataset_close(ds);
    strcpy(data.source, "imagenet");
    ck_assert_int_eq(dataset_open_train(&data, &model, 1, NULL, &ds, err, sizeof err), 2);
    ck_assert_ptr_null(ds);
    ck_assert_ptr_nonnull(strstr(err, "imagenet"));
}
END_TEST

// ---- CIFAR-10 --------------------------------------------------------------------------------------

enum { C_TRAIN_PER_FILE = 3, C_TEST_RECORDS = 2, C_RECORD = 3073 };

// Byte of channel ch at pixel p (= y*32 + x) of record `rec` (records numbered across the five training
// files, then the test file from 100); label of record `rec`.
static uint8_t cifar_byte(int rec, int ch, int p) { return (uint8_t)(rec * 31 + ch * 85 + p * 7 + p / 32); }
static int cifar_label(int rec) { return (rec * 3 + 1) % 10; }

static void cifar_write(const char *dir, const char *name, int first_rec, int records, long truncate_to) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);  // a FIFO a former run left there would block fopen until a reader came
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint8_t rec[C_RECORD];
    for (int r = 0; r < records; r++) {
        rec[0] = (uint8_t)cifar_label(first_rec + r);
        for (int ch = 0; ch < 3; ch++)
            for (int p = 0; p < 1024; p++) rec[1 + ch * 1024 + p] = cifar_byte(first_rec + r, ch, p);
        ck_assert_int_eq(fwrite(rec, 1, sizeof rec, f), sizeof rec);
    }
    ck_assert_int_eq(fclose(f), 0);
    if (truncate_to >= 0) ck_assert_int_eq(truncate(path, truncate_to), 0);
}

static void cifar_fixture(const char *dir) {
    mkdir(dir, 0755);
    char name[32];
    for (int f = 0; f < 5; f++) {
        snprintf(name, sizeof name, "data_batch_%d.bin", f + 1);
        cifar_write(dir, name, f * C_TRAIN_PER_FILE, C_TRAIN_PER_FILE, -1);
    }
    cifar_write(dir, "test_batch.bin", 100, C_TEST_RECORDS, -1);
}

static double cifar_expected(int rec, int ch, int y, int x) {
    static const double mean[3] = {0.4914, 0.4822, 0.4465}, std[3] = {0.2470, 0.2435, 0.2616};
    double raw = (y < 0 || y >= 32 || x < 0 || x >= 32) ? 0.0 : cifar_byte(rec, ch, y * 32 + x) / 255.0;
    return (raw - mean[ch]) / std[ch];
}

START_TEST(test_cifar10_values_labels_nhwc) {
    cifar_fixture("cifar_ok");
    char err[512] = "";
    Dataset *train = NULL, *val = NULL;
    ck_assert_int_eq(dataset_cifar10_open("cifar_ok", 1, 0, 1, &train, err, sizeof err), 0);
    ck_assert_int_eq(dataset_cifar10_open("cifar_ok", 0, 0, 1, &val, err, sizeof err), 0);
    ck_assert_int_eq(train->size, 5 * C_TRAIN_PER_FILE);
    ck_assert_int_eq(val->size, C_TEST_RECORDS);
    ck_assert_int_eq(train->side, 32);
    ck_assert_int_eq(train->classes, 10);
    static float img[32 * 32 * 3];
    int32_t label;
    for (int i = 0; i < train->size; i++) {
        get_normalised(train, i, img, &label, NULL);
        ck_assert_int_eq(label, cifar_label(i));
    }
    // Record 4 = data_batch_2.bin record 1: every value, (y, x, ch) with ch fastest.
    get_normalised(train, 4, img, &label, NULL);
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++)
            for (int ch = 0; ch < 3; ch++)
                ck_assert_double_eq_tol(img[(y * 32 + x) * 3 + ch], cifar_expected(4, ch, y, x), 1e-5);
    // One value by hand: byte (4*31 + 85*1 + 7*33 + 1) & 255 = 185 at (y 1, x 1, G).
    ck_assert_double_eq_tol(img[(32 + 1) * 3 + 1], (185 / 255.0 - 0.4822) / 0.2435, 1e-5);
    get_normalised(val, 1, img, &label, NULL);
    ck_assert_int_eq(label, cifar_label(101));
    ck_assert_double_eq_tol(img[(5 * 32 + 7) * 3 + 2], cifar_expected(101, 2, 5, 7), 1e-5);
    dataset_close(train);
    dataset_close(val);
}
END_TEST

// The augmented image must be exactly one of the 9x9 crops of the zero-padded image, flipped or not.
static int cifar_match_crop(const float *img, int rec, int *flip_out) {
    int matches = 0;
    for (int dy = 0; dy <= 8; dy++)
        for (int dx = 0; dx <= 8; dx++)
            for (int flip = 0; flip < 2; flip++) {
                int ok = 1;
                for (int y = 0; y < 32 && ok; y++)
                    for (int x = 0; x < 32 && ok; x++)
                        for (int ch = 0; ch < 3 && ok; ch++) {
                            int sx = (flip ? 31 - x : x) + dx - 4;
                            ok = fabs(img[(y * 32 + x) * 3 + ch] - cifar_expected(rec, ch, y + dy - 4, sx)) <
                                 1e-5;
                        }
                if (ok) {
                    matches++;
                    *flip_out = flip;
                }
            }
    return matches;
}

START_TEST(test_cifar10_augmentation_reproducible) {
    cifar_fixture("cifar_aug");
    char err[512] = "";
    Dataset *ds = NULL;
    ck_assert_int_eq(dataset_cifar10_open("cifar_aug", 1, 1, 42, &ds, err, sizeof err), 0);
    ck_assert_int_eq(ds->augment, 1);
    static float a[2][32 * 32 * 3], b[2][32 * 32 * 3], first[32 * 32 * 3];
    int32_t la[2], lb[2];
    int flips[2] = {0, 0}, distinct = 0;
    for (int epoch = 0; epoch < 24; epoch++) {
        // Same (seed, epoch, index), different batch position: same bits.
        int32_t ab[2] = {4, 7}, ba[2] = {7, 4};
        get_batch_normalised(ds, ab, 2, epoch, a[0], la);
        get_batch_normalised(ds, ba, 2, epoch, b[0], lb);
        ck_assert_mem_eq(a[0], b[1], sizeof a[0]);
        ck_assert_mem_eq(a[1], b[0], sizeof a[1]);
        ck_assert_int_eq(la[0], cifar_label(4));
        int flip = -1;
        ck_assert_int_ge(cifar_match_crop(a[0], 4, &flip), 1);
        flips[flip]++;
        if (epoch == 0)
            memcpy(first, a[0], sizeof first);
        else
            distinct += memcmp(first, a[0], sizeof first) != 0;
    }
    ck_assert_int_gt(flips[0], 0);
    ck_assert_int_gt(flips[1], 0);
    ck_assert_int_ge(distinct, 20);
    // A reopened dataset with the same seed augments identically; validation never augments.
    Dataset *again = NULL, *val = NULL;
    ck_assert_int_eq(dataset_cifar10_open("cifar_aug", 1, 1, 42, &again, err, sizeof err), 0);
    int32_t idx = 4;
    get_batch_normalised(again, &idx, 1, 23, b[0], lb);
    ck_assert_mem_eq(a[0], b[0], sizeof a[0]);
    ck_assert_int_eq(dataset_cifar10_open("cifar_aug", 0, 1, 42, &val, err, sizeof err), 0);
    ck_assert_int_eq(val->augment, 0);
    dataset_close(ds);
    dataset_close(again);
    dataset_close(val);
}
END_TEST

// TrivialAugmentWide and RandomErasing after CIFAR-10's crop and flip, from the same stream: the bytes of
// the source's own augmentation followed by the drawn op and box; the same bits for the same (epoch,
// index, repetition) at any batch position, other bits for other repetitions. The factory sets them from
// the config, erasing with CIFAR-10's mean bytes (0.4914, 0.4822, 0.4465 x 255 -> 125, 123, 114).
START_TEST(test_cifar10_trivial_augment_and_erasing) {
    cifar_fixture("cifar_ta");
    Config cfg;
    const char *ov[] = {"data.source=cifar10",
                        "data.path=cifar_ta",
                        "data.auto_augment=ta_wide",
                        "data.auto_augment_interpolation=bilinear",
                        "data.random_erase=0.5",
                        "train.seed=42",
                        NULL};
    tu_config(&cfg, ov);
    char err[512] = "";
    Dataset *ds = NULL, *plain = NULL, *val = NULL;
    ck_assert_int_eq(dataset_open_train(&cfg.data, &cfg.model, cfg.train.seed, NULL, &ds, err, sizeof err),
                     0);
    ck_assert_int_eq(dataset_open_val(&cfg.data, &cfg.model, cfg.train.seed, NULL, &val, err, sizeof err), 0);
    ck_assert(ds->extra.ta_wide && ds->extra.filter == AUGMENT_BILINEAR && ds->extra.erase_p == 0.5);
    ck_assert(ds->extra.erase_fill[0] == 125 && ds->extra.erase_fill[1] == 123 &&
              ds->extra.erase_fill[2] == 114);
    ck_assert(!val->extra.ta_wide && val->extra.erase_p == 0);
    ck_assert_int_eq(dataset_cifar10_open("cifar_ta", 1, 1, 42, &plain, err, sizeof err), 0);
    enum { BYTES = 32 * 32 * 3 };
    static uint8_t got[4][BYTES], want[BYTES], swapped[2][BYTES];
    int32_t labels[4], idx[4] = {4, 4, 4, 4};
    uint8_t reps[4] = {0, 1, 2, 3};
    int erased = 0, changed = 0;
    for (int epoch = 0; epoch < 6; epoch++) {
        dataset_get_repeated_batch(ds, idx, reps, 4, epoch, got[0], labels);
        for (int r = 0; r < 4; r++) {
            Rng rng;
            data_rng_sample(&rng, 42, epoch, r, 4);
            int32_t label;
            dataset_get(plain, 4, want, &label, &rng);
            uint8_t before[BYTES];
            memcpy(before, want, BYTES);
            AugmentDraw d = image_ta_wide_draw(&rng);
            image_augment_op(want, 32, 32, d.op, image_ta_wide_magnitude(d), AUGMENT_BILINEAR);
            ImageRect box;
            if (image_random_erase_draw(32, 32, 0.5, &rng, &box)) {
                image_erase(want, 32, box, ds->extra.erase_fill);
                erased++;
            }
            changed += memcmp(before, want, BYTES) != 0;
            ck_assert_mem_eq(got[r], want, BYTES);
            ck_assert_int_eq(labels[r], cifar_label(4));
            for (int q = 0; q < r; q++) ck_assert(memcmp(got[q], got[r], BYTES) != 0);
        }
        int32_t pair[2] = {7, 4};
        uint8_t pair_reps[2] = {0, 2};
        dataset_get_repeated_batch(ds, pair, pair_reps, 2, epoch, swapped[0], labels);
        ck_assert_mem_eq(swapped[1], got[2], BYTES);
    }
    ck_assert_int_gt(erased, 0);
    ck_assert_int_gt(changed, 12);
    dataset_close(ds);
    dataset_close(plain);
    dataset_close(val);
}
END_TEST

START_TEST(test_cifar10_truncated_file_is_an_error) {
    cifar_fixture("cifar_trunc");
    cifar_write("cifar_trunc", "data_batch_3.bin", 6, C_TRAIN_PER_FILE, 2 * C_RECORD + 100);
    char err[512] = "";
    Dataset *ds = (Dataset *)1;
    ck_assert_int_eq(dataset_cifar10_open("cifar_trunc", 1, 0, 1, &ds, err, sizeof err), 2);
    ck_assert_ptr_null(ds);
    ck_assert_ptr_nonnull(strstr(err, "cifar_trunc/data_batch_3.bin"));
    ck_assert_ptr_nonnull(strstr(err, "6246 bytes"));
    ck_assert_ptr_nonnull(strstr(err, "3073"));
    // The other split does not read that file.
    ck_assert_int_eq(dataset_cifar10_open("cifar_trunc", 0, 0, 1, &ds, err, sizeof err), 0);
    dataset_close(ds);
}
END_TEST

// A FIFO in place of a data file: refused by its type, at once (opening it to read would wait for a
// writer for ever), the file named.
START_TEST(test_cifar10_fifo_is_refused_without_blocking) {
    cifar_fixture("cifar_fifo");
    ck_assert_int_eq(remove("cifar_fifo/data_batch_2.bin"), 0);
    ck_assert_int_eq(mkfifo("cifar_fifo/data_batch_2.bin", 0644), 0);
    char err[512] = "";
    Dataset *ds = (Dataset *)1;
    ck_assert_int_eq(dataset_cifar10_open("cifar_fifo", 1, 0, 1, &ds, err, sizeof err), 2);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(err, "cifar_fifo/data_batch_2.bin: not a regular file (a FIFO)"), "%s", err);
}
END_TEST

START_TEST(test_cifar10_missing_file_is_an_error) {
    cifar_fixture("cifar_missing");
    ck_assert_int_eq(remove("cifar_missing/data_batch_4.bin"), 0);
    ck_assert_int_eq(remove("cifar_missing/test_batch.bin"), 0);
    char err[512] = "";
    Dataset *ds = NULL;
    ck_assert_int_eq(dataset_cifar10_open("cifar_missing", 1, 0, 1, &ds, err, sizeof err), 2);
    ck_assert_ptr_null(ds);
    ck_assert_ptr_nonnull(strstr(err, "cifar_missing/data_batch_4.bin"));
    ck_assert_ptr_nonnull(strstr(err, "No such file"));
    // Through the factory, as main calls it.
    DataConfig data;
    ModelConfig model;
    memset(&data, 0, sizeof data);
    memset(&model, 0, sizeof model);
    strcpy(data.source, "cifar10");
    strcpy(data.path, "cifar_missing");
    model.image_size = 32;
    model.num_classes = 10;
    ck_assert_int_eq(dataset_open_val(&data, &model, 1, NULL, &ds, err, sizeof err), 2);
    ck_assert_ptr_nonnull(strstr(err, "cifar_missing/test_batch.bin"));
    model.image_size = 64;
    ck_assert_int_eq(dataset_open_train(&data, &model, 1, NULL, &ds, err, sizeof err), 2);
    ck_assert_ptr_nonnull(strstr(err, "model.image_size"));
}
END_TEST

// ---- loader ----------------------------------------------------------------------------------------

static int batches_equal(const Batch *a, const Batch *b, size_t bytes_per_batch, int batch) {
    return a->count == b->count && a->step_total == b->step_total && a->epoch == b->epoch &&
           a->step == b->step && a->micro == b->micro && memcmp(a->images, b->images, bytes_per_batch) == 0 &&
           memcmp(a->labels, b->labels, (size_t)batch * sizeof(int32_t)) == 0;
}

// prefetch 2 (two workers) and prefetch 3 (three workers, so workers finish out of order) against
// prefetch 0 over two epochs, and all against sampler + dataset called directly (with the sampler's
// repetitions).
static void check_prefetch_matches_sync(const Dataset *ds, const Sampler *s) {
    Loader *sync = loader_create(ds, s, LOADER_PIXELS, 0, 1, 0, 0, 2, NULL);
    Loader *ahead = loader_create(ds, s, LOADER_PIXELS, 2, 2, 0, 0, 2, NULL);
    Loader *wide = loader_create(ds, s, LOADER_PIXELS, 3, 3, 0, 0, 2, NULL);
    Sampler direct;
    sampler_init(&direct, s->size, s->batch, s->world, s->rank, s->accum, 0, (long)s->seed);
    sampler_set_repeats(&direct, s->repeats);
    uint8_t *reps = calloc((size_t)s->batch, 1);
    size_t bytes = (size_t)s->batch * dataset_image_bytes(ds);
    uint8_t *images = calloc(bytes, 1);
    int32_t *labels = calloc((size_t)s->batch, sizeof(int32_t)),
            *idx = calloc((size_t)s->batch, sizeof(int32_t));
    int n = 0, partial = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int step = 0; step < sampler_steps_per_epoch(s); step++) {
            for (int micro = 0; micro < s->accum; micro++, n++) {
                double waited = 0;
                const Batch *a = loader_next(sync, NULL), *b = loader_next(ahead, &waited);
                const Batch *c = loader_next(wide, &waited);
                ck_assert_ptr_nonnull(a);
                ck_assert_ptr_nonnull(b);
                ck_assert_ptr_nonnull(c);
                ck_assert(batches_equal(a, b, bytes, s->batch));
                ck_assert(batches_equal(a, c, bytes, s->batch));
                ck_assert(waited >= 0);
                ck_assert_int_eq(a->epoch, epoch);
                ck_assert_int_eq(a->step, step);
                ck_assert_int_eq(a->micro, micro);
                int count = sampler_block(&direct, epoch, step, micro, idx);
                ck_assert_int_eq(a->count, count);
                partial += count < s->batch;
                sampler_block_repetitions(&direct, step, micro, reps);
                dataset_get_repeated_batch(ds, idx, reps, count, epoch, images, labels);
                ck_assert_mem_eq(a->images, images, (size_t)count * dataset_image_bytes(ds));
                ck_assert_mem_eq(a->labels, labels, (size_t)count * sizeof(int32_t));
            }
        }
    }
    ck_assert_int_gt(partial, 0);  // the fixtures exercise a partial last step
    ck_assert_ptr_null(loader_next(sync, NULL));
    ck_assert_ptr_null(loader_next(ahead, NULL));
    ck_assert_ptr_null(loader_next(ahead, NULL));
    ck_assert_ptr_null(loader_next(wide, NULL));
    loader_destroy(sync);
    loader_destroy(ahead);
    loader_destroy(wide);
    sampler_free(&direct);
    free(images);
    free(labels);
    free(idx);
    free(reps);
}

START_TEST(test_loader_prefetch_is_bitwise_synchronous) {
    cifar_fixture("cifar_loader");
    char err[512] = "";
    Dataset *cifar = NULL;
    ck_assert_int_eq(dataset_cifar10_open("cifar_loader", 1, 1, 3, &cifar, err, sizeof err), 0);
    Sampler s;
    sampler_init(&s, cifar->size, 2, 2, 1, 2, 0, 3);  // 15 samples, global batch 8: 2 steps, the last partial
    check_prefetch_matches_sync(cifar, &s);
    sampler_free(&s);
    dataset_close(cifar);
    Dataset *learnable = dataset_learnable_create(50, L_SIDE, L_CLASSES, 3, 0);
    sampler_init(&s, learnable->size, 3, 3, 2, 1, 0, 3);  // global batch 9: 6 steps, the last partial
    check_prefetch_matches_sync(learnable, &s);
    sampler_free(&s);
    dataset_close(learnable);
    // batches of several chunks (8 samples each) shared by the workers, the last chunk and the last
    // batch partial
    learnable = dataset_learnable_create(130, L_SIDE, L_CLASSES, 5, 0);
    sampler_init(&s, learnable->size, 21, 2, 0, 1, 0, 4);  // global batch 42: 4 steps, the last partial
    check_prefetch_matches_sync(learnable, &s);
    sampler_free(&s);
    dataset_close(learnable);
    // repeated augmentation: 300 samples, 256 entries an epoch, global batch 20: 13 steps, the last partial
    learnable = dataset_learnable_create(300, L_SIDE, L_CLASSES, 6, 0);
    sampler_init(&s, learnable->size, 5, 2, 1, 2, 0, 6);
    sampler_set_repeats(&s, 3);
    check_prefetch_matches_sync(learnable, &s);
    sampler_free(&s);
    dataset_close(learnable);
}
END_TEST

START_TEST(test_loader_starts_at_any_step) {
    Dataset *ds = dataset_learnable_create(100, L_SIDE, L_CLASSES, 9, 0);
    Sampler s;
    sampler_init(&s, ds->size, 4, 2, 1, 2, 0, 9);  // global batch 16: 7 steps
    size_t bytes = (size_t)s.batch * dataset_image_bytes(ds);
    Loader *from_start = loader_create(ds, &s, LOADER_PIXELS, 0, 1, 0, 0, 3, NULL);
    const Batch *b;
    do {
        b = loader_next(from_start, NULL);
        ck_assert_ptr_nonnull(b);
    } while (!(b->epoch == 1 && b->step == 3 && b->micro == 0));
    Loader *resumed = loader_create(ds, &s, LOADER_PIXELS, 2, 2, 1, 3, 3, NULL);
    int compared = 0;
    for (; b; b = loader_next(from_start, NULL), compared++) {
        const Batch *r = loader_next(resumed, NULL);
        ck_assert_ptr_nonnull(r);
        ck_assert(batches_equal(b, r, bytes, s.batch));
    }
    ck_assert_ptr_null(loader_next(resumed, NULL));
    ck_assert_int_eq(compared, (7 - 3) * 2 + 7 * 2);  // rest of epoch 1, all of epoch 2
    loader_destroy(from_start);
    loader_destroy(resumed);
    // Stopping early joins a thread that is blocked on a full ring.
    Loader *early = loader_create(ds, &s, LOADER_PIXELS, 3, 2, 0, 0, 100, NULL);
    ck_assert_ptr_nonnull(loader_next(early, NULL));
    loader_destroy(early);
    sampler_free(&s);
    dataset_close(ds);
}
END_TEST

// A dataset whose calls after the first `impl` ones never come back (a read stuck on a hung file system):
// get sleeps until the test lets it go.
static atomic_int hang_released, hang_calls;
static void hanging_get(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng) {
    (void)rng;
    int call = atomic_fetch_add(&hang_calls, 1);
    while (call >= *(const int *)ds->impl && !atomic_load(&hang_released)) usleep(1000);
    memset(img, index, dataset_image_bytes(ds));
    *label = index % ds->classes;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile sig_atomic_t hang_stop;
static void *set_stop_later(void *arg) {
    (void)arg;
    usleep(200000);
    hang_stop = 1;
    return NULL;
}

// One worker: the first batch (8 calls) comes, the second never does. With the stop flag set 0.2 s into the wait,
// loader_next_unless returns NULL within a poll, and loader_abandon returns at once though a worker is
// still stuck in get. Without a stop flag the same wait would last until the worker came back.
START_TEST(test_loader_wait_ends_on_stop) {
    static int hang_from = 8;
    // static: the abandoned worker finishes its stuck sample after this test has returned
    static Dataset ds =
        {.name = "hanging", .size = 64, .side = 4, .classes = 2, .get = hanging_get, .impl = &hang_from};
    Sampler s;
    sampler_init(&s, ds.size, 8, 1, 0, 1, 0, 1);
    atomic_store(&hang_released, 0);
    atomic_store(&hang_calls, 0);
    hang_stop = 0;
    Loader *l = loader_create(&ds, &s, LOADER_PIXELS, 2, 1, 0, 0, 1, NULL);
    const Batch *first = loader_next_unless(l, NULL, &hang_stop);
    ck_assert_ptr_nonnull(first);
    ck_assert_int_eq(first->count, 8);
    pthread_t setter;
    pthread_create(&setter, NULL, set_stop_later, NULL);
    double start = now_s();
    ck_assert_ptr_null(loader_next_unless(l, NULL, &hang_stop));
    double waited = now_s() - start;
    pthread_join(setter, NULL);
    ck_assert_msg(waited >= 0.15 && waited < 1.0, "waited %.3f s", waited);
    start = now_s();
    loader_abandon(l);
    ck_assert_msg(now_s() - start < 0.1, "abandon took %.3f s", now_s() - start);
    atomic_store(&hang_released, 1);  // the detached workers end; what they hold is the process's to free
    sampler_free(&s);
}
END_TEST

static Suite *data_suite(void) {
    Suite *suite = suite_create("data");
    TCase *sampler = tcase_create("sampler");
    tcase_add_test(sampler, test_sampler_covers_each_sample_once);
    tcase_add_test(sampler, test_sampler_epochs_differ_and_repeat);
    tcase_add_test(sampler, test_sampler_two_ranks_equal_accum_two);
    tcase_add_test(sampler, test_sampler_resume_position);
    tcase_add_test(sampler, test_sampler_validation_shards);
    tcase_add_test(sampler, test_sampler_drop_last_takes_only_full_steps);
    tcase_add_test(sampler, test_sampler_repeats_like_rasampler);
    suite_add_tcase(suite, sampler);
    TCase *generated = tcase_create("generated");
    tcase_add_test(generated, test_synthetic_is_a_function_of_seed_and_index);
    tcase_add_test(generated, test_learnable_same_index_same_image);
    tcase_add_test(generated, test_learnable_is_learnable);
    tcase_add_test(generated, test_factory_generated_splits);
    suite_add_tcase(suite, generated);
    TCase *cifar = tcase_create("cifar10");
    tcase_add_test(cifar, test_cifar10_values_labels_nhwc);
    tcase_add_test(cifar, test_cifar10_augmentation_reproducible);
    tcase_add_test(cifar, test_cifar10_trivial_augment_and_erasing);
    tcase_add_test(cifar, test_cifar10_truncated_file_is_an_error);
    tcase_add_test(cifar, test_cifar10_fifo_is_refused_without_blocking);
    tcase_add_test(cifar, test_cifar10_missing_file_is_an_error);
    suite_add_tcase(suite, cifar);
    TCase *loader = tcase_create("loader");
    tcase_add_test(loader, test_loader_prefetch_is_bitwise_synchronous);
    tcase_add_test(loader, test_loader_starts_at_any_step);
    tcase_add_test(loader, test_loader_wait_ends_on_stop);
    suite_add_tcase(suite, loader);
    return suite;
}

int main(void) { return tu_run_suite(data_suite(), 1); }
