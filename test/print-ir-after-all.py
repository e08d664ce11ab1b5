# --print-ir-after-all dumps the IR after every pass of the pipeline, in order, to stderr, each
# under a header naming the pass; stdout stays empty. The dumps show each pass's effect.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models shared_type -o %t/in.pt
# RUN: fsdp-opt %t/in.pt --print-ir-after-all --method=forward 2>%t/all.err >%t/all.out
# The default pipeline (passes/register_passes.cpp, docs/passes.md), in order, each pass once.
# RUN: FileCheck %s < %t/all.err --implicit-check-not='IR after'
# CHECK: // *** IR after lower-indexed-module-calls ***
# CHECK: // *** IR after expand-parameter-lists ***
# CHECK: // *** IR after specialize-unit-types ***
# CHECK: // *** IR after check-hidden-unit-calls ***
# CHECK: // *** IR after lint-sharded-reads ***
# CHECK: // *** IR after check-parameter-aliases ***
# CHECK: // *** IR after insert-unit-gathers ***
# CHECK: // *** IR after wrap-entry-methods ***
# CHECK: // *** IR after check-unsharded-budget ***
# CHECK: // *** IR after plan-gather-lifetimes ***
# CHECK: // *** IR after inline-loop-calls ***
# CHECK: // *** IR after eliminate-redundant-gathers ***
# CHECK: // *** IR after hoist-loop-gathers ***
# CHECK: // *** IR after bucket-gathers ***
# CHECK: // *** IR after prefetch-gathers ***
# CHECK: // *** IR after rank-uniform-control-flow ***
# CHECK: // *** IR after reshard-on-raise ***
# CHECK: // *** IR after specialize-no-grad ***
# CHECK: // *** IR after verify-fsdp ***
# RUN: FileCheck %s --check-prefix=ORDER < %t/all.err
# ORDER:      // *** IR after specialize-unit-types ***
# ORDER-NEXT: // . : __torch__.SharedType__fsdp{{[0-9]+}} :: forward
# ORDER-NOT:  fsdp::
# ORDER:      // *** IR after lint-sharded-reads ***
# ORDER-NOT:  fsdp::
# ORDER:      // *** IR after check-parameter-aliases ***
# ORDER-NOT:  fsdp::
# ORDER:      // *** IR after insert-unit-gathers ***
# ORDER-NOT:  fsdp::check_rank
# ORDER:      fsdp::all_gather
# ORDER-NOT:  fsdp::check_rank
# ORDER:      // *** IR after wrap-entry-methods ***
# ORDER:      fsdp::check_rank
# ORDER:      fsdp::all_gather
# ORDER:      // *** IR after verify-fsdp ***
# ORDER:      fsdp::check_rank
# RUN: %python -m lit_helpers tree %t/all.out | FileCheck %s --check-prefix=EMPTY
# EMPTY: all.out 0
#
# With --passes, only the passes run are dumped.
# RUN: fsdp-opt %t/in.pt --passes=specialize-unit-types,insert-unit-gathers --print-ir-after-all 2>&1 >/dev/null \
# RUN:   | FileCheck %s --check-prefix=CUSTOM --implicit-check-not='IR after'
# CUSTOM: // *** IR after specialize-unit-types ***
# CUSTOM: // *** IR after insert-unit-gathers ***
