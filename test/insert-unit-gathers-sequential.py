# insert-unit-gathers inside nn.Sequential: the Sequential's own forward (its unrolled calls)
# is the caller, so the gathers of units seq.0 and seq.2 are inserted there, around those two
# calls only, not around the ReLU in between nor in the root's graph.
# The pipeline is pinned to the passes under test (the default one goes on to schedule the
# gathers: docs/passes.md).
#
# RUN: %python -m fsdp_models sequential -o %t.pt
# RUN: fsdp-opt %t.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --fsdp-unit=seq.0 --fsdp-unit=seq.2 --print-ir --method=forward | FileCheck %s
# CHECK-LABEL: // . : __torch__.SequentialModel :: forward
# CHECK:       fsdp::check_rank
# CHECK-NOT:   fsdp::
# CHECK-LABEL: // seq : __torch__.torch.nn.modules.container.Sequential :: forward
# CHECK:       prim::Constant[value=[16, 16]]()
# CHECK-NEXT:  %[[G0:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:  %[[Y0:.*]] : Tensor = prim::CallMethod[name="forward"](%_0, %input.1)
# CHECK-NEXT:  fsdp::reshard(%[[G0]],
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK-NEXT:  %[[Y1:.*]] : Tensor = prim::CallMethod[name="forward"](%_1, %[[Y0]])
# CHECK:       prim::Constant[value=[8, 8]]()
# CHECK-NEXT:  %[[G2:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:  prim::CallMethod[name="forward"](%_2, %[[Y1]])
# CHECK-NEXT:  fsdp::reshard(%[[G2]],
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK-NEXT:  return
# CHECK-NOT:   fsdp::
#
# The whole Sequential as one unit: one gather with all four parameters, in the root's graph.
# RUN: fsdp-opt %t.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --fsdp-unit=seq --print-ir --method=forward | FileCheck %s --check-prefix=WHOLE
# WHOLE-LABEL: // . : __torch__.SequentialModel :: forward
# WHOLE:       prim::CallMethod[name="forward"](%inp.1,
# WHOLE:       prim::Constant[value=[16, 16, 8, 8]]()
# WHOLE-NEXT:  %[[G:.*]] : Tensor[] = fsdp::all_gather(
# WHOLE-NEXT:  prim::CallMethod[name="forward"](%seq.1,
# WHOLE-NEXT:  fsdp::reshard(%[[G]],
# WHOLE-NEXT:  prim::TupleConstruct
# WHOLE-NEXT:  fsdp::backward_hook(
# WHOLE-NEXT:  prim::CallMethod[name="forward"](%out.1,
# WHOLE-LABEL: // seq : __torch__.torch.nn.modules.container.Sequential :: forward
# WHOLE-NOT:   fsdp::
