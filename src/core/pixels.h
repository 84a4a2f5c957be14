// pixels.h - how raw image bytes become the network's input.
//
// Every dataset hands out images as uint8 RGB, (side, side, 3), HWC, with the per-channel mean and
// standard deviation of torchvision's Normalize on [0, 1] pixels. Batches cross to the device as these
// bytes (a quarter of float32's), and the first op of the forward pass (Backend.input_normalize) turns
// them into the activation dtype: value = (byte / 255 - mean[ch]) / std[ch] = byte * scale[ch] + shift[ch].
#ifndef AMPTRAIN_PIXELS_H
#define AMPTRAIN_PIXELS_H

typedef struct PixelNorm {
    float mean[3], std[3];  // R, G, B, on [0, 1] pixels
} PixelNorm;

// The same normalisation as one multiply-add per value.
typedef struct PixelAffine {
    float scale[3], shift[3];
} PixelAffine;

static inline PixelAffine pixel_affine_of(const PixelNorm *n) {
    PixelAffine a;
    for (int ch = 0; ch < 3; ch++) {
        a.scale[ch] = 1.0f / (255.0f * n->std[ch]);
        a.shift[ch] = -n->mean[ch] / n->std[ch];
    }
    return a;
}

// Images already normalised (float32 inputs of tests and the parity check): the identity.
static inline PixelAffine pixel_affine_identity(void) {
    PixelAffine a = {{1.0f, 1.0f, 1.0f}, {0.0f, 0.0f, 0.0f}};
    return a;
}

#endif
