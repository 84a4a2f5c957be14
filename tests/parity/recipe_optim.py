#!/usr/bin/env python3
"""The recipe's optimizer in PyTorch, for tests/gpu/test_recipe_optim_parity.c: torch.optim.SGD with
torchvision's weight-decay param groups (--norm-weight-decay), torch.nn.utils.clip_grad_norm_ (after
GradScaler.unscale_ under AMP) and torchvision's ExponentialMovingAverage, driven as torchvision's
references/classification/train.py drives them, on a small torchvision ResNeXt, over given gradients.

The gradients (and the BN running statistics and num_batches_tracked a forward would leave) of each step are
drawn here and exported, so both sides run the same optimizer steps on the same numbers; no forward or
backward runs. Two cases: fp32, and AMP with GradScaler (the gradients given to torch are fp16(g x S) as
amptrain's fp16 gradient buffer holds them, and one step carries an inf, which GradScaler skips and the EMA
still averages).

Written (safetensors; scalars of the run in the metadata):
  <state_dict key>                       the model before the first step (torchvision names and layouts)
  recipe.grad.<k>.<param>                step k's gradient (fp32, unscaled)
  recipe.stats.<k>.<bn>.running_mean/var the BN statistics the step's forward leaves (fp32)
  recipe.lr, recipe.tracked              per step: the learning rate (fp32), num_batches_tracked (I64)
  recipe.<case>.norm                     per step: clip_grad_norm_'s total norm (fp32; inf/NaN where skipped)
  recipe.<case>.final.<param>            the weights after the last step
  recipe.<case>.momentum.<param>         SGD's momentum buffers after it
  recipe.<case>.ema.<key>                AveragedModel.state_dict() after it: module.<key> and n_averaged
"""
import argparse

import torch
import torchvision
from safetensors.torch import save_file

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--seed", type=int, default=2024)
a = p.parse_args()

# The run. amptrain's test builds the same model (model.arch custom, planes 64) and trainer from these.
RUN = dict(steps=10, steps_per_epoch=4, batch=32, epochs=8, ema_every=2, ema_decay=0.99, warmup_steps=3,
           weight_decay=0.05, norm_weight_decay=0.0, momentum=0.9, clip=1.0, amp_scale=1024.0, inf_step=5,
           inf_param="fc.weight", classes=10)
device = "cuda" if torch.cuda.is_available() else "cpu"


def make_model():
    return torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, [1, 1, 1, 1],
                                            num_classes=RUN["classes"], groups=2, width_per_group=4)


# torchvision/references/classification/utils.py, as published (BSD-3-Clause): the references are not part
# of the torchvision package, so the two pieces the recipe uses are repeated here unchanged.
class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    def __init__(self, model, decay, device="cpu"):
        def ema_avg(avg_model_param, model_param, num_averaged):
            return decay * avg_model_param + (1 - decay) * model_param

        super().__init__(model, device, ema_avg, use_buffers=True)


def set_weight_decay(model, weight_decay, norm_weight_decay=None, norm_classes=None):
    if not norm_classes:
        norm_classes = [torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm,
                        torch.nn.modules.instancenorm._InstanceNorm, torch.nn.LocalResponseNorm]
    norm_classes = tuple(norm_classes)
    params = {"other": [], "norm": []}
    params_weight_decay = {"other": weight_decay, "norm": norm_weight_decay}

    def _add_params(module, prefix=""):
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            if norm_weight_decay is not None and isinstance(module, norm_classes):
                params["norm"].append(p)
            else:
                params["other"].append(p)
        for child_name, child_module in module.named_children():
            child_prefix = f"{prefix}.{child_name}" if prefix != "" else child_name
            _add_params(child_module, prefix=child_prefix)

    _add_params(model)
    return [{"params": params[k], "weight_decay": params_weight_decay[k]} for k in params if len(params[k]) > 0]


torch.manual_seed(a.seed)
initial = make_model()
with torch.no_grad():  # BN biases and statistics away from 0 and 1, so decay and averaging show on them
    for m in initial.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-0.5, 0.5)
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
state0 = {k: v.detach().clone() for k, v in initial.state_dict().items()}
out = {k: v.contiguous() for k, v in state0.items()}
names = [n for n, _ in initial.named_parameters()]
stat_names = [n for n, _ in initial.named_buffers() if n.endswith(("running_mean", "running_var"))]
K = RUN["steps"]
grads = [{n: torch.randn_like(state0[n]) * 0.3 for n in names} for _ in range(K)]
stats = [{n: (torch.rand_like(state0[n]) + 0.5 if n.endswith("var") else torch.randn_like(state0[n]))
          for n in stat_names} for _ in range(K)]
