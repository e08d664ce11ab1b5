# specialize-unit-types: TorchScript gives `a` and `b` of SharedType ONE class type, but `a` is
# a unit and `b` is not. Each gets its own type, so only the call of `a` is wrapped; the root,
# whose child types changed, gets its own type too. The output saves and loads.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models shared_type -o %t/in.pt
# RUN: fsdp-opt %t/in.pt --remarks --print-ir --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods 2>%t/remarks | FileCheck %s
# RUN: fsdp-opt %t/in.pt -o %t/out.pt
# RUN: FileCheck %s --check-prefix=REMARK < %t/remarks
# REMARK-DAG: remark: [specialize-unit-types] instance 'a' of __torch__.LinearBlock gets type __torch__.LinearBlock__fsdp{{[0-9]+}}
# REMARK-DAG: remark: [specialize-unit-types] instance 'b' of __torch__.LinearBlock gets type __torch__.LinearBlock__fsdp{{[0-9]+}}
# REMARK-DAG: remark: [specialize-unit-types] instance '.' of __torch__.SharedType gets type __torch__.SharedType__fsdp{{[0-9]+}}
#
# CHECK-LABEL: // . : __torch__.SharedType__fsdp{{[0-9]+}} :: forward
# CHECK-DAG:   %b.1 : __torch__.LinearBlock__fsdp[[B:[0-9]+]] = prim::GetAttr[name="b"](%self.1)
# CHECK-DAG:   %a.1 : __torch__.LinearBlock__fsdp[[A:[0-9]+]] = prim::GetAttr[name="a"](%self.1)
# CHECK:       fsdp::all_gather
# CHECK-NEXT:  %[[Y:.*]] : Tensor = prim::CallMethod[name="forward"](%a.1, %x.1)
# CHECK-NEXT:  fsdp::reshard
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# The plain instance's call has no gather.
# CHECK-NEXT:  prim::CallMethod[name="forward"](%b.1, %[[Y]])
# CHECK-NEXT:  return
# Two types, each printed once: `a`'s, then `b`'s.
# CHECK:       // a : __torch__.LinearBlock__fsdp[[A]] :: forward
# CHECK:       // b : __torch__.LinearBlock__fsdp[[B]] :: forward
# CHECK-NOT:   fsdp::
#
# RUN: %python %s %t/out.pt | FileCheck %s --check-prefix=LOADED
# LOADED: a: __torch__.LinearBlock__fsdp{{[0-9]+}} b: __torch__.LinearBlock__fsdp{{[0-9]+}} same type: False
# LOADED: gathers in forward: 1

import sys

import lit_helpers as lh

m = lh.load_rewritten(sys.argv[1])
ta, tb = m.a._c._type(), m.b._c._type()
print("a:", ta.qualified_name(), "b:", tb.qualified_name(), "same type:", ta == tb)
print("gathers in forward:", lh.count_gathers(m.forward.graph))
