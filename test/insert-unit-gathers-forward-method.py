# A registered forward method that calls forward of the SAME unit gathers once: one gather,
# one reshard, around the registered method, and none around its inner self.forward() calls.
# The pipeline is pinned to the passes under test: the default one goes on to inline, hoist
# and bucket these gathers (docs/passes.md).
#
# RUN: rm -rf %t && mkdir -p %t
#
# 1. The root GPT as a unit with generate registered: generate is wrapped in its body (no
#    caller graph exists); its loop calls self.forward with no gather of its own.
# RUN: %python -m fsdp_models gpt -o %t/gpt.pt
# RUN: fsdp-opt %t/gpt.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --fsdp-unit=. --forward-method=.:generate --print-ir --method=generate | FileCheck %s --check-prefix=ROOT
# ROOT-LABEL: // . : __torch__.GPT :: generate
# ROOT:       fsdp::check_rank
# ROOT:       %[[G:.*]] : Tensor[] = fsdp::all_gather(
# ROOT-NOT:   fsdp::
# ROOT:       prim::Loop(
# ROOT-NOT:   fsdp::
# ROOT:       prim::CallMethod[name="forward"](%self.1,
# ROOT-NOT:   fsdp::
# ROOT:       fsdp::reshard(%[[G]],
# ROOT-NEXT:  prim::TupleConstruct
# ROOT-NEXT:  fsdp::backward_hook(
# ROOT-NEXT:  return
#
# 2. A unit registered with generate, called from its parent: the PARENT's graph gathers
#    around `self.lm.generate(...)`, and lm's generate has no fsdp op at all.
# RUN: %python %s %t/wrapper.pt
# RUN: fsdp-opt %t/wrapper.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --fsdp-unit=lm --forward-method=lm:generate --print-ir --method=generate --stats \
# RUN:   | FileCheck %s --check-prefix=CHILD
# CHILD-LABEL: // . : __torch__.Wrapper :: generate
# CHILD:       fsdp::check_rank
# CHILD:       prim::Constant[value=[67, 67, 16, {{.*}}]]()
# CHILD-NEXT:  %[[G:.*]] : Tensor[] = fsdp::all_gather(
# CHILD-NEXT:  prim::CallMethod[name="generate"](%lm.1,
# CHILD-NEXT:  fsdp::reshard(%[[G]],
# CHILD-NEXT:  prim::TupleConstruct
# CHILD-NEXT:  fsdp::backward_hook(
# CHILD-NEXT:  return
# CHILD-LABEL: // lm : __torch__.fsdp_models.GPT :: generate
# CHILD-NOT:   fsdp::
# CHILD:       prim::CallMethod[name="forward"](%self.1,
# CHILD-NOT:   fsdp::
# CHILD:       return
# CHILD:       gathers per call of generate: 1{{$}}

import sys

import torch
import torch.nn as nn

import fsdp_models as fm
import lit_helpers as lh


class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm = fm.make("gpt")

    def forward(self, idx):
        return self.lm(idx)

    @torch.jit.export
    def generate(self, idx: torch.Tensor, n: int) -> torch.Tensor:
        return self.lm.generate(idx, n)


lh.save(Wrapper(), sys.argv[1])
