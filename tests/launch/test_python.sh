#!/usr/bin/env bash
# test_python.sh AMPTRAIN - the Python the launch scripts and tools run under, and their bad arguments:
#   1. AMPTRAIN_PYTHON names the interpreter: each script started through its #! line (python3 on PATH)
#      runs again under it (a wrapper that logs its arguments and runs $PYTHON), once; one that names no
#      executable is a usage error (exit 2)
#   2. a missing module (matplotlib, Pillow: hidden on PYTHONPATH) is reported naming the interpreter
#      that lacks it and AMPTRAIN_PYTHON
#   3. bad arguments to every script: one line, exit 2, never a Python traceback, nothing written
# Run in a scratch folder (the working directory).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
take_amptrain "$0" "$@"
out="$scratch/out"
rm -rf "$out"
mkdir -p "$out"
export AMPTRAIN=$amptrain
unset AMPTRAIN_PYTHON AMPTRAIN_PYTHON_RUNNING
python_exe=$("$PYTHON" -c 'import sys; print(sys.executable)')

echo "== 1. AMPTRAIN_PYTHON"
cat >"$out/logged-python" <<EOF
#!/usr/bin/env bash
printf '%s\n' "\$1" >>"$out/logged-python.calls"
exec "$PYTHON" "\$@"
EOF
chmod +x "$out/logged-python"
scripts=(launch/scaling launch/compare-amp launch/plot-metrics tools/fashion-mnist tools/pack-shards)
for script in "${scripts[@]}"; do
    rm -f "$out/logged-python.calls"
    AMPTRAIN_PYTHON="$out/logged-python" "$repo/$script" --help >"$out/help.out" 2>&1 \
        || fail "$script --help under AMPTRAIN_PYTHON exited with $?: $(cat "$out/help.out")"
    grep -q '^usage: ' "$out/help.out" || fail "$script --help printed no usage"
    [[ $(cat "$out/logged-python.calls" 2>/dev/null) == "$repo/$script" ]] \
        || fail "$script did not run once under AMPTRAIN_PYTHON: $(cat "$out/logged-python.calls" 2>/dev/null)"
done
status env AMPTRAIN_PYTHON="$out/no-such-python" "$repo/launch/plot-metrics" --help >"$out/bad-python.out" 2>&1
((rc == 2)) || fail "AMPTRAIN_PYTHON naming nothing gave exit $rc, expected 2"
grep -q "AMPTRAIN_PYTHON=$out/no-such-python is not an executable" "$out/bad-python.out" \
    || fail "no word about the bad AMPTRAIN_PYTHON: $(cat "$out/bad-python.out")"

echo "== 2. a missing module names the interpreter"
"$amptrain" "$repo/configs/tiny.yaml" data.train_size=64 data.val_size=0 train.epochs=1 log.every=1 checkpoint.dir= \
    log.metrics="$out/run/metrics.jsonl" >"$out/run.log" 2>&1 || fail "amptrain exited with $?; see $out/run.log"
status env PYTHONPATH=$(no_matplotlib_path) AMPTRAIN_PYTHON=$PYTHON "$repo/launch/plot-metrics" "$out/run/metrics.jsonl" \
    >"$out/no-mpl.out" 2>&1
cat "$out/no-mpl.out"
((rc == 1)) || fail "plot-metrics without matplotlib exited with $rc, expected 1"
grep -qF "matplotlib is not installed for $python_exe (AMPTRAIN_PYTHON=" "$out/no-mpl.out" \
    || fail "the missing matplotlib does not name $python_exe and AMPTRAIN_PYTHON"
# four images and labels in Fashion-MNIST's IDX format (gzip; magic 0x803 / 0x801, big-endian sizes)
mkdir -p "$out/idx"
"$PYTHON" - "$out/idx" <<'PY'
import gzip, struct, sys
for prefix in ("train", "t10k"):
    with gzip.open(f"{sys.argv[1]}/{prefix}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, 4, 28, 28) + bytes(range(256)) * 12 + bytes(4 * 784 - 3072))
    with gzip.open(f"{sys.argv[1]}/{prefix}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 0x801, 4) + bytes([0, 3, 7, 9]))
PY
mkdir -p "$out/no-pil/PIL"
echo 'raise ImportError("Pillow hidden by the test")' >"$out/no-pil/PIL/__init__.py"
status env PYTHONPATH="$out/no-pil" "$PYTHON" "$repo/tools/fashion-mnist" "$out/fmnist" --idx "$out/idx" \
    >"$out/no-pil.out" 2>&1
cat "$out/no-pil.out"
((rc == 1)) || fail "fashion-mnist without Pillow exited with $rc, expected 1"
grep -qF "Pillow is not installed for $python_exe (AMPTRAIN_PYTHON=" "$out/no-pil.out" \
    || fail "the missing Pillow does not name $python_exe and AMPTRAIN_PYTHON"
[[ ! -e $out/fmnist && ! -e $out/fmnist.partial ]] || fail "fashion-mnist wrote its folder without Pillow"

echo "== 3. bad arguments: exit 2, one line, no traceback, nothing written"
mkdir -p "$out/shards" "$out/empty"
touch "$out/shards/train-000000.tar"
bad=(
    "launch/scaling --cpu --config $repo/configs/tiny.yaml --ranks 1,x --out $out/w"
    "launch/scaling --cpu --config $repo/configs/tiny.yaml --ranks 1 --out /proc/amptrain-test/w"
    "launch/scaling --cpu --config $repo/configs/tiny.yaml --ranks 1 --steps 0 --out $out/w"
    "launch/scaling --cpu --config $out/no-such.yaml --ranks 1 --out $out/w"
    "launch/compare-amp $repo/configs/tiny.yaml --out /proc/amptrain-test/w"
    "launch/compare-amp $repo/configs/tiny.yaml --timeout -1 --out $out/w"
    "launch/compare-amp $out/no-such.yaml --out $out/w"
    "launch/plot-metrics $out/no-such.jsonl -o $out/w.png"
    "launch/plot-metrics $out/run/metrics.jsonl -o /proc/amptrain-test/w.png"
    "tools/fashion-mnist /proc/amptrain-test/w --idx $out/idx"
    "tools/fashion-mnist $out/w --idx $out/empty"
    "tools/fashion-mnist $out/w --side 8"
    "tools/fashion-mnist $out/w --limit-train x"
    "tools/fashion-mnist $out/w --idx $out/idx --shards $out/shards"
    "tools/pack-shards $out/empty $out/w"
    "tools/pack-shards $out/empty $out/w --shard-size 0"
    "tools/pack-shards $repo/tests $out/w"
)
for args in "${bad[@]}"; do
    # shellcheck disable=SC2086 # the arguments are words
    status "$PYTHON" "$repo"/$args >"$out/bad.out" 2>&1
    ((rc == 2)) || fail "$args: exit $rc, expected 2: $(cat "$out/bad.out")"
    ! grep -q Traceback "$out/bad.out" || fail "$args: a traceback: $(cat "$out/bad.out")"
    [[ ! -e $out/w && ! -e $out/w.png && ! -e $out/w.partial ]] || fail "$args: wrote its output"
    echo "$args: $(grep -v '^usage:\|^  ' "$out/bad.out" | head -1)"
done

echo "PASS"
