# Parameters whose attribute type is Optional[Tensor] are parameters like any other: nn.Conv2d
# declares `bias: Optional[Tensor]` (so does any module annotating an optional parameter), and
# a unit holding one is gathered with its bias in the list (cast to Tensor, since the list is
# Tensor[]), sharded in the rank files like the rest. (Found by this test: the pipeline used to
# abort with "Expected a list element that subtypes 'Tensor' but got an element of type
# 'Optional[Tensor]'"; fixed in da6ca1b.)
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t/in.pt
# RUN: fsdp-opt %t/in.pt --fsdp-unit=conv --fsdp-unit=opt --print-ir --method=forward --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods | FileCheck %s
# CHECK-LABEL: // . : __torch__.Model :: forward
# CHECK:       %[[W1:.*]] : Tensor = prim::GetAttr[name="weight"](%conv.1)
# CHECK-NEXT:  %[[B1:.*]] : Tensor? = prim::GetAttr[name="bias"](%conv.1)
# CHECK-NEXT:  %[[C1:.*]] : Tensor = prim::unchecked_cast(%[[B1]])
# CHECK-NEXT:  prim::ListConstruct(%[[W1]], %[[C1]])
# CHECK:       prim::Constant[value=[4, 4]]()
# CHECK-NEXT:  %[[G1:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:  prim::CallMethod[name="forward"](%conv
# CHECK-NEXT:  fsdp::reshard(%[[G1]],
# CHECK:       %[[B2:.*]] : Tensor? = prim::GetAttr[name="bias"](%opt.1)
# CHECK-NEXT:  %[[C2:.*]] : Tensor = prim::unchecked_cast(%[[B2]])
# CHECK-NEXT:  prim::ListConstruct(%{{[^,]+}}, %[[C2]])
# CHECK:       prim::Constant[value=[4, 4]]()
# CHECK-NEXT:  %[[G2:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:  prim::CallMethod[name="forward"](%opt
# CHECK-NEXT:  fsdp::reshard(%[[G2]],
#
# The root as the unit (biased conv in its group), sharded for 2 ranks.
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --world-size=2 -o %t/out
# RUN: %python %s --check %t/out | FileCheck %s --check-prefix=SHARDS
# SHARDS: grouped: conv.weight conv.bias opt.weight opt.bias
# SHARDS: rank0: conv.bias (2,) opt.bias (2,)
# SHARDS: rank1: conv.bias (2,) opt.bias (2,)

import sys
from typing import Optional

import torch
import torch.nn as nn

import lit_helpers as lh


class OptionalBias(nn.Module):
    bias: Optional[torch.Tensor]

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))
        self.bias = nn.Parameter(torch.zeros(4))

    def forward(self, x):
        bias = self.bias
        if bias is not None:
            x = x + bias
        return x * self.weight


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.opt = OptionalBias()

    def forward(self, x):
        return self.opt(self.conv(x).mean(dim=(2, 3)))


if sys.argv[1] == "--check":
    import json
    import os
    out = sys.argv[2]
    with open(os.path.join(out, "manifest.json")) as f:
        print("grouped:", " ".join(sorted((p["path"] for u in json.load(f)["units"] for p in u["params"]),
                                          key=lambda n: (n.split(".")[0], n.endswith("bias")))))
    for r in range(2):
        m = lh.load_rewritten(os.path.join(out, "rank%d.pt" % r))
        print("rank%d: conv.bias %s opt.bias %s" % (r, tuple(m.conv.bias.shape), tuple(m.opt.bias.shape)))
else:
    lh.save(Model(), sys.argv[1])
