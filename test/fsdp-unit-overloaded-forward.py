# A unit whose forward is overloaded (@torch.jit._overload_method, as torchvision's DenseNet
# layers do): TorchScript compiles the overloads as `forward__0`, `forward__1` and callers call
# those. They are the unit's forward methods, so each call is gathered; sharded at W=2 the
# model computes the original's output bit for bit.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t/in.pt %t/in.args.pt
# RUN: fsdp-opt %t/in.pt --fsdp-unit-type=Layer --remarks --passes=specialize-unit-types,insert-unit-gathers 2>&1 | FileCheck %s
# CHECK: remark: [find-units] unit 'first' ({{.*}}Layer), forward methods: forward__0, forward__1
# CHECK: call site rewritten: unit 'first' method forward__{{[01]}}
# CHECK: call site rewritten: unit 'second' method forward__{{[01]}}
# RUN: fsdp-opt %t/in.pt --fsdp-unit-type=Layer --world-size=2 -o %t/out
# RUN: fsdp-run %t/out --inputs=%t/in.args.pt --check=%t/in.pt | FileCheck %s --check-prefix=EXACT
# EXACT-DAG: rank 0: outputs bitwise identical
# EXACT-DAG: rank 1: outputs bitwise identical

import sys
from typing import List

import torch
import torch.nn as nn

import lit_helpers as lh


class Layer(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, 4)

    @torch.jit._overload_method  # noqa: F811
    def forward(self, x):
        # type: (List[torch.Tensor]) -> torch.Tensor
        pass

    @torch.jit._overload_method  # noqa: F811
    def forward(self, x):
        # type: (torch.Tensor) -> torch.Tensor
        pass

    def forward(self, x):  # noqa: F811
        if isinstance(x, torch.Tensor):
            inputs = [x]
        else:
            inputs = x
        return torch.relu(self.fc(torch.cat(inputs, 1)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Layer(4)
        self.second = Layer(8)

    def forward(self, x):
        y = self.first(x)
        return self.second([x, y])


torch.manual_seed(0)
lh.save(Net(), sys.argv[1])
torch.save((torch.randn(3, 4),), sys.argv[2])
