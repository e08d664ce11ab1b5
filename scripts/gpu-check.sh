#!/usr/bin/env bash
# scripts/gpu-check.sh: build the CUDA runtime on a GPU machine, run its GPU tests and the GPU
# benchmark. One script, no network, meant to finish in about 8 minutes on 16 cores.
#
#   OUT=/some/dir bash scripts/gpu-check.sh
#
# Needs: a Python whose torch 2.x has CUDA (FSDP_OPT_PYTHON, default python3), nvcc, cmake >= 3.18,
# ninja. Nothing else is assumed: the runtime is built as its own small project
# (test/gpu/standalone: libfsdp_runtime with the CUDA backend, the GPU tests and the benchmark;
# without gloo headers it builds without the CPU multi-rank backend), and fsdp-opt, which the
# GPT parity test needs and whose dependencies (nlohmann_json, CLI11, OpenSSL) the machine may
# lack, is built separately; if that fails the parity test is reported NOT RUN.
#
# Steps (each with a time limit; logs under $OUT, default build/gpu-check):
#   env        the GPU, driver, toolkit and torch
#   build-rt   build/gpu-rt: runtime (CUDA), test_cuda_runtime, fsdp-gpu-bench      } in
#   build-opt  build/gpu-opt: fsdp-opt (CPU build of the full project, tests off)   } parallel
#   test-cuda-runtime   ctest -L gpu: copy kernel vs CPU reference, ops, stream protocol;
#                       copy-only path and FSDP_OPT_CUDA_FORCE_NCCL=1 (one-rank NCCL) under
#                       both gather layouts (FSDP_OPT_CUDA_GATHER_LAYOUT=packed, per-param)
#   test-cuda-ops       test/gpu/cuda_ops.py: the ops from Python/TorchScript vs CPU reference
#                       (copy-only, NCCL packed, NCCL per-param)
#   test-gpt-parity     test/gpu/gpt_parity_cuda.py: rewritten GPT bitwise = original, on the GPU
#                       (the same three paths)
#   bench, bench-nccl   fsdp-gpu-bench: copy-in/copy-out bandwidth vs a D2D copy of the same bytes,
#                       per-call cost of fsdp::all_gather for a 1 MiB unit, a 1 GiB unit and a
#                       unit of 1024 small parameters; bench-nccl measures it under BOTH gather
#                       layouts side by side and names the faster (docs/runtime.md, "Gather
#                       layouts": the default stays packed until these figures say otherwise)
# Ends with summary.txt (also printed) and exits 0 when everything passed, 1 if a test failed or a
# build broke, 2 if torch sees no CUDA device (then it only checks that everything builds).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/build/gpu-check}
mkdir -p "$out"
out=$(cd "$out" && pwd)
python=${FSDP_OPT_PYTHON:-python3}
jobs=${FSDP_OPT_JOBS:-$(nproc)}
summary=$out/summary.txt
: >"$summary"
failed=0

note() { echo "$*" | tee -a "$summary"; }

# step NAME LIMIT_S CMD...: runs CMD with its output in $out/NAME.log; one summary line.
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  local verdict=ok
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    verdict="TIMED OUT after ${limit}s"
  elif [ "$rc" -eq 77 ]; then
    verdict="skipped (no CUDA device)"
    rc=0
  elif [ "$rc" -ne 0 ]; then
    verdict="FAILED (rc $rc)"
  elif grep -q 'skipped: no CUDA device' "$out/$name.log"; then
    verdict="skipped (no CUDA device)"
  fi
  note "$(printf '%-18s %-22s %4ss  %s' "$name" "$verdict" "$((SECONDS - start))" "$out/$name.log")"
  return "$rc"
}

note "gpu-check: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), $jobs jobs, repo $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"

# ---- environment ----------------------------------------------------------------------------
{
  nvidia-smi || true
  echo
  command -v nvcc && nvcc --version
  cmake --version | head -n1
  echo "ninja $(ninja --version)"
  "$python" -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available()); print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-"); print("nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-")'
} >"$out/env.log" 2>&1
note "$(grep -E '^(torch|device) ' "$out/env.log" | tr '\n' ' ')"

