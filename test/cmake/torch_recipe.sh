#!/usr/bin/env bash
# ctest `torch-recipe`: PyTorch's documented recipe for building against its wheel,
# -DCMAKE_PREFIX_PATH=<torch.utils.cmake_prefix_path> and no other torch argument, on a machine
# that also has Debian's libtorch-dev (as scripts/install-deps.sh leaves it):
#   1. this leg was configured that way (scripts/build.sh passes nothing else about torch);
#   2. the project configures that way from scratch, every torch library found in the wheel;
#   3. a small program configured and built that way (cmake/FsdpOptTorch.cmake) links the
#      wheel's libtorch_cuda.so (its NCCL found) and runs on the wheel's c10, not Debian's;
#   4. configurations that mix the two torches fail at configure time with an error naming
#      both: CMAKE_PREFIX_PATH naming both, a Debian library leaking into torch's variables, and
#      a consumer of the installed package (find_package(FsdpOpt)) naming both.
# usage: torch_recipe.sh TEST_CONFIG.sh WORKDIR
set -euo pipefail
config=$1 work=$2
source "$config"
rm -rf "$work" && mkdir -p "$work"
debian_torch=/usr/lib/x86_64-linux-gnu/cmake/Torch
debian_c10=/usr/lib/x86_64-linux-gnu/libc10.so

fail() { echo "FAIL: $*"; exit 1; }
[ -f "$debian_torch/TorchConfig.cmake" ] && [ -e "$debian_c10" ] \
  || fail "Debian's libtorch-dev is not installed ($debian_torch): run scripts/install-deps.sh"
prefix=$("$FSDP_PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_lib=$(realpath "$TORCH_LIBRARY_DIR")
echo "torch.utils.cmake_prefix_path: $prefix"

echo "== 1. this leg was configured with the plain recipe"
[ "$LEG_PREFIX_PATH" = "$prefix" ] || fail "CMAKE_PREFIX_PATH is '$LEG_PREFIX_PATH', not '$prefix'"
case "$LEG_EXE_LINKER_FLAGS $LEG_SHARED_LINKER_FLAGS" in
  *rpath-link*) fail "the leg's linker flags carry -rpath-link: '$LEG_EXE_LINKER_FLAGS'" ;;
esac

# expect_configure_error NAME WANT1 WANT2 ARGS...: cmake fails naming both WANTs.
expect_configure_error() {
  local name=$1 want1=$2 want2=$3
  shift 3
  if "$FSDP_CMAKE" "$@" >"$work/$name.log" 2>&1; then
    cat "$work/$name.log"; fail "$name: configure succeeded"
  fi
  local text
  text=$(tr -s ' \n' ' ' <"$work/$name.log")
  for want in "$want1" "$want2"; do
    [[ "$text" == *"$want"* ]] || { cat "$work/$name.log"; fail "$name: the error does not name $want"; }
  done
  grep -m1 -A1 "^CMake Error" "$work/$name.log"
}

echo "== 2. the project, configured with only the plain prefix"
"$FSDP_CMAKE" -S "$FSDP_SOURCE_DIR" -B "$work/project" "${GENERATOR_ARGS[@]}" \
  "-DCMAKE_PREFIX_PATH=$prefix" -DFSDP_OPT_BUILD_TESTS=OFF >"$work/project.log" 2>&1 \
  || { cat "$work/project.log"; fail "configure of the project"; }
for var in c10_LIBRARY TORCH_LIBRARY C10_CUDA_LIBRARY; do
  value=$(sed -n "s/^$var:FILEPATH=//p" "$work/project/CMakeCache.txt")
  [ -z "$value" ] || [[ "$value" == *NOTFOUND ]] && continue
  [ "$(dirname "$(realpath "$value")")" = "$torch_lib" ] || fail "$var is $value, not in $torch_lib"
  echo "$var=$value"
done

echo "== 3. a program built with only the plain prefix links and runs"
"$FSDP_CMAKE" -S "$FSDP_SOURCE_DIR/test/cmake/torch_consumer" -B "$work/consumer" \
  "${GENERATOR_ARGS[@]}" "-DCMAKE_PREFIX_PATH=$prefix" >"$work/consumer.log" 2>&1 \
  || { cat "$work/consumer.log"; fail "configure of torch_consumer"; }
"$FSDP_CMAKE" --build "$work/consumer" >"$work/consumer-build.log" 2>&1 \
  || { tail -30 "$work/consumer-build.log"; fail "build of torch_consumer (the link)"; }
"$work/consumer/torch_consumer" >"$work/consumer.out" 2>&1 || { cat "$work/consumer.out"; fail "torch_consumer"; }
cat "$work/consumer.out"
c10=$(sed -n 's/^c10: //p' "$work/consumer.out")
[ "$(dirname "$(realpath "$c10")")" = "$torch_lib" ] || fail "torch_consumer runs on $c10, not the wheel's c10"
grep -qx "sum: 83" "$work/consumer.out" || fail "torch_consumer computed a wrong sum"

echo "== 4. mixed configurations fail at configure time, naming both torches"
wheel_torch=$(dirname "$torch_lib")/share/cmake/Torch
expect_configure_error prefix-names-both "$debian_torch" "$wheel_torch" \
  -S "$FSDP_SOURCE_DIR" -B "$work/mixed-prefix" "${GENERATOR_ARGS[@]}" \
  "-DCMAKE_PREFIX_PATH=$(dirname "$debian_torch");$prefix" -DFSDP_OPT_BUILD_TESTS=OFF
expect_configure_error debian-c10-leaks "$torch_lib" "$(realpath "$debian_c10")" \
  -S "$FSDP_SOURCE_DIR" -B "$work/mixed-leak" "${GENERATOR_ARGS[@]}" \
  "-DCMAKE_PREFIX_PATH=$prefix" "-Dc10_LIBRARY=$debian_c10" -DFSDP_OPT_BUILD_TESTS=OFF
"$FSDP_CMAKE" --install "$FSDP_BUILD_DIR" --prefix "$work/installed" >"$work/install.log" 2>&1 \
  || { cat "$work/install.log"; fail "cmake --install"; }
expect_configure_error package-names-both "$debian_torch" "$wheel_torch" \
  -S "$FSDP_SOURCE_DIR/examples/cpp-pipeline" -B "$work/mixed-package" "${GENERATOR_ARGS[@]}" \
  "-DCMAKE_PREFIX_PATH=$work/installed;$(dirname "$debian_torch");$prefix"
echo "PASS"
