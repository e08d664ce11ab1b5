# wrap-entry-methods: every method of the root is an entry method and starts with the rank
# check (its three attributes read first, nothing before). When the root is a unit, ONLY its
# forward methods are also wrapped in the root's gather (right after the check) and reshard
# (right before the return); other root methods are not, and no submodule method gets either.
#
# RUN: %python %s %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit=body --print-ir --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods | FileCheck %s
#
# CHECK-LABEL: // . : __torch__.Model :: forward
# CHECK-NEXT:  graph(%self.1 : __torch__.Model,
# CHECK-NEXT:        %x.1 : Tensor):
# The budget of backward prefetch that the body unit's backward hook takes (-1: none).
# CHECK-NEXT:    %{{.*}} : int = prim::Constant[value=-1]()
# CHECK-NEXT:    %[[RANK:.*]] : int = prim::GetAttr[name="_fsdp_rank"](%self.1)
# CHECK-NEXT:    %[[WORLD:.*]] : int = prim::GetAttr[name="_fsdp_world_size"](%self.1)
# CHECK-NEXT:    %[[SHA:.*]] : str = prim::GetAttr[name="_fsdp_manifest_sha256"](%self.1)
# CHECK-NEXT:    = fsdp::check_rank(%[[RANK]], %[[WORLD]], %[[SHA]])
# The root's group is `scale.weight` only (body is a unit of its own): its chain follows.
# CHECK-NEXT:    prim::GetAttr[name="scale"](%self.1)
# CHECK-NEXT:    prim::GetAttr[name="weight"]
# CHECK-NEXT:    %[[LIST:.*]] : Tensor[] = prim::ListConstruct(
# CHECK-NEXT:    %[[PATH:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%self.1)
# CHECK-NEXT:    prim::Constant[value=[3]]()
# CHECK-NEXT:    %[[FULL:.*]] : Tensor[] = fsdp::all_gather(%[[LIST]],
# The nested unit `body` keeps its own gather around its own call.
# CHECK:         %[[BODY:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:    prim::CallMethod[name="forward"](%body
# CHECK-NEXT:    fsdp::reshard(%[[BODY]],
# CHECK-NEXT:    prim::TupleConstruct
# CHECK-NEXT:    fsdp::backward_hook(
# CHECK:         = fsdp::reshard(%[[FULL]], %[[PATH]])
# CHECK-NEXT:    prim::TupleConstruct
# CHECK-NEXT:    fsdp::backward_hook(
# CHECK-NEXT:    return
#
# `describe` is an entry method but not a forward method: the check, and no gather.
# CHECK-LABEL: // . : __torch__.Model :: describe
# CHECK-NEXT:  graph(%self : __torch__.Model):
# CHECK-NEXT:    prim::GetAttr[name="_fsdp_rank"](%self)
# CHECK-NEXT:    prim::GetAttr[name="_fsdp_world_size"](%self)
# CHECK-NEXT:    prim::GetAttr[name="_fsdp_manifest_sha256"](%self)
# CHECK-NEXT:    = fsdp::check_rank(
# CHECK-NOT:     fsdp::
# CHECK:         return
#
# Submodules' methods are not entry methods.
# CHECK-LABEL: // body : __torch__.Body :: forward
# CHECK-NOT:   fsdp::
# CHECK:       return
# CHECK-NOT:   fsdp::check_rank
#
# With the root not a unit, root methods get the check only.
# RUN: fsdp-opt %t.pt --fsdp-unit=body --print-ir --method=forward --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods | FileCheck %s --check-prefix=PLAIN
# PLAIN-LABEL:   // . : __torch__.Model :: forward
# PLAIN:         fsdp::check_rank
# PLAIN-COUNT-1: fsdp::all_gather
# PLAIN-NEXT:    prim::CallMethod[name="forward"](%body
# PLAIN-NOT:     fsdp::all_gather

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Linear(4, 3, bias=False)
        self.body = Body()

    def forward(self, x):
        return self.scale(self.body(x))

    @torch.jit.export
    def describe(self) -> str:
        return "model"


lh.save(Model(), sys.argv[1])
