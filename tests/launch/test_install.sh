#!/usr/bin/env bash
# test_install.sh CMAKE BUILD_DIR - cmake --install into a prefix in the scratch folder, then, with no
# amptrain on PATH and $AMPTRAIN unset (so the scripts must find the binary next to themselves):
#   P/bin/amptrain --version                  the same line as the built binary's
#   P/bin/amptrain-scaling --cpu --config P/share/amptrain/configs/tiny.yaml --ranks 1 ...
#                                             one ok point, run by P/bin/amptrain under P/bin/amptrain-mpirun
#   P/bin/amptrain-compare-amp P/share/amptrain/configs/tiny.yaml (shortened)
#                                             both rows, run by P/bin/amptrain
#   P/bin/amptrain-plot-metrics --help        finds its Python module in P/share/amptrain/python
#   P/bin/amptrain-fashion-mnist --help       the same for the tools
#   P/bin/amptrain-pack-shards                packs a small ImageFolder into the expected shards
# and the layout: configs, docs, the README and the LICENSE in P/share/amptrain.
set -euo pipefail

if (($# != 2)) || [[ $1 == -h || $1 == --help ]]; then
    echo "usage: $0 CMAKE BUILD_DIR   (registered in CTest by tests/launch/launch.cmake)" >&2
    exit 2
fi
cmake=$1
build=$2
source "$(dirname "$0")/lib.sh"
prefix="$scratch/prefix"
out="$scratch/out"
rm -rf "$prefix" "$out"
mkdir -p "$out"

echo "== 1. cmake --install --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$out/install.log" || fail "cmake --install exited with $?"
for f in bin/amptrain bin/amptrain-mpirun bin/amptrain-scaling bin/amptrain-compare-amp bin/amptrain-plot-metrics \
    bin/amptrain-fashion-mnist bin/amptrain-pack-shards share/amptrain/bench/torch_train.py; do
    [[ -f $prefix/$f && -x $prefix/$f ]] || fail "$f is not an executable in the prefix"
done
for f in share/amptrain/configs/tiny.yaml share/amptrain/configs/seed_resnext50.yaml share/amptrain/docs/config.md \
    share/amptrain/README.md share/amptrain/LICENSE share/amptrain/python/amptrain_report.py \
    share/amptrain/python/amptrain_python.py share/amptrain/launch/amptrain.sbatch; do
    [[ -s $prefix/$f ]] || fail "$f missing in the prefix"
done

# Only the installed binary may be found: no amptrain on PATH, no $AMPTRAIN.
unset AMPTRAIN
path=""
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    [[ -n $d && ! -x $d/amptrain ]] && path="${path:+$path:}$d"
done
export PATH=$path
! command -v amptrain >/dev/null || fail "an amptrain is still on PATH"
bin="$prefix/bin"
tiny="$prefix/share/amptrain/configs/tiny.yaml"

echo "== 2. the installed amptrain --version"
version=$("$bin/amptrain" --version) || fail "installed amptrain --version exited with $?"
echo "$version"
[[ $version == "$("$build/amptrain" --version)" ]] || fail "the installed binary's --version differs from the built one's"

echo "== 3. the installed scaling driver, one CPU point"
"$bin/amptrain-scaling" --cpu --config "$tiny" --ranks 1 --precisions amp --steps 1 --warmup 1 --out "$out/scaling" \
    || fail "amptrain-scaling exited with $?"
[[ $(grep -c ',ok,' "$out/scaling/scaling.csv") -eq 1 ]] || fail "scaling.csv has no ok point"
grep -q "^\$ $bin/amptrain-mpirun .*--amptrain $bin/amptrain " "$out"/scaling/logs/*.log \
    || fail "the point did not run $bin/amptrain under $bin/amptrain-mpirun"

echo "== 4. the installed compare-amp"
"$bin/amptrain-compare-amp" "$tiny" data.train_size=64 data.val_size=0 train.epochs=1 --out "$out/cmp" \
    || fail "amptrain-compare-amp exited with $?"
grep -q '^| amptrain | fp32 | [0-9]' "$out/cmp/report.md" && grep -q '^| amptrain | AMP | [0-9]' "$out/cmp/report.md" \
    || fail "report.md lacks a row"
grep -q "^\$ $bin/amptrain " "$out/cmp/amp/amptrain.log" || fail "compare-amp did not run $bin/amptrain"

echo "== 5. the installed plot-metrics and tools find their modules"
"$bin/amptrain-plot-metrics" --help >/dev/null || fail "amptrain-plot-metrics --help exited with $?"
"$bin/amptrain-fashion-mnist" --help >/dev/null || fail "amptrain-fashion-mnist --help exited with $?"
grep -q '^MIT License' "$prefix/share/amptrain/LICENSE" || fail "the installed LICENSE is not the MIT license"

echo "== 6. the installed pack-shards packs an ImageFolder (file bytes as they are), under AMPTRAIN_PYTHON"
for split in train val; do
    for cls in cat dog; do
        mkdir -p "$out/folder/$split/$cls"
        printf 'not decoded: %s/%s' "$split" "$cls" >"$out/folder/$split/$cls/1.jpg"
    done
done
AMPTRAIN_PYTHON=$PYTHON "$bin/amptrain-pack-shards" "$out/folder" "$out/shards" --shard-size 1 \
    || fail "amptrain-pack-shards exited with $?"
[[ $(ls "$out/shards") == "$(printf '%s\n' train-000000.tar train-000001.tar val-000000.tar val-000001.tar)" ]] \
    || fail "shards: $(ls "$out/shards")"
[[ $(tar -xOf "$out/shards/train-000001.tar" 00000001.jpg) == "not decoded: train/dog" ]] \
    || fail "train-000001.tar does not hold the second training image"
[[ $(tar -xOf "$out/shards/train-000001.tar" 00000001.cls) == 1 ]] || fail "the dog's label is not 1"

echo "PASS"
