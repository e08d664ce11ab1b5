# plan-gather-lifetimes: every unit an entry method reaches is held for the whole call, so a
# decoding loop written with `for` + `break` (its layer calls inside the prim::If that `break`
# becomes, where hoisting does not look) gathers once, before the loop, and needs no agreement;
# the same for a prefill + cached step loop whose gathers live in other methods. With a budget
# of the root plus one layer nothing but the root fits, and the remarks say why.
#
# RUN: %python -m decoders kv -o %t.pt
#
# The pass alone: held gathers after the rank check and the root's gather, their reshards
# before the root's; the call sites keep theirs until eliminate-redundant-gathers runs.
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit-type=Block --fsdp-unit=head_a --fsdp-unit=head_b --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,plan-gather-lifetimes,verify-fsdp --print-ir --method=generate_break --remarks 2>%t.alone | FileCheck %s --check-prefix=ALONE
# RUN: FileCheck %s --check-prefix=ALONE-REMARK < %t.alone
# ALONE-REMARK: remark: [plan-gather-lifetimes] 4 unit(s) held for the whole call of __torch__.KVDecoder::generate_break: '.', 'blocks.0', 'blocks.1', 'head_a' (static peak 93952 bytes)
# ALONE-LABEL: // . : __torch__.KVDecoder :: generate_break
# ALONE:       fsdp::check_rank(
# ALONE:       %[[ROOT:.*]] : Tensor[] = fsdp::all_gather(
# ALONE:       %[[B0:.*]] : Tensor[] = fsdp::all_gather(
# ALONE:       %[[B1:.*]] : Tensor[] = fsdp::all_gather(
# ALONE:       %[[HEAD:.*]] : Tensor[] = fsdp::all_gather(
# ALONE:       prim::Loop(
# ALONE:       fsdp::reshard(%[[ROOT]],
# ALONE-NEXT:  fsdp::reshard(%[[B0]],
# ALONE-NEXT:  fsdp::reshard(%[[B1]],
# ALONE-NEXT:  fsdp::reshard(%[[HEAD]],
# ALONE-NEXT:  return
#
# The default pipeline: one bucket before the loop, nothing gathered or agreed inside it.
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit-type=Block --fsdp-unit=head_a --fsdp-unit=head_b --world-size=2 --print-ir --method=generate_break --stats | FileCheck %s
# CHECK-LABEL: // . : __torch__.KVDecoder :: generate_break
# CHECK:       fsdp::check_rank(
# CHECK:       %[[HELD:.*]] : Tensor[] = fsdp::all_gather(
# CHECK-NOT:   fsdp::{{(all_gather|rank_any)}}
# CHECK:       prim::Loop(
# CHECK-NOT:   fsdp::{{(all_gather|reshard|rank_any)}}
# CHECK:       fsdp::reshard(%[[HELD]],
# CHECK-NEXT:  -> (
# CHECK:       control flow made rank-uniform: 0
# CHECK:       gathers per call of generate_branch: 1{{$}}
# CHECK:       gathers per call of generate_break: 1{{$}}
# CHECK:       gathers per call of generate_cached: 1{{$}}
# CHECK:       gathers per call of generate_helpers: 1{{$}}
# CHECK:       gathers per call of generate_while: 1{{$}}
#
# A budget of the least peak (the root + one block): only the root is held where the rewrite
# did not gather it already; the layers keep one gather per iteration.
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit-type=Block --fsdp-unit=head_a --fsdp-unit=head_b --world-size=2 --max-unsharded-bytes=51200 --stats --remarks 2>%t.budget | FileCheck %s --check-prefix=BUDGET
# RUN: FileCheck %s --check-prefix=BUDGET-REMARK < %t.budget
# BUDGET-REMARK: unit 'blocks.0' not held for the call of __torch__.KVDecoder::generate_break: holding it would reach 85376 unsharded bytes, over the budget of 51200
# BUDGET-REMARK: 1 unit(s) held for the whole call of __torch__.KVDecoder::generate_break: '.' (static peak 51200 bytes)
# BUDGET:      gathers per call of generate_break: 4 (3 inside loops, once per iteration)
# BUDGET:      gathers per call of generate_cached: 7 (3 inside loops, once per iteration)
