# The fsdp:: ops survive TorchScript's own dead-code elimination (they are side-effecting, by
# their alias annotation), although the gathers' results are used only by the reshards and the
# reshards/checks/releases return nothing: loaded from a rewritten file (after loading the
# runtime library), every method graph keeps all its fsdp:: ops through
# torch._C._jit_pass_dce, and through CSE and constant propagation too (two identical gathers
# of one unit must not be merged).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t/in.pt
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --fsdp-unit=step -o %t/out.pt
# RUN: %python %s --check %t/out.pt | FileCheck %s --match-full-lines
# CHECK:      forward: 6 fsdp ops [all_gather, all_gather, check_rank, release_all, reshard, reshard]
# CHECK-NEXT: forward: after dce 6, after cse 6, after constant propagation + dce 6
# CHECK-NEXT: repeat: 4 fsdp ops [all_gather, all_gather, reshard, reshard]
# CHECK-NEXT: repeat: after dce 4, after cse 4, after constant propagation + dce 4

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)

    @torch.jit.export
    def repeat(self, x):
        # Two calls of self.forward from a non-forward method: two identical gathers.
        return self.forward(x) + self.forward(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = Step()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x, n: int):
        if n < 0:
            raise ValueError("n must be >= 0")
        for _ in range(n):
            x = self.step(x)
        return x * self.scale


def summary(graph):
    return sorted(node.kind().split("::")[1] for node in lh.fsdp_nodes(graph))


if sys.argv[1] == "--check":
    m = lh.load_rewritten(sys.argv[2])
    for name, method in [("forward", m.forward), ("repeat", m.step.repeat)]:
        graph = method.graph.copy()
        ops = summary(graph)
        print("%s: %d fsdp ops [%s]" % (name, len(ops), ", ".join(ops)))
        torch._C._jit_pass_dce(graph)
        after_dce = lh.count_fsdp_ops(graph)
        torch._C._jit_pass_cse(graph)
        after_cse = lh.count_fsdp_ops(graph)
        torch._C._jit_pass_constant_propagation(graph)
        torch._C._jit_pass_dce(graph)
        print("%s: after dce %d, after cse %d, after constant propagation + dce %d"
              % (name, after_dce, after_cse, lh.count_fsdp_ops(graph)))
else:
    lh.save(Model(), sys.argv[1])
