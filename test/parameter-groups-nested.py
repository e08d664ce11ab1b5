# FSDP2 nesting: a unit's group is every parameter below it that is NOT below a nested unit.
# `outer` holds pre.*, inner.fc.* and post.*, and `outer.inner` is a unit too, so outer's
# gather list has pre.* and post.* only, and inner is gathered inside outer's forward graph.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models nested -o %t/in.pt
# RUN: fsdp-opt %t/in.pt --print-ir --method=forward --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods | FileCheck %s
#
# The root calls outer with outer's own four parameters (pre.weight, pre.bias, post.weight,
# post.bias: rows 8 each), and reads nothing of inner to do so.
# CHECK-LABEL: // . : __torch__.NestedUnits :: forward
# CHECK-NOT:   [name="inner"]
# CHECK:       %[[W1:.*]] : Tensor = prim::GetAttr[name="weight"](%pre.1)
# CHECK-NOT:   [name="inner"]
# CHECK:       %[[LIST:.*]] : Tensor[] = prim::ListConstruct(%[[W1]], %{{[^,]+}}, %{{[^,]+}}, %{{[^,)]+}})
# CHECK-NEXT:  %[[PATH:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%outer.1)
# CHECK-NEXT:  prim::Constant[value=[8, 8, 8, 8]]()
# CHECK-NEXT:  %[[FULL:.*]] : Tensor[] = fsdp::all_gather(%[[LIST]],
# CHECK-NEXT:  prim::CallMethod[name="forward"](%outer.1,
# CHECK-NEXT:  fsdp::reshard(%[[FULL]], %[[PATH]])
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK-NOT:   fsdp::all_gather
#
# Outer's forward gathers inner (fc.weight, fc.bias) around inner's call, between pre and post.
# CHECK-LABEL: // outer : __torch__.Outer :: forward
# CHECK:       prim::CallMethod[name="forward"](%pre.1,
# CHECK:       %[[ILIST:.*]] : Tensor[] = prim::ListConstruct(%{{[^,]+}}, %{{[^,)]+}})
# CHECK-NEXT:  %[[IPATH:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%inner.1)
# CHECK-NEXT:  prim::Constant[value=[8, 8]]()
# CHECK-NEXT:  %[[IFULL:.*]] : Tensor[] = fsdp::all_gather(%[[ILIST]],
# CHECK-NEXT:  prim::CallMethod[name="forward"](%inner.1,
# CHECK-NEXT:  fsdp::reshard(%[[IFULL]], %[[IPATH]])
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK-NEXT:  prim::CallMethod[name="forward"](%post.1,
#
# Inner itself gathers nothing: its caller did.
# CHECK-LABEL: // outer.inner : __torch__.Inner :: forward
# CHECK-NOT:   fsdp::
# CHECK:       return
#
# The manifest says the same: each parameter in exactly one group.
# RUN: fsdp-opt %t/in.pt --world-size=2 -o %t/out
# RUN: %python %s %t/out/manifest.json | FileCheck %s --check-prefix=GROUPS
# GROUPS:      outer: outer.pre.weight outer.pre.bias outer.post.weight outer.post.bias
# GROUPS-NEXT: outer.inner: outer.inner.fc.weight outer.inner.fc.bias
# GROUPS-NEXT: end

import json
import sys

with open(sys.argv[1]) as f:
    manifest = json.load(f)
for unit in manifest["units"]:
    print("%s: %s" % (unit["path"], " ".join(p["path"] for p in unit["params"])))
print("end")
