# Parameters whose dim 0 is smaller than the world size: each rank holds c = ceil(N / W) rows,
# zero-padded; a rank past the end holds c rows of zeros. The manifest records shard_rows.
# SmallDim0 has gain [1], fc.weight [3, 8], fc.bias [3].
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models small_dim0 -o %t/in.pt
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --world-size=4 -o %t/w4
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --world-size=2 -o %t/w2
# RUN: %python %s %t/in.pt %t/w4 4 | FileCheck %s --check-prefix=W4
# RUN: %python %s %t/in.pt %t/w2 2 | FileCheck %s --check-prefix=W2
#
# W4:      world_size 4
# W4-NEXT: gain [1] shard_rows=1
# W4-NEXT: fc.weight [3, 8] shard_rows=1
# W4-NEXT: fc.bias [3] shard_rows=1
# W4-NEXT: rank0: gain (1,) [0.5] fc.bias (1,) real
# W4-NEXT: rank1: gain (1,) [0.0] fc.bias (1,) real
# W4-NEXT: rank2: gain (1,) [0.0] fc.bias (1,) real
# W4-NEXT: rank3: gain (1,) [0.0] fc.bias (1,) zeros
# W4-NEXT: reassembled equal: True
#
# W2:      world_size 2
# W2-NEXT: gain [1] shard_rows=1
# W2-NEXT: fc.weight [3, 8] shard_rows=2
# W2-NEXT: fc.bias [3] shard_rows=2
# W2-NEXT: rank0: gain (1,) [0.5] fc.bias (2,) real
# W2-NEXT: rank1: gain (1,) [0.0] fc.bias (2,) real
# W2-NEXT: reassembled equal: True

import json
import os
import sys

import torch

import lit_helpers as lh

original, out, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(os.path.join(out, "manifest.json")) as f:
    manifest = json.load(f)
print("world_size", manifest["world_size"])
for unit in manifest["units"]:
    for p in unit["params"]:
        print(p["path"], p["shape"], "shard_rows=%d" % p["shard_rows"])
full = torch.jit.load(original)
ranks = [lh.load_rewritten(os.path.join(out, "rank%d.pt" % r)) for r in range(world)]
for r, m in enumerate(ranks):
    bias = m.fc.bias.detach()
    print("rank%d: gain %s %s fc.bias %s %s" % (r, tuple(m.gain.shape), m.gain.detach().tolist(),
                                               tuple(bias.shape), "zeros" if not bias.any() else "real"))
ok = True
for name, value in full.named_parameters():
    n = value.shape[0]
    parts = torch.cat([dict(m.named_parameters())[name].detach() for m in ranks])[:n]
    ok = ok and torch.equal(parts, value.detach())
print("reassembled equal:", ok)
