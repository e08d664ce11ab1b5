# check-unsharded-budget: a --max-unsharded-bytes below the least peak any schedule can keep is
# an error naming that least budget and what needs it; at or above it the pipeline goes on.
# Sizes (float32): the root's own group is `scale` (8) + `head` (4x8) = 160 bytes, each block a
# Linear(8, 8) = 288 bytes; forward holds the root and one block at once: 448 bytes.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t/in.pt
#
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=. --fsdp-unit='blocks.*' --world-size=2 \
# RUN:   --max-unsharded-bytes=447 -o %t/out | FileCheck %s --check-prefix=BELOW --implicit-check-not=error: --match-full-lines
# BELOW:      [stdout]
# BELOW-NEXT: [stderr]
# BELOW-NEXT: error: --max-unsharded-bytes=447 cannot be kept: the smallest budget any schedule can keep is 448 bytes in entry method 'forward', units '.' (160 bytes), 'blocks.0' (288 bytes) unsharded together
# BELOW-NEXT: [exit 1]
# RUN: %python -m lit_helpers tree %t | FileCheck %s --check-prefix=NOTHING --implicit-check-not=out
# NOTHING: in.pt
#
# The pass alone, after the rewrite, says the same.
# RUN: not fsdp-opt %t/in.pt --fsdp-unit=. --fsdp-unit='blocks.*' --max-unsharded-bytes=300 \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,check-unsharded-budget 2>&1 \
# RUN:   | FileCheck %s --check-prefix=ALONE
# ALONE: error: --max-unsharded-bytes=300 cannot be kept: the smallest budget any schedule can keep is 448 bytes
#
# At the least peak: accepted, and said.
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --fsdp-unit='blocks.*' --world-size=2 --max-unsharded-bytes=448 --remarks -o %t/out 2>&1 \
# RUN:   | FileCheck %s --check-prefix=AT
# AT: remark: [check-unsharded-budget] least peak of unsharded parameters: 448 bytes in entry method 'forward', units '.' (160 bytes), 'blocks.0' (288 bytes) unsharded together (budget 448)
#
# Without a budget: a remark only; a root method that gathers nothing, none.
# RUN: fsdp-opt %t/in.pt --fsdp-unit='blocks.*' --remarks 2>&1 | FileCheck %s --check-prefix=NONE
# NONE: remark: [check-unsharded-budget] least peak of unsharded parameters: 288 bytes in entry method 'forward', unit 'blocks.0' (288 bytes) unsharded{{$}}
# RUN: fsdp-opt %t/in.pt --remarks 2>&1 | FileCheck %s --check-prefix=EMPTY
# EMPTY: remark: [check-unsharded-budget] least peak of unsharded parameters: 0 bytes (no unit is gathered)

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8))
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
        self.head = nn.Linear(8, 4, bias=False)

    def forward(self, x):
        x = x * self.scale
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


lh.save(Net(), sys.argv[1])
