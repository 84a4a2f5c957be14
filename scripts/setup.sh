#!/usr/bin/env bash
# setup.sh - install what amptrain's build needs on Debian/Ubuntu (idempotent; skips what is there).
#   required: a C compiler, CMake >= 3.24, pkg-config, libyaml, Check
#   optional: libjpeg-turbo (the JPEG image sources: imagefolder, webdataset; its libjpeg API decodes only a crop's region); Open MPI (multi-rank runs and the MPI tests); matplotlib (the pictures of launch/scaling,
#             compare-amp and plot-metrics); CUDA 12+/13 with cuDNN 9 and NCCL is used when found under
#             /usr/local/cuda (not installed by this script)
set -euo pipefail

# dataset-fashion-mnist and python3-pil: the real-data test (tests/unit/test_fashion_mnist.c, ~30 MB)
packages=(build-essential cmake pkg-config libyaml-dev check libturbojpeg0-dev libjpeg62-turbo-dev libopenmpi-dev openmpi-bin python3
          python3-matplotlib python3-pil dataset-fashion-mnist)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup.sh: all build dependencies are installed"
    exit 0
fi
echo "setup.sh: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
