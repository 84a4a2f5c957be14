#!/usr/bin/env python3
"""Export a seeded torchvision ResNeXt-50 32x4d and one batch, with PyTorch's logits, loss and gradients,
to safetensors for tests/gpu/test_torch_parity.c (run on the device machine, which has torch).

Tensors written (fp32 unless noted):
  <state_dict key>            every parameter and buffer, torchvision names and layouts (I64 counters)
  parity.input                (N, 224, 224, 3) the batch, NHWC (amptrain's activation layout)
  parity.labels               (N,) int32
  parity.fp32.logits / .loss  forward in fp32 (TF32 off), train mode (batch statistics)
  parity.fp32.grad.<param>    gradient of the mean cross-entropy loss
  parity.amp.logits / .loss / .grad.<param>   the same under torch.autocast(float16), no loss scaling
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
out = {k: v.contiguous().cpu() for k, v in state.items()}
out["parity.input"] = x.permute(0, 2, 3, 1).contiguous().cpu()
out["parity.labels"] = y.to(torch.int32).cpu()

for tag, amp in (("fp32", False), ("amp", True)):
    net.load_state_dict(state)  # identical weights and running stats for both passes
    net.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits = net(x)
        loss = torch.nn.functional.cross_entropy(logits.float(), y)
    loss.backward()
    out[f"parity.{tag}.logits"] = logits.float().detach().cpu()
    out[f"parity.{tag}.loss"] = loss.detach().reshape(1).cpu()
    for name, param in net.named_parameters():
        out[f"parity.{tag}.grad.{name}"] = param.grad.float().contiguous().cpu()
    print(f"{tag}: loss {loss.item():.6f}")

save_file(out, a.out)
print(f"wrote {a.out}: {len(out)} tensors")
