#!/usr/bin/env python3
"""pil_reference.py MANIFEST - Pillow's answers for tests/unit/test_images_pil.c.

Each manifest line is a job; each output line is "LINE_NO MAX_ABS_DIFF" between Pillow's bytes and the
bytes amptrain wrote, and for a decode, when torchvision is installed, a third number: the same against
torchvision.io.decode_jpeg (CPU, mode RGB):
  decode JPEG OURS W H            Image.open(JPEG).convert("RGB") vs OURS (raw RGB, W x H)
  val RAW W H RESIZE SIDE OURS    torchvision Resize(RESIZE) + CenterCrop(SIDE) on a PIL image
  crop RAW W H TOP LEFT CH CW SIDE OURS   torchvision resized_crop(TOP, LEFT, CH, CW, SIDE) on a PIL image
  ta OP BIN SIGN MAGNITUDE FILTER RAW W H OURS
                                  TrivialAugmentWide's op OP (torchvision's name) with MAGNITUDE on RAW, by
                                  the PIL calls torchvision's _apply_op makes for a PIL image; FILTER is
                                  nearest or bilinear. Where torchvision is installed, a third number: its
                                  own _apply_op against OURS, or 999 when its magnitude for (OP, BIN, SIGN)
                                  differs from MAGNITUDE (BIN -1: an op without magnitudes)
RAW is amptrain's decoded image, so the resize is compared on identical input. The torchvision numbers
(output size, crop offsets, affine matrices) are written out here as torchvision 0.15 computes them for
PIL images.
"""
import math
import sys

from PIL import Image, ImageEnhance, ImageOps

try:
    import torchvision.io as tvio
    from torchvision.transforms import InterpolationMode, autoaugment
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


def val(img, s, side):
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = s, int(s * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    img = img.resize((new_w, new_h), Image.BILINEAR)
    top = int(round((new_h - side) / 2.0))
    left = int(round((new_w - side) / 2.0))
    return img.crop((left, top, left + side, top + side))


def inverse_affine(center, angle, translate, scale, shear):
    """torchvision.transforms.functional._get_inverse_affine_matrix."""
    rot = math.radians(angle)
    sx = math.radians(shear[0])
    sy = math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = [d, -b, 0.0, -c, a, 0.0]
    matrix = [x / scale for x in matrix]
    matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty)
    matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty)
    matrix[2] += cx
    matrix[5] += cy
    return matrix


def affine(img, translate, shear, resample, center=None):
    """F.affine(img, angle=0, translate, scale=1, shear, interpolation, fill=None, center) on a PIL image."""
    w, h = img.size
    if center is None:
        center = [w * 0.5, h * 0.5]
    matrix = inverse_affine(center, 0.0, translate, 1.0, shear)
    return img.transform((w, h), Image.AFFINE, matrix, resample, fillcolor=(0, 0, 0))


def ta_op(img, op, m, resample):
    """torchvision.transforms.autoaugment._apply_op(img, op, m, interpolation, fill=None), PIL path."""
    if op == "ShearX":
        return affine(img, [0, 0], [math.degrees(math.atan(m)), 0.0], resample, center=[0, 0])
    if op == "ShearY":
        return affine(img, [0, 0], [0.0, math.degrees(math.atan(m))], resample, center=[0, 0])
    if op == "TranslateX":
        return affine(img, [int(m), 0], [0.0, 0.0], resample)
    if op == "TranslateY":
        return affine(img, [0, int(m)], [0.0, 0.0], resample)
    if op == "Rotate":
        return img.rotate(m, resample, False, None, fillcolor=(0, 0, 0))
    enhance = {"Brightness": ImageEnhance.Brightness, "Color": ImageEnhance.Color,
               "Contrast": ImageEnhance.Contrast, "Sharpness": ImageEnhance.Sharpness}
    if op in enhance:
        return enhance[op](img).enhance(1.0 + m)
    if op == "Posterize":
        return ImageOps.posterize(img, int(m))
    if op == "Solarize":
        return ImageOps.solarize(img, m)
    if op == "AutoContrast":
        return ImageOps.autocontrast(img)
    if op == "Equalize":
        return ImageOps.equalize(img)
    assert op == "Identity", op
    return img.copy()


def torchvision_ta_diff(img, op, bin_, sign, m, filter_, path):
    """torchvision's own magnitude and _apply_op against OURS; None without torchvision."""
    if tvio is None:
        return None
    if bin_ >= 0:
        magnitudes, signed = autoaugment.TrivialAugmentWide()._augmentation_space(31)[op]
        theirs = float(magnitudes[bin_].item())
        if signed and sign:
            theirs *= -1.0
        if theirs != m:
            return 999
    mode = InterpolationMode.NEAREST if filter_ == "nearest" else InterpolationMode.BILINEAR
    return max_diff(autoaugment._apply_op(img, op, m, interpolation=mode, fill=None), path)


def main():
    for n, line in enumerate(open(sys.argv[1]), 1):
        f = line.split()
        if f[0] == "decode":
            d = max_diff(Image.open(f[1]).convert("RGB"), f[2])
            t = torchvision_diff(f[1], f[2])
            if t is not None:
                print(n, d, t)
                continue
        elif f[0] == "ta":
            op, bin_, sign, m, filter_ = f[1], int(f[2]), int(f[3]), float(f[4]), f[5]
            img = raw(f[6], int(f[7]), int(f[8]))
            resample = Image.NEAREST if filter_ == "nearest" else Image.BILINEAR
            d = max_diff(ta_op(img, op, m, resample), f[9])
            t = torchvision_ta_diff(img, op, bin_, sign, m, filter_, f[9])
            if t is not None:
                print(n, d, t)
                continue
        elif f[0] == "val":
            d = max_diff(val(raw(f[1], int(f[2]), int(f[3])), int(f[4]), int(f[5])), f[6])
        else:
            img = raw(f[1], int(f[2]), int(f[3]))
            top, left, ch, cw, side = map(int, f[4:9])
            d = max_diff(img.crop((left, top, left + cw, top + ch)).resize((side, side), Image.BILINEAR), f[9])
        print(n, d)


main()
