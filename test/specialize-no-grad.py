# specialize-no-grad: every root method that reaches a training op (fsdp::backward_hook,
# fsdp::unit_call, fsdp::replicated_params) chooses on entry between itself, with grad mode, and a
# copy `_fsdp_no_grad_METHOD` without them: its calls inlined, the training ops and the operands
# only they used gone, one fsdp::check_rank. The copy keeps the method's gathers and reshards.
# A method that sets grad mode itself keeps one path, as does one that reaches no training op.
# --stats lists the methods a user calls, not the copies. Idempotent.
#
# RUN: %python %s %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=child --world-size=2 --print-ir --stats --remarks 2>%t.remarks | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t.remarks
# REMARK: remark: [specialize-no-grad] __torch__.Model::no_grad_inside sets grad mode itself: it keeps one path
# REMARK: remark: [specialize-no-grad] 2 entry method(s) get a path without training ops for calls without grad mode
#
# CHECK-LABEL: // . : __torch__.Model :: forward
# CHECK-NEXT:  graph(%self
# CHECK:         %[[GRAD:.*]] : bool = aten::is_grad_enabled()
# CHECK-NEXT:    %[[OUT:.*]] : Tensor = prim::If(%[[GRAD]])
# CHECK-NEXT:      block0():
# CHECK:             fsdp::check_rank
# CHECK:             fsdp::all_gather
# CHECK:             fsdp::unit_call
# CHECK-NEXT:        prim::CallMethod[name="forward"](%child
# CHECK:             fsdp::backward_hook
# CHECK:             fsdp::reshard
# CHECK-NEXT:        -> (
# CHECK-NEXT:      block1():
# CHECK-NEXT:        %[[COPY:.*]] : Tensor = prim::CallMethod[name="_fsdp_no_grad_forward"](%self
# CHECK-NEXT:        -> (%[[COPY]])
# CHECK-NEXT:  return (%[[OUT]])
#
# generate calls forward in a loop: its copy inlines forward's copy-free body and child's forward.
# CHECK-LABEL: // . : __torch__.Model :: generate
# CHECK:         aten::is_grad_enabled()
# CHECK:         prim::CallMethod[name="_fsdp_no_grad_generate"]
#
# CHECK-LABEL: // . : __torch__.Model :: helper
# CHECK-NOT:     is_grad_enabled
# CHECK-LABEL: // . : __torch__.Model :: no_grad_inside
# CHECK-NOT:     _fsdp_no_grad_
#
# CHECK-LABEL: // . : __torch__.Model :: _fsdp_no_grad_forward
# CHECK-NOT:     backward_hook
# CHECK-NOT:     unit_call
# CHECK-NOT:     prim::CallMethod
# CHECK:         fsdp::check_rank
# CHECK:         fsdp::all_gather
# CHECK:         aten::linear
# CHECK:         fsdp::reshard
# CHECK-NOT:     backward_hook
# CHECK-LABEL: // . : __torch__.Model :: _fsdp_no_grad_generate
# CHECK:         fsdp::check_rank
# CHECK-NOT:     fsdp::check_rank
# CHECK-NOT:     backward_hook
# CHECK-NOT:     prim::CallMethod
# CHECK:         prim::Loop
# CHECK-NOT:     backward_hook
# CHECK-NOT:     check_rank
# CHECK:         return
#
# CHECK:       gathers per call of forward: 1
# CHECK:       gathers per call of generate: 1
# CHECK-NOT:   gathers per call of _fsdp_no_grad_
#
# Run twice, the pass changes nothing more; after the insertion passes alone it already makes
# the copies (with their hooks and without).
# RUN: fsdp-opt %t.pt --fsdp-unit=child --world-size=2 --passes=insert-unit-gathers,wrap-entry-methods,specialize-no-grad --print-ir > %t.once
# RUN: fsdp-opt %t.pt --fsdp-unit=child --world-size=2 --passes=insert-unit-gathers,wrap-entry-methods,specialize-no-grad,specialize-no-grad --print-ir > %t.twice
# RUN: %python -m lit_helpers diff %t.once %t.twice
# RUN: FileCheck %s --check-prefix=ALONE < %t.once
# ALONE: prim::CallMethod[name="_fsdp_no_grad_forward"]
# ALONE: prim::CallMethod[name="_fsdp_no_grad_generate"]

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Child(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.child = Child()

    def forward(self, x):
        return self.child(x) * 2

    @torch.jit.export
    def generate(self, x, n: int):
        for _ in range(n):
            x = self.forward(x)
        return x

    @torch.jit.export
    def helper(self, x):
        return x + 1

    @torch.jit.export
    def no_grad_inside(self, x):
        with torch.no_grad():
            y = self.child(x)
        return y


lh.save(Model(), sys.argv[1])
