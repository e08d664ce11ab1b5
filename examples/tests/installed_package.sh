#!/usr/bin/env bash
# ctest `cpp-pipeline-installed`: the installed package, as a user gets it.
#   1. cmake --install the build into WORKDIR/prefix; the files of the layout are there;
#   2. the installed fsdp-opt runs (its RPATH finds libfsdp_passes beside it and torch);
#   3. examples/cpp-pipeline, configured ALONE (not in fsdp-opt's tree) with
#      find_package(FsdpOpt) from that prefix, builds and links the installed libraries;
#   4. it runs on the test GPT with outputs bitwise equal to the original's.
# WORKDIR is a fixed scratch directory, so a rebuild of the example hits ccache.
# usage: installed_package.sh TEST_CONFIG.sh WORKDIR
set -euo pipefail
config=$1 work=$2
source "$config"
prefix=$work/prefix
rm -rf "$prefix" "$work/run" && mkdir -p "$work/run"

fail() { echo "FAIL: $*"; exit 1; }
# uses_installed BINARY: the libfsdp_passes.so the loader picks for BINARY is the prefix's.
uses_installed() {
  local lib
  lib=$(ldd "$1" | awk '$1 == "libfsdp_passes.so" { print $3 }')
  [ -n "$lib" ] && [ "$(realpath "$lib")" = "$(realpath "$prefix/lib/libfsdp_passes.so")" ] \
    || { ldd "$1" | grep fsdp; fail "$1 does not load the installed libfsdp_passes.so"; }
}

echo "== cmake --install $FSDP_BUILD_DIR --prefix $prefix"
"$FSDP_CMAKE" --install "$FSDP_BUILD_DIR" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
for f in include/fsdp_opt/fsdp_opt.h include/fsdp_opt/passes/pass_manager.h include/fsdp_opt/runtime/runtime.h \
         lib/libfsdp_passes.so lib/libfsdp_runtime.so bin/fsdp-opt bin/fsdp-run \
         lib/cmake/FsdpOpt/FsdpOptConfig.cmake lib/cmake/FsdpOpt/FsdpOptConfigVersion.cmake \
         lib/cmake/FsdpOpt/FsdpOptTargets.cmake; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
echo "installed: include/fsdp_opt, lib/libfsdp_{passes,runtime}.so, bin/fsdp-{opt,run}, lib/cmake/FsdpOpt"

echo "== installed tools"
"$prefix/bin/fsdp-opt" --version
"$prefix/bin/fsdp-opt" --list-passes | grep -q '^ *verify-fsdp ' || fail "installed fsdp-opt --list-passes"
uses_installed "$prefix/bin/fsdp-opt"

echo "== examples/cpp-pipeline against the installed package"
"$FSDP_CMAKE" -S "$FSDP_SOURCE_DIR/examples/cpp-pipeline" -B "$work/build" "${CONSUMER_CMAKE_ARGS[@]}" \
  "-DCMAKE_PREFIX_PATH=$prefix;$TORCH_PREFIX_PATH" >"$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; fail "configure of examples/cpp-pipeline"; }
grep -E 'FsdpOpt|Torch' "$work/build/CMakeCache.txt" | grep -E '^(FsdpOpt_DIR|Torch_DIR)' || true
grep -q "^FsdpOpt_DIR:PATH=$prefix/lib/cmake/FsdpOpt$" "$work/build/CMakeCache.txt" || fail "FsdpOpt not found in $prefix"
grep "cpp-pipeline: FsdpOpt" "$work/configure.log"
grep -q "headers in $prefix/include$" "$work/configure.log" || fail "FsdpOpt_INCLUDE_DIR is not $prefix/include"
"$FSDP_CMAKE" --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build of examples/cpp-pipeline"; }
exe=$work/build/cpp-pipeline
uses_installed "$exe"

cd "$work/run"
PYTHONPATH="$FSDP_SOURCE_DIR/test/Inputs" "$FSDP_PYTHON" -m fsdp_models gpt -o gpt.pt --unit 'blocks.0' --unit 'blocks.1'
PYTHONPATH="$FSDP_SOURCE_DIR/test/Inputs" "$FSDP_PYTHON" -c '
import torch, fsdp_models as fm
torch.save((fm.example_inputs("gpt")[0], 3), "generate-args.pt")'
"$exe" gpt.pt generate-args.pt --method generate >run.out 2>run.err || { cat run.out run.err; fail "the installed example"; }
cat run.out
grep -q '^cpp-pipeline: rank 0: generate: output matches the original bit for bit$' run.out || fail "no exact match"
echo "PASS"