if ! mapfile -t torch_paths < <("$python" -c '
import glob, os, torch
root = os.path.dirname(torch.__file__)
print(torch.utils.cmake_prefix_path)
print(root)
print(":".join(sorted(glob.glob(os.path.join(os.path.dirname(root), "nvidia", "*", "lib")))))') || [ "${#torch_paths[@]}" -lt 2 ]; then
  note "error: $python cannot import torch"
  exit 1
fi
prefix_path="${torch_paths[0]};${torch_paths[1]}"
link_args=()
if [ -n "${torch_paths[2]:-}" ]; then
  link_args=("-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,${torch_paths[2]}"
             "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,${torch_paths[2]}")
fi
# The copy kernel for this machine's GPU only, where CMake can ask (>= 3.24); else the default list.
arch_args=()
cmake_minor=$(cmake --version | head -n1 | sed -E 's/.* ([0-9]+)\.([0-9]+).*/\1 \2/')
if [ "$(echo "$cmake_minor" | awk '{print ($1 > 3 || ($1 == 3 && $2 >= 24))}')" = 1 ] && command -v nvidia-smi >/dev/null; then
  arch_args=("-DFSDP_OPT_CUDA_ARCHITECTURES=native")
fi
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$prefix_path"
        "-DFSDP_OPT_PYTHON=$python" -DFSDP_OPT_REQUIRE_GLOO=OFF "${link_args[@]}")

# ---- build: runtime (CUDA) and fsdp-opt, in parallel -----------------------------------------
rt=$root/build/gpu-rt
opt=$root/build/gpu-opt
q() { printf '%q ' "$@"; }
build_rt=$(q cmake -S "$root/test/gpu/standalone" -B "$rt" "${common[@]}" "${arch_args[@]}" \
             -DFSDP_OPT_ENABLE_CUDA=ON)"&& "$(q cmake --build "$rt" -j "$jobs" --target fsdp_runtime \
             test_cuda_runtime fsdp-gpu-bench)
build_opt=$(q cmake -S "$root" -B "$opt" "${common[@]}" -DFSDP_OPT_BUILD_TESTS=OFF \
              -DFSDP_OPT_ENABLE_CUDA=OFF)"&& "$(q cmake --build "$opt" -j "$jobs" --target fsdp-opt)
step build-opt 330 bash -c "$build_opt" &
opt_pid=$!
step build-rt 330 bash -c "$build_rt"
rt_rc=$?
wait "$opt_pid"
opt_rc=$?
[ "$rt_rc" -eq 0 ] || failed=1

lib=$rt/lib/libfsdp_runtime.so
export PYTHONPATH="$root/test/Inputs${PYTHONPATH:+:$PYTHONPATH}"
export FSDP_OPT_TIMEOUT_S=${FSDP_OPT_TIMEOUT_S:-60}

# ---- tests ----------------------------------------------------------------------------------
if [ "$rt_rc" -eq 0 ]; then
  step test-cuda-runtime 240 ctest --test-dir "$rt" -L gpu --output-on-failure -V || failed=1
  step test-cuda-ops 120 "$python" "$root/test/gpu/cuda_ops.py" "$lib" || failed=1
  if [ "$opt_rc" -eq 0 ]; then
    rm -rf "$out/gpt" && mkdir -p "$out/gpt"
    step test-gpt-parity 260 "$python" "$root/test/gpu/gpt_parity_cuda.py" "$lib" "$opt/bin/fsdp-opt" "$out/gpt" || failed=1
  else
    note "test-gpt-parity    NOT RUN: fsdp-opt did not build here (see build-opt.log)"
    failed=1
  fi

  # ---- benchmark ----------------------------------------------------------------------------
  step bench 120 "$rt/bin/fsdp-gpu-bench" || failed=1
  step bench-nccl 180 env FSDP_OPT_CUDA_FORCE_NCCL=1 "$rt/bin/fsdp-gpu-bench" || failed=1
  {
    echo
    echo "== bench (copy-only path at world size 1)"
    cat "$out/bench.log"
    echo "== bench-nccl (FSDP_OPT_CUDA_FORCE_NCCL=1, one-rank NCCL; packed: copy-in, ncclAllGather, copy-out | per-param: grouped per-parameter ncclAllGather, copy-in for casts only)"
    cat "$out/bench-nccl.log"
  } | tee -a "$summary"
fi

if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  note "gpu-check: NO CUDA DEVICE: built only, every GPU test skipped (logs in $out)"
  exit 2
fi
note "gpu-check: $([ "$failed" -eq 0 ] && echo PASS || echo FAIL) (logs in $out)"
exit "$failed"
