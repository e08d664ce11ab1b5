# Sourced by scripts/build.sh and scripts/gpu-check.sh: what both need to configure a CMake build
# against a pip-installed torch, through ccache, only when its arguments changed.

# torch_cmake_args PYTHON: sets the array TORCH_CMAKE_ARGS to the arguments that build against
# the torch package PYTHON imports: what PyTorch documents, torch.utils.cmake_prefix_path on
# CMAKE_PREFIX_PATH, and nothing else (cmake/FsdpOptTorch.cmake finds the rest through that
# package). Returns 1, with a message on stderr, when PYTHON imports no torch.
torch_cmake_args() {
  local python=$1 prefix
  prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) || prefix=
  if [ -z "$prefix" ]; then
    echo "error: $python cannot import torch" >&2
    return 1
  fi
  TORCH_CMAKE_ARGS=("-DCMAKE_PREFIX_PATH=$prefix")
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
# build tool itself, which reruns CMake), from an empty cache when the arguments changed. A
# directory made by another generator starts afresh.
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
  # Other arguments than last time: the cache goes, or a -D dropped from them would live on in it
  # (objects stay; ninja rebuilds only what the new configuration changes).
  if [ -f "$dir/CMakeCache.txt" ]; then
    echo "$dir: configure arguments changed; configuring it afresh"
    rm -f "$dir/CMakeCache.txt"
  fi
  rm -f "$stamp"
  cmake -S "$src" -B "$dir" "$@" || return 1
  printf '%s\n' "$wanted" >"$stamp"
}
