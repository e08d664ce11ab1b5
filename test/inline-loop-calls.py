# inline-loop-calls: generate() calls self.forward in its decoding loop; forward's per-layer
# gathers move into the loop body of generate (with forward's own calls kept as calls), while
# forward itself keeps its graph for its other callers.
#
# RUN: %python -m fsdp_models gpt --arg n_layer=2 -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,inline-loop-calls --print-ir --remarks 2>%t.remarks | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t.remarks
# REMARK: remark: [inline-loop-calls] inlined __torch__.GPT.forward into the loop of __torch__.GPT::generate
# REMARK-NOT: inlined
#
# CHECK-LABEL: // . : __torch__.GPT :: forward
# CHECK-COUNT-3: fsdp::all_gather(
# CHECK-LABEL: // . : __torch__.GPT :: generate
# CHECK:       fsdp::all_gather(
# CHECK:       prim::Loop(
# CHECK-NOT:   prim::CallMethod[name="forward"](%self
# CHECK:         fsdp::check_rank(
# CHECK:         fsdp::all_gather(
# CHECK:         %[[B0:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:    prim::CallMethod[name="forward"](%_0,
# CHECK-NEXT:    fsdp::reshard(%[[B0]],
# CHECK:         %[[B1:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NEXT:    prim::CallMethod[name="forward"](%_1,
# CHECK-NEXT:    fsdp::reshard(%[[B1]],
# CHECK:         prim::CallMethod[name="forward"](%lm_head
