// config.h - the run's configuration: defaults, YAML file, command-line overrides, validation.
//
// Load order: defaults -> YAML file -> `section.key=value` overrides, each validated as it is applied.
// Any problem is one line `FILE:LINE: KEY: what is wrong` (overrides: `command line: KEY: ...`),
// and config_load returns nonzero; main then exits 2 before writing anything.
// docs/config.md is the reference for every key below.
#ifndef AMPTRAIN_CONFIG_H
#define AMPTRAIN_CONFIG_H

#include <stdio.h>

#define CONFIG_PATH_MAX 512

typedef struct ModelConfig {
    char arch[32];    // resnext50_32x4d | resnext101_32x4d | resnext101_32x8d | custom
    int layers[4];    // bottleneck blocks per stage (presets fill these)
    int cardinality;  // groups of the 3x3 convolution
    int base_width;   // torchvision's width_per_group
    int planes;       // stage-1 planes; stem width; doubles each stage (torchvision: 64)
    int num_classes;
    int image_size;           // square input side
    int recompute_bn_blocks;  // the first N blocks keep no bn1/bn2 output: backward recomputes them
    char init
        [CONFIG_PATH_MAX];  // a fresh run's weights from this safetensors file ("": drawn from train.seed);
                            // checkpoint/model_file.h
} ModelConfig;

typedef struct DataConfig {
    char source[16];  // synthetic | learnable | cifar10 | imagefolder | webdataset
    char path
        [CONFIG_PATH_MAX];   // cifar10: folder with data_batch_1..5.bin, test_batch.bin; image sources: root
    int train_size;          // synthetic/learnable: samples per epoch
    int val_size;            // synthetic/learnable: validation samples (0: no evaluation)
    int batch_size;          // per rank
    int augment;             // cifar10: random crop (pad 4) + flip; image sources: RandomResizedCrop + flip
    double mean[3], std[3];  // image sources: torchvision's Normalize on [0, 1] pixels (R, G, B)
    double crop_scale_min, crop_scale_max;  // image sources: RandomResizedCrop's scale range (area fraction)
    int train_crop;  // image sources: RandomResizedCrop's side, the side the model trains at (model.image_size
                     // unless written; other sources: model.image_size)
    int val_resize;  // image sources: validation's Resize of the shorter side (round(val_crop * 256 / 224)
                     // unless written)
    int val_crop;    // image sources: validation's CenterCrop, the side the model evaluates at
                     // (model.image_size unless written; other sources: model.image_size)
    char auto_augment
        [8];  // none | ta_wide: TrivialAugmentWide after the crop and flip (training with augment)
    char auto_augment_interpolation[12];  // nearest | bilinear: its resampling
    double random_erase;                  // RandomErasing's probability after it (0: off)
    int repeated_aug;                     // RASampler's repetitions of each sample in an epoch (1: off)
    double mixup_alpha;                   // MixUp's Beta(alpha, alpha) on each training micro-batch (0: off)
    double cutmix_alpha;  // CutMix's the same (0: off); with both, one of the two per micro-batch
    char decode[8];  // image sources: host | device, where the training JPEGs are decoded and transformed
    long
        max_image_pixels;  // image sources: a JPEG whose header claims more pixels is refused (decompression bomb)
    int prefetch;          // batches prepared ahead by the loader's workers (0: synchronous)
    int workers;           // loader threads (0: auto)
    int drop_last;         // skip each epoch's partial last step
} DataConfig;

typedef struct TrainConfig {
    int epochs;
    int steps;  // stop after this many optimizer steps (0: run all epochs)
    double lr;
    double momentum;
    double weight_decay;
    double norm_weight_decay;  // batch-norm weights and biases (the weight_decay unless written)
    int nesterov;
    double label_smoothing;  // CrossEntropyLoss(label_smoothing) of the training loss (0: off)
    double clip_grad_norm;   // clip the global gradient norm to this (0: off)
    double ema_decay;        // EMA of the weights, torchvision's --model-ema-decay (0: off)
    int ema_every;           // steps between EMA updates (torchvision's --model-ema-steps)
    char schedule[16];       // constant | step | cosine
    int warmup_steps;        // linear warm-up from 0 to lr over this many steps
    int step_every;          // schedule step: multiply lr by step_gamma every this many epochs
    double step_gamma;
    double min_lr;  // cosine floor
    long seed;
    int accum_steps;      // micro-batches per optimizer step
    char lr_scaling[16];  // none | linear (lr *= global_batch / 256)
    char cuda_graph[8];   // auto | on | off: capture the step as one CUDA graph (auto: on with CUDA)
} TrainConfig;

