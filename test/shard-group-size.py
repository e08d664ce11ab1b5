# --shard-group-size=S (HSDP): W ranks form W / S shard groups of S consecutive ranks; every unit
# parameter is cut into S shards and rank r holds shard r % S (c = ceil(N / S) rows), so the
# R = W / S ranks r % S, r % S + S, ... hold the same rows. Every rank still gets its own
# DIR/rank{r}.pt carrying its rank, the world size and the shard group size; the manifest records
# the mesh and shard rows of S; every entry method's check_rank takes the shard group size (the
# runtime's gathers then run within the group); --stats names the mesh and counts bytes per rank
# over S. An S that does not divide W is one `error:` line and nothing is written; S = W is plain
# FSDP (no mesh attribute, the 3-argument check_rank).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models gpt -o %t/in.pt
# RUN: fsdp-opt %t/in.pt '--fsdp-unit=blocks.*' --world-size=4 --shard-group-size=2 -o %t/hsdp --stats \
# RUN:   | FileCheck %s --check-prefix=STATS
# STATS:      world size: 4
# STATS-NEXT: mesh: 2 replicas x shard group size 2
# STATS-NEXT: sharded bytes per rank: [[BYTES:[0-9]+]] (of {{[0-9]+}})
# RUN: %python %s %t/in.pt %t/hsdp 4 2 | FileCheck %s --check-prefix=FILES --match-full-lines
# FILES:      manifest mesh: {'replicas': 2, 'shard_group_size': 2}
# FILES-NEXT: manifest shard_rows of blocks.0.mlp.fc.weight (128 rows): 64
# FILES-NEXT: rank0: rank 0 of 4, shard group size 2, holds shard 0: True
# FILES-NEXT: rank1: rank 1 of 4, shard group size 2, holds shard 1: True
# FILES-NEXT: rank2: rank 2 of 4, shard group size 2, holds shard 0: True
# FILES-NEXT: rank3: rank 3 of 4, shard group size 2, holds shard 1: True
# FILES-NEXT: check_rank of forward: fsdp::check_rank(rank, world, shard_group_size, sha)
# RUN: fsdp-opt %t/in.pt '--fsdp-unit=blocks.*' --world-size=4 --shard-group-size=4 -o %t/plain
# RUN: %python %s %t/in.pt %t/plain 4 4 | FileCheck %s --check-prefix=PLAIN --match-full-lines
# PLAIN:      manifest mesh: {'replicas': 1, 'shard_group_size': 4}
# PLAIN-NEXT: manifest shard_rows of blocks.0.mlp.fc.weight (128 rows): 32
# PLAIN:      rank3: rank 3 of 4, shard group size 4, holds shard 3: True
# PLAIN-NEXT: check_rank of forward: fsdp::check_rank(rank, world, sha)
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt '--fsdp-unit=blocks.*' --world-size=4 --shard-group-size=3 -o %t/bad \
# RUN:   | FileCheck %s --check-prefix=BAD --implicit-check-not=error: --match-full-lines
# BAD:      [stdout]
# BAD-NEXT: [stderr]
# BAD-NEXT: error: --shard-group-size=3 does not divide --world-size=4 (W ranks form W / S shard groups of S ranks)
# BAD-NEXT: [exit 1]
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt '--fsdp-unit=blocks.*' --world-size=4 --shard-group-size=0 -o %t/bad \
# RUN:   | FileCheck %s --check-prefix=ZERO --implicit-check-not=error:
# ZERO: error: --shard-group-size must be at least 1, got 0
# RUN: %python -m lit_helpers tree %t/bad | FileCheck %s --check-prefix=NOTHING
# NOTHING: bad: missing

import json
import os
import sys

import torch

import lit_helpers as lh

original_path, out, world, group = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with open(os.path.join(out, "manifest.json")) as f:
    manifest = json.load(f)
print("manifest mesh:", manifest["mesh"])
rows = {p["path"]: p for u in manifest["units"] for p in u["params"]}
fc = rows["blocks.0.mlp.fc.weight"]
print("manifest shard_rows of blocks.0.mlp.fc.weight (%d rows): %d" % (fc["shape"][0], fc["shard_rows"]))
original = {k: v.detach() for k, v in torch.jit.load(original_path).named_parameters()}
for r in range(world):
    m = lh.load_rewritten(os.path.join(out, "rank%d.pt" % r))
    s = m._fsdp_shard_group_size if hasattr(m, "_fsdp_shard_group_size") else m._fsdp_world_size
    shard = r % group
    exact = True
    for name, p in m.named_parameters():
        full = original[name]
        if name in rows and full.dim() > 0:
            c = -(-full.shape[0] // group)
            want = torch.zeros((c,) + tuple(full.shape[1:]), dtype=full.dtype)
            got_rows = full[shard * c:(shard + 1) * c]
            want[:got_rows.shape[0]] = got_rows
        else:
            want = full
        exact = exact and p.shape == want.shape and torch.equal(p.detach(), want)
    print("rank%d: rank %d of %d, shard group size %d, holds shard %d: %s"
          % (r, m._fsdp_rank, m._fsdp_world_size, s, shard, exact))
graph = lh.load_rewritten(os.path.join(out, "rank0.pt")).forward.graph
check = graph.findAllNodes("fsdp::check_rank")[0]  # first in program order, nested blocks included
names = {"_fsdp_rank": "rank", "_fsdp_world_size": "world", "_fsdp_shard_group_size": "shard_group_size",
         "_fsdp_manifest_sha256": "sha"}
print("check_rank of forward: fsdp::check_rank(%s)" % ", ".join(names[i.node().s("name")] for i in check.inputs()))
