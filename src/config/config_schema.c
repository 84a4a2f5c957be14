// config_schema.c - every configuration key in one table, and the typo suggestions drawn from it.
//
// Ranges here are the single source of truth for "out of range" errors and for docs/config.md.
// Rules that tie two keys together (presets, cifar10's fixed shape) live in config.c.
#include "config/config_schema.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "dist/watchdog.h"
#include "core/image_job.h"

#define AT(field) offsetof(Config, field), 0
#define AT_STR(field) offsetof(Config, field), sizeof(((Config *)0)->field)

// Ranges: ANY accepts every double, NONE marks keys that are not numbers; the rest are intervals.
#define ANY -INFINITY, INFINITY, 0, 0
#define AT_LEAST(v) (v), INFINITY, 0, 1
#define ABOVE(v) (v), INFINITY, 1, 1
#define BETWEEN(a, b) (a), (b), 0, 0
#define CLOSED_OPEN(a, b) (a), (b), 0, 1
#define OPEN_CLOSED(a, b) (a), (b), 1, 0
#define OPEN(a, b) (a), (b), 1, 1
#define NONE 0, 0, 0, 0

// Bounds that keep a value inside what the code computes with. The sampler holds and shuffles an int32
// index per sample at each epoch's start: 2^24 generated samples (ImageNet-21k's 14 million fit) are 64 MiB
// and about a second; 2^31 - 1 took minutes before the first step, and a validation count near INT_MAX
// overflows the split between ranks.
#define GENERATED_MAX_SAMPLES 16777216
// Per rank and micro-batch; beyond any device's memory at ImageNet sizes, and far inside the 64-bit
// sizes of the batch buffers.
#define MAX_BATCH 65536
// A bucket larger than the model's gradients is one bucket: 1 TiB is beyond any model, and keeps the
// byte count of the conversion to size_t well inside its range (1e30 MiB would not be).
#define MAX_BUCKET_MB 1048576

