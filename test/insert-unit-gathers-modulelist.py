# insert-unit-gathers around the unrolled calls of a ModuleList: `for layer in self.layers`
# becomes one call per layer, and each call gets its own unit's gather right before and its
# reshard right after (gather -> call -> reshard), with the unit's own parameters and path.
# The pipeline is pinned to the passes under test (the default one goes on to schedule the
# gathers: docs/passes.md).
#
# RUN: %python -m fsdp_models two_blocks -o %t.pt
# RUN: fsdp-opt %t.pt --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods '--fsdp-unit=layers.*' --print-ir --method=forward | FileCheck %s
# CHECK-LABEL: // . : __torch__.TwoBlocks :: forward
# CHECK:       %_0 : __torch__.LinearBlock = prim::GetAttr[name="0"](%layers.1)
# CHECK-NEXT:  %_1 : __torch__.LinearBlock = prim::GetAttr[name="1"](%layers.1)
#
# CHECK-NEXT:  %[[FC0:.*]] : {{.*}}Linear = prim::GetAttr[name="fc"](%_0)
# CHECK-NEXT:  %[[W0:.*]] : Tensor = prim::GetAttr[name="weight"](%[[FC0]])
# CHECK-NEXT:  %[[FC0B:.*]] : {{.*}}Linear = prim::GetAttr[name="fc"](%_0)
# CHECK-NEXT:  %[[B0:.*]] : Tensor = prim::GetAttr[name="bias"](%[[FC0B]])
# CHECK-NEXT:  %[[L0:.*]] : Tensor[] = prim::ListConstruct(%[[W0]], %[[B0]])
# CHECK-NEXT:  %[[P0:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%_0)
# CHECK-NEXT:  %[[R0:.*]] : int[] = prim::Constant[value=[8, 8]]()
# CHECK-NEXT:  %[[G0:.*]] : Tensor[] = fsdp::all_gather(%[[L0]], %[[R0]], %[[P0]])
# CHECK-NEXT:  %[[Y0:.*]] : Tensor = prim::CallMethod[name="forward"](%_0, %x.1)
# CHECK-NEXT:  = fsdp::reshard(%[[G0]], %[[P0]])
# The call's backward hook names the same shards, rows and unit, and the call's output.
# CHECK-NEXT:  %[[IN0:.*]] : (Tensor) = prim::TupleConstruct(%x.1)
# CHECK-NEXT:  = fsdp::backward_hook(%[[L0]], %[[R0]], %[[P0]], %[[Y0]], %[[IN0]], %{{.*}})
#
# CHECK-NEXT:  %[[FC1:.*]] : {{.*}}Linear = prim::GetAttr[name="fc"](%_1)
# CHECK:       %[[L1:.*]] : Tensor[] = prim::ListConstruct(
# CHECK-NEXT:  %[[P1:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%_1)
# CHECK-NEXT:  %[[R1:.*]] : int[] = prim::Constant[value=[8, 8]]()
# CHECK-NEXT:  %[[G1:.*]] : Tensor[] = fsdp::all_gather(%[[L1]], %[[R1]], %[[P1]])
# CHECK-NEXT:  %[[Y1:.*]] : Tensor = prim::CallMethod[name="forward"](%_1, %[[Y0]])
# CHECK-NEXT:  = fsdp::reshard(%[[G1]], %[[P1]])
# CHECK-NEXT:  %[[IN1:.*]] : (Tensor) = prim::TupleConstruct(%[[Y0]])
# CHECK-NEXT:  = fsdp::backward_hook(%[[L1]], %[[R1]], %[[P1]], %[[Y1]], %[[IN1]], %{{.*}})
# CHECK-NEXT:  return (%[[Y1]])
#
# The unit path string each gather names is stored on the unit itself.
# RUN: fsdp-opt %t.pt '--fsdp-unit=layers.*' -o %t.out.pt
# RUN: %python %s %t.out.pt | FileCheck %s --check-prefix=PATHS
# PATHS: layers.0 layers.1

import sys

import lit_helpers as lh

m = lh.load_rewritten(sys.argv[1])
print(" ".join(getattr(m.layers, i)._fsdp_unit_path for i in ("0", "1")))
