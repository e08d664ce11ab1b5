#!/usr/bin/env bash
# ctest `cpp-train`: examples/cpp-train trains the test GPT's rank files on 2 processes with
# torchrun's environment (3 steps of SGD with momentum, each rank on its own batches); every
# rank's trained parameters must be bitwise its rows of the original model trained in one
# Python process on the mean of the two ranks' gradients (SPEC section 10).
# usage: cpp_train.sh TEST_CONFIG.sh CPP_TRAIN_EXE FSDP_OPT_EXE WORKDIR
set -euo pipefail
config=$1 exe=$2 fsdp_opt=$3 work=$4
source "$config"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

export PYTHONPATH="$FSDP_SOURCE_DIR/test/Inputs"
"$FSDP_PYTHON" -m fsdp_models gpt -o gpt.pt
"$FSDP_PYTHON" -c '
import torch
g = torch.Generator().manual_seed(3)
torch.save(torch.randint(0, 67, (2, 3, 2, 7), generator=g), "batches.pt")'
"$fsdp_opt" gpt.pt --fsdp-unit=. --fsdp-unit='blocks.*' --world-size=2 -o w2

# Rank 0's store port, held until this script ends (docs/runtime.md, "Rendezvous ports").
exec 3< <(PYTHONPATH="$FSDP_SOURCE_DIR/test/Inputs" "$FSDP_PYTHON" -m fsdp_harness --reserve-port-while $$)
read -r port <&3
pids=()
for rank in 0 1; do
  RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$exe" w2 batches.pt trained.$rank.pt >train.$rank.out 2>train.$rank.err &
  pids+=($!)
done
for rank in 0 1; do
  wait "${pids[$rank]}" || { cat train.$rank.out train.$rank.err; fail "rank $rank"; }
  cat train.$rank.out
  grep -q "^cpp-train: rank $rank: step 2: loss " train.$rank.out || fail "rank $rank did not run 3 steps"
done

"$FSDP_PYTHON" - <<'PY'
import json, sys
import torch, torch.nn.functional as F
import fsdp_harness as h
torch.set_num_threads(1)
ref = h.MeanGradientReference("gpt.pt", world=2)  # a copy per rank: fsdp_harness.py says why
params = ref.params
opt = torch.optim.SGD(list(params.values()), lr=0.05, momentum=0.9, foreach=False)
batches = torch.load("batches.pt")


def rank_backward(r, module):
    seq = batches[r, step]
    logits = module(seq[:, :-1].contiguous())
    F.cross_entropy(logits.reshape(-1, logits.size(-1)), seq[:, 1:].contiguous().reshape(-1)).backward()


for step in range(batches.shape[1]):
    opt.zero_grad()
    ref.backward(rank_backward)
    opt.step()
    ref.sync()
manifest = json.load(open("w2/manifest.json"))
sharded = {name for u in manifest["units"] for p in u["params"] for name in [p["path"]] + p["aliases"]}
bad = []
for r in range(2):
    trained = h.torch_load("trained.%d.pt" % r)
    if set(trained) != set(params):
        sys.exit("FAIL: rank %d trained %s, expected %s" % (r, sorted(trained), sorted(params)))
    for n, p in params.items():
        want = h.expected_shard(p.detach(), 2, r) if n in sharded else p.detach()
        if not torch.equal(trained[n], want):
            bad.append("rank %d %s" % (r, n))
if bad:
    sys.exit("FAIL: differ from the one-process reference: %s" % ", ".join(bad))
print("cpp-train: %d parameters on each of 2 ranks bitwise equal to the one-process reference" % len(params))
PY
echo "PASS"
