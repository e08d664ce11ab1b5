#!/usr/bin/env bash
# Runs fsdp-opt's benchmarks and writes their tables (stdout), JSON (bench/results/) and plots
# (docs/bench_*.png). The numbers in docs/benchmarks.md come from this command.
#
#   bash bench/run.sh            # full run: all ten benchmarks (tens of minutes on 2 shared cores)
#   bash bench/run.sh --quick    # smoke run of all ten (what test/bench-smoke.py checks)
#
# Environment: FSDP_OPT_VENV (the torch 2.x venv, default ~/.cache/fsdp-opt/venv-torch2),
# FSDP_OPT_BUILD (default build/t2: bin/fsdp-opt, lib/libfsdp_runtime.so, lib/libfsdp_passes.so).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${FSDP_OPT_VENV:-$HOME/.cache/fsdp-opt/venv-torch2}
build=${FSDP_OPT_BUILD:-$root/build/t2}
python=$venv/bin/python
[ -x "$python" ] || { echo "run.sh: error: no venv at $venv; run scripts/install-deps.sh" >&2; exit 1; }
[ -x "$build/bin/fsdp-opt" ] || { echo "run.sh: error: no $build/bin/fsdp-opt; run scripts/build.sh t2" >&2; exit 1; }

if [ "${1:-}" = "--quick" ]; then
  "$python" "$root/bench/generate_vs_eager.py" --quick --build "$build"
  "$python" "$root/bench/pass_scaling.py" --quick --build "$build"
  "$python" "$root/bench/divergent_generate.py" --quick --build "$build"
  "$python" "$root/bench/train_step.py" --quick --build "$build"
  "$python" "$root/bench/entry_cost.py" --quick --cpu-transport gloo,shm --build "$build"
  "$python" "$root/bench/decode_loops.py" --quick --build "$build"
  "$python" "$root/bench/shard_model.py" --quick --build "$build"
  "$python" "$root/bench/hsdp.py" --quick --build "$build"
  "$python" "$root/bench/hook_cost.py" --quick --build "$build"
  "$python" "$root/bench/gloo_stall.py" --quick
  exit 0
fi
mkdir -p "$root/bench/results"
"$python" "$root/bench/generate_vs_eager.py" --build "$build" \
  --json "$root/bench/results/generate_vs_eager.json" --plot "$root/docs/bench_generate.png" "$@"
"$python" "$root/bench/pass_scaling.py" --build "$build" \
  --json "$root/bench/results/pass_scaling.json" --plot "$root/docs/bench_pass_scaling.png"
"$python" "$root/bench/divergent_generate.py" --build "$build" \
  --json "$root/bench/results/divergent_generate.json"
"$python" "$root/bench/train_step.py" --build "$build" \
  --json "$root/bench/results/train_step.json" --plot "$root/docs/bench_train.png"
"$python" "$root/bench/entry_cost.py" --cpu-transport gloo,shm --build "$build" \
  --json "$root/bench/results/entry_cost.json"
"$python" "$root/bench/decode_loops.py" --build "$build" \
  --json "$root/bench/results/decode_loops.json"
"$python" "$root/bench/shard_model.py" --build "$build" \
  --json "$root/bench/results/shard_model.json"
"$python" "$root/bench/hsdp.py" --build "$build" \
  --json "$root/bench/results/hsdp.json" --plot "$root/docs/bench_hsdp.png"
"$python" "$root/bench/hook_cost.py" --build "$build" \
  --json "$root/bench/results/hook_cost.json"
"$python" "$root/bench/gloo_stall.py" --json "$root/bench/results/gloo_stall.json"
