#!/usr/bin/env python3
"""model.init and --eval against torchvision itself (run on the device machine, which has torch and
torchvision; nothing is downloaded).

1. torchvision.models.resnext50_32x4d() (1000 classes, its own random initialisation, BN running statistics
   settled on random batches so that evaluation sees normalised activations) is saved with
   safetensors.torch.save_file(net.state_dict(), FILE), as a user exports pretrained weights.
2. Start-up: amptrain with model.num_classes=10 model.init=FILE trains 2 steps on synthetic data and says
   "model.init: 318 tensors from FILE; fc.weight, fc.bias left at their initial values (the file has 1000
   classes, this model 10)".
3. Evaluation: a validation folder of grayscale JPEGs made of 8x8-aligned constant blocks at quality 100 (a
   JPEG decodes those exactly, so amptrain's pixels and PIL's are the source's), 232 x 232 so that the V2
   recipe's Resize(232) is the identity on both sides and CenterCrop(224) cuts the same window. A second
   file holds the first model's state_dict and, beside it, torch.optim.swa_utils.AveragedModel's state_dict
   of another model (module.*, n_averaged): what --model-ema keeps. `amptrain --eval
   configs/resnext50_32x4d_torchvision_v2.yaml` (fp32, TF32 off) on that folder must give torchvision's
   eval-mode cross-entropy of both models (the model's and the EMA weights') within fp32 tolerance.

usage: recipe_finetune.py [--amptrain build/amptrain] [--work DIR]; exit 0 when every check passes.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torchvision
from PIL import Image
from safetensors.torch import save_file
from torch.optim.swa_utils import AveragedModel
from torchvision import transforms

REL_TOL = 1e-4  # fp32 forward of 50 layers on two libraries' kernels, TF32 off on both

p = argparse.ArgumentParser()
p.add_argument("--amptrain", default="build/amptrain")
p.add_argument("--work", default="/tmp/recipe_finetune")
p.add_argument("--recipe", default="configs/resnext50_32x4d_torchvision_v2.yaml")
a = p.parse_args()
shutil.rmtree(a.work, ignore_errors=True)
os.makedirs(a.work)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def settled_model(seed):
    """torchvision's ResNeXt-50 with its own initialisation and BN running statistics averaged over random
    batches (momentum None: the cumulative mean), as trained weights would carry."""
    torch.manual_seed(seed)
    net = torchvision.models.resnext50_32x4d().to(device)
    bns = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    net.train()
    with torch.no_grad():
        for _ in range(4):
            net(torch.randn(16, 3, 224, 224, device=device))
    for bn in bns:
        bn.momentum = 0.1
    return net.eval()


def state(module):
    return {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}


def run(args):
    r = subprocess.run([a.amptrain] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout.rstrip())
    return r.returncode, r.stdout


# 1. torchvision's file
net = settled_model(0)
tv_file = os.path.join(a.work, "resnext50_32x4d.safetensors")
save_file(state(net), tv_file)
print(f"wrote {tv_file}: {len(net.state_dict())} tensors")

# 2. a fine-tuning start: the classifier of 10 classes keeps its own draw
rc, out = run(["configs/resnext50_32x4d_imagenet.yaml", "model.num_classes=10", f"model.init={tv_file}",
               "data.batch_size=8", "data.train_size=64", "data.val_size=0", "train.steps=2", "train.warmup_steps=0",
               "log.progress=never", "log.metrics=", "checkpoint.dir=", "checkpoint.every=0"])
line = (f"model.init: 318 tensors from {tv_file}; fc.weight, fc.bias left at their initial values (the file has "
        "1000 classes, this model 10)")
check(rc == 0 and line in out and "summary: 2 steps" in out, f"fine-tuning start: exit {rc}, the classifier line")

# 3. evaluation of the model and of its EMA copy against torchvision on the same images
rng = np.random.default_rng(0)
images, labels = [], []
for c in range(2):
    # the classes are train/'s folders (amptrain's imagefolder, as torchvision's ImageFolder on each split)
    for split in ("train", "val"):
        os.makedirs(os.path.join(a.work, "images", split, f"c{c}"))
    for i in range(4):
        blocks = rng.integers(16, 240, (29, 29), dtype=np.uint8)  # 232 = 29 blocks of 8
        pixels = np.kron(blocks, np.ones((8, 8), dtype=np.uint8))
        for split in ("train", "val"):
            path = os.path.join(a.work, "images", split, f"c{c}", f"{i}.jpg")
            Image.fromarray(pixels, "L").save(path, quality=100)
        decoded = np.asarray(Image.open(path))
        check(np.array_equal(decoded, pixels), f"{path} decodes to its blocks exactly")
        images.append(path)
        labels.append(c)
ema_net = AveragedModel(settled_model(1))
ema_file = os.path.join(a.work, "resnext50_32x4d_ema.safetensors")
save_file({**state(net), **state(ema_net)}, ema_file)
check(any(k.startswith("module.") for k in ema_net.state_dict()) and "n_averaged" in ema_net.state_dict(),
      "AveragedModel's state_dict names its tensors module.* beside n_averaged")

# torchvision's reference train.py evaluation transform for the V2 recipe (ImageFolder's loader: RGB)
val = transforms.Compose([transforms.Resize(232, interpolation=transforms.InterpolationMode.BILINEAR),
                          transforms.CenterCrop(224), transforms.ToTensor(),
                          transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
x = torch.stack([val(Image.open(f).convert("RGB")) for f in images]).to(device)
y = torch.tensor(labels, device=device)
with torch.no_grad():
    want = {"model": torch.nn.functional.cross_entropy(net(x), y).item(),
            "ema": torch.nn.functional.cross_entropy(ema_net.module.eval()(x), y).item()}

metrics = os.path.join(a.work, "eval.jsonl")
rc, out = run(["--eval", a.recipe, f"data.path={os.path.join(a.work, 'images')}", f"model.init={ema_file}",
               f"checkpoint.dir={os.path.join(a.work, 'run')}", f"log.metrics={metrics}", "data.batch_size=8",
               "amp.enabled=false", "cudnn.tf32=false", "cudnn.matmul_tf32=false", "log.progress=never"])
check(rc == 0, f"amptrain --eval exit {rc}")
records = {}
if os.path.exists(metrics):
    for text in open(metrics):
        r = json.loads(text)
        records[r.get("weights")] = r
for weights, loss in want.items():
    r = records.get(weights)
    if r is None or r.get("loss") is None:
        check(False, f"--eval reported no loss for the {weights} weights")
        continue
    rel = abs(r["loss"] - loss) / abs(loss)
    check(rel < REL_TOL and r["samples"] == len(images),
          f"{weights} weights: amptrain loss {r['loss']:.6f}, torchvision {loss:.6f}, relative difference "
          f"{rel:.2e} (< {REL_TOL:g}), {r['samples']} samples")

print(f"recipe_finetune: {'FAIL: ' + '; '.join(failures) if failures else 'all checks passed'}")
sys.exit(1 if failures else 0)
