# A method of a unit that is NOT one of its forward methods, calling self.forward, runs with
# the unit sharded; each self.forward call inside it is wrapped (in the unit's own graph), and
# the parent's call of that method is not.
# The pipeline is pinned to the passes under test (the default one goes on to schedule the
# gathers: docs/passes.md).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t/in.pt
# RUN: fsdp-opt %t/in.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --fsdp-unit=child --print-ir | FileCheck %s
# CHECK-LABEL: // . : __torch__.Model :: both
# CHECK:       fsdp::check_rank
# CHECK-NOT:   fsdp::
# CHECK:       prim::CallMethod[name="twice"](%child
# CHECK-NOT:   fsdp::
# CHECK:       return
# CHECK-LABEL: // child : __torch__.Child :: twice
# CHECK:       %[[G1:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:  %[[Y:.*]] : Tensor = prim::CallMethod[name="forward"](%self.1, %x.1)
# CHECK-NEXT:  fsdp::reshard(%[[G1]],
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK:       %[[G2:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:  prim::CallMethod[name="forward"](%self.1, %[[Y]])
# CHECK-NEXT:  fsdp::reshard(%[[G2]],
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK-NEXT:  return
#
# Registering `twice` and `thrice` (which calls twice, another forward method of the same
# unit) moves the gather out: once, in the parent, and none inside either.
# RUN: fsdp-opt %t/in.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --fsdp-unit=child --forward-method=child:twice --forward-method=child:thrice --print-ir \
# RUN:   | FileCheck %s --check-prefix=REG
# REG-LABEL: // . : __torch__.Model :: both
# REG:       %[[G:.*]] : Tensor[] = fsdp::all_gather(
# REG-NEXT:  prim::CallMethod[name="twice"](%child
# REG-NEXT:  fsdp::reshard(%[[G]],
# REG-LABEL: // . : __torch__.Model :: three
# REG:       %[[G3:.*]] : Tensor[] = fsdp::all_gather(
# REG-NEXT:  prim::CallMethod[name="thrice"](%child
# REG-NEXT:  fsdp::reshard(%[[G3]],
# REG-LABEL: // child : __torch__.Child :: thrice
# REG-NOT:   fsdp::
# REG-LABEL: // child : __torch__.Child :: twice
# REG-NOT:   fsdp::
# REG:       return

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Child(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)

    @torch.jit.export
    def twice(self, x):
        return self.forward(self.forward(x))

    @torch.jit.export
    def thrice(self, x):
        return self.forward(self.twice(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.child = Child()

    def forward(self, x):
        return self.child(x)

    @torch.jit.export
    def both(self, x):
        return self.child.twice(x)

    @torch.jit.export
    def three(self, x):
        return self.child.thrice(x)


lh.save(Model(), sys.argv[1])
