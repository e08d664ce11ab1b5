# insert-unit-gathers alone on a minimal input: around the one call of the unit `block`'s
# forward, in the caller's graph, ONE fsdp::all_gather of the unit's whole group (its
# parameters read through prim::GetAttr chains, their full dim-0 sizes, the unit's path) right
# before the call, its fsdp::reshard right after it, then the call's fsdp::backward_hook
# (what a backward through the call needs); nothing else changes (no rank check:
# that is wrap-entry-methods', and no gather around the non-unit `head`).
#
# RUN: %python %s %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=block --passes=insert-unit-gathers --print-ir | FileCheck %s
# CHECK-LABEL: // . : __torch__.Net :: forward
# CHECK-NOT:   fsdp::
# CHECK:       %[[BLOCK:.*]] : __torch__.Block = prim::GetAttr[name="block"](%self
# CHECK-NOT:   fsdp::
# The group in named_parameters() order: the block's own `scale`, then fc's.
# CHECK:       %[[SCALE:.*]] : Tensor = prim::GetAttr[name="scale"](%[[BLOCK]])
# CHECK-NEXT:  %[[FC:.*]] : __torch__.torch.nn.modules.linear.Linear = prim::GetAttr[name="fc"](%[[BLOCK]])
# CHECK-NEXT:  %[[W:.*]] : Tensor = prim::GetAttr[name="weight"](%[[FC]])
# CHECK-NEXT:  %[[FC2:.*]] : __torch__.torch.nn.modules.linear.Linear = prim::GetAttr[name="fc"](%[[BLOCK]])
# CHECK-NEXT:  %[[B:.*]] : Tensor = prim::GetAttr[name="bias"](%[[FC2]])
# CHECK-NEXT:  %[[LIST:.*]] : Tensor[] = prim::ListConstruct(%[[SCALE]], %[[W]], %[[B]])
# CHECK-NEXT:  %[[PATH:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%[[BLOCK]])
# CHECK-NEXT:  %[[ROWS:.*]] : int[] = prim::Constant[value=[6, 6, 6]]()
# CHECK-NEXT:  %[[FULL:.*]] : Tensor[] = fsdp::all_gather(%[[LIST]], %[[ROWS]], %[[PATH]])
# CHECK-NEXT:  %[[Y:.*]] : Tensor = prim::CallMethod[name="forward"](%[[BLOCK]], %x.1)
# CHECK-NEXT:  = fsdp::reshard(%[[FULL]], %[[PATH]])
# Then the call's backward hook (SPEC section 10): with grad mode on, its outputs' backward
# gathers the unit again; its inputs (all but self) say when that backward is over.
# CHECK-NEXT:  %[[IN:.*]] : (Tensor) = prim::TupleConstruct(%x.1)
# CHECK-NEXT:  = fsdp::backward_hook(%[[LIST]], %[[ROWS]], %[[PATH]], %[[Y]], %[[IN]], %{{.*}})
# CHECK-NOT:   fsdp::
# CHECK:       return
# CHECK-LABEL: // block : __torch__.Block :: forward
# CHECK-NOT:   fsdp::
# CHECK:       return
# CHECK-NOT:   fsdp::
#
# Without wrap-entry-methods there is no rank check, so no rank file can be written: refused.
# RUN: rm -f %t.out.pt
# RUN: not fsdp-opt %t.pt --fsdp-unit=block --passes=insert-unit-gathers -o %t.out.pt 2>&1 | FileCheck %s --check-prefix=NOWRITE
# NOWRITE: error: cannot write '{{.*}}.out.pt': the pipeline did not run wrap-entry-methods, which gives every rank file its rank check; add it to --passes
# RUN: %python -m lit_helpers tree %t.out.pt | FileCheck %s --check-prefix=NOFILE
# NOFILE: out.pt: missing

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.scale = nn.Parameter(torch.ones(6))

    def forward(self, x):
        return self.fc(x) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        return self.head(self.block(x))


lh.save(Net(), sys.argv[1])
