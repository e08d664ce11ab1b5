# The "call site rewritten" remark names the unit by its module path. For a call on `self`
# (a non-forward method of a unit calling its own forward) that is the unit's own path.
#
# Regression test (fixed): insert-unit-gathers joins the representative path and the (empty) path from
# self with a dot, printing "unit 'child.' method forward in __torch__.Child::twice" (and
# "unit 'lm.'" for the GPT's generate); for the root it happens to print '.'.
#
# RUN: %python %s %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=child --remarks 2>&1 >/dev/null | FileCheck %s --match-full-lines
# CHECK: remark: [insert-unit-gathers] call site rewritten: unit 'child' method forward in __torch__.Model::forward
# CHECK: remark: [insert-unit-gathers] call site rewritten: unit 'child' method forward in __torch__.Child::twice

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
        return self.forward(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.child = Child()

    def forward(self, x):
        return self.child(x)

    @torch.jit.export
    def both(self, x):
        return self.child.twice(x)


lh.save(Model(), sys.argv[1])
