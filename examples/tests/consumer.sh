# Sourced by installed_package.sh and pip_install.sh (after the test config): what a user of an
# installed fsdp-opt does with it, wherever it was installed.
#   uses_installed BINARY LIBDIR   the libfsdp_passes.so the loader picks for BINARY is LIBDIR's
#   check_installed_tools BINDIR LIBDIR   the installed fsdp-opt runs and loads LIBDIR's library
#   consumer_pipeline PREFIX WORK  examples/cpp-pipeline configured ALONE (not in fsdp-opt's tree)
#                                  with find_package(FsdpOpt) from PREFIX, built in WORK/build
#                                  and run on the test GPT: bitwise equal to the original
# WORK is a fixed scratch directory, so a rebuild of the example hits ccache.

fail() { echo "FAIL: $*"; exit 1; }

uses_installed() {
  local lib
  lib=$(ldd "$1" | awk '$1 == "libfsdp_passes.so" { print $3 }')
  [ -n "$lib" ] && [ "$(realpath "$lib")" = "$(realpath "$2/libfsdp_passes.so")" ] \
    || { ldd "$1" | grep fsdp; fail "$1 does not load the installed $2/libfsdp_passes.so"; }
}

check_installed_tools() {
  "$1/fsdp-opt" --version
  "$1/fsdp-opt" --list-passes | grep -q '^ *verify-fsdp ' || fail "installed fsdp-opt --list-passes"
  uses_installed "$1/fsdp-opt" "$2"
}

consumer_pipeline() {
  local prefix=$1 work=$2
  rm -rf "$work/run" && mkdir -p "$work/run"
  echo "== examples/cpp-pipeline against the package installed in $prefix"
  "$FSDP_CMAKE" -S "$FSDP_SOURCE_DIR/examples/cpp-pipeline" -B "$work/build" "${CONSUMER_CMAKE_ARGS[@]}" \
    "-DCMAKE_PREFIX_PATH=$prefix;$TORCH_PREFIX_PATH" >"$work/configure.log" 2>&1 \
    || { cat "$work/configure.log"; fail "configure of examples/cpp-pipeline"; }
  grep -E '^(FsdpOpt_DIR|Torch_DIR)' "$work/build/CMakeCache.txt" || true
  grep -q "^FsdpOpt_DIR:PATH=$prefix/lib/cmake/FsdpOpt$" "$work/build/CMakeCache.txt" || fail "FsdpOpt not found in $prefix"
  grep "cpp-pipeline: FsdpOpt" "$work/configure.log"
  grep -q "headers in $prefix/include$" "$work/configure.log" || fail "FsdpOpt_INCLUDE_DIR is not $prefix/include"
  "$FSDP_CMAKE" --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build of examples/cpp-pipeline"; }
  local exe=$work/build/cpp-pipeline
  uses_installed "$exe" "$prefix/lib"
  (
    cd "$work/run"
    PYTHONPATH="$FSDP_SOURCE_DIR/test/Inputs" "$FSDP_PYTHON" -m fsdp_models gpt -o gpt.pt --unit 'blocks.0' --unit 'blocks.1'
    PYTHONPATH="$FSDP_SOURCE_DIR/test/Inputs" "$FSDP_PYTHON" -c '
import torch, fsdp_models as fm
torch.save((fm.example_inputs("gpt")[0], 3), "generate-args.pt")'
    "$exe" gpt.pt generate-args.pt --method generate >run.out 2>run.err || { cat run.out run.err; fail "the installed example"; }
    cat run.out
    grep -q '^cpp-pipeline: rank 0: generate: output matches the original bit for bit$' run.out || fail "no exact match"
  )
}
