#!/usr/bin/env bash
# scripts/gpu-check.sh: every check of the CUDA runtime that needs a GPU, as ONE run that fits
# one lent GPU machine (docs/runtime.md, "Testing on a GPU"): at most 600 s, no network, and
# everything it produced packed into one archive in $OUT.
#
#   OUT=$OUT bash scripts/gpu-check.sh      on the GPU machine
#   bash scripts/gpu-check.sh --dry-run     on a CPU machine (CI runs this): prepares the GPT
#                                           parity files, builds what the GPU run builds, runs
#                                           every step that needs no GPU and shows the plan
#   bash scripts/gpu-check.sh --plan        the plan and its time limits only
#
# Steps (limits in seconds; the four test steps run side by side, the benchmarks alone):
#   env         the GPU, driver, toolkit, compilers, cmake/ninja, compute-sanitizer, torch, NCCL
#   prepare     (dry run only) test/gpu/gpt_parity_cuda.py --prepare with this checkout's
#               fsdp-opt: the original GPT and its rewrite, in build/gpu-inputs, to be carried
#   build       configure and build test/gpu/standalone (runtime with CUDA, test_cuda_runtime,
#               test_nccl_setup, fsdp-gpu-bench) in build/gpu-standalone, kernels for this GPU
#   ctest       every test of the standalone build (gpu.*: each 60 s at most; cuda.nccl_setup_errors)
#   memcheck    compute-sanitizer memcheck of the copy-kernel tests (uncached allocations, so
#               an overrun of any tensor is caught, and FSDP_OPT_CUDA_DEBUG_SYNC=1)
#   cuda-ops    test/gpu/cuda_ops.py: the ops from Python/TorchScript vs a CPU reference
#   gpt-parity  test/gpu/gpt_parity_cuda.py --prepared build/gpu-inputs: rewritten GPT bitwise
#               equal to the original on the GPU (skipped, saying why, without those files)
#   bench       fsdp-gpu-bench on the copy-only path
#   bench-nccl  fsdp-gpu-bench with FSDP_OPT_CUDA_FORCE_NCCL=1: both gather layouts side by side
#
# Output: $OUT/summary.txt (also printed last) and $OUT/gpu-check.tar.gz (every log, the env
# report, the parity files' metadata). Logs are written under a temporary folder first, so a
# step killed at its limit still leaves what it printed.
# Exit: 0 all passed; 1 a step failed or timed out; 2 no CUDA device (not a dry run): built only;
# 3 nothing failed but a step was skipped on a GPU machine (the summary says why).
#
# Environment: FSDP_OPT_PYTHON (default: python3; in a dry run the t2 venv's if there is one),
# FSDP_OPT_JOBS (default nproc), FSDP_OPT_GPU_BUDGET_S (default 540: the steps' share of the 600 s
# a lent run may take), FSDP_OPT_GPU_INPUTS (default build/gpu-inputs), FSDP_OPT_GPU_BUILD_DIR
# (default build/gpu-standalone), FSDP_OPT_BIN (fsdp-opt for --dry-run; default build/t2/bin).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/cmake-common.sh"

mode=run
case "${1:-}" in
  "") ;;
  --dry-run) mode=dry ;;
  --plan) mode=plan ;;
  -h | --help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: scripts/gpu-check.sh [--dry-run | --plan]" >&2; exit 2 ;;
esac

# ---- the plan: one table for the runner and the printout -------------------------------------
# name, limit (s), group (steps of one group run side by side), what
plan=(
  "env        30  env      GPU, driver, toolkit, compilers, torch, NCCL"
  "prepare    90  prepare  (dry run only) GPT parity files -> build/gpu-inputs"
  "build      180 build    configure + build test/gpu/standalone"
  "ctest      120 tests    ctest of the standalone build (60 s per test)"
  "memcheck   120 tests    compute-sanitizer memcheck of the copy-kernel tests"
  "cuda-ops   90  tests    test/gpu/cuda_ops.py"
  "gpt-parity 120 tests    test/gpu/gpt_parity_cuda.py --prepared"
  "bench      60  bench    fsdp-gpu-bench, copy-only path"
  "bench-nccl 90  nccl     fsdp-gpu-bench, one-rank NCCL, both gather layouts"
)
declare -A limit_of
for row in "${plan[@]}"; do
  read -r name lim _ <<<"$row"
  limit_of[$name]=$lim
