#!/usr/bin/env bash
# The t113 leg under AddressSanitizer and UndefinedBehaviorSanitizer: builds build/t113-asan,
# then runs the unit tests and a representative set of end-to-end tests with the sanitizers
# active, and fails on the first report.
#
#   bash scripts/sanitize.sh            # build, unit tests, the end-to-end set
#   bash scripts/sanitize.sh --build    # build only
#   FSDP_OPT_SANITIZE_LIT='REGEX' bash scripts/sanitize.sh   # another lit selection ('.' = all)
#
# The end-to-end set covers every path of the runtime and the launcher at least once: the ops
# on 1..4 processes (gather, nested, split start/wait, mixed precision, the host buffer pool in a
# steady state, a peer dying mid-start, fsdp::rank_any on ranks whose data differ), fsdp-run's
# launcher (bitwise checks, a rank that raises, wrong files, bad input), the shared-memory CPU
# transport (its exactness checks, and the ops, training and HSDP suites over it), and fsdp-opt's passes
# and shard writer on the GPT, a ResNet and a ViT run bitwise on 2 ranks, parameters that keep a
# layout other than row-major (channels_last, transposed: their strided copies), plus the lit tests of
# the passes that move, bucket and guard gathers (hoist, prefetch, reshard-on-raise,
# rank-uniform-control-flow), of the two that read the program before the rewrite and edit or
# copy its graphs (expand-parameter-lists, check-parameter-aliases) and --stats.
#
# Why t113: Debian's LibTorch is what CI builds first and has the smaller link; the code under
# test (passes, runtime, tools) is the same on both legs. Python is not instrumented: tests that
# load libfsdp_runtime.so into it get the ASan runtime through LD_PRELOAD (below). Leak checking
# is off: Python and torch keep allocations until exit by
# design, and so do the runtime's process group and registry (leaked on purpose, see
# docs/runtime.md), so a leak report would say nothing about our code.
#
# Ends with `sanitize.sh: N passed, N failed` (unit and lit tests), which scripts/test.sh's
# `asan` leg counts; CI runs it that way (README, "CI time").
#
# Environment: FSDP_OPT_JOBS (default: nproc), FSDP_OPT_CTEST_JOBS (tests at once, default 2),
# FSDP_OPT_SANITIZE_LIT, CCACHE_DIR.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$root/build/t113-asan
python=/usr/bin/python3
source "$root/scripts/cmake-common.sh"

build_only=0
case "${1:-}" in
  --build) build_only=1 ;;
  "") ;;
  *) echo "usage: scripts/sanitize.sh [--build]" >&2; exit 2 ;;
esac

# -O1: ASan's documented recommendation (reports stay precise, the build stays fast).
# -fno-sanitize-recover: an undefined-behaviour report fails the process like an ASan one.
# -fno-sanitize=vptr: UBSan's dynamic-type check needs the typeinfo of every polymorphic class our
# code touches, and Debian's libtorch does not export all of it (typeinfo for c10::DynamicType:
# the link fails); the other UBSan checks stay on.
sanitize="-fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined"
sanitize+=" -fno-omit-frame-pointer"
use_ccache "$root"
# -g makes ccache hash the build directory (its debug info names it), so a fresh clone elsewhere,
# as CI makes, would miss on every object: measured, a "warm" fresh clone rebuilt all of it.
# Not hashing it lets clones share objects; their debug info then names the directory of the
# clone that compiled them first, which costs nothing here: sanitizer reports print the paths
# as the compiler got them (../../runtime/x.cpp:LINE), relative to any clone's build directory.
export CCACHE_NOHASHDIR=1
configure_if_changed "$root" "$build_dir" \
  -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  "-DCMAKE_CXX_FLAGS=$sanitize" \
  "-DCMAKE_EXE_LINKER_FLAGS=$sanitize" \
  "-DCMAKE_SHARED_LINKER_FLAGS=$sanitize" \
  "-DCMAKE_MODULE_LINKER_FLAGS=$sanitize" \
  "-DFSDP_OPT_PYTHON=$python" \
  "-DCMAKE_PREFIX_PATH=/usr/lib/x86_64-linux-gnu/cmake"
