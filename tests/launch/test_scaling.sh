#!/usr/bin/env bash
# test_scaling.sh AMPTRAIN - the scaling workflow end to end on the CPU backend:
#   launch/scaling --cpu --config configs/tiny.yaml --ranks 1,2 --precisions amp,fp32 --steps 3 --warmup 1
# must write a CSV with 4 data rows of positive images/s, a markdown table and a PNG (or, when $PYTHON has
# no matplotlib, say so); with matplotlib hidden it must still write the CSV and table and say why there is
# no PNG; and asking for 64 GPUs without --cpu, more than 256 ranks, more than 2 CPU ranks per usable CPU
# (taskset too) or a timeout of 0 must be refused with exit code 2 and a message, before anything runs.
# Run in a scratch folder (the working directory).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
take_amptrain "$0" "$@"
scaling="$repo/launch/scaling"
out="$scratch/out"
rm -rf "$out"

echo "== 1. CPU weak scaling, 1 and 2 ranks, amp and fp32"
"$PYTHON" "$scaling" --cpu --config "$repo/configs/tiny.yaml" --ranks 1,2 --precisions amp,fp32 --steps 3 --warmup 1 \
    --amptrain "$amptrain" --out "$out/report" || fail "launch/scaling exited with $?"

csv="$out/report/scaling.csv"
[[ -s $csv ]] || fail "$csv missing"
"$PYTHON" - "$csv" <<'PY' || fail "scaling.csv content"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4, f"expected 4 data rows, got {len(rows)}"
seen = set()
for r in rows:
    assert r["status"] == "ok", r
    assert float(r["img_s_total"]) > 0 and float(r["img_s_per_gpu"]) > 0, r
    assert float(r["step_ms_median"]) > 0, r
    assert int(r["global_batch"]) == int(r["n"]) * int(r["batch_per_rank"]), r
    assert 0 < float(r["efficiency"]) < 10, r
    if r["n"] == "1":
        assert abs(float(r["efficiency"]) - 1) < 1e-9, r
    seen.add((r["precision"], int(r["n"])))
assert seen == {("amp", 1), ("amp", 2), ("fp32", 1), ("fp32", 2)}, seen
print("scaling.csv: 4 rows, all positive images/s:", sorted(seen))
PY

md="$out/report/scaling.md"
[[ -s $md ]] || fail "$md missing"
grep -q '^| impl | precision | N |' "$md" || fail "no table header in $md"
[[ $(grep -c '^| amptrain | ' "$md") -eq 4 ]] || fail "expected 4 amptrain rows in $md"
echo "scaling.md: table with 4 rows"

png="$out/report/scaling.png"
if has_matplotlib; then
    is_png "$png" || fail "$png missing or not a PNG"
    grep -q '](scaling.png)' "$md" || fail "$md does not show scaling.png"
    echo "scaling.png: PNG signature ok ($(wc -c <"$png") bytes)"
else
    [[ ! -e $png ]] || fail "$png written without matplotlib"
    grep -q 'matplotlib is not installed' "$md" || fail "$md does not say why there is no PNG"
    echo "no matplotlib for $PYTHON: no scaling.png, and scaling.md says why"
fi

echo "== 2. without matplotlib: the CSV and the table, and a word on stderr"
PYTHONPATH=$(no_matplotlib_path) "$PYTHON" "$scaling" --cpu --config "$repo/configs/tiny.yaml" --ranks 1 \
    --precisions amp --steps 1 --warmup 1 --amptrain "$amptrain" --out "$out/no-mpl" 2>"$out/no-mpl.err" \
    || fail "launch/scaling without matplotlib exited with $?"
cat "$out/no-mpl.err"
[[ $(grep -c '^| amptrain | ' "$out/no-mpl/scaling.md") -eq 1 ]] || fail "no table row without matplotlib"
[[ -s $out/no-mpl/scaling.csv && ! -e $out/no-mpl/scaling.png ]] || fail "without matplotlib: want the CSV, no PNG"
grep -q 'matplotlib is not installed' "$out/no-mpl.err" || fail "no word on stderr about the missing matplotlib"
grep -q 'matplotlib is not installed' "$out/no-mpl/scaling.md" || fail "scaling.md does not say why there is no PNG"

echo "== 3. --gpus 64 without --cpu is refused"
set +e
msg=$("$PYTHON" "$scaling" --config "$repo/configs/tiny.yaml" --gpus 64 --amptrain "$amptrain" --out "$out/refused" 2>&1)
rc=$?
set -e
echo "$msg"
((rc == 2)) || fail "--gpus 64 gave exit code $rc, expected 2"
grep -q '64' <<<"$msg" || fail "the refusal does not name the 64 GPUs asked for"
grep -qi 'gpu' <<<"$msg" || fail "the refusal does not explain itself"
[[ ! -e $out/refused ]] || fail "a refused run must not create its output folder"

echo "== 4. rank counts past 256, or past 2 per usable CPU with --cpu, and a bad --timeout are refused"
cpus=$("$PYTHON" -c 'import os; print(len(os.sched_getaffinity(0)))')
refuse() { # refuse WHAT TEXT ARGS...: exit 2, TEXT in the message, no output folder, no Python traceback
    local what=$1 text=$2
    shift 2
    set +e
    msg=$("$PYTHON" "$scaling" --config "$repo/configs/tiny.yaml" --amptrain "$amptrain" --out "$out/refused" "$@" 2>&1)
    rc=$?
    set -e
    echo "$msg"
    ((rc == 2)) || fail "$what gave exit code $rc, expected 2"
    grep -q -- "$text" <<<"$msg" || fail "$what: the refusal does not say '$text'"
    ! grep -q Traceback <<<"$msg" || fail "$what: a Python traceback"
    [[ ! -e $out/refused ]] || fail "$what: a refused run must not create its output folder"
}
refuse "--cpu --ranks 1,257" "at most 256 ranks" --cpu --ranks 1,257
refuse "--gpus 300" "at most 256 ranks" --gpus 300
refuse "--cpu --ranks $((2 * cpus + 1))" "may use $cpus CPU" --cpu --ranks $((2 * cpus + 1))
refuse "--timeout 0" "--timeout must be a positive" --cpu --ranks 1 --timeout 0
# taskset narrows the CPUs: 3 ranks on 1 CPU are too many
if command -v taskset >/dev/null; then
    set +e
    msg=$(taskset -c 0 "$PYTHON" "$scaling" --cpu --config "$repo/configs/tiny.yaml" --ranks 3 --amptrain "$amptrain" \
        --out "$out/refused" 2>&1)
    rc=$?
    set -e
    echo "$msg"
    ((rc == 2)) && grep -q "may use 1 CPU" <<<"$msg" || fail "taskset -c 0 with --ranks 3: exit $rc"
fi

echo "PASS"
