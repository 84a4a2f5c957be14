#!/usr/bin/env python3
"""criteria.py [--bars loop|fused] BENCH_JSONL - the training loop's targets ("bars"), checked on the rows one
device call wrote: `loop` (the default; `bash dev/device_suite.sh criteria` appends its rows to $OUT/bench.jsonl
and runs this on it), or `fused`, batch norm inside the convolutions (stage criteriafused: b256 AMP >= 7,500
img/s, b70 >= 5,800, fp32 >= 3,000, peak memory <= 0.75x PyTorch's, batch-norm kernels <= 25% of a b256 AMP
step's kernel time, start-up <= 1.5 s on the kernel-choice cache and no slower than 7.9 s without it).
criteria.py --seed-row METRICS_JSONL AMP(1|0) - prints amptrain's row for the seed bars from the metrics file
of a configs/seed_resnext50.yaml run: the loop's seconds, the seconds after the model build (the seed's script
starts its clock once its model exists) and the peak memory.

Each bar prints one line: PASS or FAIL, what it asks, the numbers it compared. A bar over several repeats takes
amptrain's slowest repeat and PyTorch's fastest. Exit 0 when every bar passes, 1 when one fails, 2 when the
file cannot be read, a line is not JSON (named by file and line) or a row a bar needs is missing (named by tag;
the other bars are still checked).
"""
import json
import sys

# The rows, by the tags dev/device_suite.sh gives them.
LOOP256, BENCH256, TORCH256 = "amptrain loop b256 amp1", "amptrain w1 b256 amp1", "torch w1 b256 amp1 cl1"
LOOP70, BENCH70, TORCH70 = "amptrain loop b70 amp1", "amptrain w1 b70 amp1", "torch w1 b70 amp1 cl1"
COMPILE70 = "torch w1 b70 amp1 cl1 compile reduce-overhead"
FP32, TORCH_FP32 = "amptrain loop b256 amp0", "torch w1 b256 amp0 cl1"
FP32_EXACT, TORCH_FP32_EXACT = "amptrain loop b256 amp0 cudnn.tf32=false", "torch w1 b256 amp0 cl1 tf32off"
SEED, SEED_TORCH = "amptrain seed amp{}", "seed-torch amp{}"
COLD256 = LOOP256 + " cudnn.cache=off"  # the b256 AMP loop timing every kernel choice
PROFILE256 = "amptrain profile b256 amp"  # dev/kernel_profile.py --row: one b256 AMP step's kernels under ncu
REPEATS_B70 = 3
BAR_SETS = ("loop", "fused")


class Missing(Exception):
    pass