typedef struct AmpConfig {
    int enabled;
    char dtype[12];  // float16 | bfloat16: the autocast dtype (bfloat16: no loss scaling, see config_load)
    int dynamic;     // 0: static scale = init_scale, never updated
    double init_scale;
    double growth_factor;
    double backoff_factor;
    int growth_interval;
    int max_consecutive_skips;  // skipped steps in a row that end the run as diverged (0: never)
    double min_scale;           // a dynamic scale below this ends the run as diverged (0: never)
} AmpConfig;

typedef struct LogConfig {
    int every;                      // steps between log lines / metrics records
    char metrics[CONFIG_PATH_MAX];  // JSON-lines metrics file ("" : none)
    char progress[8];               // auto | always | never (auto: bar when stdout is a terminal)
} LogConfig;

typedef struct CheckpointConfig {
    char dir[CONFIG_PATH_MAX];     // where checkpoints go ("" : none)
    int every;                     // steps between checkpoints (0: only at the end)
    int keep;                      // step-numbered checkpoints kept (0, 1: only last.safetensors)
    char resume[CONFIG_PATH_MAX];  // checkpoint file to resume from ("" : fresh start; "auto": the newest
                                   // valid one in dir, or a fresh start when there is none)
    int overwrite;                 // a fresh start may replace an earlier run's files in dir and log.metrics
} CheckpointConfig;

typedef struct DistConfig {
    double bucket_mb;        // gradient bucket size
    double first_bucket_mb;  // the first (last-layer) bucket, small so communication starts early
    double timeout_s;        // a rank silent this long ends the job
} DistConfig;

typedef struct BackendConfig {
    char device[8];  // auto | cpu | cuda
} BackendConfig;

typedef struct CudnnConfig {
    int benchmark;     // timed algorithm search once per shape
    int tf32;          // fp32 convolutions may use TF32 (PyTorch's torch.backends.cudnn.allow_tf32, on)
    int matmul_tf32;   // the fp32 classifier matmul may use TF32 (torch.backends.cuda.matmul.allow_tf32, off)
    int workspace_mb;  // largest convolution workspace an algorithm may use
    char batch_norm[8];           // auto | unfused | cudnn | own: whose kernels train batch norm on CUDA
    char cache[CONFIG_PATH_MAX];  // the file of timed kernel choices: a path, auto (the XDG cache folder's),
                                  // off or "" (none); core/kernel_cache.h
} CudnnConfig;

typedef struct DebugConfig {
    int inject_step;      // step at which gradients are poisoned (-1: never)
    int inject_rank;      // which rank poisons its local gradients (-1: every rank)
    double inject_value;  // the value written into the first gradient element (.inf, .nan, or e.g. 40000)
} DebugConfig;

typedef struct Config {
    ModelConfig model;
    DataConfig data;
    TrainConfig train;
    AmpConfig amp;
    LogConfig log;
    CheckpointConfig checkpoint;
    DistConfig dist;
    BackendConfig backend;
    CudnnConfig cudnn;
    DebugConfig debug;
    char source_path[CONFIG_PATH_MAX];  // the YAML file it came from
} Config;

// Defaults (the tiny CPU demo's values where a choice is needed).
void config_defaults(Config *cfg);

// Reads `path` over the defaults, then applies `n_overrides` strings "section.key=value".
// On error writes one line to `err` (may be stderr) and returns 2; returns 0 when valid.
int config_load(Config *cfg, const char *path, int n_overrides, char **overrides, FILE *err);

// Writes the merged config as YAML that config_load reads back to the same values.
void config_print(const Config *cfg, FILE *out);

// The keys one by one, for comparing two configs (the ranks of one run must hold the same): key i in
// [0, config_value_count()) as its name "section.key" and its value as config_print writes it.
// CONFIG_VALUE_MAX holds any value (a string of CONFIG_PATH_MAX - 1 characters, each escaped as \xHH).
#define CONFIG_VALUE_MAX (4 * CONFIG_PATH_MAX + 8)
size_t config_value_count(void);
void config_value_text(const Config *cfg, size_t i, char *name, size_t name_len, char *value,
                       size_t value_len);

#endif
