# --fsdp-unit=. names the root module, and only the root: its group is every parameter of
# the model, gathered inside the root's own forward (no caller graph exists to hold it).
#
# RUN: %python -m fsdp_models two_blocks -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --remarks 2>&1 >/dev/null \
# RUN:   | FileCheck %s --check-prefix=REMARK --implicit-check-not='[find-units] unit' --implicit-check-not='call site rewritten'
# REMARK: remark: [find-units] unit '.' ({{.*}}TwoBlocks), forward methods: forward
# REMARK: remark: [wrap-entry-methods] entry method forward wrapped in the root unit's gather/reshard
#
# RUN: fsdp-opt %t.pt --fsdp-unit=. --print-ir --method=forward | FileCheck %s
# CHECK-LABEL: // . : __torch__.TwoBlocks :: forward
# CHECK:       fsdp::check_rank
# CHECK:       %[[LIST:.*]] : Tensor[] = prim::ListConstruct(%{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}})
# CHECK:       %[[PATH:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%self.1)
# CHECK-NEXT:  %[[ROWS:.*]] : int[] = prim::Constant[value=[8, 8, 8, 8]]()
# CHECK-NEXT:  %[[FULL:.*]] : Tensor[] = fsdp::all_gather(%[[LIST]], %[[ROWS]], %[[PATH]])
# CHECK-NOT:   fsdp::
# CHECK:       prim::CallMethod[name="forward"](%_0
# CHECK-NOT:   fsdp::
# CHECK:       prim::CallMethod[name="forward"](%_1
# CHECK-NOT:   fsdp::
# CHECK:       = fsdp::reshard(%[[FULL]], %[[PATH]])
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK-NEXT:  -> (
# Nothing is gathered inside the blocks: they are not units.
# CHECK-NOT:   fsdp::
