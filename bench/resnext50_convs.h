// resnext50_convs.h - ResNeXt-50 32x4d's convolution shapes (all but the stem's), with how many of each
// the model has: the benches that time convolutions per shape share this table.
#ifndef AMPTRAIN_RESNEXT50_CONVS_H
#define AMPTRAIN_RESNEXT50_CONVS_H

typedef struct Resnext50Conv {
    const char *name;
    int side;  // input h = w
    int c_in, c_out, k, stride, groups;
    int count;  // convolutions of this shape in ResNeXt-50 32x4d (the stem's has no data gradient)
} Resnext50Conv;

// ResNeXt-50 32x4d's convolutions with a data gradient: a stage's stride is on its first block's conv2 and
// downsample; conv2 is grouped (32 groups).
static const Resnext50Conv RESNEXT50_CONVS[] = {
    {"layer1.0 conv1", 56, 64, 128, 1, 1, 1, 1},         {"layer1 conv1", 56, 256, 128, 1, 1, 1, 2},
    {"layer1 conv2", 56, 128, 128, 3, 1, 32, 3},         {"layer1 conv3", 56, 128, 256, 1, 1, 1, 3},
    {"layer1.0 downsample", 56, 64, 256, 1, 1, 1, 1},    {"layer2.0 conv1", 56, 256, 256, 1, 1, 1, 1},
    {"layer2 conv1", 28, 512, 256, 1, 1, 1, 3},          {"layer2.0 conv2", 56, 256, 256, 3, 2, 32, 1},
    {"layer2 conv2", 28, 256, 256, 3, 1, 32, 3},         {"layer2 conv3", 28, 256, 512, 1, 1, 1, 4},
    {"layer2.0 downsample", 56, 256, 512, 1, 2, 1, 1},   {"layer3.0 conv1", 28, 512, 512, 1, 1, 1, 1},
    {"layer3 conv1", 14, 1024, 512, 1, 1, 1, 5},         {"layer3.0 conv2", 28, 512, 512, 3, 2, 32, 1},
    {"layer3 conv2", 14, 512, 512, 3, 1, 32, 5},         {"layer3 conv3", 14, 512, 1024, 1, 1, 1, 6},
    {"layer3.0 downsample", 28, 512, 1024, 1, 2, 1, 1},  {"layer4.0 conv1", 14, 1024, 1024, 1, 1, 1, 1},
    {"layer4 conv1", 7, 2048, 1024, 1, 1, 1, 2},         {"layer4.0 conv2", 14, 1024, 1024, 3, 2, 32, 1},
    {"layer4 conv2", 7, 1024, 1024, 3, 1, 32, 2},        {"layer4 conv3", 7, 1024, 2048, 1, 1, 1, 3},
    {"layer4.0 downsample", 14, 1024, 2048, 1, 2, 1, 1},
};
#define RESNEXT50_CONV_COUNT ((int)(sizeof RESNEXT50_CONVS / sizeof RESNEXT50_CONVS[0]))

#endif
