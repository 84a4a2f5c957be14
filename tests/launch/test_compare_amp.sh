#!/usr/bin/env bash
# test_compare_amp.sh AMPTRAIN - launch/compare-amp on the CPU backend:
#   compare-amp configs/tiny.yaml data.train_size=256 data.val_size=64 train.epochs=2
# must run amptrain twice with the same config but for amp.enabled, and write report.csv whose rows are
# the two runs' own summary records (fp32: amp false, AMP: amp true; 256 / 32 x 2 = 16 steps each), AMP's
# peak memory below fp32's (fp16 activations) with the saving computed from the two, report.md with the
# fp32, AMP and "AMP saves" rows, and report.png + curves.png (or, when $PYTHON has no matplotlib, say
# so); with matplotlib hidden it must still write the table and say why there is no PNG, and --redraw (with
# matplotlib) must then add the pictures to the same table; its own keys
# (amp.enabled) and a bad config are refused with exit code 2, before anything is written.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
take_amptrain "$0" "$@"
compare="$repo/launch/compare-amp"
tiny="$repo/configs/tiny.yaml"
out="$scratch/out"
rm -rf "$out"

echo "== 1. fp32 vs AMP on the tiny config"
"$PYTHON" "$compare" "$tiny" data.train_size=256 data.val_size=64 train.epochs=2 --amptrain "$amptrain" \
    --out "$out/cmp" || fail "compare-amp exited with $?"

"$PYTHON" - "$out/cmp" <<'PY' || fail "report.csv does not match the runs"
import csv, json, shlex, sys
folder = sys.argv[1]
rows = {r["precision"]: r for r in csv.DictReader(open(f"{folder}/report.csv"))}
assert sorted(rows) == ["amp", "fp32"], rows.keys()
summary = {}
for prec, row in rows.items():
    assert row["impl"] == "amptrain" and row["status"] == "ok" and row["exit_code"] == "0", row
    records = [json.loads(line) for line in open(f"{folder}/{prec}/metrics.jsonl")]
    s = records[-1]
    assert s.get("summary") is True, f"{prec}: the metrics file does not end with the summary record"
    assert s["amp"] is (prec == "amp"), f"{prec} run had amp={s['amp']}"
    assert s.get("amp_dtype") == ("float16" if prec == "amp" else None), f"{prec}: amp_dtype {s.get('amp_dtype')}"
    assert s["steps"] == 16, f"{prec}: {s['steps']} steps, want 256 / 32 x 2 = 16"
    for key in ("steps", "seconds", "images_per_s", "peak_mib", "skipped_total"):
        assert float(row[key]) == float(s[key]), (prec, key, row[key], s[key])
    assert abs(float(row["final_loss"]) - s["final_loss"]) <= 1e-12, (prec, row["final_loss"], s["final_loss"])
    summary[prec] = s
assert summary["fp32"]["skipped_total"] == 0, "fp32 skipped a step"
# the same run but for the precision: the two commands differ only in amp.enabled and the metrics path
def rest(cmd):
    return [w for w in shlex.split(cmd) if not w.startswith(("amp.enabled=", "log.metrics="))]
assert rest(rows["fp32"]["command"]) == rest(rows["amp"]["command"]), (rows["fp32"]["command"], rows["amp"]["command"])
assert summary["amp"]["peak_mib"] < summary["fp32"]["peak_mib"], "AMP should hold its activations in fp16"
want = 100 * (1 - summary["amp"]["peak_mib"] / summary["fp32"]["peak_mib"])
assert abs(float(rows["amp"]["memory_saved_pct"]) - want) < 0.01, (rows["amp"]["memory_saved_pct"], want)
want = 100 * (1 - summary["amp"]["seconds"] / summary["fp32"]["seconds"])
assert abs(float(rows["amp"]["time_saved_pct"]) - want) < 0.01, (rows["amp"]["time_saved_pct"], want)
print("report.csv: fp32 and AMP rows are the runs' summary records; memory saved", rows["amp"]["memory_saved_pct"], "%")
PY

md="$out/cmp/report.md"
grep -q '^| amptrain | fp32 | [0-9]' "$md" || fail "no fp32 row in $md"
grep -q '^| amptrain | AMP | [0-9]' "$md" || fail "no AMP row in $md"
grep -q '^| amptrain | \*\*AMP saves\*\* | ' "$md" || fail "no AMP-saves row in $md"
if has_matplotlib; then
    is_png "$out/cmp/report.png" 1000 400 || fail "report.png missing, not a PNG or not 1000x400"
    is_png "$out/cmp/curves.png" 1500 750 || fail "curves.png missing, not a PNG or not 1500x750"
    grep -q '](report.png)' "$md" || fail "$md does not show report.png"
    echo "report.md: fp32, AMP and saving rows; report.png and curves.png drawn"
