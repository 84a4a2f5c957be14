// image_job.h - one encoded image and the geometry that turns it into a (side, side, 3) u8 training input,
// for a backend that decodes (backend_ops.def input_decode): the source rectangle `box` resized to (out_w, out_h)
// with Pillow's antialiased BILINEAR, of which the window `win` (side x side) is kept, mirrored left-right
// when `mirror`. Both of torchvision's ImageNet transforms take this form (image/image_transform.h):
//   train: box = RandomResizedCrop's box, out = (side, side), win = all of it, mirror = the flip's coin
//   val:   box = the whole image, out = Resize(round(side * 256 / 224)) of the shorter side,
//          win = CenterCrop(side), mirror = 0
// A training sample may then be augmented (`augment`): drawn by the loader, applied by the decoder after the
// geometry, on the (side, side, 3) bytes.
#ifndef AMPTRAIN_IMAGE_JOB_H
#define AMPTRAIN_IMAGE_JOB_H

// The most pixels an image's header may claim: the ceiling of data.max_image_pixels and its default
// (Pillow's decompression-bomb limit); image/image_decode.h says how they are used.
#define IMAGE_MAX_PIXELS (1L << 30)
#define IMAGE_DEFAULT_MAX_PIXELS 89478485L  // 1024 * 1024 * 1024 / 4 / 3, as Pillow has it

#include <stddef.h>
#include <stdint.h>

// A rectangle of pixels: rows top .. top+height-1, columns left .. left+width-1.
typedef struct ImageRect {
    int top, left, height, width;
} ImageRect;

typedef struct ImageGeometry {
    ImageRect box;     // in the whole image's pixels
    int out_w, out_h;  // box resized to this
    ImageRect win;     // the part of the resized box kept: the input is (win.height, win.width, 3)
    int mirror;        // 1: mirrored left-right
} ImageGeometry;

// TrivialAugmentWide's draw and RandomErasing's box for one sample (image/image_augment.h draws them,
// image_augment_draw, and says how they apply, image_augment_run). All zero: nothing (Identity, no box).
typedef struct ImageJobAugment {
    int op;        // AugmentOp (image/image_augment_ops.h); 0 is Identity
    int bin;       // its magnitude bin, 0..30, or -1 for an op without magnitudes
    int negative;  // 1: the magnitude's sign flipped (signed ops only)
    int filter;    // AugmentFilter of the geometric ops: 0 nearest, 1 bilinear
    int erase;     // 1: erase_box is set to erase_fill after the op
    ImageRect erase_box;
    uint8_t erase_fill[3];  // one byte per channel (image_erase_byte)
} ImageJobAugment;

typedef struct ImageJob {
    const uint8_t *bytes;  // the JPEG, host memory
    size_t len;
    int sample;  // the dataset sample the bytes are (a replacement's when the one asked for was unreadable)
    int width, height;  // the image's size, from its header
    ImageGeometry geometry;
    ImageJobAugment augment;  // applied after the geometry
} ImageJob;

#endif
