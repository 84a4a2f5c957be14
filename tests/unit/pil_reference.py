#!/usr/bin/env python3
"""pil_reference.py MANIFEST - Pillow's answers for tests/unit/test_images_pil.c.

Each manifest line is a job; each output line is "LINE_NO MAX_ABS_DIFF" between Pillow's bytes and the
bytes amptrain wrote, and for a decode, when torchvision is installed, a third number: the same against
torchvision.io.decode_jpeg (CPU, mode RGB):
  decode JPEG OURS W H            Image.open(JPEG).convert("RGB") vs OURS (raw RGB, W x H)
  val RAW W H SIDE OURS           torchvision Resize(round(SIDE*256/224)) + CenterCrop(SIDE) on a PIL image
  crop RAW W H TOP LEFT CH CW SIDE OURS   torchvision resized_crop(TOP, LEFT, CH, CW, SIDE) on a PIL image
RAW is amptrain's decoded image, so the resize is compared on identical input. The torchvision numbers
(output size, crop offsets) are written out here as torchvision 0.15 computes them for PIL images.
"""
import sys

from PIL import Image

try:
    import torchvision.io as tvio
except ImportError:
    tvio = None


def max_diff(image, path):
    ours = open(path, "rb").read()
    theirs = image.tobytes()
    if len(ours) != len(theirs):
        return 999
    return max((abs(a - b) for a, b in zip(ours, theirs)), default=0)


def torchvision_diff(jpeg, path):
    """torchvision.io.decode_jpeg's pixels (HWC bytes) against OURS; None without torchvision."""
    if tvio is None:
        return None
    pixels = tvio.decode_jpeg(tvio.read_file(jpeg), mode=tvio.ImageReadMode.RGB).permute(1, 2, 0).contiguous()
    theirs = bytes(pixels.flatten().tolist())
    ours = open(path, "rb").read()
    if len(ours) != len(theirs):
        return 999
    return max((abs(a - b) for a, b in zip(ours, theirs)), default=0)


def raw(path, w, h):
    return Image.frombytes("RGB", (w, h), open(path, "rb").read())


def val(img, side):
    s = round(side * 256 / 224)
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = s, int(s * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    img = img.resize((new_w, new_h), Image.BILINEAR)
    top = int(round((new_h - side) / 2.0))
    left = int(round((new_w - side) / 2.0))
    return img.crop((left, top, left + side, top + side))


def main():
    for n, line in enumerate(open(sys.argv[1]), 1):
        f = line.split()
        if f[0] == "decode":
            d = max_diff(Image.open(f[1]).convert("RGB"), f[2])
            t = torchvision_diff(f[1], f[2])
            if t is not None:
                print(n, d, t)
                continue
        elif f[0] == "val":
            d = max_diff(val(raw(f[1], int(f[2]), int(f[3])), int(f[4])), f[5])
        else:
            img = raw(f[1], int(f[2]), int(f[3]))
            top, left, ch, cw, side = map(int, f[4:9])
            d = max_diff(img.crop((left, top, left + cw, top + ch)).resize((side, side), Image.BILINEAR), f[9])
        print(n, d)


main()
