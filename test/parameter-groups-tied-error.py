# A tied parameter whose owners have no common FSDP unit is an error naming both paths:
# exit 1, one `error:` line, nothing written.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models gpt -o %t/gpt.pt
# RUN: %python -m lit_helpers run fsdp-opt %t/gpt.pt --fsdp-unit=wte --fsdp-unit=lm_head --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --implicit-check-not=error: --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: tied parameter 'wte.weight', 'lm_head.weight' is not held by any single FSDP unit{{.*}}
# CHECK-NEXT: [exit 1]
# RUN: %python -m lit_helpers tree %t/out | FileCheck %s --check-prefix=NOTHING
# NOTHING: out: missing
#
# Deeper: the tie spans two units (`left.proj`, `right.proj`) under a parent that is no unit.
# RUN: %python %s %t/deep.pt
# RUN: %python -m lit_helpers run fsdp-opt %t/deep.pt --fsdp-unit=pair.left --fsdp-unit=pair.right \
# RUN:   | FileCheck %s --check-prefix=DEEP --implicit-check-not=error:
# DEEP:      [stderr]
# DEEP-NEXT: error: tied parameter 'pair.left.proj.weight', 'pair.right.proj.weight' is not held by any single FSDP unit{{.*}}
# DEEP-NEXT: [exit 1]
#
# Making the parent a unit resolves it: the tie joins the parent's group, not either child's.
# RUN: fsdp-opt %t/deep.pt --fsdp-unit=pair.left --fsdp-unit=pair.right --fsdp-unit=pair --remarks 2>&1 \
# RUN:   | FileCheck %s --check-prefix=FIXED --implicit-check-not=error:
# FIXED: remark: [parameter-groups] tied parameter 'pair.left.proj.weight', 'pair.right.proj.weight' joins the group of unit 'pair'

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Side(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4, bias=False)

    def forward(self, x):
        return self.proj(x)


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.left = Side()
        self.right = Side()
        self.right.proj.weight = self.left.proj.weight

    def forward(self, x):
        return self.right(self.left(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = Pair()

    def forward(self, x):
        return self.pair(x)


lh.save(Model(), sys.argv[1])
