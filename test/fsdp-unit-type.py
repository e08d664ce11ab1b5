# --fsdp-unit-type=NAME: every instance of a module class is a unit (FSDP1's ModuleWrapPolicy,
# FSDP2's `for block in model.blocks: fully_shard(block)`), by the class's last name component,
# by its qualified name as Python spells it, or as TorchScript does; the `___torch_mangle_N`
# component TorchScript adds to a second class of one name (here `head`, a Linear without bias)
# never gets in the way. --remarks says what each policy chose.
#
# RUN: %python %s %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit-type=Block --remarks 2>&1 | FileCheck %s --check-prefix=BLOCK --implicit-check-not='[find-units] unit'
# BLOCK:      remark: [find-units] --fsdp-unit-type={{(__torch__\.)?}}Block chose 3 module(s): blocks.0, blocks.1, blocks.2
# BLOCK:      remark: [find-units] unit 'blocks.0' (__torch__.Block), forward methods: forward
# BLOCK-NEXT: remark: [find-units] unit 'blocks.1' (__torch__.Block), forward methods: forward
# BLOCK-NEXT: remark: [find-units] unit 'blocks.2' (__torch__.Block), forward methods: forward
#
# RUN: fsdp-opt %t.pt --fsdp-unit-type=__torch__.Block --remarks 2>&1 | FileCheck %s --check-prefix=BLOCK
#
# Linear by its last component, by torch's module path, and by TorchScript's name: the three
# Linear layers with a bias and the mangled bias-free `head` alike.
# RUN: fsdp-opt %t.pt --fsdp-unit-type=Linear --remarks 2>&1 | FileCheck %s --check-prefix=LINEAR --implicit-check-not='[find-units] unit'
# RUN: fsdp-opt %t.pt --fsdp-unit-type=torch.nn.modules.linear.Linear --remarks 2>&1 | FileCheck %s --check-prefix=LINEAR --implicit-check-not='[find-units] unit'
# RUN: fsdp-opt %t.pt --fsdp-unit-type=__torch__.torch.nn.modules.linear.Linear --remarks 2>&1 | FileCheck %s --check-prefix=LINEAR --implicit-check-not='[find-units] unit'
# LINEAR:      chose 4 module(s): blocks.0.fc, blocks.1.fc, blocks.2.fc, head
# LINEAR:      remark: [find-units] unit 'blocks.0.fc' (__torch__.torch.nn.modules.linear.Linear), forward methods: forward
# LINEAR-NEXT: remark: [find-units] unit 'blocks.1.fc' (__torch__.torch.nn.modules.linear.Linear), forward methods: forward
# LINEAR-NEXT: remark: [find-units] unit 'blocks.2.fc' (__torch__.torch.nn.modules.linear.Linear), forward methods: forward
# LINEAR-NEXT: remark: [find-units] unit 'head' (__torch__.torch.nn.modules.linear.___torch_mangle_{{[0-9]+}}.Linear), forward methods: forward
#
# Combined with a path pattern (the root), repeated, and with the rewrite: the 5 units, held for
# the call by the planner and bucketed, cost one collective per call.
# RUN: fsdp-opt %t.pt --fsdp-unit-type=Block --fsdp-unit-type=Norm --fsdp-unit=. --world-size=2 --stats --remarks 2>%t.err | FileCheck %s --check-prefix=STATS
# RUN: FileCheck %s --check-prefix=COMBINED < %t.err
# STATS: units: 5
# STATS: gathers per call of forward: 1
# COMBINED: --fsdp-unit-type=Norm chose 1 module(s): norm
# COMBINED: unit '.' (__torch__.Net)
# COMBINED: unit 'norm' (__torch__.Norm)
#
# A prefix of the qualified name or part of a component is not a class name.
# RUN: not fsdp-opt %t.pt --fsdp-unit-type=Bloc 2>&1 | FileCheck %s --check-prefix=PART
# RUN: not fsdp-opt %t.pt --fsdp-unit-type=torch.nn 2>&1 | FileCheck %s --check-prefix=PART
# PART: error: --fsdp-unit-type '{{Bloc|torch.nn}}' matches no module's class (the model's classes: Block, Linear, ModuleList, Net, Norm)

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.norm = Norm()
        self.head = nn.Linear(4, 2, bias=False)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


lh.save(Net(), sys.argv[1])