def read_records(path):
    """The JSON values of a JSON-lines file (blank lines skipped); exit 2 naming file and line on a bad one."""
    records = []
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    print(f"criteria: {path}:{number}: not JSON ({e.msg})", file=sys.stderr)
                    sys.exit(2)
    except OSError as e:
        print(f"criteria: {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    return records


def seed_row(metrics_path, amp):
    summaries = [r for r in read_records(metrics_path) if r.get("summary")]
    if not summaries:
        print(f"criteria: {metrics_path}: no summary record (did the run finish?)", file=sys.stderr)
        return 2
    s = summaries[-1]
    print(json.dumps({"tag": SEED.format(amp), "loop_s": round(s["seconds"], 3),
                      "after_build_s": round(s["total_s"] - s["startup_build_s"], 3), "total_s": round(s["total_s"], 3),
                      "peak_mib": round(s["peak_mib"], 1)}))
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "--seed-row" and argv[3] in ("0", "1"):
        return seed_row(argv[2], argv[3])
    bar_set = "loop"
    if len(argv) == 4 and argv[1] == "--bars":
        if argv[2] not in BAR_SETS:
            print(f"criteria: --bars {argv[2]}: expected one of {', '.join(BAR_SETS)}", file=sys.stderr)
            return 2
        bar_set, argv = argv[2], argv[:1] + argv[3:]
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    rows = {}
    for row in read_records(argv[1]):
        if isinstance(row, dict) and "tag" in row:
            rows.setdefault(row["tag"], []).append(row)

    def values(tag, key, at_least=1):
        found = [r[key] for r in rows.get(tag, []) if key in r]
        if len(found) < at_least:
            raise Missing(f'{at_least} row(s) tagged "{tag}" with "{key}", found {len(found)}')
        return found

    def img_s(tag, at_least=1):  # the loop's median of records, or a --bench / PyTorch row's rate
        key = "img_s_median" if tag.startswith("amptrain loop") else "img_s_total"
        return values(tag, key, at_least)

    def last(tag, key):  # the newest row's value: the b256 loops run cold, then fill the cache, then warm
        return values(tag, key)[-1]

    def bn_share():
        share = values(PROFILE256, "share")[-1]
        if "batch norm" not in share:
            raise Missing(f'a "batch norm" share in the row tagged "{PROFILE256}"')
        return share["batch norm"]

    at_least, above = (lambda a, b: a >= b), (lambda a, b: a > b)
    at_most, below = (lambda a, b: a <= b), (lambda a, b: a < b)
    fused_bars = [
        ("b256 AMP loop >= 7,500 img/s", lambda: (min(img_s(LOOP256)), 7500.0), at_least),
        ("b70 AMP slowest loop repeat >= 5,800 img/s", lambda: (min(img_s(LOOP70, REPEATS_B70)), 5800.0), at_least),
        ("b256 fp32 loop at the defaults >= 3,000 img/s", lambda: (min(img_s(FP32)), 3000.0), at_least),
        ("b256 AMP peak memory <= 0.75x PyTorch eager's",
         lambda: (max(values(LOOP256, "peak_mem_MiB")), 0.75 * min(values(TORCH256, "peak_mem_MiB"))), at_most),
        ("b256 AMP step: batch-norm kernels <= 25% of kernel time", lambda: (bn_share(), 0.25), at_most),
        ("b256 AMP start-up on the kernel-choice cache <= 1.5 s", lambda: (last(LOOP256, "startup_s"), 1.5),
         at_most),
        ("b256 AMP start-up timing every choice <= 7.9 s", lambda: (max(values(COLD256, "startup_s")), 7.9),
         at_most),
    ]
    loop_bars = [
        ("b256 AMP loop >= 6,000 img/s", lambda: (min(img_s(LOOP256)), 6000.0), at_least),
        ("b256 AMP loop within 3% of --bench", lambda: (min(img_s(LOOP256)), 0.97 * img_s(BENCH256)[0]),
         at_least),
        ("b70 AMP loop within 3% of --bench", lambda: (min(img_s(LOOP70)), 0.97 * img_s(BENCH70)[0]),
         at_least),
        ("b70 AMP loop >= 4,200 img/s", lambda: (min(img_s(LOOP70, REPEATS_B70)), 4200.0), at_least),
        ("b70 AMP slowest loop repeat > fastest PyTorch eager repeat",
         lambda: (min(img_s(LOOP70, REPEATS_B70)), max(img_s(TORCH70, REPEATS_B70))), above),
        ("b70 AMP slowest loop repeat > torch.compile reduce-overhead",
         lambda: (min(img_s(LOOP70, REPEATS_B70)), max(img_s(COMPILE70))), above),
        ("b256 fp32 loop >= PyTorch eager, both at their defaults",
         lambda: (min(img_s(FP32)), max(img_s(TORCH_FP32))), at_least),
        ("b256 fp32 loop >= PyTorch eager, TF32 off on both sides",
         lambda: (min(img_s(FP32_EXACT)), max(img_s(TORCH_FP32_EXACT))), at_least),
        ("b256 AMP peak memory <= 0.9x PyTorch eager's",
         lambda: (max(values(LOOP256, "peak_mem_MiB") + values(BENCH256, "peak_mem_MiB")),
                  0.9 * min(values(TORCH256, "peak_mem_MiB"))), at_most),
        ("seed AMP: seconds after the model build <= 0.6x the seed's script",
         lambda: (max(values(SEED.format(1), "after_build_s")), 0.6 * min(values(SEED_TORCH.format(1), "total_s"))),
         at_most),
        ("seed fp32: seconds after the model build <= 0.9x the seed's script",
         lambda: (max(values(SEED.format(0), "after_build_s")), 0.9 * min(values(SEED_TORCH.format(0), "total_s"))),
         at_most),
        ("seed AMP: peak memory below the seed's script",
         lambda: (max(values(SEED.format(1), "peak_mib")), min(values(SEED_TORCH.format(1), "peak_mib"))),
         below),
        ("seed fp32: peak memory below the seed's script",
         lambda: (max(values(SEED.format(0), "peak_mib")), min(values(SEED_TORCH.format(0), "peak_mib"))),
         below),
    ]
    bars = fused_bars if bar_set == "fused" else loop_bars
    failed = missing = 0
    for name, measure, holds in bars:
        try:
            ours, bar = measure()
        except Missing as e:
            print(f"MISSING  {name}: {e}")
            missing += 1
            continue
        ok = holds(ours, bar)
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}     {name}: {ours:,.3f} against {bar:,.3f}")
    print(f"criteria: {len(bars) - failed - missing} of {len(bars)} bars pass"
          + (f", {failed} fail" if failed else "") + (f", {missing} without their rows" if missing else ""))
    return 2 if missing else 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