done
budget=${FSDP_OPT_GPU_BUDGET_S:-540}
reserve=20  # packing and the summary, after the last step

# The GPU run's plan: what must fit the lent machine.
print_plan() {
  local total=0 group_max=0 group="" name lim grp what
  echo "gpu-check plan for the GPU run (steps of one group run side by side):"
  for row in "${plan[@]}"; do
    read -r name lim grp what <<<"$row"
    [ "$name" = prepare ] && continue
    if [ "$grp" != "$group" ]; then
      total=$((total + group_max))
      group=$grp
      group_max=0
    fi
    [ "$lim" -gt "$group_max" ] && group_max=$lim
    printf '  %-10s %4s s  %-8s %s\n' "$name" "$lim" "[$grp]" "$what"
  done
  total=$((total + group_max))
  echo "  worst case ${total} s of steps + ${reserve} s packing, within its budget of ${budget} s (FSDP_OPT_GPU_BUDGET_S; one lent run may take 600 s)"
}

print_plan
[ "$mode" = plan ] && exit 0
if [ "$mode" = dry ]; then
  # The limits above are the GPU run's (16 idle cores). A dry run shares 2 cores with the rest
  # of CI, may build on a cold ccache, and need not fit one lent run: it gets five times each
  # limit, and the build 2400 s.
  for name in "${!limit_of[@]}"; do limit_of[$name]=$((limit_of[$name] * 5)); done
  limit_of[build]=${FSDP_OPT_DRY_BUILD_S:-2400}
  budget=${FSDP_OPT_GPU_BUDGET_S:-3600}
  echo "this dry run: prepare first; each limit times 5, the build's ${limit_of[build]} s, a budget of ${budget} s (2 shared cores, maybe a cold ccache)"
fi

# ---- where things go -------------------------------------------------------------------------
out=${OUT:-$root/build/gpu-check}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-gpu-check.XXXXXX")
summary=$work/summary.txt
inputs=${FSDP_OPT_GPU_INPUTS:-$root/build/gpu-inputs}
build_dir=${FSDP_OPT_GPU_BUILD_DIR:-$root/build/gpu-standalone}
jobs=${FSDP_OPT_JOBS:-$(nproc)}
start_s=$SECONDS
deadline=$((budget - reserve))
failed=0
skipped_on_gpu=0
has_gpu=0

export PATH="/usr/local/cuda/bin:$PATH"
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}  # NCCL's own warnings land in the step's log
export PYTHONUNBUFFERED=1
export FSDP_OPT_TIMEOUT_S=${FSDP_OPT_TIMEOUT_S:-60}
python=${FSDP_OPT_PYTHON:-}
if [ -z "$python" ]; then
  python=python3
  venv_python=${FSDP_OPT_VENV:-$HOME/.cache/fsdp-opt/venv-torch2}/bin/python
  [ "$mode" = dry ] && [ -x "$venv_python" ] && python=$venv_python
fi
# cmake and ninja may come from the Python's own environment (pip packages).
python_bin=$("$python" -c 'import os, sys; print(os.path.dirname(sys.executable))' 2>/dev/null) &&
  export PATH="$PATH:$python_bin"

note() { echo "$*" | tee -a "$summary"; }