start=$SECONDS
cmake --build "$build_dir" -j "${FSDP_OPT_JOBS:-$(nproc)}"
echo "sanitize.sh: build took $((SECONDS - start)) s"
[ "$build_only" = 1 ] && exit 0

# ASan must be the first library of a process. Python is not instrumented, so its processes
# get it by LD_PRELOAD, followed by libstdc++: ASan finds the real __cxa_throw (which it wraps)
# when it starts, and Python itself does not link libstdc++, so without it every C++ exception
# thrown in the process aborts in ASan's interceptor.
libasan=$(g++ -print-file-name=libasan.so)
libstdcxx=$(g++ -print-file-name=libstdc++.so)
for lib in "$libasan" "$libstdcxx"; do
  [ -f "$lib" ] || { echo "sanitize.sh: error: no $lib next to g++" >&2; exit 1; }
done
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=86
failed=0
passed_tests=0 failed_tests=0

echo "=== unit tests (instrumented executables)"
start=$SECONDS
log=$build_dir/sanitize-unit.log
ctest --test-dir "$build_dir" -L unit --output-on-failure -j "${FSDP_OPT_CTEST_JOBS:-2}" 2>&1 | tee "$log" \
  || failed=1
# ctest's summary: "NN% tests passed, F tests failed out of T". None: count one failed test.
summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1) || true
if [ -n "$summary" ]; then
  n_failed=$(sed -E 's/.* ([0-9]+) tests? failed out of.*/\1/' <<<"$summary")
  n_total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")
  passed_tests=$((n_total - n_failed)) failed_tests=$n_failed
else
  failed_tests=1
fi
echo "sanitize.sh: unit tests took $((SECONDS - start)) s"

echo "=== end-to-end tests (Python with LD_PRELOAD=$libasan $libstdcxx)"
# lit matches --filter against a test's full name, "fsdp-opt :: e2e/gpt_exact.py" or
# "fsdp-opt :: stats.py": the top-level tests are anchored on ":: ", not on a slash.
selection=${FSDP_OPT_SANITIZE_LIT:-':: e2e/(runtime_ops|runtime_ops_split|runtime_ops_mp|runtime_ops_memory|fsdp_run_launcher|gpt_exact|resnet_forward_features|vit_forward_features|rank_files_fsdp_run|dead_peer_fsdp_run|divergent_ranks|shm_transport|memory_format)\.py$|:: (reshard-on-raise|hoist-loop-gathers|prefetch-gathers|rank-uniform-control-flow|stats|expand-parameter-lists|check-parameter-aliases)\.py$'}
start=$SECONDS
log=$build_dir/sanitize-lit.log
LD_PRELOAD="$libasan $libstdcxx" FSDP_OPT_TIMEOUT_S=${FSDP_OPT_TIMEOUT_S:-120} \
  "$python" /usr/lib/llvm-14/build/utils/lit/lit.py -sv -j "${FSDP_OPT_CTEST_JOBS:-2}" \
  --timeout 900 --filter "$selection" "$build_dir/test" 2>&1 | tee "$log" || failed=1
# lit: "-- Testing: S of N tests" and "  Passed  : P" / "  Unsupported: U"; whatever of the S
# selected did neither failed (Failed, Timed Out, Unresolved...). No such line: one failed test.
lit_count() { sed -nE "s/^  $1 *: *([0-9]+)\$/\1/p" "$log" | tail -n 1; }
selected=$(sed -nE 's/^-- Testing: ([0-9]+) of [0-9]+ tests.*/\1/p' "$log" | tail -n 1)
if [ -n "$selected" ]; then
  lit_passed=$(lit_count Passed) lit_unsupported=$(lit_count Unsupported)
  passed_tests=$((passed_tests + ${lit_passed:-0}))
  failed_tests=$((failed_tests + selected - ${lit_passed:-0} - ${lit_unsupported:-0}))
else
  failed_tests=$((failed_tests + 1))
fi
echo "sanitize.sh: end-to-end tests took $((SECONDS - start)) s"

# test.sh reads this line.
echo "sanitize.sh: $passed_tests passed, $failed_tests failed"
if [ "$failed" != 0 ] || [ "$failed_tests" != 0 ]; then
  echo "sanitize.sh: FAILED (a sanitizer report exits with status 86; see the output above)"
  exit 1
fi
echo "sanitize.sh: passed"
