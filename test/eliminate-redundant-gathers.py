# eliminate-redundant-gathers: after inlining forward into generate's loop, the root's gather
# from forward's prologue (and its rank check) is covered by generate's own root gather and is
# removed; the per-layer gathers stay. Without inlining nothing is redundant.
#
# RUN: %python -m fsdp_models gpt --arg n_layer=2 -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,inline-loop-calls,eliminate-redundant-gathers --print-ir --method=generate --remarks --stats 2>%t.remarks | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t.remarks
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,eliminate-redundant-gathers --stats | FileCheck %s --check-prefix=NONE
# REMARK: remark: [eliminate-redundant-gathers] 1 redundant gather(s) removed in __torch__.GPT::generate
#
# CHECK-LABEL: // . : __torch__.GPT :: generate
# CHECK-COUNT-1: fsdp::check_rank(
# CHECK-NOT:   fsdp::check_rank(
# CHECK:       %[[ROOT:.*]] : Tensor[] = fsdp::all_gather(
# CHECK:       prim::Loop(
# CHECK-COUNT-2: fsdp::all_gather(
# CHECK-NOT:   fsdp::all_gather(
# CHECK:       fsdp::reshard(%[[ROOT]],
# CHECK:       redundant gathers removed: 1
# NONE:        redundant gathers removed: 0