# Packs whatever exists, whatever happened: this is all a lent run brings back.
pack() {
  trap - EXIT
  note "gpu-check: finished after $((SECONDS - start_s)) s"
  # One file may come back at 16 MiB at most: a runaway log keeps its head and tail.
  find "$work" -type f -size +4M | while read -r f; do
    { head -c 1048576 "$f"; printf '\n[... %s bytes cut by gpu-check ...]\n' "$(stat -c %s "$f")"; tail -c 2097152 "$f"; } >"$f.cut" && mv "$f.cut" "$f"
  done
  cp "$summary" "$out/summary.txt"
  tar -C "$work" -czf "$out/gpu-check.tar.gz" . && note "gpu-check: logs in $out/gpu-check.tar.gz ($(stat -c %s "$out/gpu-check.tar.gz") bytes), summary in $out/summary.txt"
  cp "$summary" "$out/summary.txt"
  echo
  echo "=================== summary ==================="
  cat "$summary"
}
trap pack EXIT

# run_step NAME CMD...: runs CMD (a command, or a function of this script) under the step's
# limit, cut to what is left of the budget; output in NAME.log; leaves NAME.verdict:
# "STATUS SECONDS LIMIT TEXT".
run_step() {
  local name=$1
  shift
  declare -F "$1" >/dev/null && set -- bash -c "$1"  # timeout runs programs: the function is exported
  local lim=${limit_of[$name]} left=$((deadline - (SECONDS - start_s))) t0=$SECONDS rc status text
  [ "$left" -lt "$lim" ] && lim=$left
  if [ "$lim" -lt 5 ]; then
    echo "notrun 0 0 NOT RUN: the budget of ${budget} s is spent" >"$work/$name.verdict"
    return 0
  fi
  timeout --kill-after=5 "$lim" "$@" >"$work/$name.log" 2>&1
  rc=$?
  local reason
  reason=$(grep -m1 -E '^skipped: ' "$work/$name.log" | sed 's/^skipped: //')
  local ctest_skips
  ctest_skips=$(grep -c '(Skipped)' "$work/$name.log")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=failed text="TIMED OUT at its limit"
  elif [ "$rc" -eq 77 ]; then
    status=skipped text="skipped (${reason:-no CUDA device})"
  elif [ "$rc" -ne 0 ]; then
    status=failed text="FAILED (exit $rc)"
  elif [ -n "$reason" ]; then
    status=skipped text="skipped ($reason)"
  elif [ "$ctest_skips" -gt 0 ]; then
    status=skipped text="ok, but $ctest_skips tests skipped"
  else
    status=ok text=ok
  fi
  echo "$status $((SECONDS - t0)) $lim $text" >"$work/$name.verdict"
}

# skip_step NAME WHY: a step that cannot run here.
skip_step() { echo "skipped 0 ${limit_of[$1]} skipped ($2)" >"$work/$1.verdict"; }

# report NAME: one summary line; a failed step adds the end of its log.
report() {
  local name=$1 status secs lim text
  read -r status secs lim text <"$work/$name.verdict"
  note "$(printf '  %-10s %-44s %4s s of %s' "$name" "$text" "$secs" "$lim")"
  case "$status" in
    failed)
      failed=1
      # The first errors (a compiler's come long before the end of a parallel build's log),
      # then the end of the log.
      grep -n -m 8 -E 'error|FAILED|FAIL |Error' "$work/$name.log" | sed 's/^/      ! /' | tee -a "$summary"
      tail -n 25 "$work/$name.log" | sed 's/^/      | /' | tee -a "$summary"
      ;;
    skipped | notrun) [ "$has_gpu" = 1 ] && skipped_on_gpu=1 ;;
  esac
  return 0
}

