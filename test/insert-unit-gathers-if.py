# insert-unit-gathers inside prim::If branches: only the branch that calls the unit gathers,
# inside that branch; a nested If inside a loop is handled at any depth.
# The pipeline is pinned to the passes under test (the default one goes on to schedule the
# gathers: docs/passes.md).
#
# RUN: %python %s %t.pt
# RUN: fsdp-opt %t.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --fsdp-unit=unit --print-ir --method=forward | FileCheck %s
# unit and plain are Linears of one class type: the root is specialized as well.
# CHECK-LABEL: // . : __torch__.Model__fsdp{{[0-9]+}} :: forward
# CHECK:       fsdp::check_rank
# CHECK-NOT:   fsdp::
# CHECK:       prim::If(%flag.1)
# CHECK-NEXT:    block0():
# CHECK:           %[[G1:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:      prim::CallMethod[name="forward"](%unit
# CHECK-NEXT:      fsdp::reshard(%[[G1]],
# CHECK-NEXT:      prim::TupleConstruct
# CHECK-NEXT:      fsdp::backward_hook(
# CHECK-NEXT:      -> (
# CHECK-NEXT:    block1():
# CHECK-NOT:       fsdp::
# CHECK:           prim::CallMethod[name="forward"](%plain
# CHECK-NOT:       fsdp::
# CHECK:       prim::Loop(
# CHECK-NOT:     fsdp::
# CHECK:         prim::If(
# CHECK-NEXT:      block0():
# CHECK:             %[[G2:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:        prim::CallMethod[name="forward"](%unit
# CHECK-NEXT:        fsdp::reshard(%[[G2]],
# CHECK-NEXT:        prim::TupleConstruct
# CHECK-NEXT:        fsdp::backward_hook(
# CHECK-NOT:   fsdp::
# CHECK:       return
#
# Three fsdp ops per call site and the rank check: nothing else.
# RUN: fsdp-opt %t.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --fsdp-unit=unit --print-ir --method=forward | FileCheck %s --check-prefix=COUNT
# COUNT-COUNT-1: fsdp::check_rank
# COUNT-COUNT-2: fsdp::all_gather
# COUNT-NOT:     fsdp::all_gather

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.unit = nn.Linear(4, 4)
        self.plain = nn.Linear(4, 4)

    def forward(self, x, flag: bool, n: int):
        if flag:
            x = self.unit(x)
        else:
            x = self.plain(x)
        for i in range(n):
            if i % 2 == 0:
                x = self.unit(x)
        return x


lh.save(Model(), sys.argv[1])
