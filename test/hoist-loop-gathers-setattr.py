# hoist-loop-gathers keeps a gather in its loop when the loop may reassign a submodule: after
# `self.block = self.other` the chain `self.block` reaches the other unit's parameters, so a
# gather hoisted before the loop would leave the later iterations computing on shards. The
# same loop without the assignment is hoisted. Both run bitwise exact at W=2.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t
#
# RUN: fsdp-opt %t/swap.pt --fsdp-unit=block --fsdp-unit=other --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,hoist-loop-gathers \
# RUN:   --print-ir --method=forward --remarks 2>%t/swap.err | FileCheck %s --check-prefix=KEPT
# RUN: FileCheck %s --check-prefix=KEPT-REMARK < %t/swap.err
# KEPT-REMARK: remark: [hoist-loop-gathers] no gather hoisted out of a loop in __torch__.Net::forward: the loop may reassign a submodule or a parameter (prim::SetAttr)
# KEPT:      prim::Loop
# KEPT:        %[[G:.*]] : Tensor[] = fsdp::all_gather(
# KEPT-NEXT:   prim::CallMethod[name="forward"](%block
# KEPT-NEXT:   fsdp::reshard(%[[G]],
# KEPT-NEXT:   prim::TupleConstruct
# KEPT-NEXT:   fsdp::backward_hook(
# KEPT-NEXT:   prim::GetAttr[name="other"](%self
# KEPT-NEXT:   prim::SetAttr[name="block"](%self
#
# RUN: fsdp-opt %t/plain.pt --fsdp-unit=block --fsdp-unit=other --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,hoist-loop-gathers \
# RUN:   --print-ir --method=forward --remarks 2>&1 | FileCheck %s --check-prefix=HOISTED
# HOISTED: remark: [hoist-loop-gathers] gather of unit 'block' hoisted out of a loop in __torch__.Plain::forward
# HOISTED: %[[G:.*]] : Tensor[] = fsdp::all_gather(
# HOISTED: prim::Loop
# HOISTED-NOT: fsdp::{{(all_gather|reshard)}}
# HOISTED: fsdp::reshard(%[[G]],
#
# RUN: fsdp-opt %t/swap.pt --fsdp-unit=block --fsdp-unit=other --world-size=2 -o %t/swap
# RUN: fsdp-run %t/swap --inputs=%t/in.pt --check=%t/swap.pt | FileCheck %s --check-prefix=EXACT
# RUN: fsdp-opt %t/plain.pt --fsdp-unit=block --fsdp-unit=other --world-size=2 -o %t/plain
# RUN: fsdp-run %t/plain --inputs=%t/in.pt --check=%t/plain.pt | FileCheck %s --check-prefix=EXACT
# EXACT-DAG: rank 0: outputs bitwise identical
# EXACT-DAG: rank 1: outputs bitwise identical

import os
import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.other = Block()

    def forward(self, x, n: int):
        for _ in range(n):
            x = self.block(x)
            self.block = self.other
        return x


class Plain(Net):
    def forward(self, x, n: int):
        for _ in range(n):
            x = self.block(x)
        return x


out = sys.argv[1]
torch.manual_seed(0)
lh.save(Net(), os.path.join(out, "swap.pt"))
torch.manual_seed(0)
lh.save(Plain(), os.path.join(out, "plain.pt"))
torch.save((torch.randn(2, 4), 3), os.path.join(out, "in.pt"))
