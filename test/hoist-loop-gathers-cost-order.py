# hoist-loop-gathers takes the costliest gathers out of a loop first, by the planner's cost model
# (ir/gather_cost.h): `run` calls unit a, then unit b in an inner loop and once more, then
# unit d, in every step of its outer loop, after a larger unit c once before it. The budget fits
# c alone, or one of a, b, d held across the outer loop beside one other, not two of them held;
# so nothing can be held for the whole call, and of the outer loop's gathers only the first one
# hoisted fits. In program order that would be a (1 collective per step). b's collectives in the
# inner loop weigh kLoopWeight^2 each, so b goes: its inner gathers are then nested under the
# hoisted one and issue nothing, and a and d stay per step: 1 + 1 + 2 per outer iteration.
#
# RUN: %python %s %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=a --fsdp-unit=b --fsdp-unit=c --fsdp-unit=d --world-size=2 --max-unsharded-bytes=2560 --bucket-bytes=0 --stats --remarks -o %t.out 2>%t.remarks | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t.remarks
# REMARK-NOT:  [plan-gather-lifetimes] {{.*}} held for the whole call of __torch__.{{.*}}::run
# The inner loop's gather of b first (innermost loops first), then both of b's in the outer body.
# REMARK:      remark: [hoist-loop-gathers] gather of unit 'b' hoisted out of a loop in __torch__.{{.*}}::run (static peak 1600 bytes)
# REMARK-NEXT: remark: [hoist-loop-gathers] gather of unit 'b' hoisted out of a loop in __torch__.{{.*}}::run (static peak 2048 bytes)
# REMARK-NEXT: remark: [hoist-loop-gathers] gather of unit 'b' hoisted out of a loop in __torch__.{{.*}}::run (static peak 2048 bytes)
# REMARK-NEXT: remark: [hoist-loop-gathers] unit 'a' kept per iteration in __torch__.{{.*}}::run: hoisting it would reach 3072 unsharded bytes, over the budget of 2560
# REMARK-NEXT: remark: [hoist-loop-gathers] unit 'd' kept per iteration in __torch__.{{.*}}::run: hoisting it would reach 3072 unsharded bytes, over the budget of 2560
# CHECK:       units held for a whole entry call: 0
# CHECK:       gathers hoisted out of loops: 6
# c once, b once, a and d once per outer iteration:
# CHECK:       gathers per call of run: 4 (2 inside loops, once per iteration)

import sys

import torch
import torch.nn as nn


class Nest(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Linear(16, 25, bias=False)  # 1600 bytes
        self.a = nn.Linear(16, 16, bias=False)  # 1024 bytes each
        self.b = nn.Linear(16, 16, bias=False)
        self.d = nn.Linear(16, 16, bias=False)

    def forward(self, x):
        return self.run(x, 1, 1)

    @torch.jit.export
    def run(self, x: torch.Tensor, n: int, m: int) -> torch.Tensor:
        y = self.c(x)[:, :16]
        for _ in range(n):
            y = self.a(y)
            for _ in range(m):
                y = self.b(y)
            y = self.d(self.b(y))
        return y


if __name__ == "__main__":
    torch.jit.script(Nest()).save(sys.argv[1])
