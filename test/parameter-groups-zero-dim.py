# A 0-dim parameter is replicated, not sharded: it is in no gather list and no manifest group,
# and every rank file holds it whole, even when its owner is a unit.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models zero_dim -o %t/in.pt
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --world-size=2 -o %t/out --remarks --print-ir --stats 2>%t/remarks \
# RUN:   | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t/remarks
# REMARK: remark: [parameter-groups] parameter 'scale' is 0-dim: replicated, not sharded
#
# CHECK-LABEL: // . : __torch__.ZeroDimParam :: forward
# CHECK-NOT:   [name="scale"]
# CHECK:       prim::ListConstruct(%{{[^,]+}}, %{{[^,)]+}})
# CHECK-NEXT:  prim::GetAttr[name="_fsdp_unit_path"](%self.1)
# CHECK-NEXT:  prim::Constant[value=[8, 8]]()
# CHECK-NEXT:  fsdp::all_gather
# CHECK:       prim::GetAttr[name="scale"](%self.1)
# CHECK:       fsdp::reshard
# CHECK:       stats:
# CHECK:       sharded parameters: 2
# CHECK:       replicated bytes per rank: 4
#
# RUN: %python %s %t/out | FileCheck %s --check-prefix=FILES
# FILES:      grouped: fc.weight fc.bias
# FILES-NEXT: rank0: scale () 1.5 fc.weight (4, 8)
# FILES-NEXT: rank1: scale () 1.5 fc.weight (4, 8)

import json
import os
import sys

import lit_helpers as lh

out = sys.argv[1]
with open(os.path.join(out, "manifest.json")) as f:
    manifest = json.load(f)
print("grouped:", " ".join(p["path"] for u in manifest["units"] for p in u["params"]))
for rank in range(2):
    m = lh.load_rewritten(os.path.join(out, "rank%d.pt" % rank))
    print("rank%d: scale %s %s fc.weight %s" % (rank, tuple(m.scale.shape), m.scale.item(), tuple(m.fc.weight.shape)))
