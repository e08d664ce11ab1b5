#!/usr/bin/env bash
# ctest `cpp-pipeline-installed`: the installed package, as a user gets it.
#   1. cmake --install the build into WORKDIR/prefix; the files of the layout are there;
#   2. the installed fsdp-opt runs (its RPATH finds libfsdp_passes beside it and torch);
#   3. examples/cpp-pipeline, configured alone with find_package(FsdpOpt) from that prefix,
#      builds, links the installed libraries and runs bitwise (consumer.sh).
# usage: installed_package.sh TEST_CONFIG.sh WORKDIR
set -euo pipefail
config=$1 work=$2
source "$config"
source "$(dirname "${BASH_SOURCE[0]}")/consumer.sh"
prefix=$work/prefix
rm -rf "$prefix" && mkdir -p "$work"

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
check_installed_tools "$prefix/bin" "$prefix/lib"
consumer_pipeline "$prefix" "$work"
echo "PASS"
