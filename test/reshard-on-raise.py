# reshard-on-raise: fsdp::release_all immediately before EVERY prim::RaiseException, in every
# method of every module (a raise unwinds all TorchScript frames, gathered units included), so
# the module stays usable after an exception. Idempotent.
#
# RUN: %python %s %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=child --print-ir --remarks 2>%t.remarks | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t.remarks
# REMARK: remark: [reshard-on-raise] release_all inserted before 3 raise(s)
#
# In the root: before the raise that precedes the child's call and the one that follows it, both
# inside the child's gather (plan-gather-lifetimes holds the child for the whole call).
# CHECK-LABEL: // . : __torch__.Model :: forward
# CHECK:       fsdp::all_gather
# CHECK:       prim::If(
# CHECK-NEXT:    block0():
# CHECK-NEXT:      = fsdp::release_all()
# CHECK-NEXT:      = prim::RaiseException(
# CHECK:       prim::CallMethod[name="forward"](%child
# CHECK:       prim::If(
# CHECK-NEXT:    block0():
# CHECK-NEXT:      = fsdp::release_all()
# CHECK-NEXT:      = prim::RaiseException(
# CHECK:       fsdp::reshard
# CHECK-NEXT:  -> (
# Inside the unit's own forward, while it is gathered.
# CHECK-LABEL: // child : __torch__.Child :: forward
# CHECK:         = fsdp::release_all()
# CHECK-NEXT:    = prim::RaiseException(
#
# Every raise gets one release, and there is no other: three of each, and three more in the
# copy of forward for calls without grad mode (specialize-no-grad), which inlines the child's.
# RUN: fsdp-opt %t.pt --fsdp-unit=child --print-ir | FileCheck %s --check-prefix=PAIRS
# PAIRS-COUNT-6: fsdp::release_all()
# PAIRS-NOT:     fsdp::release_all()
# RUN: fsdp-opt %t.pt --fsdp-unit=child --print-ir | FileCheck %s --check-prefix=RAISES
# RAISES-COUNT-6: prim::RaiseException
# RAISES-NOT:     prim::RaiseException
#
# Run twice, the pass gives the same IR as run once. It needs no earlier pass: alone (no gathers
# yet) it still puts a release before every raise, since the runtime's state is global.
# RUN: fsdp-opt %t.pt --fsdp-unit=child --passes=reshard-on-raise --print-ir > %t.once
# RUN: fsdp-opt %t.pt --fsdp-unit=child --passes=reshard-on-raise,reshard-on-raise --print-ir > %t.twice
# RUN: %python -m lit_helpers diff %t.once %t.twice
# RUN: FileCheck %s --check-prefix=ALONE < %t.twice
# ALONE-COUNT-3: fsdp::release_all()
# ALONE-NOT:     fsdp::release_all()

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Child(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if bool(torch.isnan(y).any()):
            raise RuntimeError("nan in child")
        return y


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.child = Child()

    def forward(self, x, n: int):
        if n < 0:
            raise ValueError("negative n")
        y = self.child(x)
        if n > 10:
            raise ValueError("n too large")
        return y


lh.save(Model(), sys.argv[1])
