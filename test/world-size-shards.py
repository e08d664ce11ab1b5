# Each DIR/rank{r}.pt is an ordinary TorchScript archive (torch.jit.load opens it once the
# runtime library registered the fsdp:: ops) holding the rewritten methods and ONLY rank r's
# shards: every grouped parameter has c = ceil(N / W) rows, rows [r*c, (r+1)*c) of the
# original, zero-padded; no rank file holds any grouped parameter whole (not even among its
# raw storages); replicated parameters are whole on every rank. Each file carries its rank,
# the world size and the sha256 of manifest.json.
# (The raw-storage search skips constant tensors such as LayerNorm's ones/zeros, whose bytes
# equal the replicated ln_f's by value.)
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models gpt -o %t/in.pt
# RUN: fsdp-opt %t/in.pt '--fsdp-unit=blocks.*' --world-size=3 -o %t/out
# RUN: %python %s %t/in.pt %t/out 3 | FileCheck %s --match-full-lines
# CHECK:      manifest sha256 of 64 hex digits: True
# CHECK-NEXT: rank0: _fsdp_rank=0 _fsdp_world_size=3 sha matches manifest: True
# CHECK-NEXT: rank0: blocks.0.mlp.fc.weight (43, 32) blocks.0.ln1.weight (11,) wte.weight (67, 32)
# CHECK-NEXT: rank0: shards exact: True, replicated exact: True, no full tensor in archive: True
# CHECK-NEXT: rank0: rewritten: True
# CHECK-NEXT: rank1: _fsdp_rank=1 _fsdp_world_size=3 sha matches manifest: True
# CHECK-NEXT: rank1: blocks.0.mlp.fc.weight (43, 32) blocks.0.ln1.weight (11,) wte.weight (67, 32)
# CHECK-NEXT: rank1: shards exact: True, replicated exact: True, no full tensor in archive: True
# CHECK-NEXT: rank1: rewritten: True
# CHECK-NEXT: rank2: _fsdp_rank=2 _fsdp_world_size=3 sha matches manifest: True
# CHECK-NEXT: rank2: blocks.0.mlp.fc.weight (43, 32) blocks.0.ln1.weight (11,) wte.weight (67, 32)
# CHECK-NEXT: rank2: shards exact: True, replicated exact: True, no full tensor in archive: True
# CHECK-NEXT: rank2: rewritten: True
# CHECK-NEXT: shards of all ranks reassemble the originals: True

import json
import math
import os
import sys
import zipfile

import torch

import lit_helpers as lh

original_path, out, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
manifest_path = os.path.join(out, "manifest.json")
manifest_sha = lh.sha256(manifest_path)
print("manifest sha256 of 64 hex digits:", len(manifest_sha) == 64)
with open(manifest_path) as f:
    manifest = json.load(f)
grouped = {p["path"] for u in manifest["units"] for p in u["params"]}
original = {k: v.detach() for k, v in torch.jit.load(original_path).named_parameters()}

pieces = {name: [] for name in grouped}
for r in range(world):
    path = os.path.join(out, "rank%d.pt" % r)
    m = lh.load_rewritten(path)
    print("rank%d: _fsdp_rank=%d _fsdp_world_size=%d sha matches manifest: %s"
          % (r, m._fsdp_rank, m._fsdp_world_size, m._fsdp_manifest_sha256 == manifest_sha))
    params = {k: v.detach() for k, v in m.named_parameters()}
    print("rank%d: %s" % (r, " ".join("%s %s" % (n, tuple(params[n].shape))
                                     for n in ["blocks.0.mlp.fc.weight", "blocks.0.ln1.weight", "wte.weight"])))
    shards_ok = replicated_ok = True
    for name, full in original.items():
        mine = params[name]
        if name in grouped:
            n = full.shape[0]
            c = math.ceil(n / world)
            expect = torch.zeros((c,) + tuple(full.shape[1:]), dtype=full.dtype)
            begin = min(r * c, n)
            count = min(c, n - begin)
            expect[:count] = full[begin:begin + count]
            shards_ok = shards_ok and torch.equal(mine, expect)
            pieces[name].append(mine)
        else:
            replicated_ok = replicated_ok and torch.equal(mine, full)
    with zipfile.ZipFile(path) as z:
        blobs = [z.read(i) for i in z.namelist() if "/data/" in i]
    distinctive = [n for n in grouped if original[n].unique().numel() > 1]
    assert len(distinctive) > 10
    whole = any(original[n].numpy().tobytes() in blob for n in distinctive for blob in blobs)
    print("rank%d: shards exact: %s, replicated exact: %s, no full tensor in archive: %s"
          % (r, shards_ok, replicated_ok, not whole))
    print("rank%d: rewritten: %s" % (r, lh.count_gathers(m.forward.graph) > 0))
print("shards of all ranks reassemble the originals:",
      all(torch.equal(torch.cat(pieces[n])[:original[n].shape[0]], original[n]) for n in grouped))