# ---- env -------------------------------------------------------------------------------------
note "gpu-check ($mode): $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), $jobs jobs, repo $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
env_report() {
  echo "== tools"
  for tool in nvidia-smi nvcc cmake ninja c++ g++ ccache compute-sanitizer "$python"; do
    printf '%-20s %s\n' "$tool" "$(command -v "$tool" || echo MISSING)"
  done
  nvcc --version 2>&1 | tail -n 2
  cmake --version 2>&1 | head -n 1
  echo "ninja $(ninja --version 2>&1)"
  c++ --version 2>&1 | head -n 1
  compute-sanitizer --version 2>&1 | head -n 2
  echo "== machine"
  echo "cores $(nproc)"; free -g | head -n 2; df -h "$work" "$root" | sed 1d
  echo "== GPU"
  nvidia-smi 2>&1 | head -n 20
  echo "== torch"
  "$python" -c '
import sys, torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda)
ok = torch.cuda.is_available()
print("cuda_available", ok)
if ok:
    print("device", torch.cuda.get_device_name(0), "capability %d.%d" % torch.cuda.get_device_capability(0), "count", torch.cuda.device_count())
    print("nccl", ".".join(map(str, torch.cuda.nccl.version())) if isinstance(torch.cuda.nccl.version(), tuple) else torch.cuda.nccl.version())
'
}
export -f env_report torch_cmake_args use_ccache configure_if_changed
export python work root build_dir jobs
run_step env env_report
report env
grep -E '^(torch|device|nccl|cuda_available) ' "$work/env.log" | sed 's/^/      /' | tee -a "$summary"
missing=$(grep -E ' MISSING$' "$work/env.log" | awk '{print $1}' | tr '\n' ' ')
[ -n "$missing" ] && note "      missing: $missing"
grep -q '^cuda_available True' "$work/env.log" && has_gpu=1
if [ "$mode" = run ] && [ "$has_gpu" = 0 ]; then
  note "  NO CUDA DEVICE visible to $python: building and running what needs none; every GPU test will skip"
fi

# ---- prepare (dry run): the parity files, with this checkout's fsdp-opt ------------------------
if [ "$mode" = dry ]; then
  fsdp_opt=${FSDP_OPT_BIN:-$root/build/t2/bin/fsdp-opt}
  if [ -x "$fsdp_opt" ]; then
    run_step prepare "$python" "$root/test/gpu/gpt_parity_cuda.py" --prepare "$fsdp_opt" "$inputs"
  else
    skip_step prepare "no fsdp-opt at $fsdp_opt: run bash scripts/build.sh t2 first"
    failed=1  # a dry run exists to leave these files behind
  fi
  report prepare
fi

