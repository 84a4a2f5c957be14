#!/usr/bin/env python3
"""Export PyTorch's loss side of the torchvision recipe for tests/gpu/test_recipe_loss.c (run on the device
machine, which has torch and torchvision): torch.nn.functional.cross_entropy with label_smoothing on hard and
MixUp targets, and torchvision.transforms.v2.MixUp / CutMix on a batch, with lambda and CutMix's box centre
fixed to given draws (the Beta sample and torch.randint replaced for the call), so that amptrain's box rule
and mixing op can be held to torchvision's on the same draws.

Tensors written (fp32 unless noted):
  xent.logits            (N, C) random logits
  xent.labels            (N,) int32
  xent.cases             (K, 2) per case: label_smoothing, lambda of MixUp's targets (-1: hard labels)
  xent.K.fp32.loss/grad  (1,), (N, C): the mean loss and d loss / d logits, computed in float64
  xent.K.fp16.loss/grad  the same on the logits rounded to fp16 (amptrain's AMP logits)
  mix.images             (B, H, W, 3) a normalised batch, NHWC (amptrain's layout), H != W
  mix.labels             (B,) int32
  mix.cases              (M, 4) per case: 1 for CutMix (0 MixUp), lambda, r_x, r_y (CutMix's centre)
  mix.K.images           (B, H, W, 3) torchvision's output on mix.images (fp32, as the reference mixes)
  mix.K.images_fp16      the same output rounded to fp16 (what autocast hands the stem)
  mix.K.targets          (B, classes) torchvision's soft targets
"""
import argparse

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torchvision.transforms import v2

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--seed", type=int, default=4321)
a = p.parse_args()
torch.manual_seed(a.seed)
out = {}

# ---- cross-entropy with label smoothing, hard and mixed targets ------------------------------------------
N, C = 8, 1000
logits = torch.randn(N, C) * 3
labels = torch.randint(0, C, (N,))
labels[3] = labels[2]  # a row whose rolled label is its own
out["xent.logits"] = logits
out["xent.labels"] = labels.to(torch.int32)


class FixedBeta:
    """Stands in for the transform's Beta distribution: .sample(()) gives the chosen lambda."""

    def __init__(self, lam):
        self.lam = lam

    def sample(self, shape=()):
        return torch.tensor([self.lam])


def exact(value):
    """The float32 value of a draw, as a Python float: what torch's fp32 Beta sample hands the transform."""
    return float(torch.tensor(value, dtype=torch.float32))


def mixup_targets(lab, lam, classes):
    mixup = v2.MixUp(alpha=1.0, num_classes=classes)
    mixup._dist = FixedBeta(lam)
    _, targets = mixup(torch.zeros(lab.shape[0], 3, 4, 4), lab)
    return targets


xent_cases = [(0.0, -1.0), (0.1, -1.0), (0.0, exact(0.3)), (0.1, exact(0.3)), (0.1, exact(0.8125))]
out["xent.cases"] = torch.tensor(xent_cases, dtype=torch.float32)
for k, (smoothing, lam) in enumerate(xent_cases):
    for tag, z in (("fp32", logits), ("fp16", logits.half().float())):
        z64 = z.double().requires_grad_()
        target = labels if lam < 0 else mixup_targets(labels, lam, C).double()
        loss = F.cross_entropy(z64, target, label_smoothing=smoothing)
        loss.backward()
        out[f"xent.{k}.{tag}.loss"] = loss.detach().float().reshape(1)
        out[f"xent.{k}.{tag}.grad"] = z64.grad.float()
    print(f"xent case {k}: smoothing {smoothing} lambda {lam}: loss {out[f'xent.{k}.fp32.loss'].item():.6f}")

# ---- MixUp and CutMix on fixed draws --------------------------------------------------------------------
B, H, W, CLASSES = 6, 24, 40, 10
images = torch.randn(B, 3, H, W)  # NCHW, as torchvision's batch
mix_labels = torch.randint(0, CLASSES, (B,))
mix_labels[4] = mix_labels[3]
out["mix.images"] = images.permute(0, 2, 3, 1).contiguous()
out["mix.labels"] = mix_labels.to(torch.int32)
# (CutMix, lambda, r_x, r_y): boxes inside, against each edge, in a corner, and empty (lambda 1).
mix_cases = [(0, exact(0.3), 0, 0), (0, exact(0.137), 0, 0), (1, exact(0.36), 30, 3), (1, exact(0.5), 10, 10),
             (1, exact(0.05), 0, 23), (1, exact(0.9), 39, 12), (1, 1.0, 20, 12)]
out["mix.cases"] = torch.tensor(mix_cases, dtype=torch.float32)
real_randint = torch.randint
for k, (cutmix, lam, r_x, r_y) in enumerate(mix_cases):
    t = v2.CutMix(alpha=1.0, num_classes=CLASSES) if cutmix else v2.MixUp(alpha=1.0, num_classes=CLASSES)
    t._dist = FixedBeta(lam)
    centre = iter([r_x, r_y])  # CutMix draws r_x = randint(W), then r_y = randint(H)
    torch.randint = lambda *args, **kwargs: torch.tensor([next(centre)])
    try:
        mixed, targets = t(images.clone(), mix_labels)
    finally:
        torch.randint = real_randint
    if cutmix:
        assert next(centre, None) is None, "CutMix did not draw its centre as expected"
    out[f"mix.{k}.images"] = mixed.permute(0, 2, 3, 1).contiguous()
    out[f"mix.{k}.images_fp16"] = mixed.half().float().permute(0, 2, 3, 1).contiguous()
    out[f"mix.{k}.targets"] = targets.float()
    print(f"mix case {k}: {'CutMix' if cutmix else 'MixUp'} lambda {lam} centre ({r_x}, {r_y}): "
          f"{(mixed != images).any(dim=1).float().mean().item():.3f} of the pixels changed")

save_file(out, a.out)
print(f"wrote {a.out}: {len(out)} tensors")
