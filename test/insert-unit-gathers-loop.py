# insert-unit-gathers inside prim::Loop bodies: the gather and reshard go INSIDE the loop body,
# around the call, so every iteration gathers and reshards (for and while loops alike).
# The pipeline is pinned to the passes under test: the default one goes on to inline, hoist
# and bucket these gathers (docs/passes.md).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t/in.pt
# RUN: fsdp-opt %t/in.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --fsdp-unit=step --print-ir --method=forward --remarks 2>%t/remarks | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t/remarks
# REMARK-COUNT-2: remark: [insert-unit-gathers] call site rewritten: unit 'step' method forward in __torch__.Model::forward (nested block)
# REMARK-NOT:     call site rewritten
#
# CHECK-LABEL: // . : __torch__.Model :: forward
# CHECK:       fsdp::check_rank
# CHECK-NOT:   fsdp::
# CHECK:       prim::Loop(%n.1,
# CHECK-NEXT:    block0(
# CHECK-NOT:     fsdp::
# CHECK:         %[[G1:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:    prim::CallMethod[name="forward"](%step
# CHECK-NEXT:    fsdp::reshard(%[[G1]],
# CHECK-NEXT:    prim::TupleConstruct
# CHECK-NEXT:    fsdp::backward_hook(
# CHECK-NEXT:    -> (
# CHECK-NOT:   fsdp::
# CHECK:       prim::Loop(
# CHECK:         %[[G2:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:    prim::CallMethod[name="forward"](%step
# CHECK-NEXT:    fsdp::reshard(%[[G2]],
# CHECK-NEXT:    prim::TupleConstruct
# CHECK-NEXT:    fsdp::backward_hook(
# CHECK-NOT:   fsdp::
# CHECK:       return
#
# The GPT's generate() loops over forward(); with the root a unit and generate NOT registered,
# the root's gather sits inside generate's loop, around that call (once per generated token).
# RUN: %python -m fsdp_models gpt -o %t/gpt.pt
# RUN: fsdp-opt %t/gpt.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --fsdp-unit=. --print-ir --method=generate --stats | FileCheck %s --check-prefix=GPT
# GPT-LABEL: // . : __torch__.GPT :: generate
# GPT:       fsdp::check_rank
# GPT-NOT:   fsdp::
# GPT:       prim::Loop(%max_new_tokens.1,
# GPT:         prim::If(
# GPT:         %[[G:.*]] : Tensor[] = fsdp::all_gather(
# GPT-NEXT:    %logits.1 : Tensor = prim::CallMethod[name="forward"](%self.1,
# GPT-NEXT:    fsdp::reshard(%[[G]],
# GPT-NEXT:    prim::TupleConstruct
# GPT-NEXT:    fsdp::backward_hook(
# GPT-NOT:   fsdp::
# GPT:       return
# GPT:       gathers per call of generate: 1 (1 inside loops, once per iteration)

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.fc(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = Step()

    def forward(self, x, n: int):
        for _ in range(n):
            x = self.step(x)
        while bool(x.sum() > 100.0):
            x = self.step(x)
        return x


lh.save(Model(), sys.argv[1])