# ---- build -----------------------------------------------------------------------------------
build() {
  local missing=() tool gen=Ninja
  for tool in cmake nvcc c++; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  if ((${#missing[@]})); then
    echo "error: missing ${missing[*]}: the GPU checks cannot be built here"
    return 1
  fi
  command -v ninja >/dev/null 2>&1 || { gen="Unix Makefiles"; echo "no ninja: using $gen"; }
  torch_cmake_args "$python" || return 1
  # Kernels for this GPU only (sm_90 on an H200), else the default list, which has sm_90 too.
  local config_extra=() cc
  # CMake 4 refuses packages that still declare a minimum below 3.5; pip's cmake may be 4.
  [ "$(cmake --version | sed -nE '1s/.* ([0-9]+)\..*/\1/p')" -ge 4 ] 2>/dev/null &&
    config_extra+=("-DCMAKE_POLICY_VERSION_MINIMUM=3.5")
  cc=$(sed -nE 's/^device .* capability ([0-9]+)\.([0-9]+).*/\1\2/p' "$work/env.log")
  [ -n "$cc" ] && config_extra+=("-DFSDP_OPT_CUDA_ARCHITECTURES=${cc}-real")
  export CUDACXX=${CUDACXX:-$(command -v nvcc)}
  use_ccache "$root"
  CMAKE_GENERATOR_NAME=$gen configure_if_changed "$root/test/gpu/standalone" "$build_dir" \
    -G "$gen" -DCMAKE_BUILD_TYPE=Release -DFSDP_OPT_ENABLE_CUDA=ON "${TORCH_CMAKE_ARGS[@]}" \
    "${config_extra[@]}" || return 1
  cmake --build "$build_dir" -j "$jobs"
}
export -f build
run_step build build
report build
build_ok=0
grep -q '^ok ' "$work/build.verdict" && build_ok=1
if [ "$build_ok" = 0 ]; then
  for log in CMakeConfigureLog.yaml CMakeOutput.log CMakeError.log; do
    [ -f "$build_dir/CMakeFiles/$log" ] && cp "$build_dir/CMakeFiles/$log" "$work/cmake-$log"
  done
fi

# ---- tests, side by side -----------------------------------------------------------------------
bin=$build_dir/bin
lib=$build_dir/lib/libfsdp_runtime.so
export PYTHONPATH="$root/test/Inputs${PYTHONPATH:+:$PYTHONPATH}"
if [ "$build_ok" = 0 ]; then
  for name in ctest memcheck cuda-ops gpt-parity bench bench-nccl; do
    echo "notrun 0 ${limit_of[$name]} NOT RUN: nothing was built (see build)" >"$work/$name.verdict"
  done
else
  run_step ctest ctest --test-dir "$build_dir" --output-on-failure -V -j 4 --timeout 60 &
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null)
  if [ -z "$sanitizer" ]; then
    skip_step memcheck "compute-sanitizer is not installed"
  elif [ "$has_gpu" = 0 ]; then
    skip_step memcheck "no CUDA device"
  else
    # Uncached: every tensor its own cudaMalloc, so memcheck sees an overrun of any one of them
    # (torch's caching allocator would hide it inside a larger block).
    run_step memcheck env PYTORCH_NO_CUDA_MEMORY_CACHING=1 FSDP_OPT_CUDA_DEBUG_SYNC=1 \
      "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 \
      "$bin/test_cuda_runtime" \
      --only=copy_roundtrip_w3_,copy_roundtrip_many_segments,copy_roundtrip_large,direct_unshard_ &
  fi
  run_step cuda-ops "$python" "$root/test/gpu/cuda_ops.py" "$lib" &
  if [ -f "$inputs/gpt.pt" ] && [ -f "$inputs/gpt.w1.pt" ]; then
    run_step gpt-parity "$python" "$root/test/gpu/gpt_parity_cuda.py" --prepared "$inputs" "$lib" &
  else
    skip_step gpt-parity "no prepared files in $inputs: on the CPU machine run 'bash scripts/build.sh t2 && bash scripts/gpu-check.sh --dry-run' and carry build/gpu-inputs"
  fi
  wait
fi
for name in ctest memcheck cuda-ops gpt-parity; do report "$name"; done

# ---- benchmarks, alone on the GPU ----------------------------------------------------------------
if [ "$build_ok" = 1 ]; then
  run_step bench "$bin/fsdp-gpu-bench"
  run_step bench-nccl env FSDP_OPT_CUDA_FORCE_NCCL=1 "$bin/fsdp-gpu-bench"
fi
report bench
report bench-nccl
for name in bench bench-nccl; do
  if grep -q '^ok ' "$work/$name.verdict"; then
    note "---- $name"
    sed 's/^/      /' "$work/$name.log" | tee -a "$summary"
  fi
done

if [ "$failed" = 1 ]; then
  note "gpu-check: FAIL"
  exit 1
elif [ "$mode" = dry ]; then
  note "gpu-check: dry run PASS: everything that needs no GPU ran; the GPU steps above skipped"
  exit 0
elif [ "$has_gpu" = 0 ]; then
  note "gpu-check: NO CUDA DEVICE: built only, every GPU step skipped"
  exit 2
elif [ "$skipped_on_gpu" = 1 ]; then
  note "gpu-check: INCOMPLETE: nothing failed, but a step above was skipped"
  exit 3
fi
note "gpu-check: PASS"
exit 0
