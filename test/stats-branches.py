# --stats counts the collectives ONE call issues: of a branch's two arms a call takes one, so
# their gathers are not added up. Here both arms call the same three blocks (as timm's ViTs do
# around grad checkpointing): 3 gathers per call, not 6; with a unit called in one arm only, the
# larger arm counts.
#
# RUN: %python %s %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit='blocks.*' --fsdp-unit=extra --bucket-bytes=0 --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,verify-fsdp --stats | FileCheck %s
# CHECK: gathers per call of forward: 3{{$}}
# CHECK: gathers per call of unbalanced: 4{{$}}

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.extra = nn.Linear(4, 4)
        self.checkpointing = False

    def forward(self, x):
        if self.checkpointing:
            for block in self.blocks:
                x = block(x) * 2.0
        else:
            for block in self.blocks:
                x = block(x)
        return x

    @torch.jit.export
    def unbalanced(self, x):
        if bool(x.sum() > 0):
            x = self.extra(x)
        for block in self.blocks:
            x = block(x)
        return x


lh.save(Net(), sys.argv[1])
