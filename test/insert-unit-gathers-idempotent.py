# insert-unit-gathers is idempotent: running it a second time wraps nothing again; the IR is
# the same as after one run, with one gather per call site.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models nested -o %t/in.pt
# RUN: fsdp-opt %t/in.pt --passes=specialize-unit-types,insert-unit-gathers --print-ir > %t/once.ir
# RUN: fsdp-opt %t/in.pt --passes=specialize-unit-types,insert-unit-gathers,insert-unit-gathers --print-ir \
# RUN:   --remarks 2>%t/remarks > %t/twice.ir
# RUN: %python -m lit_helpers diff %t/once.ir %t/twice.ir
# RUN: FileCheck %s < %t/twice.ir
# CHECK-LABEL: // . : __torch__.NestedUnits :: forward
# CHECK-COUNT-1: fsdp::all_gather
# CHECK-NEXT:    prim::CallMethod[name="forward"](%outer.1,
# CHECK-NEXT:    fsdp::reshard
# CHECK-NEXT:    prim::TupleConstruct
# CHECK-NEXT:    fsdp::backward_hook(
# CHECK-NOT:     fsdp::
# CHECK-LABEL: // outer : __torch__.Outer :: forward
# CHECK-COUNT-1: fsdp::all_gather
# CHECK-NEXT:    prim::CallMethod[name="forward"](%inner.1,
# CHECK-NEXT:    fsdp::reshard
# CHECK-NEXT:    prim::TupleConstruct
# CHECK-NEXT:    fsdp::backward_hook(
# CHECK-NOT:     fsdp::
# CHECK-LABEL: // outer.inner : __torch__.Inner :: forward
# CHECK-NOT:     fsdp::
#
# The second run rewrites no call site: two remarks in all, from the first run.
# RUN: FileCheck %s --check-prefix=REMARK < %t/remarks
# REMARK-COUNT-2: [insert-unit-gathers] call site rewritten
# REMARK-NOT:     [insert-unit-gathers] call site rewritten
#
# Also inside loops (generate's loop calling forward, root a unit, generate not registered).
# RUN: %python -m fsdp_models gpt -o %t/gpt.pt
# RUN: fsdp-opt %t/gpt.pt --fsdp-unit=. '--fsdp-unit=blocks.*' --passes=insert-unit-gathers,insert-unit-gathers \
# RUN:   --print-ir --method=generate | FileCheck %s --check-prefix=LOOP
# LOOP-LABEL:    :: generate
# LOOP:          prim::Loop(
# LOOP-COUNT-1:  fsdp::all_gather
# LOOP-NEXT:     prim::CallMethod[name="forward"](%self.1,
# LOOP-NEXT:     fsdp::reshard
# LOOP-NEXT:     prim::TupleConstruct
# LOOP-NEXT:     fsdp::backward_hook(
# LOOP-NOT:      fsdp::