lrs = [0.1 * (k + 1) / RUN["warmup_steps"] if k < RUN["warmup_steps"] else 0.1 for k in range(K)]
tracked = [k + 1 for k in range(K)]
for k in range(K):
    for n in names:
        out[f"recipe.grad.{k}.{n}"] = grads[k][n].clone().contiguous()
    for n in stat_names:
        out[f"recipe.stats.{k}.{n}"] = stats[k][n].clone().contiguous()
out["recipe.lr"] = torch.tensor(lrs, dtype=torch.float32)
out["recipe.tracked"] = torch.tensor(tracked, dtype=torch.int64)

# train.py: adjust = world_size * batch_size * model_ema_steps / epochs; alpha = min(1, (1 - decay) * adjust)
adjust = 1 * RUN["batch"] * RUN["ema_every"] / RUN["epochs"]
alpha = min(1.0, (1.0 - RUN["ema_decay"]) * adjust)
decay = 1.0 - alpha


def make_scaler():
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device, init_scale=RUN["amp_scale"], growth_interval=2000)
    return torch.cuda.amp.GradScaler(init_scale=RUN["amp_scale"], growth_interval=2000)


def run(case):
    amp = case == "amp"
    model = make_model().to(device)
    model.load_state_dict(state0)
    groups = set_weight_decay(model, RUN["weight_decay"], norm_weight_decay=RUN["norm_weight_decay"])
    opt = torch.optim.SGD(groups, lr=lrs[0], momentum=RUN["momentum"])
    scaler = make_scaler() if amp else None
    ema = ExponentialMovingAverage(model, device=device, decay=decay)
    norms = []
    for k in range(K):
        for g in opt.param_groups:
            g["lr"] = lrs[k]
        with torch.no_grad():
            for n, b in model.named_buffers():
                if n in stats[k]:
                    b.copy_(stats[k][n])
                elif n.endswith("num_batches_tracked"):
                    b.fill_(tracked[k])
        if amp:
            # GradScaler makes its scale tensor at its first scale(); the gradients here come from the file
            scaler.scale(torch.zeros((), device=device))
        for n, p in model.named_parameters():
            g = grads[k][n].to(device).clone()  # clip_grad_norm_ scales it in place
            if amp:
                g = (g * scaler.get_scale()).half().float()  # amptrain's fp16 gradient buffer
                if k == RUN["inf_step"] and n == RUN["inf_param"]:
                    g.view(-1)[0] = float("inf")
            p.grad = g
        if amp:
            scaler.unscale_(opt)
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), RUN["clip"]).item())
            scaler.step(opt)
            scaler.update()
        else:
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), RUN["clip"]).item())
            opt.step()
        # train.py: `if model_ema and i % args.model_ema_steps == 0` with i the step's index in its epoch, and
        # the reset during warm-up (train.py: epoch < lr_warmup_epochs; amptrain: step < train.warmup_steps).
        if (k % RUN["steps_per_epoch"]) % RUN["ema_every"] == 0:
            ema.update_parameters(model)
            if k < RUN["warmup_steps"]:
                ema.n_averaged.fill_(0)
    out[f"recipe.{case}.norm"] = torch.tensor(norms, dtype=torch.float32)
    for n, p in model.named_parameters():
        out[f"recipe.{case}.final.{n}"] = p.detach().cpu().contiguous()
        out[f"recipe.{case}.momentum.{n}"] = opt.state[p]["momentum_buffer"].cpu().contiguous()
    for n, v in ema.state_dict().items():
        out[f"recipe.{case}.ema.{n}"] = v.detach().cpu().contiguous()
    print(f"{case}: norms {', '.join(f'{x:.4g}' for x in norms)}; n_averaged {ema.n_averaged.item()}")


for case in ("fp32", "amp"):
    run(case)
meta = {k: str(v) for k, v in RUN.items()}
meta["ema_adjusted_decay"] = repr(decay)
save_file({k: v.cpu() for k, v in out.items()}, a.out, metadata=meta)
print(f"wrote {a.out}: {len(out)} tensors on {device}, EMA decay {decay!r}")
