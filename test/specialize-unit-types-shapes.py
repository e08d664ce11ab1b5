# specialize-unit-types: units of ONE class type whose parameters have different shapes need
# different constants (full row counts) in their callers, so they get different types; units
# of that type with equal shapes keep sharing one. Gain(6), Gain(5), Gain(6) share a type in
# TorchScript (no constants differ).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t/in.pt | FileCheck %s --check-prefix=SCRIPTED
# SCRIPTED: one type before: True
#
# RUN: fsdp-opt %t/in.pt '--fsdp-unit=*' --remarks --print-ir --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods 2>%t/remarks | FileCheck %s
# RUN: fsdp-opt %t/in.pt '--fsdp-unit=*' -o %t/out.pt
# RUN: FileCheck %s --check-prefix=REMARK --implicit-check-not='[specialize-unit-types]' < %t/remarks
# REMARK-DAG: [specialize-unit-types] instance 'p' of __torch__.Gain gets type __torch__.Gain__fsdp{{[0-9]+}}
# REMARK-DAG: [specialize-unit-types] instance 'q' of __torch__.Gain gets type __torch__.Gain__fsdp{{[0-9]+}}
# REMARK-DAG: [specialize-unit-types] instance '.' of __torch__.Model gets type __torch__.Model__fsdp{{[0-9]+}}
#
# CHECK-LABEL: :: forward
# CHECK-DAG:   %p.1 : __torch__.Gain__fsdp[[P:[0-9]+]] = prim::GetAttr[name="p"]
# CHECK-DAG:   %q.1 : __torch__.Gain__fsdp[[Q:[0-9]+]] = prim::GetAttr[name="q"]
# CHECK-DAG:   %r.1 : __torch__.Gain__fsdp[[P]] = prim::GetAttr[name="r"]
# CHECK:       prim::Constant[value=[6]]()
# CHECK-NEXT:  fsdp::all_gather
# CHECK-NEXT:  prim::CallMethod[name="forward"](%p.1,
# CHECK:       prim::Constant[value=[5]]()
# CHECK-NEXT:  fsdp::all_gather
# CHECK-NEXT:  prim::CallMethod[name="forward"](%q.1,
# CHECK:       prim::Constant[value=[6]]()
# CHECK-NEXT:  fsdp::all_gather
# CHECK-NEXT:  prim::CallMethod[name="forward"](%r.1,
# CHECK:       // p : __torch__.Gain__fsdp[[P]] :: forward
# CHECK:       // q : __torch__.Gain__fsdp[[Q]] :: forward
# CHECK-NOT:   // r :
#
# RUN: %python %s --check %t/out.pt | FileCheck %s --check-prefix=LOADED
# LOADED: p==r: True p==q: False

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Gain(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.g = nn.Parameter(torch.arange(n, dtype=torch.float32))

    def forward(self, x):
        return x * self.g.sum()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = Gain(6)
        self.q = Gain(5)
        self.r = Gain(6)

    def forward(self, x):
        return self.r(self.q(self.p(x)))


if sys.argv[1] == "--check":
    m = lh.load_rewritten(sys.argv[2])
    tp, tq, tr = (getattr(m, n)._c._type() for n in "pqr")
    print("p==r:", tp == tr, "p==q:", tp == tq)
else:
    s = lh.save(Model(), sys.argv[1])
    print("one type before:", s.p._c._type() == s.q._c._type() == s.r._c._type())