const ConfigKey config_keys[] = {
    // ---- model ----
    {"model",
     "arch",
     CK_ENUM,
     AT_STR(model.arch),
     NONE,
     {"resnext50_32x4d", "resnext101_32x4d", "resnext101_32x8d", "custom"},
     "torchvision preset (fixes layers, cardinality, base_width, planes) or custom"},
    {"model",
     "layers",
     CK_INT_LIST,
     AT(model.layers),
     BETWEEN(1, 64),
     {0},
     "bottleneck blocks in each of the 4 stages (custom only)"},
    {"model",
     "cardinality",
     CK_INT,
     AT(model.cardinality),
     BETWEEN(1, 1024),
     {0},
     "groups of the 3x3 convolution (custom only)"},
    {"model",
     "base_width",
     CK_INT,
     AT(model.base_width),
     BETWEEN(1, 1024),
     {0},
     "torchvision's width_per_group (custom only)"},
    {"model",
     "planes",
     CK_INT,
     AT(model.planes),
     BETWEEN(1, 1024),
     {0},
     "stage-1 planes and stem width, doubled each stage (custom only)"},
    {"model", "num_classes", CK_INT, AT(model.num_classes), BETWEEN(2, 100000), {0}, "classifier outputs"},
    {"model",
     "image_size",
     CK_INT,
     AT(model.image_size),
     BETWEEN(32, 1024),
     {0},
     "square input side in pixels (5 stride-2 stages need at least 32)"},
    {"model",
     "recompute_bn_blocks",
     CK_INT,
     AT(model.recompute_bn_blocks),
     BETWEEN(0, 256),
     {0},
     "the first N blocks keep no bn1/bn2+ReLU output; backward recomputes it from the saved statistics "
     "(less memory, one elementwise pass each; N above the block count: all)"},
    {"model",
     "init",
     CK_STRING,
     AT_STR(model.init),
     NONE,
     {0},
     "a fresh run's weights and BN statistics from this safetensors file: a torchvision state_dict or an amptrain "
     "checkpoint; a classifier of another class count keeps its initial value (\"\": drawn from train.seed; not read "
     "on a resume)"},
    // ---- data ----
    {"data",
     "source",
     CK_ENUM,
     AT_STR(data.source),
     NONE,
     {"synthetic", "learnable", "cifar10", "imagefolder", "webdataset"},
     "synthetic: random noise; learnable: class-dependent patterns a model can fit; cifar10: files; "
     "imagefolder, webdataset: JPEGs in class folders or tar shards"},
    {"data",
     "path",
     CK_STRING,
     AT_STR(data.path),
     NONE,
     {0},
     "cifar10: folder with data_batch_1..5.bin and test_batch.bin; imagefolder: the root with train/ and "
     "val/ class folders; webdataset: the folder of train-*.tar and val-*.tar shards"},
    {"data",
     "train_size",
     CK_INT,
     AT(data.train_size),
     BETWEEN(1, GENERATED_MAX_SAMPLES),
     {0},
     "synthetic/learnable: training samples per epoch"},
    {"data",
     "val_size",
     CK_INT,
     AT(data.val_size),
     BETWEEN(0, GENERATED_MAX_SAMPLES),
     {0},
     "synthetic/learnable: validation samples (0: no evaluation)"},
    {"data",
     "batch_size",
     CK_INT,
     AT(data.batch_size),
     BETWEEN(1, MAX_BATCH),
     {0},
     "samples per rank per micro-batch"},
    {"data",
     "augment",
     CK_BOOL,
     AT(data.augment),
     NONE,
     {0},
     "cifar10: random crop (pad 4) and horizontal flip; imagefolder/webdataset: RandomResizedCrop and "
     "horizontal flip (false: the validation transform)"},
    {"data",
     "mean",
     CK_FLOAT3,
     AT(data.mean),
     BETWEEN(0, 1),
     {0},
     "imagefolder/webdataset: per-channel mean (R, G, B) of torchvision's Normalize on [0, 1] pixels"},
    {"data",
     "crop_scale_min",
     CK_FLOAT,
     AT(data.crop_scale_min),
     OPEN_CLOSED(0, 1),
     {0},
     "imagefolder/webdataset with augment: RandomResizedCrop's smallest area fraction (torchvision: 0.08)"},
    {"data",
     "crop_scale_max",
     CK_FLOAT,
     AT(data.crop_scale_max),
     OPEN_CLOSED(0, 1),
     {0},
     "imagefolder/webdataset with augment: RandomResizedCrop's largest area fraction (torchvision: 1)"},
    {"data",
     "std",
     CK_FLOAT3,
     AT(data.std),
     ABOVE(0),
     {0},
     "imagefolder/webdataset: per-channel standard deviation (R, G, B) of the same Normalize"},
    {"data",
     "train_crop",
     CK_INT,
     AT(data.train_crop),
     BETWEEN(32, 1024),
     {0},
     "imagefolder/webdataset: the side of training images (RandomResizedCrop's size), which the model trains at "
     "(default model.image_size)"},
    {"data",
     "val_resize",
     CK_INT,
     AT(data.val_resize),
     BETWEEN(32, 8192),
     {0},
     "imagefolder/webdataset: validation's Resize of the shorter side (default round(val_crop x 256 / 224))"},
    {"data",
     "val_crop",
     CK_INT,
     AT(data.val_crop),
     BETWEEN(32, 1024),
     {0},
     "imagefolder/webdataset: validation's CenterCrop, the side the model evaluates at (default model.image_size)"},
    {"data",
     "auto_augment",
     CK_ENUM,
     AT_STR(data.auto_augment),
     NONE,
     {"none", "ta_wide"},
     "cifar10/imagefolder/webdataset with augment: ta_wide applies torchvision's TrivialAugmentWide after the "
     "crop and flip"},
    {"data",
     "auto_augment_interpolation",
     CK_ENUM,
     AT_STR(data.auto_augment_interpolation),
     NONE,
     {"nearest", "bilinear"},
     "TrivialAugmentWide's resampling of its shears, translations and rotations (nearest: its default; "
     "bilinear: what torchvision's reference train.py passes it)"},
    {"data",
     "random_erase",
     CK_FLOAT,
     AT(data.random_erase),
     BETWEEN(0, 1),
     {0},
     "cifar10/imagefolder/webdataset with augment: torchvision's RandomErasing probability, last (0: off)"},
    {"data",
     "repeated_aug",
     CK_INT,
     AT(data.repeated_aug),
     BETWEEN(1, 16),
     {0},
     "repeated augmentation (torchvision's RASampler): every sample N times an epoch, each with its own "
     "augmentation, an epoch floor(size / 256) x 256 samples (1: off; data.decode host)"},
    {"data",
     "mixup_alpha",
     CK_FLOAT,
     AT(data.mixup_alpha),
     AT_LEAST(0),
     {0},
     "torchvision's MixUp(alpha) on every training micro-batch of a rank, after normalisation: lambda ~ "
     "Beta(alpha, alpha), each image blended with the one before it in the batch, targets alike (0: off)"},
    {"data",
     "cutmix_alpha",
     CK_FLOAT,
     AT(data.cutmix_alpha),
     AT_LEAST(0),
     {0},
     "torchvision's CutMix(alpha): a box of area 1 - lambda pasted from the image before, lambda corrected to "
     "the box (0: off); with mixup_alpha too, one of the two per micro-batch, each with probability 1/2"},
    {"data",
     "decode",
     CK_ENUM,
     AT_STR(data.decode),
     NONE,
     {"host", "device"},
     "imagefolder/webdataset: where training JPEGs are decoded, cropped and flipped. host: libjpeg-turbo on "
     "the loader's threads; device: the backend's decoder on a thread of its own (CUDA: nvJPEG and kernels, "
     "when the build has nvJPEG; CPU: the reference decoder), the loader's threads only read files. "
     "Validation always decodes on the host"},
    {"data",
     "max_image_pixels",
     CK_LONG,
     AT(data.max_image_pixels),
     BETWEEN(1, IMAGE_MAX_PIXELS),
     {0},
     "imagefolder/webdataset: a JPEG whose header claims more pixels is replaced like an unreadable one, "
     "before anything is decoded (default Pillow's decompression-bomb limit)"},
    {"data",
     "prefetch",
     CK_INT,
     AT(data.prefetch),
     BETWEEN(0, 64),
     {0},
     "batches prepared ahead by the loader's workers (0: synchronous, on the training thread)"},
    {"data",
     "workers",
     CK_INT,
     AT(data.workers),
     BETWEEN(0, 64),
     {0},
     "loader threads (0: auto, the CPUs the ranks of a host may use, shared by them, one left to each rank); all of "
     "them assemble one batch at a time, a few samples each"},
    {"data",
     "drop_last",
     CK_BOOL,
     AT(data.drop_last),
     NONE,
     {0},
     "skip each epoch's partial last step (needed when it would leave a rank one image and the last "
     "stage is 1x1)"},
    // ---- train ----
    {"train", "epochs", CK_INT, AT(train.epochs), AT_LEAST(1), {0}, "passes over the training set"},
    {"train",
     "steps",
     CK_INT,
     AT(train.steps),
     AT_LEAST(0),
     {0},
     "stop after this many optimizer steps (0: run all epochs)"},
    {"train", "lr", CK_FLOAT, AT(train.lr), ABOVE(0), {0}, "peak learning rate (before lr_scaling)"},
    {"train", "momentum", CK_FLOAT, AT(train.momentum), CLOSED_OPEN(0, 1), {0}, "SGD momentum"},
    {"train",
     "weight_decay",
     CK_FLOAT,
     AT(train.weight_decay),
     AT_LEAST(0),
     {0},
     "L2 penalty added to every gradient (PyTorch SGD's weight_decay)"},
    {"train",
     "norm_weight_decay",
     CK_FLOAT,
     AT(train.norm_weight_decay),
     AT_LEAST(0),
     {0},
     "weight decay of the batch-norm weights and biases (torchvision's --norm-weight-decay; default "
     "train.weight_decay)"},
    {"train", "nesterov", CK_BOOL, AT(train.nesterov), NONE, {0}, "Nesterov momentum (needs momentum > 0)"},
    {"train",
     "label_smoothing",
     CK_FLOAT,
     AT(train.label_smoothing),
     BETWEEN(0, 1),
     {0},
     "torch.nn.CrossEntropyLoss(label_smoothing) of the training loss: targets (1 - e) x onehot + e / classes "
     "(0: off; the validation loss stays plain cross-entropy)"},
    {"train",
     "clip_grad_norm",
     CK_FLOAT,
     AT(train.clip_grad_norm),
     AT_LEAST(0),
     {0},
     "clip the global L2 norm of the unscaled gradients to this, as torch.nn.utils.clip_grad_norm_ (0: off)"},
    {"train",
     "ema_decay",
     CK_FLOAT,
     AT(train.ema_decay),
     CLOSED_OPEN(0, 1),
     {0},
     "exponential moving average of the weights and BN statistics, torchvision's --model-ema-decay, adjusted "
     "for the global batch, ema_every and epochs as its train.py does (0: off)"},
    {"train",
     "ema_every",
     CK_INT,
     AT(train.ema_every),
     AT_LEAST(1),
     {0},
     "the EMA is updated after every ema_every-th step of an epoch (torchvision's --model-ema-steps)"},
    {"train",
     "schedule",
     CK_ENUM,
     AT_STR(train.schedule),
     NONE,
     {"constant", "step", "cosine"},
     "learning-rate schedule after warm-up"},
    {"train",
     "warmup_steps",
     CK_INT,
     AT(train.warmup_steps),
     AT_LEAST(0),
     {0},
     "linear warm-up from 0 to lr over this many steps"},
    {"train",
     "step_every",
     CK_INT,
     AT(train.step_every),
     AT_LEAST(1),
     {0},
     "schedule step: multiply lr by step_gamma every this many epochs"},
    {"train",
     "step_gamma",
     CK_FLOAT,
     AT(train.step_gamma),
     OPEN_CLOSED(0, 1),
     {0},
     "schedule step: the factor"},
    {"train",
     "min_lr",
     CK_FLOAT,
     AT(train.min_lr),
     AT_LEAST(0),
     {0},
     "schedule cosine: the floor (at most lr)"},
    {"train", "seed", CK_LONG, AT(train.seed), AT_LEAST(0), {0}, "seeds weights, data and shuffling"},
    {"train",
     "accum_steps",
     CK_INT,
     AT(train.accum_steps),
     BETWEEN(1, 1024),
     {0},
     "micro-batches per optimizer step"},
    {"train",
     "lr_scaling",
     CK_ENUM,
     AT_STR(train.lr_scaling),
     NONE,
     {"none", "linear"},
     "linear: lr *= global batch / 256 (global batch = batch_size x ranks x accum_steps)"},
    {"train",
     "cuda_graph",
     CK_ENUM,
     AT_STR(train.cuda_graph),
     NONE,
     {"auto", "on", "off"},
     "capture the training step once as a CUDA graph and replay it (auto: on with the CUDA backend; on with "
     "the CPU backend: its op-log emulation, for tests; steps with a partial batch, accumulation or a debug "
     "injection run as plain launches)"},
    // ---- amp ----
    {"amp",
     "enabled",
     CK_BOOL,
     AT(amp.enabled),
     NONE,
     {0},
     "mixed precision (16-bit compute in amp.dtype, fp32 masters); false: everything fp32"},
    {"amp",
     "dtype",
     CK_ENUM,
     AT_STR(amp.dtype),
     NONE,
     {"float16", "bfloat16"},
     "the autocast dtype (torch.autocast's dtype): float16 with loss scaling, or bfloat16 without (the scale "
     "stays 1; the scaling keys are refused); needs amp.enabled"},
    {"amp",
     "dynamic",
     CK_BOOL,
     AT(amp.dynamic),
     NONE,
     {0},
     "dynamic loss scaling; false: static scale = init_scale (float16 only)"},
    {"amp", "init_scale", CK_FLOAT, AT(amp.init_scale), ABOVE(0), {0}, "initial loss scale (float16 only)"},
    {"amp",
     "growth_factor",
     CK_FLOAT,
     AT(amp.growth_factor),
     ABOVE(1),
     {0},
     "scale multiplier after growth_interval clean steps (float16 only)"},
    {"amp",
     "backoff_factor",
     CK_FLOAT,
     AT(amp.backoff_factor),
     OPEN(0, 1),
     {0},
     "scale multiplier after a step with inf/NaN gradients (float16 only)"},
    {"amp",
     "growth_interval",
     CK_INT,
     AT(amp.growth_interval),
     AT_LEAST(1),
     {0},
     "clean steps in a row before the scale grows (float16 only)"},
    {"amp",
     "max_consecutive_skips",
     CK_INT,
     AT(amp.max_consecutive_skips),
     BETWEEN(0, 1000000000),
     {0},
     "steps in a row skipped for inf/NaN gradients after which the run stops as diverged (exit 4; 0: never)"},
    {"amp",
     "min_scale",
     CK_FLOAT,
     AT(amp.min_scale),
     AT_LEAST(0),
     {0},
     "a dynamic loss scale below this stops the run as diverged (exit 4; 0: never; float16 only)"},
    // ---- log ----
    {"log", "every", CK_INT, AT(log.every), AT_LEAST(1), {0}, "steps between log lines and metrics records"},
    {"log", "metrics", CK_STRING, AT_STR(log.metrics), NONE, {0}, "JSON-lines metrics file (\"\": none)"},
    {"log",
     "progress",
     CK_ENUM,
     AT_STR(log.progress),
     NONE,
     {"auto", "always", "never"},
     "progress bar (auto: when stdout is a terminal)"},
    // ---- checkpoint ----
    {"checkpoint",
     "dir",
     CK_STRING,
     AT_STR(checkpoint.dir),
     NONE,
     {0},
     "folder for checkpoints (\"\": none)"},
    {"checkpoint",
     "every",
     CK_INT,
     AT(checkpoint.every),
     AT_LEAST(0),
     {0},
     "steps between checkpoints (0: only at the end)"},
    {"checkpoint",
     "keep",
     CK_INT,
     AT(checkpoint.keep),
     BETWEEN(0, 1000000),
     {0},
     "step-numbered checkpoints kept beside last.safetensors, the oldest removed (0 or 1: only last)"},
    {"checkpoint",
     "resume",
     CK_STRING,
     AT_STR(checkpoint.resume),
     NONE,
     {0},
     "checkpoint file to resume from (\"\": fresh start; auto: the newest valid checkpoint in checkpoint.dir, "
     "last.safetensors first, or a fresh start when there is none)"},
    {"checkpoint",
     "overwrite",
     CK_BOOL,
     AT(checkpoint.overwrite),
     NONE,
     {0},
     "a fresh start may replace an earlier run in checkpoint.dir and log.metrics (its checkpoints are "
     "removed, the metrics file emptied); false: such a start is refused"},
    // ---- dist ----
    {"dist",
     "bucket_mb",
     CK_FLOAT,
     AT(dist.bucket_mb),
     OPEN_CLOSED(0, MAX_BUCKET_MB),
     {0},
     "gradient bucket size in MiB"},
    {"dist",
     "first_bucket_mb",
     CK_FLOAT,
     AT(dist.first_bucket_mb),
     OPEN_CLOSED(0, MAX_BUCKET_MB),
     {0},
     "first (last-layer) bucket in MiB, small so communication starts early"},
    {"dist",
     "timeout_s",
     CK_FLOAT,
     AT(dist.timeout_s),
     OPEN_CLOSED(0, WATCHDOG_MAX_TIMEOUT_S),
     {0},
     "a rank silent this many seconds ends the job (at most a week)"},
    // ---- backend ----
    {"backend",
     "device",
     CK_ENUM,
     AT_STR(backend.device),
     NONE,
     {"auto", "cpu", "cuda"},
     "auto: cuda when built with CUDA and a GPU is present, else cpu"},
    // ---- cudnn ----
    {"cudnn",
     "benchmark",
     CK_BOOL,
     AT(cudnn.benchmark),
     NONE,
     {0},
     "timed convolution algorithm search once per shape"},
    {"cudnn",
     "tf32",
     CK_BOOL,
     AT(cudnn.tf32),
     NONE,
     {0},
     "fp32 convolutions may use TF32 tensor cores (PyTorch's default: on)"},
    {"cudnn",
     "matmul_tf32",
     CK_BOOL,
     AT(cudnn.matmul_tf32),
     NONE,
     {0},
     "the fp32 classifier matmul may use TF32 (PyTorch's default: off)"},
    {"cudnn",
     "workspace_mb",
     CK_INT,
     AT(cudnn.workspace_mb),
     BETWEEN(0, 65536),
     {0},
     "largest convolution workspace (MiB) an algorithm may use (default 512 with AMP, 4096 without): "
     "less memory, maybe slower layers"},
    {"cudnn",
     "batch_norm",
     CK_ENUM,
     AT_STR(cudnn.batch_norm),
     NONE,
     {"auto", "unfused", "cudnn", "own"},
     "training batch norm per layer shape on the fastest forward/backward pair of cuDNN's and amptrain's "
     "kernels timed at start-up, with the statistics of a 1x1 convolution's output from that convolution's "
     "epilogue where timed faster (auto; with cudnn.benchmark, else as cudnn), the same never taking them from "
     "the convolution (unfused), on cuDNN's fused NHWC kernels where cuDNN takes the call, or on amptrain's own "
     "(inference and recomputation always run amptrain's own)"},
    {"cudnn",
     "cache",
     CK_STRING,
     AT_STR(cudnn.cache),
     NONE,
     {0},
     "the file of the kernel choices timed at start-up (with cudnn.benchmark), which later runs on the same GPU "
     "and libraries take instead of timing again (auto: $XDG_CACHE_HOME/amptrain/kernels.cache, else "
     "~/.cache/amptrain/kernels.cache; off: none)"},
    // ---- debug ----
    {"debug",
     "inject_step",
     CK_INT,
     AT(debug.inject_step),
     AT_LEAST(-1),
     {0},
     "step at which gradients are poisoned (-1: never)"},
    {"debug",
     "inject_rank",
     CK_INT,
     AT(debug.inject_rank),
     AT_LEAST(-1),
     {0},
     "rank that poisons its local gradients (-1: every rank)"},
    {"debug",
     "inject_value",
     CK_FLOAT,
     AT(debug.inject_value),
     ANY,
     {0},
     "value written into the first gradient element (.inf, .nan, 40000, ...)"},
};
const size_t config_key_count = sizeof config_keys / sizeof config_keys[0];
_Static_assert(sizeof config_keys / sizeof config_keys[0] <= CONFIG_MAX_KEYS,
               "raise CONFIG_MAX_KEYS in config_schema.h");

