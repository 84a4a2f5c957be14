#!/usr/bin/env python3
"""torch_train.py - the PyTorch twin of one amptrain training run (launch/compare-amp --torch runs it).

The same model shape (torchvision's ResNet with Bottleneck blocks: layers, groups = cardinality,
width_per_group = base width, 64 stem planes), batch size, number of steps and SGD settings (constant
learning rate, momentum, weight decay, Nesterov), in fp32 or with AMP (fp16 autocast + GradScaler with
amptrain's scaler settings, or with --amp-dtype bfloat16 bf16 autocast without one). Prints one JSON line
with the keys of amptrain's summary record:

    {"impl": "torch", "amp": ..., "amp_dtype": ... (under AMP), "device": ..., "steps": ..., "batch": ..., "seconds": ...,
     "images_per_s": ..., "peak_mib": ..., "final_loss": ..., "skipped_total": ..., "scale": ...}

seconds is the wall time of the training loop (the first step to the last, synchronised), as amptrain's
summary. The data: each step's batch of N(0,1) images with uniform labels is drawn on the device from a
seeded generator inside the loop (amptrain's loader makes each batch on the host and uploads it), so the
device holds one batch at a time, as amptrain's does.
skipped_total counts fp16 AMP steps whose scale fell (GradScaler skipped them); fp32 and bf16 runs report
null (PyTorch checks their gradients nowhere). peak_mib: torch.cuda.max_memory_allocated, null on the CPU.
"""
import argparse
import json
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default="3,4,6,3", help="bottleneck blocks per stage (default 3,4,6,3)")
    p.add_argument("--cardinality", type=int, default=32)
    p.add_argument("--base-width", type=int, default=4)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=70)
    p.add_argument("--steps", type=int, default=150, help="optimizer steps (default 150: 3 epochs of 50)")
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--nesterov", type=int, default=0)
    p.add_argument("--amp", type=int, default=1, help="1: autocast (fp16: with a GradScaler); 0: fp32")
    p.add_argument("--amp-dtype", default="float16", choices=("float16", "bfloat16"),
                   help="the autocast dtype; bfloat16 runs without a GradScaler, as amp.dtype: bfloat16")
    p.add_argument("--init-scale", type=float, default=65536.0)
    p.add_argument("--growth-factor", type=float, default=2.0)
    p.add_argument("--backoff-factor", type=float, default=0.5)
    p.add_argument("--growth-interval", type=int, default=2000)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--channels-last", type=int, default=1)
    p.add_argument("--cudnn-benchmark", type=int, default=0)
    p.add_argument("--tf32", type=int, default=0, help="allow TF32 in cuDNN convolutions and matmuls")
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    a.layers = [int(x) for x in a.layers.split(",")]
    if len(a.layers) != 4 or min(a.layers) < 1 or min(a.batch, a.steps) < 1:
        p.error("--layers takes four positive counts; --batch and --steps must be positive")
    return a


def main():
    a = parse_args()
    try:
        import torch
        from torchvision.models.resnet import Bottleneck, ResNet
    except ImportError as e:
        print(f"torch_train.py: needs PyTorch and torchvision ({e})", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_train.py: --device cuda but PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = bool(a.cudnn_benchmark)
    torch.backends.cudnn.allow_tf32 = bool(a.tf32)
    torch.backends.cuda.matmul.allow_tf32 = bool(a.tf32)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format

    net = ResNet(Bottleneck, a.layers, num_classes=a.classes, groups=a.cardinality,
                 width_per_group=a.base_width).to(dev).to(memory_format=fmt)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay,
                          nesterov=bool(a.nesterov))
    scaler = torch.amp.GradScaler(a.device, init_scale=a.init_scale, growth_factor=a.growth_factor,
                                  backoff_factor=a.backoff_factor, growth_interval=a.growth_interval,
                                  enabled=bool(a.amp) and a.amp_dtype == "float16")
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device=dev).manual_seed(a.seed)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    skipped = torch.zeros((), dtype=torch.int64, device=dev)  # counted on the device: no sync per step
    sync()
    start = time.perf_counter()
    for _ in range(a.steps):
        images = torch.randn(a.batch, 3, a.image_size, a.image_size, device=dev, generator=gen).to(memory_format=fmt)
        labels = torch.randint(0, a.classes, (a.batch,), device=dev, generator=gen)
        with torch.autocast(a.device, dtype=getattr(torch, a.amp_dtype), enabled=bool(a.amp)):
            loss = loss_fn(net(images), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        if scaler.is_enabled():
            before = scaler._scale.clone()  # GradScaler keeps its scale on the device; a skipped step lowers it
            scaler.update()
            skipped += (scaler._scale < before).to(torch.int64).squeeze()
        opt.zero_grad(set_to_none=True)
    sync()
    seconds = time.perf_counter() - start
    print(json.dumps({
        "impl": "torch", "amp": bool(a.amp), **({"amp_dtype": a.amp_dtype} if a.amp else {}), "device": a.device, "steps": a.steps, "batch": a.batch,
        "seconds": round(seconds, 3), "images_per_s": round(a.steps * a.batch / seconds, 1),
        "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if dev.type == "cuda" else None,
        "final_loss": float(loss), "skipped_total": int(skipped) if scaler.is_enabled() else None,
        "scale": scaler.get_scale() if scaler.is_enabled() else 1.0}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
