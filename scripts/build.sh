#!/usr/bin/env bash
# Configure (when needed) and build one LibTorch leg in build/LEG.
#
#   scripts/build.sh t113   Debian's LibTorch 1.13, tests run with /usr/bin/python3
#   scripts/build.sh t2     PyPI torch 2.x from the venv made by scripts/install-deps.sh
#
# Release, not RelWithDebInfo: the compile time of this project is torch's headers, and -g
# makes every object several times larger, slows the link and fills ccache sooner, all on a
# 2-core CI budget. Tests compare bits, not timings, so -O3 vs -O2 changes nothing they check.
# For a debugger, configure your own build/dev-* with -DCMAKE_BUILD_TYPE=Debug.
#
# Environment: FSDP_OPT_VENV (t2 venv), FSDP_OPT_JOBS (default: nproc), CCACHE_DIR.
set -euo pipefail

leg=${1:-}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$root/build/$leg
venv=${FSDP_OPT_VENV:-$HOME/.cache/fsdp-opt/venv-torch2}
extra_args=()

case "$leg" in
  t113)
    python=/usr/bin/python3
    prefix_path=/usr/lib/x86_64-linux-gnu/cmake
    ;;
  t2)
    python=$venv/bin/python
    [ -x "$python" ] || { echo "build.sh: error: no venv at $venv; run scripts/install-deps.sh" >&2; exit 1; }
    # One torch import (seconds) gives three lines: the CMake package dir, the torch package
    # root, and the lib dirs of the nvidia-* wheels that torch's CUDA libraries load.
    mapfile -t torch_paths < <("$python" -c '
import glob, os, torch
root = os.path.dirname(torch.__file__)
print(torch.utils.cmake_prefix_path)
print(root)
print(":".join(sorted(glob.glob(os.path.join(os.path.dirname(root), "nvidia", "*", "lib")))))')
    [ "${#torch_paths[@]}" -eq 3 ] || { echo "build.sh: error: $python cannot import torch; run scripts/install-deps.sh" >&2; exit 1; }
    # torch's TorchConfig.cmake finds libtorch.so with find_library(... PATHS <torch>/lib),
    # which searches the system directories first: with Debian's libtorch-dev installed it
    # would pick /usr/lib/x86_64-linux-gnu/libtorch.so (1.13). Putting the torch package
    # root itself on CMAKE_PREFIX_PATH makes <torch>/lib win.
    prefix_path="${torch_paths[0]};${torch_paths[1]}"
    # When ld links an executable it resolves libtorch_cuda.so's own dependencies, and the
    # -rpath CMake adds for the CUDA toolkit (/usr/local/cuda/lib) comes before that
    # library's $ORIGIN rpath: it would take the toolkit's older libnccl.so.2 and fail on
    # symbols only the wheel's NCCL has. -rpath-link is searched first. At run time the
    # loader follows libtorch_cuda.so's own RPATH, so nothing else is needed.
    if [ -n "${torch_paths[2]}" ]; then
      extra_args+=("-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,${torch_paths[2]}"
                   "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,${torch_paths[2]}")
    fi
    # The CUDA/NCCL runtime backend (docs/runtime.md, "CUDA"): compiled and linked whenever the
    # CUDA toolkit's nvcc is there, GPU or not; its GPU tests skip without a device.
    if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
      extra_args+=("-DFSDP_OPT_ENABLE_CUDA=ON")
    fi
    ;;
  *)
    echo "usage: scripts/build.sh t113|t2" >&2
    exit 2
    ;;
esac

# One ccache for every clone and leg. base_dir rewrites absolute paths under the checkout,
# so a fresh clone in another directory (as CI makes) hits what an earlier one compiled.
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_BASEDIR=$root
mkdir -p "$CCACHE_DIR"
ccache --max-size=5G >/dev/null

configure_args=(
  -G Ninja
  -DCMAKE_BUILD_TYPE=Release
  "-DCMAKE_PREFIX_PATH=$prefix_path"
  "-DFSDP_OPT_PYTHON=$python"
  "${extra_args[@]}"
)

# Reconfigure only when the arguments changed or the last configure did not finish; a change
# to a CMakeLists.txt is noticed by ninja itself, which reruns CMake as part of the build.
stamp=$build_dir/.fsdp-configure-args
wanted=$(printf '%s\n' "${configure_args[@]}")
if [ -f "$build_dir/CMakeCache.txt" ] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$build_dir/CMakeCache.txt"; then
  echo "build.sh: $build_dir was made by another generator; starting it afresh"
  rm -rf "$build_dir"
fi
if [ -f "$build_dir/build.ninja" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
  echo "build.sh: $leg: configuration up to date"
else
  rm -f "$stamp"
  cmake -S "$root" -B "$build_dir" "${configure_args[@]}"
  printf '%s\n' "$wanted" >"$stamp"
fi

cmake --build "$build_dir" -j "${FSDP_OPT_JOBS:-$(nproc)}"
