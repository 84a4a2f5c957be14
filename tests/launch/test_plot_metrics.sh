#!/usr/bin/env bash
# test_plot_metrics.sh AMPTRAIN - launch/plot-metrics on two short tiny runs (fp32 and AMP, logged every 2
# steps): it must print each run's summary line (16 steps: 256 / 32 x 2) under its label and draw one
# 1500x750 PNG (or, when $PYTHON has no matplotlib, exit 1 and say so; also checked with matplotlib
# hidden); a malformed line is refused naming file and line, a --label count that does not match the files
# is refused, both with exit code 2 and no PNG.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
take_amptrain "$0" "$@"
plot="$repo/launch/plot-metrics"
out="$scratch/out"
rm -rf "$out"
mkdir -p "$out"

echo "== 1. two runs, overlaid"
for amp in false true; do
    "$amptrain" "$repo/configs/tiny.yaml" data.train_size=256 data.val_size=64 train.epochs=2 log.every=2 \
        amp.enabled=$amp log.metrics="$out/amp-$amp/metrics.jsonl" checkpoint.dir= >"$out/amp-$amp.log" 2>&1 \
        || fail "amptrain amp.enabled=$amp exited with $?; see $out/amp-$amp.log"
done
set +e
"$PYTHON" "$plot" "$out/amp-false/metrics.jsonl" "$out/amp-true/metrics.jsonl" --label fp32 --label AMP \
    -o "$out/curves.png" >"$out/plot.out" 2>&1
rc=$?
set -e
cat "$out/plot.out"
grep -q '^plot-metrics: fp32: 16 steps, ' "$out/plot.out" || fail "no summary line for the fp32 run"
grep -q '^plot-metrics: AMP: 16 steps, ' "$out/plot.out" || fail "no summary line for the AMP run"
if has_matplotlib; then
    ((rc == 0)) || fail "plot-metrics exited with $rc"
    is_png "$out/curves.png" 1500 750 || fail "curves.png missing, not a PNG or not 1500x750"
else
    ((rc == 1)) || fail "plot-metrics without matplotlib exited with $rc, expected 1"
    grep -q 'matplotlib is not installed' "$out/plot.out" || fail "no word about the missing matplotlib"
fi

echo "== 2. without matplotlib: exit 1, the summaries, and why"
set +e
PYTHONPATH=$(no_matplotlib_path) "$PYTHON" "$plot" "$out/amp-true/metrics.jsonl" -o "$out/no-mpl.png" >"$out/no-mpl.out" 2>&1
rc=$?
set -e
cat "$out/no-mpl.out"
((rc == 1)) || fail "plot-metrics with matplotlib hidden exited with $rc, expected 1"
grep -q 'matplotlib is not installed' "$out/no-mpl.out" || fail "no word about the missing matplotlib"
grep -q '^plot-metrics: amp-true: 16 steps, ' "$out/no-mpl.out" || fail "no summary line (label: the folder name)"
[[ ! -e $out/no-mpl.png ]] || fail "a PNG without matplotlib"

echo "== 3. refusals"
bad="$out/bad.jsonl"
{ head -n 2 "$out/amp-true/metrics.jsonl"; echo '{"step": 3, "loss": '; tail -n 1 "$out/amp-true/metrics.jsonl"; } >"$bad"
for args in "$bad" "$out/amp-true/metrics.jsonl --label one --label two"; do
    set +e
    msg=$("$PYTHON" "$plot" $args -o "$out/refused.png" 2>&1)
    rc=$?
    set -e
    echo "$msg"
    ((rc == 2)) || fail "'$args' gave exit code $rc, expected 2"
    [[ ! -e $out/refused.png ]] || fail "a refused plot must not write its PNG"
    [[ $args != "$bad" ]] || grep -q "bad.jsonl:3: not a JSON object" <<<"$msg" \
        || fail "the malformed line is not named as bad.jsonl:3"
done

echo "PASS"