else
    [[ ! -e $out/cmp/report.png ]] || fail "report.png written without matplotlib"
    grep -q 'matplotlib is not installed' "$md" || fail "$md does not say why there is no PNG"
    echo "report.md: fp32, AMP and saving rows; no matplotlib for $PYTHON, and it says so"
fi

echo "== 1b. bf16 autocast: amp.dtype goes to the AMP run only"
"$PYTHON" "$compare" "$tiny" data.train_size=64 data.val_size=0 train.epochs=1 amp.dtype=bfloat16 \
    --amptrain "$amptrain" --out "$out/bf16" >"$out/bf16.log" 2>&1 || fail "compare-amp amp.dtype=bfloat16 exited with $?"
"$PYTHON" - "$out/bf16" <<'PY' || fail "the bf16 comparison's runs are not fp32 and bf16"
import csv, json, sys
folder = sys.argv[1]
rows = {r["precision"]: r for r in csv.DictReader(open(f"{folder}/report.csv"))}
fp32 = json.loads(open(f"{folder}/fp32/metrics.jsonl").read().splitlines()[-1])
amp = json.loads(open(f"{folder}/amp/metrics.jsonl").read().splitlines()[-1])
assert fp32["amp"] is False and "amp_dtype" not in fp32, fp32
assert amp["amp"] is True and amp["amp_dtype"] == "bfloat16" and amp["scale"] == 1, amp
assert "amp.dtype=bfloat16" in rows["amp"]["command"] and "amp.dtype" not in rows["fp32"]["command"], rows
print("bf16: the AMP run in bfloat16 at scale 1, the fp32 run without amp.dtype")
PY
grep -q 'AMP in bfloat16' "$out/bf16/report.md" || fail "report.md does not name the autocast dtype"

echo "== 2. without matplotlib: the table, and a word on stderr"
PYTHONPATH=$(no_matplotlib_path) "$PYTHON" "$compare" "$tiny" data.train_size=64 data.val_size=0 train.epochs=1 \
    --amptrain "$amptrain" --out "$out/no-mpl" 2>"$out/no-mpl.err" || fail "compare-amp without matplotlib exited with $?"
cat "$out/no-mpl.err"
grep -q '^| amptrain | AMP | [0-9]' "$out/no-mpl/report.md" || fail "no AMP row without matplotlib"
[[ -s $out/no-mpl/report.csv && ! -e $out/no-mpl/report.png ]] || fail "without matplotlib: want the CSV, no PNG"
grep -q 'matplotlib is not installed' "$out/no-mpl.err" || fail "no word on stderr about the missing matplotlib"
grep -q 'matplotlib is not installed' "$out/no-mpl/report.md" || fail "report.md does not say why there is no PNG"
if has_matplotlib; then
    echo "== 2b. --redraw where matplotlib is: the same table, now with the pictures"
    grep '^|' "$out/no-mpl/report.md" >"$out/no-mpl.rows"
    "$PYTHON" "$compare" --redraw --out "$out/no-mpl" || fail "compare-amp --redraw exited with $?"
    grep '^|' "$out/no-mpl/report.md" | cmp -s - "$out/no-mpl.rows" || fail "--redraw changed the table"
    is_png "$out/no-mpl/report.png" 1000 400 || fail "--redraw drew no report.png"
    ! grep -q 'matplotlib is not installed' "$out/no-mpl/report.md" || fail "--redraw left the no-matplotlib note"
fi

echo "== 3. refusals: its own keys, a bad config"
for args in "amp.enabled=false" "train.lr=-1"; do
    set +e
    msg=$("$PYTHON" "$compare" "$tiny" $args --amptrain "$amptrain" --out "$out/refused" 2>&1)
    rc=$?
    set -e
    echo "$msg" | tail -2
    ((rc == 2)) || fail "'$args' gave exit code $rc, expected 2"
    grep -q "${args%%=*}" <<<"$msg" || fail "the refusal of '$args' does not name the key"
    [[ ! -e $out/refused ]] || fail "a refused comparison must not create its output folder"
done

echo "PASS"
