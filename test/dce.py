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
# CHECK:      forward: gathers 1, check_rank True, release_all True, reshards 1
# CHECK-NEXT: forward: all kept by dce True, by cse True, by constant propagation + dce True
# CHECK-NEXT: repeat: gathers 2, check_rank False, release_all False, reshards 2
# CHECK-NEXT: repeat: all kept by dce True, by cse True, by constant propagation + dce True

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
    kinds = [node.kind() for node in lh.fsdp_nodes(graph)]
    return "gathers %d, check_rank %s, release_all %s, reshards %d" % (
        lh.count_gathers(graph), "fsdp::check_rank" in kinds, "fsdp::release_all" in kinds,
        kinds.count("fsdp::reshard"))


if sys.argv[1] == "--check":
    m = lh.load_rewritten(sys.argv[2])
    for name, method in [("forward", m.forward), ("repeat", m.step.repeat)]:
        graph = method.graph.copy()
        print("%s: %s" % (name, summary(graph)))
        before = lh.count_fsdp_ops(graph)
        torch._C._jit_pass_dce(graph)
        after_dce = lh.count_fsdp_ops(graph)
        torch._C._jit_pass_cse(graph)
        after_cse = lh.count_fsdp_ops(graph)
        torch._C._jit_pass_constant_propagation(graph)
        torch._C._jit_pass_dce(graph)
        print("%s: all kept by dce %s, by cse %s, by constant propagation + dce %s"
              % (name, after_dce == before, after_cse == before, lh.count_fsdp_ops(graph) == before))
else:
    lh.save(Model(), sys.argv[1])
