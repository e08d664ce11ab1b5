# bucket-gathers: the planner holds the root and the two layers for the whole call of forward and
# of generate, so their gathers are adjacent and so are their reshards: they merge into ONE
# collective under the default 25 MiB bucket; --bucket-bytes below the sum keeps them apart.
#
# RUN: %python -m fsdp_models gpt --arg n_layer=2 -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --print-ir --stats --remarks 2>%t.remarks | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t.remarks
# REMARK: remark: [bucket-gathers] merged two adjacent gathers into one collective of 101632 bytes in __torch__.GPT::forward
# REMARK: remark: [bucket-gathers] merged two adjacent gathers into one collective of 112512 bytes in __torch__.GPT::forward
# REMARK: remark: [bucket-gathers] merged two adjacent gathers into one collective of 101632 bytes in __torch__.GPT::generate
# REMARK: remark: [bucket-gathers] merged two adjacent gathers into one collective of 112512 bytes in __torch__.GPT::generate
#
# CHECK-LABEL: // . : __torch__.GPT :: forward
# CHECK:       aten::join(
# CHECK:       %[[FNAMES:.*]] : str = aten::join(
# CHECK-NEXT:  %[[F:.*]] : Tensor[] = fsdp::all_gather(%{{.*}}, %{{.*}}, %[[FNAMES]])
# CHECK-NOT:   fsdp::all_gather
# CHECK:       fsdp::reshard(%[[F]],
# CHECK-LABEL: // . : __torch__.GPT :: generate
# CHECK:       aten::join(
# CHECK:       %[[NAMES:.*]] : str = aten::join(
# CHECK:       %[[ALL:.*]] : Tensor[] = fsdp::all_gather(%{{.*}}, %{{.*}}, %[[NAMES]])
# CHECK-NOT:   fsdp::all_gather(
# CHECK:       prim::Loop(
# CHECK:       fsdp::reshard(%[[ALL]],
# CHECK-NOT:   fsdp::reshard(
# CHECK:       // . : __torch__.GPT :: _fsdp_no_grad_forward
# CHECK:       gathers merged into buckets: 4
# CHECK:       gathers per call of forward: 1
# CHECK:       gathers per call of generate: 1
#
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --bucket-bytes=60000 --stats | FileCheck %s --check-prefix=SMALL
# SMALL: gathers merged into buckets: 0
# SMALL: gathers per call of generate: 3
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --bucket-bytes=0 --stats | FileCheck %s --check-prefix=SMALL
#
# The pass alone on a minimal input, right after the rewrite: the root's entry gather and the
# gather of `block` (whose call is forward's only statement) are adjacent, and so are their
# reshards: one collective of both groups (root 32 + block 80 bytes), named "., block".
# RUN: %python %s %t.min.pt
# RUN: fsdp-opt %t.min.pt --fsdp-unit=. --fsdp-unit=block --remarks --print-ir --method=forward \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,bucket-gathers,verify-fsdp 2>&1 \
# RUN:   | FileCheck %s --check-prefix=MIN
# MIN:      remark: [bucket-gathers] merged two adjacent gathers into one collective of 112 bytes in __torch__.Net::forward
# MIN-LABEL: // . : __torch__.Net :: forward
# MIN:      prim::Constant[value=[8, 4, 4]]()
# MIN:      %[[NAMES:.*]] : str = aten::join(
# MIN-NEXT: %[[ALL:.*]] : Tensor[] = fsdp::all_gather(%{{.*}}, %{{.*}}, %[[NAMES]])
# MIN-NOT:  fsdp::
# MIN:      prim::CallMethod[name="forward"](%block
# The block call's backward hook, then the merged reshard where the later one (the root's)
# was, and the root's hook (backward hooks stand between reshards without separating them).
# MIN-NEXT: prim::TupleConstruct
# MIN-NEXT: fsdp::backward_hook(
# MIN-NEXT: = fsdp::reshard(%[[ALL]], %[[NAMES]])
# MIN-NEXT: prim::TupleConstruct
# MIN-NEXT: fsdp::backward_hook(
# MIN-NEXT: return
# One byte below the bucket's size: two collectives.
# RUN: fsdp-opt %t.min.pt --fsdp-unit=. --fsdp-unit=block --bucket-bytes=111 --print-ir --method=forward \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,bucket-gathers,verify-fsdp \
# RUN:   | FileCheck %s --check-prefix=APART
# APART-COUNT-2: fsdp::all_gather(
# APART-NOT:     aten::join

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8))  # the root's group: 32 bytes
        self.block = nn.Linear(4, 4)              # 80 bytes

    def forward(self, x):
        return self.block(x)

    @torch.jit.export
    def scaled(self, y):
        return y * self.scale


lh.save(Net(), sys.argv[1])
