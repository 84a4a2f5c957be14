#!/usr/bin/env python3
"""criteria.py BENCH_JSONL - the training loop's targets ("bars"), checked on the rows one device call wrote
(`bash dev/device_suite.sh criteria` appends them to $OUT/bench.jsonl and runs this on it).
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
REPEATS_B70 = 3


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

    bars = [
        ("b256 AMP loop >= 6,000 img/s", lambda: (min(img_s(LOOP256)), 6000.0), lambda a, b: a >= b),
        ("b256 AMP loop within 3% of --bench", lambda: (min(img_s(LOOP256)), 0.97 * img_s(BENCH256)[0]),
         lambda a, b: a >= b),
        ("b70 AMP loop within 3% of --bench", lambda: (min(img_s(LOOP70)), 0.97 * img_s(BENCH70)[0]),
         lambda a, b: a >= b),
        ("b70 AMP loop >= 4,200 img/s", lambda: (min(img_s(LOOP70, REPEATS_B70)), 4200.0), lambda a, b: a >= b),
        ("b70 AMP slowest loop repeat > fastest PyTorch eager repeat",
         lambda: (min(img_s(LOOP70, REPEATS_B70)), max(img_s(TORCH70, REPEATS_B70))), lambda a, b: a > b),
        ("b70 AMP slowest loop repeat > torch.compile reduce-overhead",
         lambda: (min(img_s(LOOP70, REPEATS_B70)), max(img_s(COMPILE70))), lambda a, b: a > b),
        ("b256 fp32 loop >= PyTorch eager, both at their defaults",
         lambda: (min(img_s(FP32)), max(img_s(TORCH_FP32))), lambda a, b: a >= b),
        ("b256 fp32 loop >= PyTorch eager, TF32 off on both sides",
         lambda: (min(img_s(FP32_EXACT)), max(img_s(TORCH_FP32_EXACT))), lambda a, b: a >= b),
        ("b256 AMP peak memory <= 0.9x PyTorch eager's",
         lambda: (max(values(LOOP256, "peak_mem_MiB") + values(BENCH256, "peak_mem_MiB")),
                  0.9 * min(values(TORCH256, "peak_mem_MiB"))), lambda a, b: a <= b),
        ("seed AMP: seconds after the model build <= 0.6x the seed's script",
         lambda: (max(values(SEED.format(1), "after_build_s")), 0.6 * min(values(SEED_TORCH.format(1), "total_s"))),
         lambda a, b: a <= b),
        ("seed fp32: seconds after the model build <= 0.9x the seed's script",
         lambda: (max(values(SEED.format(0), "after_build_s")), 0.9 * min(values(SEED_TORCH.format(0), "total_s"))),
         lambda a, b: a <= b),
        ("seed AMP: peak memory below the seed's script",
         lambda: (max(values(SEED.format(1), "peak_mib")), min(values(SEED_TORCH.format(1), "peak_mib"))),
         lambda a, b: a < b),
        ("seed fp32: peak memory below the seed's script",
         lambda: (max(values(SEED.format(0), "peak_mib")), min(values(SEED_TORCH.format(0), "peak_mib"))),
         lambda a, b: a < b),
    ]
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
