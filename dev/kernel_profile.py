# kernel_profile.py [--row TAG] NCU_CSV OUT_CSV [OTHER_CSV]: the GPU kernels of one profiled step, summed by name.
#
# NCU_CSV comes from
#   ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \
#       build/amptrain CONFIG --bench --bench-profile train.cuda_graph=off ... > NCU_CSV
# OUT_CSV gets one row per kernel name: kernel,calls,total_ms (the format torch_baseline.py --profile
# writes). Printed: the step's kernel time, its shares by kernel family (batch norm, GEMM, convolution,
# other; by name) and the 25 largest rows, and the same for OTHER_CSV (PyTorch's, or another run's).
# With --row TAG, last, one JSON line of NCU_CSV's step for dev/criteria.py: {"tag": TAG, "kernels": N,
# "kernel_ms": T, "share": {family: fraction of T}}.
import csv, io, json, sys


def read_ncu(path):
    try:
        text = open(path, errors="replace").read()
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{path}: no ncu CSV header (\"ID\",...) in it; did ncu profile any kernel?")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    kernels = {}
    for r in rows:
        value = r.get("gpu__time_duration.sum", "")
        try:
            ns = float(value.replace(",", ""))
        except ValueError:
            continue  # the units row
        # ncu reports nanoseconds for gpu__time_duration in --page raw
        calls, ms = kernels.get(r["Kernel Name"], (0, 0.0))
        kernels[r["Kernel Name"]] = (calls + 1, ms + ns / 1e6)
    return kernels


def read_sums(path):
    return {r["kernel"]: (int(r["calls"]), float(r["total_ms"])) for r in csv.DictReader(open(path))}


# Kernel families by name (first match wins), for the shares printed under each listing.
# cuDNN's convolution kernels carry "implicit_gemm" or "Conv2d" in their names, so convolution is matched
# before GEMM; cuBLAS's Hopper GEMMs are named nvjet_*. A convolution that writes batch-norm statistics from its
# epilogue (cuDNN's conv_genstats graph: *fprop_bn_stat*) is a family of its own, ahead of batch norm.
FAMILIES = [
    ("convolution + bn statistics (fused)", ("bn_stat",)),
    ("batch norm", ("batchnorm", "batch_norm", "bn_", "bnfwd", "bnbwd", "bn_fw", "bn_bw")),
    ("convolution (cuDNN)", ("conv", "fprop", "dgrad", "wgrad", "xmma", "implicit")),
    ("gemm (1x1 convolutions, linear)", ("gemm", "nvjet", "cublas", "cutlass")),
]


def family_of(name):
    low = name.lower()
    for family, keys in FAMILIES:
        if any(k in low for k in keys):
            return family
    return "other"


def family_ms(kernels):
    families = {}
    for name, (_, ms) in kernels.items():
        families[family_of(name)] = families.get(family_of(name), 0.0) + ms
    return families


def row(tag, kernels):
    total = sum(ms for _, ms in kernels.values())
    return {"tag": tag, "kernels": sum(c for c, _ in kernels.values()), "kernel_ms": round(total, 4),
            "share": {family: round(ms / total, 5) for family, ms in sorted(family_ms(kernels).items())}}


def show(title, kernels):
    total = sum(ms for _, ms in kernels.values())
    print(f"{title}: {sum(c for c, _ in kernels.values())} kernels, {total:.2f} ms of kernel time")
    families = family_ms(kernels)
    for family, ms in sorted(families.items(), key=lambda kv: -kv[1]):
        print(f"  {family:34s} {ms:8.3f} ms {100 * ms / total:5.1f}%")
    for name, (calls, ms) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"  {ms:8.3f} ms {100 * ms / total:5.1f}% {calls:5d}x  {name[:150]}")


if __name__ == "__main__":
    args, tag = sys.argv[1:], None
    if args[:1] == ["--row"]:
        if len(args) < 2:
            sys.exit("kernel_profile.py: --row needs a TAG")
        tag, args = args[1], args[2:]
    if len(args) not in (2, 3):
        sys.exit("usage: kernel_profile.py [--row TAG] NCU_CSV OUT_CSV [OTHER_CSV]")
    ours = read_ncu(args[0])
    if not ours:
        sys.exit(f"{args[0]}: no kernel rows with gpu__time_duration.sum")
    with open(args[1], "w") as f:
        f.write("kernel,calls,total_ms\n")
        for name, (calls, ms) in sorted(ours.items(), key=lambda kv: -kv[1][1]):
            f.write('"%s",%d,%.4f\n' % (name.replace('"', "'"), calls, ms))
    show("amptrain", ours)
    if len(args) == 3:
        show("other", read_sums(args[2]))
    if tag is not None:
        print(json.dumps(row(tag, ours)))
