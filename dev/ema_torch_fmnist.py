#!/usr/bin/env python3
"""ema_torch_fmnist.py IDX_DIR [--epochs 40] [--stop-after N] [--planes 32]: PyTorch's side of the
Fashion-MNIST EMA run (dev/fmnist_ema_runs.txt's emaD): the same model, recipe and EMA as

    amptrain configs/fashion_mnist.yaml train.epochs=40 data.augment=true data.crop_scale_min=0.5
        data.random_erase=0.25 train.label_smoothing=0.1 train.ema_decay=0.9999 train.ema_every=8

torchvision's ResNet with Bottleneck blocks [2, 2, 2, 2], groups 8, width per group 16, the stem and
stages PLANES wide (amptrain's model.planes), 10 classes, at 64x64; SGD lr 0.1 momentum 0.9 Nesterov,
weight decay 5e-4, one warm-up epoch then cosine per step; label smoothing 0.1; fp16 autocast with a
GradScaler; and torchvision's train.py EMA: ExponentialMovingAverage (AveragedModel, use_buffers=True)
with the decay adjusted by batch x every / epochs, updated every 8 steps, restarted through the warm-up.
The data: the IDX files centred on a black 32x32 canvas; training crops RandomResizedCrop(64, scale 0.5-1)
+ flip + RandomErasing(0.25) made on the GPU per sample (bilinear, no antialias); validation resizes to
73 and centre-crops 64. Prints one JSON line per epoch: the raw and the EMA top-1 and loss.
"""
import argparse
import gzip
import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.resnet import Bottleneck, ResNet

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(idx_dir, split, device):
    images = read_idx(os.path.join(idx_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(idx_dir, f"{split}-labels-idx1-ubyte.gz"))
    canvas = np.zeros((len(images), 32, 32), np.uint8)
    canvas[:, 2:30, 2:30] = images
    x = torch.tensor(canvas, device=device).float().div_(255).sub_(MEAN).div_(STD)
    return x[:, None].expand(-1, 3, -1, -1).contiguous(), torch.tensor(labels.astype(np.int64), device=device)


def model_of(planes, classes):
    m = ResNet(Bottleneck, [2, 2, 2, 2], groups=8, width_per_group=16, num_classes=classes)
    m.inplanes = planes
    m.conv1 = nn.Conv2d(3, planes, 7, 2, 3, bias=False)
    m.bn1 = nn.BatchNorm2d(planes)
    m.layer1 = m._make_layer(Bottleneck, planes, 2)
    m.layer2 = m._make_layer(Bottleneck, planes * 2, 2, stride=2)
    m.layer3 = m._make_layer(Bottleneck, planes * 4, 2, stride=2)
    m.layer4 = m._make_layer(Bottleneck, planes * 8, 2, stride=2)
    m.fc = nn.Linear(planes * 8 * Bottleneck.expansion, classes)
    for mod in m.modules():  # torchvision's initialisation
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(mod, nn.BatchNorm2d):
            nn.init.ones_(mod.weight), nn.init.zeros_(mod.bias)
    return m


def train_crops(x, g):
    """RandomResizedCrop(64, scale=(0.5, 1), ratio=(3/4, 4/3)) + horizontal flip, per sample."""
    n = x.shape[0]
    area = torch.empty(n, device=x.device).uniform_(0.5, 1.0, generator=g)
    log_r = torch.empty(n, device=x.device).uniform_(math.log(3 / 4), math.log(4 / 3), generator=g)
    r = log_r.exp()
    w = (area * r).sqrt().clamp(max=1.0)  # fractions of the canvas side
    h = (area / r).sqrt().clamp(max=1.0)
    cx = (torch.rand(n, device=x.device, generator=g) * (1 - w) + w / 2) * 2 - 1
    cy = (torch.rand(n, device=x.device, generator=g) * (1 - h) + h / 2) * 2 - 1
    flip = torch.where(torch.rand(n, device=x.device, generator=g) < 0.5, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3, device=x.device)
    theta[:, 0, 0], theta[:, 0, 2] = w * flip, cx
    theta[:, 1, 1], theta[:, 1, 2] = h, cy
    grid = F.affine_grid(theta, (n, 3, 64, 64), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def random_erase(x, g, p=0.25):
    """RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0) per sample (one try)."""
    n, _, side, _ = x.shape
    area = torch.empty(n, device=x.device).uniform_(0.02, 0.33, generator=g) * side * side
    r = torch.empty(n, device=x.device).uniform_(math.log(0.3), math.log(3.3), generator=g).exp()
    eh, ew = (area * r).sqrt().round(), (area / r).sqrt().round()
    ok = (torch.rand(n, device=x.device, generator=g) < p) & (eh < side) & (ew < side)
    y0 = (torch.rand(n, device=x.device, generator=g) * (side - eh + 1)).floor()
    x0 = (torch.rand(n, device=x.device, generator=g) * (side - ew + 1)).floor()
    i = torch.arange(side, device=x.device)
    rows = (i[None] >= y0[:, None]) & (i[None] < (y0 + eh)[:, None])
    cols = (i[None] >= x0[:, None]) & (i[None] < (x0 + ew)[:, None])
    mask = rows[:, :, None] & cols[:, None, :] & ok[:, None, None]
    return x.masked_fill(mask[:, None], 0.0)


def val_view(x):
    y = F.interpolate(x, size=73, mode="bilinear", antialias=True, align_corners=False)
    return y[:, :, 4:68, 4:68]


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    hits, loss = 0, 0.0
    for i in range(0, len(x), 1000):
        with torch.autocast("cuda", torch.float16):
            logits = model(val_view(x[i:i + 1000])).float()
        loss += F.cross_entropy(logits, y[i:i + 1000], reduction="sum").item()
        hits += (logits.argmax(1) == y[i:i + 1000]).sum().item()
    model.train()
    return hits / len(x), loss / len(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("idx_dir")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--stop-after", type=int, default=0, help="end after this many epochs of the schedule")
    p.add_argument("--planes", type=int, default=32)
    p.add_argument("--ema-decay", type=float, default=0.9999)
    p.add_argument("--ema-every", type=int, default=8)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    g = torch.Generator(device=dev)
    g.manual_seed(a.seed)
    xtr, ytr = load(a.idx_dir, "train", dev)
    xva, yva = load(a.idx_dir, "t10k", dev)
    batch, steps_per_epoch = 128, len(xtr) // 128 + (len(xtr) % 128 > 0)
    model = model_of(a.planes, 10).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    total, warmup = a.epochs * steps_per_epoch, steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))))
    scaler = torch.amp.GradScaler("cuda")
    alpha = min(1.0, (1.0 - a.ema_decay) * batch * a.ema_every / a.epochs)
    decay = 1.0 - alpha
    ema = torch.optim.swa_utils.AveragedModel(
        model, dev, lambda avg, cur, n: decay * avg + (1 - decay) * cur, use_buffers=True)
    crit = nn.CrossEntropyLoss(label_smoothing=0.1)
    for epoch in range(1, (a.stop_after or a.epochs) + 1):
        order = torch.randperm(len(xtr), device=dev, generator=g)
        for i in range(steps_per_epoch):
            idx = order[i * batch:(i + 1) * batch]
            x = random_erase(train_crops(xtr[idx], g), g).contiguous(memory_format=torch.channels_last)
            with torch.autocast("cuda", torch.float16):
                loss = crit(model(x), ytr[idx])
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            sched.step()
            if i % a.ema_every == 0:
                ema.update_parameters(model)
                if epoch <= 1:  # train.py: epoch < lr_warmup_epochs (here one warm-up epoch)
                    ema.n_averaged.fill_(0)
        top1, vloss = evaluate(model, xva, yva)
        etop1, eloss = evaluate(ema.module, xva, yva)
        print(json.dumps({"epoch": epoch, "top1": round(100 * top1, 2), "loss": round(vloss, 4),
                          "ema_top1": round(100 * etop1, 2), "ema_loss": round(eloss, 4), "ema_decay": decay}),
              flush=True)


if __name__ == "__main__":
    main()
