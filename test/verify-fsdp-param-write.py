# verify-fsdp: a method that reassigns a unit's parameter (prim::SetAttr) cannot be sharded: the
# new tensor would be taken for a shard by the next gather. At --world-size=2 that is one
# `error:` naming the method, the parameter and the unit, and nothing is written (decay is a
# registered forward method, so its read of the weight is gathered); assigning a buffer of the
# same unit is fine.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t/in.pt
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=block --forward-method=block:decay --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --implicit-check-not=error: --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: method 'decay' of 'block' assigns parameter 'block.fc.weight' of unit 'block' (prim::SetAttr): fsdp-opt cannot shard a parameter the model reassigns
# CHECK-NEXT: [exit 1]
# RUN: %python -m lit_helpers tree %t | FileCheck %s --check-prefix=NOTHING --implicit-check-not=out
# NOTHING: in.pt
#
# At world size 1 nothing is sharded: accepted.
# RUN: fsdp-opt %t/in.pt --fsdp-unit=block --forward-method=block:decay -o %t/one.pt

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls = self.calls + 1  # a buffer: fine
        return self.fc(x)

    @torch.jit.export
    def decay(self):
        self.fc.weight = self.fc.weight * 0.5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        y = self.block(x)
        self.block.decay()
        return y


lh.save(Net(), sys.argv[1])
