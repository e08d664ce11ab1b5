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
source "$root/scripts/cmake-common.sh"

case "$leg" in
  t113)
    python=/usr/bin/python3
    extra_args+=("-DCMAKE_PREFIX_PATH=/usr/lib/x86_64-linux-gnu/cmake")
    ;;
  t2)
    python=$venv/bin/python
    [ -x "$python" ] || { echo "build.sh: error: no venv at $venv; run scripts/install-deps.sh" >&2; exit 1; }
    torch_cmake_args "$python" || { echo "build.sh: error: run scripts/install-deps.sh" >&2; exit 1; }
    extra_args+=("${TORCH_CMAKE_ARGS[@]}")
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

use_ccache "$root"

configure_args=(
  -G Ninja
  -DCMAKE_BUILD_TYPE=Release
  "-DFSDP_OPT_PYTHON=$python"
  "${extra_args[@]}"
)
configure_if_changed "$root" "$build_dir" "${configure_args[@]}"
cmake --build "$build_dir" -j "${FSDP_OPT_JOBS:-$(nproc)}"
