# The `_fsdp_unit = True` marker set in Python before scripting is equivalent to --fsdp-unit:
# the same units, the same rewritten IR, the same manifest units. `_fsdp_unit = False` is no unit.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models nested --arg marked=0 -o %t/flags.pt
# RUN: %python -m fsdp_models nested -o %t/marked.pt
# RUN: fsdp-opt %t/flags.pt --fsdp-unit=outer --fsdp-unit=outer.inner --print-ir > %t/flags.ir
# RUN: fsdp-opt %t/marked.pt --print-ir > %t/marked.ir
# RUN: fsdp-opt %t/marked.pt --print-ir --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods > %t/marked.pinned.ir
# RUN: %python -m lit_helpers diff %t/flags.ir %t/marked.ir
# RUN: FileCheck %s < %t/marked.pinned.ir
# CHECK-LABEL: // . : __torch__.NestedUnits :: forward
# CHECK:       fsdp::all_gather
# CHECK-NEXT:  prim::CallMethod[name="forward"](%outer.1
# CHECK-NEXT:  fsdp::reshard
# CHECK-LABEL: // outer : __torch__.Outer :: forward
# CHECK:       fsdp::all_gather
# CHECK-NEXT:  prim::CallMethod[name="forward"](%inner.1
# CHECK-NEXT:  fsdp::reshard
#
# Flags and markers combine: marked units plus a flag-designated one.
# RUN: fsdp-opt %t/marked.pt --fsdp-unit=head --remarks 2>&1 >/dev/null \
# RUN:   | FileCheck %s --check-prefix=BOTH --implicit-check-not='[find-units] unit'
# BOTH-DAG: [find-units] unit 'outer' ({{.*}}Outer)
# BOTH-DAG: [find-units] unit 'outer.inner' ({{.*}}Inner)
# BOTH-DAG: [find-units] unit 'head' ({{.*}}Linear)
#
# A False marker makes no unit: only `a` of SharedType (a: True, b: False) is one.
# RUN: %python -m fsdp_models shared_type -o %t/shared.pt
# RUN: fsdp-opt %t/shared.pt --remarks 2>&1 >/dev/null \
# RUN:   | FileCheck %s --check-prefix=FALSE --implicit-check-not='[find-units] unit'
# FALSE: [find-units] unit 'a' ({{.*}}LinearBlock), forward methods: forward