const char *const config_sections[] = {"model",      "data", "train",   "amp",   "log",
                                       "checkpoint", "dist", "backend", "cudnn", "debug"};
const size_t config_section_count = sizeof config_sections / sizeof config_sections[0];

// Names other trainers (PyTorch, torchvision, DDP, Horovod) use for our keys: a user who writes
// `learning_rate` or misspells it gets pointed to train.lr, which plain edit distance would miss.
static const struct {
    const char *alias, *section, *key;
} key_aliases[] = {
    {"learning_rate", "train", "lr"},
    {"base_lr", "train", "lr"},
    {"wd", "train", "weight_decay"},
    {"lr_schedule", "train", "schedule"},
    {"model_ema_decay", "train", "ema_decay"},
    {"model_ema_steps", "train", "ema_every"},
    {"max_grad_norm", "train", "clip_grad_norm"},
    {"scheduler", "train", "schedule"},
    {"num_epochs", "train", "epochs"},
    {"max_steps", "train", "steps"},
    {"warmup", "train", "warmup_steps"},
    {"warmup_iters", "train", "warmup_steps"},
    {"gradient_accumulation_steps", "train", "accum_steps"},
    {"batch", "data", "batch_size"},
    {"dataset", "data", "source"},
    {"groups", "model", "cardinality"},
    {"width_per_group", "model", "base_width"},
    {"classes", "model", "num_classes"},
    {"fp16", "amp", "enabled"},
    {"loss_scale", "amp", "init_scale"},
    {"log_interval", "log", "every"},
    {"output_dir", "checkpoint", "dir"},
    {"bucket_cap_mb", "dist", "bucket_mb"},
};

