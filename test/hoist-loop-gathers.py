# hoist-loop-gathers: with no budget both layer gathers leave generate's loop (reshards after
# it); with a budget of the root plus one layer none can (root + hoisted + one in flight would
# not fit) and the remark says why; generate's collectives per call follow (--stats).
#
# RUN: %python -m fsdp_models gpt --arg n_layer=2 -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,inline-loop-calls,eliminate-redundant-gathers,hoist-loop-gathers,verify-fsdp --print-ir --method=generate --stats --remarks 2>%t.remarks | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t.remarks
# REMARK-COUNT-2: remark: [hoist-loop-gathers] gather of unit 'blocks.{{[01]}}' hoisted out of a loop in __torch__.GPT::generate (static peak 112512 bytes)
#
# CHECK-LABEL: // . : __torch__.GPT :: generate
# CHECK:       %[[ROOT:.*]] : Tensor[] = fsdp::all_gather(
# CHECK:       %[[B0:.*]] : Tensor[] = fsdp::all_gather(
# CHECK:       %[[B1:.*]] : Tensor[] = fsdp::all_gather(
# CHECK:       prim::Loop(
# Inside the loop, only the calls' backward hooks (training: backward gathers again).
# CHECK-NOT:   fsdp::{{(all_gather|reshard)}}
# CHECK:       fsdp::reshard(%[[B1]],
# CHECK-NEXT:  fsdp::reshard(%[[B0]],
# CHECK-NEXT:  fsdp::reshard(%[[ROOT]],
# CHECK:       gathers hoisted out of loops: 2
# CHECK:       gathers per call of generate: 3
# CHECK-NOT:   inside loops
#
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,inline-loop-calls,eliminate-redundant-gathers,hoist-loop-gathers,verify-fsdp --max-unsharded-bytes=61696 --stats --remarks 2>%t.budget | FileCheck %s --check-prefix=BUDGET
# RUN: FileCheck %s --check-prefix=BUDGET-REMARK < %t.budget
# BUDGET:      gathers hoisted out of loops: 0
# BUDGET:      gathers per call of generate: 3 (2 inside loops, once per iteration)
# BUDGET-REMARK: unit 'blocks.0' kept per iteration in __torch__.GPT::generate: hoisting it would reach 112512 unsharded bytes, over the budget of 61696
#
# RUN: not fsdp-opt %t.pt --max-unsharded-bytes=lots 2>&1 | FileCheck %s --check-prefix=ERR
# ERR: error: --max-unsharded-bytes expects a size like 4096, 64KiB or 512MiB, got 'lots'
