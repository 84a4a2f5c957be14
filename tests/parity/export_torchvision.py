#!/usr/bin/env python3
"""Export a seeded torchvision ResNeXt-50 32x4d and one batch, with PyTorch's logits, loss and gradients,
to safetensors for tests/gpu/test_torch_parity.c (run on the device machine, which has torch).

Tensors written (fp32 unless noted):
  <state_dict key>            every parameter and buffer, torchvision names and layouts (I64 counters)
  parity.input                (N, 224, 224, 3) the batch, NHWC (amptrain's activation layout)
  parity.labels               (N,) int32
  parity.fp32.logits / .loss  forward in fp32 (TF32 off), train mode (batch statistics)
  parity.fp32.grad.<param>    gradient of the mean cross-entropy loss
  parity.amp.logits / .loss / .grad.<param>   the same under torch.autocast(float16), backward of
                              loss x parity.amp.scale (as GradScaler does, so fp16 gradients do not
                              underflow), gradients divided by it again
  parity.bf16.logits / .loss / .grad.<param>  the same under torch.autocast(bfloat16), backward of the
                              loss itself (bf16 autocast runs without a GradScaler)
  parity.fp64.logits / .loss / .grad.<param>  the same in float64 (stored as fp32): the exact answer that
                              both fp32 implementations are measured against
  parity.torch_fp32_error     (4,) torch fp32's own relative error against fp64: logits, loss, gradients;
                              then the cosine between its gradient vector and fp64's
  parity.torch_amp_error      (4,) the same for torch AMP
  parity.torch_bf16_error     (4,) the same for torch bf16 autocast
"""
import argparse

import torch
import torchvision
from safetensors.torch import save_file

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--batch", type=int, default=4)
p.add_argument("--seed", type=int, default=1234)
a = p.parse_args()

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(a.seed)
net = torchvision.models.resnext50_32x4d().cuda().train()
x = torch.randn(a.batch, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (a.batch,), device="cuda")
state = {k: v.detach().clone() for k, v in net.state_dict().items()}  # before any forward
AMP_SCALE = 1024.0
out_scale = torch.tensor([AMP_SCALE])
out = {k: v.contiguous().cpu() for k, v in state.items()}
out["parity.input"] = x.permute(0, 2, 3, 1).contiguous().cpu()
out["parity.labels"] = y.to(torch.int32).cpu()
out["parity.amp.scale"] = out_scale

# (tag, autocast dtype or None, parameter dtype, loss scale)
PASSES = (("fp32", None, torch.float32, 1.0), ("amp", torch.float16, torch.float32, AMP_SCALE),
          ("bf16", torch.bfloat16, torch.float32, 1.0), ("fp64", None, torch.float64, 1.0))
for tag, autocast, dtype, scale in PASSES:
    net = net.to(dtype)
    net.load_state_dict(state)  # identical weights and running stats for every pass
    net.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=autocast or torch.float16, enabled=autocast is not None):
        logits = net(x.to(dtype))
        loss = torch.nn.functional.cross_entropy(logits.float() if autocast else logits, y)
    (loss * scale).backward()
    out[f"parity.{tag}.logits"] = logits.float().detach().cpu()
    out[f"parity.{tag}.loss"] = loss.detach().float().reshape(1).cpu()
    for name, param in net.named_parameters():
        out[f"parity.{tag}.grad.{name}"] = (param.grad.float() / scale).contiguous().cpu()
    print(f"{tag}: loss {loss.item():.6f}")

def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()

def cosine(a, b):
    a, b = a.double(), b.double()
    return (a.dot(b) / (a.norm() * b.norm())).item()

grads64 = torch.cat([out[k].flatten() for k in out if k.startswith("parity.fp64.grad.")])
for tag in ("fp32", "amp", "bf16"):
    grads = torch.cat([out[k].flatten() for k in out if k.startswith(f"parity.{tag}.grad.")])
    err = [rel(out[f"parity.{tag}.logits"], out["parity.fp64.logits"]),
           rel(out[f"parity.{tag}.loss"], out["parity.fp64.loss"]), rel(grads, grads64), cosine(grads, grads64)]
    out[f"parity.torch_{tag}_error"] = torch.tensor(err, dtype=torch.float32)
    print(f"torch {tag} vs fp64: logits {err[0]:.2e} loss {err[1]:.2e} gradients {err[2]:.2e} cosine {err[3]:.6f}")
save_file(out, a.out)
print(f"wrote {a.out}: {len(out)} tensors")