const ConfigKey *config_schema_find(const char *section, const char *key) {
    for (size_t i = 0; i < config_key_count; i++) {
        if (strcmp(config_keys[i].section, section) == 0 && strcmp(config_keys[i].key, key) == 0)
            return &config_keys[i];
    }
    return NULL;
}

int config_schema_has_section(const char *section) {
    for (size_t i = 0; i < config_section_count; i++) {
        if (strcmp(config_sections[i], section) == 0) return 1;
    }
    return 0;
}

// Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent swaps cost 1.
// Names longer than the buffer are too far from every key to matter and get a large distance.
static size_t edit_distance(const char *a, const char *b) {
    enum { MAX_NAME = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= MAX_NAME || m >= MAX_NAME) return MAX_NAME;
    size_t d[MAX_NAME + 1][MAX_NAME + 1];
    for (size_t i = 0; i <= n; i++) d[i][0] = i;
    for (size_t j = 0; j <= m; j++) d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

// A key written under the wrong section (train.batch_size) is a likely mistake, but a near-exact
// key in the right section is likelier still: the section mismatch costs this much.
#define WRONG_SECTION_COST 2

static size_t key_distance(const char *section, const char *key, const char *row_section,
                           const char *row_key) {
    size_t d = edit_distance(key, row_key);
    if (!section || strcmp(section, row_section) != 0) d += WRONG_SECTION_COST;
    return d;
}

// How far a name may be from a known one and still be called a typo of it.
static size_t typo_budget(const char *name) {
    size_t third = strlen(name) / 3;
    return third > 2 ? third : 2;
}

const char *config_schema_suggest(const char *section, const char *key, char *out, size_t out_len) {
    size_t best = (size_t)-1;
    const char *best_section = NULL, *best_key = NULL;
    const char *word = key ? key : section;
    for (size_t i = 0; i < config_key_count; i++) {
        const ConfigKey *row = &config_keys[i];
        // A lone section name may be a key written one level too high (`lr:` at the top).
        size_t d = key ? key_distance(section, key, row->section, row->key)
                       : edit_distance(section, row->key) + WRONG_SECTION_COST;
        if (d < best) best = d, best_section = row->section, best_key = row->key;
    }
    for (size_t i = 0; i < sizeof key_aliases / sizeof key_aliases[0]; i++) {
        size_t d = key ? key_distance(section, key, key_aliases[i].section, key_aliases[i].alias)
                       : edit_distance(section, key_aliases[i].alias) + WRONG_SECTION_COST;
        if (d < best) best = d, best_section = key_aliases[i].section, best_key = key_aliases[i].key;
    }
    if (!key) {
        for (size_t i = 0; i < config_section_count; i++) {
            size_t d = edit_distance(section, config_sections[i]);
            if (d < best) best = d, best_section = config_sections[i], best_key = NULL;
        }
    }
    if (!best_section || best > typo_budget(word)) return NULL;
    if (best_key)
        snprintf(out, out_len, "%s.%s", best_section, best_key);
    else
        snprintf(out, out_len, "%s", best_section);
    return out;
}
