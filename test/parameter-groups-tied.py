# Tied parameters stay tied: the GPT's LM head weight IS the token embedding's. With the root
# and the blocks as units, the tie joins the group of the nearest unit holding both owners (the
# root): one group entry, in ONE gather list (both slots listed so both aliases see it), one
# shard in the rank files, shared by both attributes.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models gpt -o %t/in.pt
# The IR as insert-unit-gathers and wrap-entry-methods leave it (later passes schedule gathers).
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. '--fsdp-unit=blocks.*' --remarks --print-ir --method=forward \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods 2>%t/remarks | FileCheck %s
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. '--fsdp-unit=blocks.*' --world-size=2 -o %t/out
# RUN: FileCheck %s --check-prefix=REMARK < %t/remarks
# REMARK: remark: [parameter-groups] tied parameter 'wte.weight', 'lm_head.weight' joins the group of unit '.'
#
# CHECK-LABEL: // . : __torch__.GPT :: forward
# CHECK:       %[[WTE:.*]] : Tensor = prim::GetAttr[name="weight"](%wte)
# CHECK-NEXT:  %lm_head : {{.*}} = prim::GetAttr[name="lm_head"](%self.1)
# CHECK-NEXT:  %[[HEAD:.*]] : Tensor = prim::GetAttr[name="weight"](%lm_head)
# CHECK:       prim::ListConstruct(%[[WTE]], %[[HEAD]], %{{[^,]+}}, %{{[^,]+}}, %{{[^,)]+}})
# CHECK-NEXT:  prim::GetAttr[name="_fsdp_unit_path"](%self.1)
# CHECK-NEXT:  prim::Constant[value=[67, 67, 16, 32, 32]]()
# CHECK-NEXT:  fsdp::all_gather
# The blocks' gather lists do not hold the tied weight (no 67-row entry).
# CHECK-NOT:   prim::Constant[value=[67
# CHECK:       fsdp::all_gather
# CHECK-NOT:   prim::Constant[value=[67
# CHECK:       fsdp::all_gather
# CHECK-NOT:   fsdp::all_gather
# CHECK:       return
#
# The manifest has one entry for the tie, with its alias, in the root's group only.
# RUN: %python %s %t/out | FileCheck %s --check-prefix=FILES
# FILES:      unit .: wte.weight aliases=['lm_head.weight'] shape=[67, 32] shard_rows=34
# FILES-NEXT: lm_head.weight listed as a path: 0
# FILES-NEXT: rank0: wte (34, 32) lm_head (34, 32) one tensor: True
# FILES-NEXT: rank1: wte (34, 32) lm_head (34, 32) one tensor: True
#
# Counted once.
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. '--fsdp-unit=blocks.*' --stats | FileCheck %s --check-prefix=STATS
# STATS: sharded parameters: 28

import json
import os
import sys

import lit_helpers as lh

out = sys.argv[1]
with open(os.path.join(out, "manifest.json")) as f:
    manifest = json.load(f)
paths = []
for unit in manifest["units"]:
    for p in unit["params"]:
        paths.append(p["path"])
        if p["path"] == "wte.weight":
            print("unit %s: %s aliases=%s shape=%s shard_rows=%d"
                  % (unit["path"], p["path"], p["aliases"], p["shape"], p["shard_rows"]))
print("lm_head.weight listed as a path:", paths.count("lm_head.weight"))
for rank in range(2):
    m = lh.load_rewritten(os.path.join(out, "rank%d.pt" % rank))
    wte, head = m.wte.weight, m.lm_head.weight
    print("rank%d: wte %s lm_head %s one tensor: %s" % (
        rank, tuple(wte.shape), tuple(head.shape),
        wte is head or (wte.data_ptr() == head.data_ptr() and wte.shape == head.shape)))
