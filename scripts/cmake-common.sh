# Sourced by scripts/build.sh and scripts/gpu-check.sh: what both need to configure a CMake build
# against a pip-installed torch, through ccache, only when its arguments changed.

# torch_cmake_args PYTHON: sets the array TORCH_CMAKE_ARGS to the arguments that build against
# the torch package PYTHON imports. Returns 1, with a message on stderr, when it imports none.
torch_cmake_args() {
  local python=$1 paths
  # One torch import (seconds) gives three lines: the CMake package dir, the torch package
  # root, and the lib dirs of the nvidia-* wheels that torch's CUDA libraries load.
  mapfile -t paths < <("$python" -c '
import glob, os, torch
root = os.path.dirname(torch.__file__)
print(torch.utils.cmake_prefix_path)
print(root)
print(":".join(sorted(glob.glob(os.path.join(os.path.dirname(root), "nvidia", "*", "lib")))))' 2>/dev/null)
  if [ "${#paths[@]}" -ne 3 ]; then
    echo "error: $python cannot import torch" >&2
    return 1
  fi
  # torch's TorchConfig.cmake finds libtorch.so with find_library(... PATHS <torch>/lib), which
  # searches the system directories first: with Debian's libtorch-dev installed it would pick
  # /usr/lib/x86_64-linux-gnu/libtorch.so (1.13). Putting the torch package root itself on
  # CMAKE_PREFIX_PATH makes <torch>/lib win.
  TORCH_CMAKE_ARGS=("-DCMAKE_PREFIX_PATH=${paths[0]};${paths[1]}")
  # When ld links an executable it resolves libtorch_cuda.so's own dependencies, and the -rpath
  # CMake adds for the CUDA toolkit (/usr/local/cuda/lib) comes before that library's $ORIGIN
  # rpath: it would take the toolkit's older libnccl.so.2 and fail on symbols only the wheel's
  # NCCL has. -rpath-link is searched first. At run time the loader follows libtorch_cuda.so's
  # own RPATH, so nothing else is needed.
  if [ -n "${paths[2]}" ]; then
    TORCH_CMAKE_ARGS+=("-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,${paths[2]}"
                       "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,${paths[2]}")
  fi
}

# use_ccache ROOT: one ccache for every clone, leg and build of the checkout at ROOT. base_dir
# rewrites absolute paths under the checkout, so a fresh clone in another directory (as CI
# makes) hits what an earlier one compiled. Nothing happens without ccache.
use_ccache() {
  command -v ccache >/dev/null 2>&1 || return 0
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
  export CCACHE_BASEDIR=$1
  mkdir -p "$CCACHE_DIR"
  ccache --max-size=5G >/dev/null
}

# configure_if_changed SOURCE_DIR BUILD_DIR ARGS...: runs CMake unless BUILD_DIR was configured
# with exactly these arguments and finished (a change to a CMakeLists.txt is noticed by the
# build tool itself, which reruns CMake). A directory made by another generator starts afresh.
configure_if_changed() {
  local src=$1 dir=$2
  shift 2
  local stamp=$dir/.fsdp-configure-args wanted
  wanted=$(printf '%s\n' "$@")
  if [ -f "$dir/CMakeCache.txt" ] && ! grep -q "^CMAKE_GENERATOR:INTERNAL=${CMAKE_GENERATOR_NAME:-Ninja}\$" "$dir/CMakeCache.txt"; then
    echo "$dir was made by another generator; starting it afresh"
    rm -rf "$dir"
  fi
  if [ -f "$dir/CMakeCache.txt" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
    echo "$dir: configuration up to date"
    return 0
  fi
  rm -f "$stamp"
  cmake -S "$src" -B "$dir" "$@" || return 1
  printf '%s\n' "$wanted" >"$stamp"
}
