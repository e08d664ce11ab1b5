# verify-fsdp checks the pairing invariant on any IR, also fsdp:: ops a user wrote by hand:
# every fsdp::all_gather is consumed by exactly one fsdp::reshard later in ITS block, and every
# reshard consumes a gather. Violations are errors naming the type and method (first as
# `error:`, the rest as notes); exit 1.
#
# RUN: %python %s %t.bad.pt bad
# RUN: %python -m lit_helpers run fsdp-opt %t.bad.pt --passes=verify-fsdp \
# RUN:   | FileCheck %s --implicit-check-not=error:
# CHECK:      [stderr]
# CHECK-NEXT: error: __torch__.Bad::forward: a reshard is not in the block of its gather, after it
# CHECK-NEXT: note: __torch__.Bad::leak: an fsdp::all_gather has 0 matching fsdp::reshard (expected exactly 1)
# CHECK-NEXT: note: __torch__.Bad::stray: an fsdp::reshard does not consume an fsdp::all_gather
# CHECK-NEXT: note: __torch__.Bad::twice: an fsdp::all_gather has 2 matching fsdp::reshard (expected exactly 1)
# CHECK-NEXT: [exit 1]
#
# A correctly paired hand-written gather passes.
# RUN: %python %s %t.good.pt good
# RUN: %python -m lit_helpers run fsdp-opt %t.good.pt --passes=verify-fsdp \
# RUN:   | FileCheck %s --check-prefix=GOOD --match-full-lines
# GOOD:      [stdout]
# GOOD-NEXT: [stderr]
# GOOD-NEXT: [exit 0]

import sys

import torch
import torch.nn as nn

import lit_helpers as lh

lh.load_runtime()  # so that torch.ops.fsdp.* resolve while scripting


class Bad(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x, flag: bool):
        full = torch.ops.fsdp.all_gather([self.w], [4], "w")
        y = x * self.w
        if flag:
            torch.ops.fsdp.reshard(full, "w")
        return y

    @torch.jit.export
    def leak(self, x):
        full = torch.ops.fsdp.all_gather([self.w], [4], "w")
        return x * self.w

    @torch.jit.export
    def stray(self, x):
        torch.ops.fsdp.reshard([self.w], "w")
        return x

    @torch.jit.export
    def twice(self, x):
        full = torch.ops.fsdp.all_gather([self.w], [4], "w")
        y = x * self.w
        torch.ops.fsdp.reshard(full, "w")
        torch.ops.fsdp.reshard(full, "w")
        return y


class Good(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x, flag: bool):
        full = torch.ops.fsdp.all_gather([self.w], [4], "w")
        y = x * self.w
        if flag:
            y = y + 1
        torch.ops.fsdp.reshard(full, "w")
        return y


lh.save(Bad() if sys.argv[2] == "bad" else Good(), sys.argv[1])
