#!/usr/bin/env bash
# The main job, end to end, on the default embedded setup (CPU, Gloo, 2 ranks):
#   1. script a GPT-style decoder (tied embedding/LM head) whose `generate` loop is a forward
#      method of the root, with each block an FSDP unit;
#   2. fsdp-opt: shard it for 2 ranks, printing the rewritten `generate` and the statistics;
#   3. fsdp-run: run `generate` on 2 local processes and check the tokens bit for bit against
#      the original model run in one process.
# Installs what it needs and builds the LibTorch 1.13 leg first (a no-op when up to date).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/install-deps.sh"
bash "$root/scripts/build.sh" t113
bin=$root/build/t113/bin
python=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-opt-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== 1. script the model: GPT decoder, 4 blocks, generate() registered on the root"
PYTHONPATH=$root/test/Inputs "$python" -m fsdp_models gpt --arg n_layer=4 -o "$work/gpt.pt" \
  --forward-method .:generate
PYTHONPATH=$root/test/Inputs "$python" - "$work/inputs.pt" <<'PY'
import sys, torch, fsdp_models
(idx,) = fsdp_models.example_inputs("gpt", n_layer=4)
torch.save((idx, 16), sys.argv[1])   # generate(idx, max_new_tokens=16)
PY

echo "== 2. fsdp-opt: root and every block are units, 2 ranks"
flags=(--fsdp-unit=. --fsdp-unit='blocks.*' --world-size=2)
"$bin/fsdp-opt" "$work/gpt.pt" "${flags[@]}" --print-ir --method=generate \
  | sed -n '/__torch__.GPT.* :: generate/,/^$/p' | grep -E 'fsdp::|CallMethod|prim::Loop|^//' 
"$bin/fsdp-opt" "$work/gpt.pt" "${flags[@]}" --stats -o "$work/sharded"
ls -l "$work/sharded"

echo "== 3. fsdp-run: generate on 2 ranks, compared bit for bit with the original"
"$bin/fsdp-run" "$work/sharded" --method generate --inputs "$work/inputs.pt" \
  --check "$work/gpt.pt" --repeat 3 --stats
echo "demo: OK"
