#!/usr/bin/env bash
# ctest `cpp-pipeline`: runs the in-tree examples/cpp-pipeline on the test GPT (test/Inputs).
#   1. world size 1, forward and generate, with the test plugin's count-gathers pass appended
#      to the default pipeline: outputs bitwise equal to the original's;
#   2. world size 2: two processes with torchrun's environment (RANK, WORLD_SIZE, MASTER_*),
#      each sharding in process: both bitwise equal to the original;
#   3. a pattern that matches no module: exit 1 with one `error:` line.
# usage: cpp_pipeline.sh TEST_CONFIG.sh CPP_PIPELINE_EXE PLUGIN.so WORKDIR
set -euo pipefail
config=$1 exe=$2 plugin=$3 work=$4
source "$config"
rm -rf "$work" && mkdir -p "$work" && cd "$work"

fail() { echo "FAIL: $*"; exit 1; }
expect() {  # expect FILE PATTERN: FILE has a line matching PATTERN
  grep -qE -- "$2" "$1" || { echo "--- $1"; cat "$1"; fail "no line matching '$2' in $1"; }
}

# The root is a unit with generate as a forward method (markers); blocks.* come from the flag.
PYTHONPATH="$FSDP_SOURCE_DIR/test/Inputs" "$FSDP_PYTHON" -m fsdp_models gpt -o gpt.pt \
  --unit . --forward-method .:generate
PYTHONPATH="$FSDP_SOURCE_DIR/test/Inputs" "$FSDP_PYTHON" -c '
import torch, fsdp_models as fm
idx = fm.example_inputs("gpt")[0]
torch.save((idx,), "forward-args.pt")
torch.save((idx, 4), "generate-args.pt")'

echo "== world size 1, plugin pass appended"
"$exe" gpt.pt forward-args.pt --fsdp-unit 'blocks.*' --load-pass-plugin "$plugin" \
  --extra-pass count-gathers --remarks >w1.out 2>w1.err || { cat w1.out w1.err; fail "forward, world size 1"; }
cat w1.out
expect w1.out '^cpp-pipeline: rank 0: fsdp::all_gather nodes: [1-9][0-9]* \(after TorchScript DCE: [1-9]'
expect w1.out '^cpp-pipeline: rank 0: forward: output matches the original bit for bit$'
expect w1.err "^remark: \[count-gathers\] [1-9][0-9]* fsdp::all_gather node\(s\) in [1-9][0-9]* method\(s\)$"
expect w1.err "^remark: \[find-units\] unit 'blocks.1'"
"$exe" gpt.pt generate-args.pt --method generate --fsdp-unit 'blocks.*' >gen.out 2>gen.err \
  || { cat gen.out gen.err; fail "generate, world size 1"; }
cat gen.out
expect gen.out '^cpp-pipeline: rank 0: generate: output matches the original bit for bit$'

echo "== world size 2, two processes"
# Rank 0's store port, held until this script ends (docs/runtime.md, "Rendezvous ports").
exec 3< <(PYTHONPATH="$FSDP_SOURCE_DIR/test/Inputs" "$FSDP_PYTHON" -m fsdp_harness --reserve-port-while $$)
read -r port <&3
pids=()
for rank in 0 1; do
  RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$exe" gpt.pt generate-args.pt --method generate --fsdp-unit 'blocks.*' >w2.$rank.out 2>w2.$rank.err &
  pids+=($!)
done
for rank in 0 1; do
  wait "${pids[$rank]}" || { cat w2.$rank.out w2.$rank.err; fail "rank $rank, world size 2"; }
done
for rank in 0 1; do
  cat w2.$rank.out
  expect w2.$rank.out "^cpp-pipeline: rank $rank: generate: [1-9][0-9]* collective\(s\) for [0-9]+ gather call\(s\), world size 2$"
  expect w2.$rank.out "^cpp-pipeline: rank $rank: generate: output matches the original bit for bit$"
done

echo "== errors"
if "$exe" gpt.pt forward-args.pt --fsdp-unit nope >err.out 2>err.err; then fail "a bad pattern must fail"; fi
cat err.err
[ "$(grep -c '^error: ' err.err)" = 1 ] || fail "expected exactly one error: line"
expect err.err "^error: --fsdp-unit pattern 'nope' matches no module"
echo "PASS"
