# The PyTorch reference that bench/ and launch/scaling run beside amptrain, in the same device call.
# PyTorch reference for the trainer: ResNeXt-50 32x4d, synthetic ImageNet-shaped data, SGD momentum,
# fp32 vs AMP (fp16 autocast + GradScaler), optionally channels_last and DDP.
# Prints one JSON line per configuration: images/s (median over timed steps) and peak memory.
import argparse, json, os, time, statistics
import torch, torchvision
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=70)
p.add_argument("--amp", type=int, default=1)
p.add_argument("--cl", type=int, default=0)  # channels_last
p.add_argument("--steps", type=int, default=30)
p.add_argument("--warmup", type=int, default=8)
p.add_argument("--nbatches", type=int, default=4)
p.add_argument("--tag", default="")
p.add_argument("--tf32", type=int, default=-1, help="0: no TF32 anywhere (cuDNN and matmuls); -1: PyTorch's defaults")
p.add_argument("--compile", default="", help="torch.compile mode: default, reduce-overhead, max-autotune")
p.add_argument("--profile", default="", help="after the timed steps, one more step under torch.profiler; its GPU "
               "kernels (name, calls, total ms) go to this CSV file, the format dev/kernel_profile.py writes")
a = p.parse_args()

ddp = "RANK" in os.environ
if ddp:
    dist.init_process_group("nccl")
    rank = dist.get_rank(); world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
else:
    rank, world = 0, 1
torch.backends.cudnn.benchmark = True
if a.tf32 == 0:
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
mf = torch.channels_last if a.cl else torch.contiguous_format
data = [torch.randn(a.batch, 3, 224, 224, device=dev).to(memory_format=mf) for _ in range(a.nbatches)]
tgts = [torch.randint(0, 1000, (a.batch,), device=dev) for _ in range(a.nbatches)]
net = torchvision.models.resnext50_32x4d().to(dev).to(memory_format=mf)
if a.compile:
    net = torch.compile(net, mode=a.compile)
if ddp:
    net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[torch.cuda.current_device()])
loss_fn = torch.nn.CrossEntropyLoss()
opt = torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
scaler = torch.amp.GradScaler("cuda", enabled=bool(a.amp))
torch.cuda.reset_peak_memory_stats()


def train_step(x, y):
    with torch.autocast("cuda", dtype=torch.float16, enabled=bool(a.amp)):
        out = net(x); loss = loss_fn(out, y)
    scaler.scale(loss).backward()
    scaler.step(opt); scaler.update()
    opt.zero_grad(set_to_none=True)
    return loss


times = []
for i in range(a.warmup + a.steps):
    x, y = data[i % a.nbatches], tgts[i % a.nbatches]
    torch.cuda.synchronize(); t0 = time.perf_counter()
    loss = train_step(x, y)
    torch.cuda.synchronize(); t1 = time.perf_counter()
    if i >= a.warmup:
        times.append(t1 - t0)
if a.profile:
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        train_step(data[0], tgts[0]); torch.cuda.synchronize()
    kernels = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            calls, us = kernels.get(ev.name, (0, 0.0))
            kernels[ev.name] = (calls + 1, us + ev.device_time)
    with open(a.profile, "w") as f:
        f.write("kernel,calls,total_ms\n")
        for name, (calls, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1]):
            f.write('"%s",%d,%.4f\n' % (name.replace('"', "'"), calls, us / 1e3))
med = statistics.median(times)
if rank == 0:
    print(json.dumps({"tag": a.tag, "world": world, "batch_per_gpu": a.batch, "amp": a.amp, "channels_last": a.cl, "compile": a.compile,
                      "step_ms_median": round(med * 1e3, 2), "img_s_per_gpu": round(a.batch / med, 1),
                      "img_s_total": round(a.batch * world / med, 1),
                      "peak_mem_MiB": round(torch.cuda.max_memory_allocated() / 2**20),
                      "loss": float(loss)}), flush=True)
if ddp:
    dist.destroy_process_group()
