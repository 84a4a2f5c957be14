# lib.sh - what the launch tests share (sourced, after `set -euo pipefail`): where the sources are, the
# Python that runs the scripts ($PYTHON, set by launch.cmake), failing, the PNG check, hiding matplotlib.
# Each test runs in its scratch folder (the working directory) and writes only there.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-python3}
scratch=$PWD
# Anything NCCL- or GPU-related in the caller's environment must not change a CPU run.
unset CUDA_VISIBLE_DEVICES

# take_amptrain "$0" "$@": the test's one argument, PATH/TO/amptrain, as an absolute path in $amptrain.
take_amptrain() {
    if (($# != 2)) || [[ $2 == -h || $2 == --help ]]; then
        echo "usage: $1 PATH/TO/amptrain   (registered in CTest by tests/launch/launch.cmake)" >&2
        exit 2
    fi
    amptrain=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# status CMD ARGS...: runs the command; its exit code in $rc, a failure not ending the test (set -e).
status() {
    rc=0
    "$@" || rc=$?
}

has_matplotlib() {
    "$PYTHON" -c "import matplotlib" 2>/dev/null
}

# is_png FILE [WIDTH HEIGHT]: FILE starts with the PNG signature (and its IHDR has that size).
is_png() {
    [[ -s $1 && $(head -c 8 "$1" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || return 1
    (($# == 1)) || [[ $(od -An -tu1 -j16 -N8 "$1" | tr -s ' ' | sed 's/^ //') == "0 0 $(($2 >> 8)) $(($2 & 255)) 0 0 $(($3 >> 8)) $(($3 & 255))" ]]
}

# A folder that, first on PYTHONPATH, makes "import matplotlib" fail as on a machine without it.
no_matplotlib_path() {
    mkdir -p "$scratch/no-matplotlib/matplotlib"
    echo 'raise ImportError("matplotlib hidden by the test")' >"$scratch/no-matplotlib/matplotlib/__init__.py"
    echo "$scratch/no-matplotlib"
}
