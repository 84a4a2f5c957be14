// synthetic.c - the two generated sources: synthetic (N(0,1) images, uniform labels) and learnable.
//
// Both generated sources draw their per-pixel randomness from one pool of N(0,1) floats made at open:
// sample i is the window pool[offset_i .. offset_i + side*side*3) with offset_i (and label_i) drawn from
// the stream keyed (DATA_STREAM_SAMPLE, split, i). Drawing 150k fresh normals per ImageNet-sized image
// would make the host, not the GPU, the bottleneck of the throughput benchmark; a window copy costs a
// memcpy. Within one image the values are independent N(0,1); across images they overlap, which no
// model can exploit to predict a label drawn independently of the offset.
//
// Both write bytes: value v becomes round(127.5 + v * k) clipped to [0, 255], with norm mean 0.5 and std
// k / 255, so the device's normalisation gives back v to within 1/(2k) (unclipped values). k is 40 for
// synthetic (clipped beyond 3.2 sigma) and 8 for learnable, whose values have a std of about 5.1.
#include "data/dataset.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/data_rng.h"

#define POOL_OFFSETS (1 << 18)  // distinct windows; the pool is image_bytes + POOL_OFFSETS values
#define LEARNABLE_NOISE 5.0f    // noise sigma relative to the templates' std of 1
#define SYNTHETIC_STEPS 40.0f   // bytes per unit of value (k above)
#define LEARNABLE_STEPS 8.0f

// ---- synthetic: N(0,1) images, uniform labels ------------------------------------------------------

typedef struct Generated {
    int split;
    float *pool;          // learnable: (image_bytes + POOL_OFFSETS) float32, N(0,1)
    uint8_t *pool_bytes;  // synthetic: the same pool as bytes (see the top of the file)
    float *colour;        // learnable: (classes, 3) float32, per-class mean colour
    float *rows;          // learnable: (classes, side, 3) float32, per-class wave along y
    float *cols;          // learnable: (classes, side, 3) float32, per-class wave along x
} Generated;

// Label and pool offset of sample i: the only per-sample randomness of the generated sources.
static size_t generated_sample(const Dataset *ds, int index, int32_t *label) {
    const Generated *g = ds->impl;
    Rng rng;
    data_rng_seed(&rng, ds->seed, DATA_STREAM_SAMPLE, (uint32_t)g->split, (uint32_t)index);
    *label = (int32_t)rng_below(&rng, (uint32_t)ds->classes);
    return rng_below(&rng, POOL_OFFSETS);
}

// v -> round(127.5 + v * steps) clipped to a byte.
static uint8_t quantise(float v, float steps) {
    float q = 127.5f + v * steps;
    return q <= 0.0f ? 0 : q >= 255.0f ? 255 : (uint8_t)(q + 0.5f);
}

static PixelNorm quantised_norm(float steps) {
    PixelNorm n;
    for (int ch = 0; ch < 3; ch++) n.mean[ch] = 0.5f, n.std[ch] = steps / 255.0f;
    return n;
}

static void synthetic_get(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng) {
    (void)rng;
    const Generated *g = ds->impl;
    memcpy(img, g->pool_bytes + generated_sample(ds, index, label), dataset_image_bytes(ds));
}

static void generated_destroy(Dataset *ds) {
    Generated *g = ds->impl;
    free(g->pool);
    free(g->pool_bytes);
    free(g->colour);
    free(g->rows);
    free(g->cols);
    free(g);
    free(ds);
}

static Dataset *generated_create(const char *name, int size, int side, int classes, long seed, int split) {
    AMP_ASSERT(size > 0 && side > 0 && classes > 0, "%s: size %d, side %d, classes %d must be positive", name,
               size, side, classes);
    Dataset *ds = xcalloc(1, sizeof *ds);
    Generated *g = xcalloc(1, sizeof *g);
    ds->name = name;
    ds->size = size;
    ds->side = side;
    ds->classes = classes;
    ds->seed = (uint64_t)seed;
    ds->destroy = generated_destroy;
    ds->impl = g;
    g->split = split;
    size_t pool_len = dataset_image_bytes(ds) + POOL_OFFSETS;
    g->pool = xcalloc(pool_len, sizeof(float));
    Rng rng;
    data_rng_seed(&rng, ds->seed, DATA_STREAM_POOL, 0, 0);
    for (size_t i = 0; i < pool_len; i++) g->pool[i] = rng_normal(&rng);
    return ds;
}

