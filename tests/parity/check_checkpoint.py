#!/usr/bin/env python3
"""torchvision loads a checkpoint amptrain wrote: every state_dict key present with its shape and dtype,
load_state_dict(strict=True) on the model part, and (with --expect) the weights equal bitwise those of a
reference safetensors file (the export that amptrain loaded before writing the checkpoint). A checkpoint of
a run with train.ema_decay also holds the EMA (module.<key>, n_averaged): torch.optim.swa_utils.AveragedModel
(use_buffers=True, as torchvision's ExponentialMovingAverage) loads it strictly, and so does the plain model
from its keys with module. stripped."""
import argparse
import sys

import torch
import torchvision
from safetensors.torch import load_file

p = argparse.ArgumentParser()
p.add_argument("checkpoint")
p.add_argument("--expect", help="safetensors file whose state_dict tensors must match exactly")
a = p.parse_args()

sd = load_file(a.checkpoint)
model_part = {k: v for k, v in sd.items() if not k.startswith(("amptrain.", "module.")) and k != "n_averaged"}
ema_part = {k: v for k, v in sd.items() if k.startswith("module.") or k == "n_averaged"}
net = torchvision.models.resnext50_32x4d()
ref = net.state_dict()
missing = sorted(set(ref) - set(model_part))
extra = sorted(set(model_part) - set(ref))
bad = [k for k in ref if k in model_part and (model_part[k].shape != ref[k].shape or model_part[k].dtype != ref[k].dtype)]
if missing or extra or bad:
    print(f"FAIL: missing {missing[:5]}, unexpected {extra[:5]}, wrong shape/dtype {bad[:5]}")
    sys.exit(1)
net.load_state_dict(model_part, strict=True)
print(f"torchvision resnext50_32x4d loaded {len(model_part)} tensors strictly from {a.checkpoint}")
momentum = [k for k in sd if k.startswith("amptrain.momentum.")]
print(f"plus {len(momentum)} momentum tensors")
if ema_part:
    averaged = torch.optim.swa_utils.AveragedModel(torchvision.models.resnext50_32x4d(), use_buffers=True)
    averaged.load_state_dict(ema_part, strict=True)
    plain = torchvision.models.resnext50_32x4d()
    plain.load_state_dict({k[len("module."):]: v for k, v in ema_part.items() if k != "n_averaged"}, strict=True)
    print(f"the EMA: AveragedModel loaded {len(ema_part)} tensors strictly (n_averaged "
          f"{int(averaged.n_averaged)}), and resnext50_32x4d the same without module.")
if a.expect:
    want = load_file(a.expect)
    diff = [k for k in ref if k.endswith(("weight", "bias")) and not torch.equal(model_part[k], want[k])]
    if diff:
        print(f"FAIL: {len(diff)} tensors differ from {a.expect}, e.g. {diff[:3]}")
        sys.exit(1)
    print(f"all parameters bitwise equal to {a.expect}")
x = torch.randn(2, 3, 224, 224)
net.eval()
with torch.no_grad():
    print("forward ok, logits", tuple(net(x).shape))
