#!/usr/bin/env bash
# check-format.sh - is every C/CUDA source formatted as .clang-format says? Lists the files clang-format
# would change and exits 1 if there are any (0 when all agree); nothing is rewritten.
#   scripts/check-format.sh            every .c .h .cu .cuh under src kernels tests bench fuzz
#   scripts/check-format.sh FILE...    just those files
# Uses clang-format 14 (Debian 12's `clang-format`); CLANG_FORMAT names another binary. Other versions
# break some lines differently, so a check is only meaningful with the version the tree was formatted by.
set -euo pipefail
cd "$(dirname "$0")/.."

clang_format=${CLANG_FORMAT:-}
if [ -z "$clang_format" ]; then
    for candidate in clang-format-14 clang-format; do
        if command -v "$candidate" >/dev/null; then clang_format=$candidate; break; fi
    done
fi
if [ -z "$clang_format" ] || ! command -v "$clang_format" >/dev/null; then
    echo "check-format.sh: clang-format not found (apt-get install clang-format, or set CLANG_FORMAT)" >&2
    exit 2
fi
version=$("$clang_format" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$version" != 14 ]; then
    echo "check-format.sh: note: $clang_format is version ${version:-unknown}; the tree's format is clang-format 14's" >&2
fi

if [ $# -gt 0 ]; then
    files=("$@")
else
    mapfile -t files < <(git ls-files -- 'src/*' 'kernels/*' 'tests/*' 'bench/*' 'fuzz/*' |
                         grep -E '\.(c|h|cu|cuh)$')
fi

bad=()
for f in "${files[@]}"; do
    "$clang_format" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
    printf '%s\n' "${bad[@]}"
    echo "check-format.sh: ${#bad[@]} of ${#files[@]} files are not formatted as .clang-format says" \
         "(show one: $clang_format --style=file FILE | diff FILE -)" >&2
    exit 1
fi
echo "check-format.sh: ${#files[@]} files formatted as .clang-format says"