Dataset *dataset_synthetic_create(int size, int side, int classes, long seed, int split) {
    Dataset *ds = generated_create("synthetic", size, side, classes, seed, split);
    Generated *g = ds->impl;
    size_t pool_len = dataset_image_bytes(ds) + POOL_OFFSETS;
    g->pool_bytes = xcalloc(pool_len, 1);
    for (size_t i = 0; i < pool_len; i++) g->pool_bytes[i] = quantise(g->pool[i], SYNTHETIC_STEPS);
    free(g->pool);
    g->pool = NULL;
    ds->norm = quantised_norm(SYNTHETIC_STEPS);
    ds->get = synthetic_get;
    return ds;
}

// ---- learnable: image = template[label] + 0.5 * N(0,1) -----------------------------------------------
//
// template[c](y, x, ch) = colour[c][ch] + rows[c][y][ch] + cols[c][x][ch], where colour ~ N(0, 1/3) and
// rows/cols are sines a*sin(2*pi*f*t/side + phase) with f in {1,2,3}, a = sqrt(2/3) (variance 1/3 over
// whole periods). So templates have std about 1, are smooth (a CNN with global pooling sees both the
// colour and the waves), and cost O(classes * side) floats, not O(classes * side^2): 1000 ImageNet
// classes would otherwise need 600 MB.

static void learnable_get(const Dataset *ds, int index, uint8_t *img, int32_t *label, Rng *rng) {
    (void)rng;
    const Generated *g = ds->impl;
    const float *noise = g->pool + generated_sample(ds, index, label);
    int side = ds->side, c = *label;
    const float *colour = g->colour + (size_t)c * 3;
    const float *rows = g->rows + (size_t)c * side * 3;
    const float *cols = g->cols + (size_t)c * side * 3;
    for (int y = 0; y < side; y++) {
        for (int x = 0; x < side; x++) {
            size_t p = ((size_t)y * side + x) * 3;
            for (int ch = 0; ch < 3; ch++)
                img[p + ch] = quantise(colour[ch] + rows[y * 3 + ch] + cols[x * 3 + ch] +
                                           LEARNABLE_NOISE * noise[p + ch],
                                       LEARNABLE_STEPS);
        }
    }
}

// wave (side, 3): one sine per channel with its own frequency and phase.
static void learnable_fill_wave(float *wave, int side, Rng *rng) {
    const double amplitude = 0.816496580927726;  // sqrt(2/3)
    for (int ch = 0; ch < 3; ch++) {
        int freq = 1 + (int)rng_below(rng, 3);
        double phase = 6.283185307179586 * rng_uniform(rng);
        for (int t = 0; t < side; t++)
            wave[t * 3 + ch] = (float)(amplitude * sin(6.283185307179586 * freq * t / side + phase));
    }
}

Dataset *dataset_learnable_create(int size, int side, int classes, long seed, int split) {
    Dataset *ds = generated_create("learnable", size, side, classes, seed, split);
    Generated *g = ds->impl;
    ds->get = learnable_get;
    ds->norm = quantised_norm(LEARNABLE_STEPS);
    g->colour = xcalloc((size_t)classes * 3, sizeof(float));
    g->rows = xcalloc((size_t)classes * side * 3, sizeof(float));
    g->cols = xcalloc((size_t)classes * side * 3, sizeof(float));
    // Templates depend on (seed, class) only, so the training and validation splits share them.
    for (int c = 0; c < classes; c++) {
        Rng rng;
        data_rng_seed(&rng, ds->seed, DATA_STREAM_TEMPLATE, 0, (uint32_t)c);
        for (int ch = 0; ch < 3; ch++) g->colour[c * 3 + ch] = 0.577350269f * rng_normal(&rng);
        learnable_fill_wave(g->rows + (size_t)c * side * 3, side, &rng);
        learnable_fill_wave(g->cols + (size_t)c * side * 3, side, &rng);
    }
    return ds;
}
