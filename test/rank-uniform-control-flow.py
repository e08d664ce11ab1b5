# rank-uniform-control-flow, run right after the rewrite (and after the default pipeline for the
# decoding loop): the IR a rank-uniform branch or loop executes. Exactness per rank, with ranks
# whose data differ: e2e/divergent_ranks.py.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m divergent_models chooser %t/chooser.pt
# RUN: %python -m divergent_models orderer %t/orderer.pt
# RUN: %python -m divergent_models stop_gpt %t/stop.pt
#
# A branch that runs unit a or unit b: both gathered in ONE collective before the branch, the
# arms only compute, the bucket resharded after it.
# RUN: fsdp-opt %t/chooser.pt --fsdp-unit=a --fsdp-unit=b --world-size=2 --remarks --print-ir --method=forward \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,rank-uniform-control-flow,verify-fsdp 2>&1 \
# RUN:   | FileCheck %s --check-prefix=MERGED
# MERGED:      remark: [rank-uniform-control-flow] branch in {{.*}}Chooser::forward merged: both arms' units gathered in one collective of 576 bytes before it
# MERGED-LABEL: :: forward
# MERGED:      %[[NAMES:.*]] : str = aten::join(
# MERGED-NEXT: %[[AB:.*]] : Tensor[] = fsdp::all_gather(%{{.*}}, %{{.*}}, %[[NAMES]])
# MERGED-NEXT: prim::If(
# MERGED-NOT:  fsdp::{{(all_gather|reshard)}}
# MERGED:      -> (
# MERGED-NOT:  fsdp::{{(all_gather|reshard)}}
# MERGED:      -> (
# MERGED-NEXT: = fsdp::reshard(%[[AB]], %[[NAMES]])
#
# With no room for a bucket (--bucket-bytes=0), split: each arm runs its own unit and joins the
# other's gather without computing, so both arms gather a, then b.
# RUN: fsdp-opt %t/chooser.pt --fsdp-unit=a --fsdp-unit=b --world-size=2 --bucket-bytes=0 --remarks --print-ir --method=forward \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,rank-uniform-control-flow,verify-fsdp 2>&1 \
# RUN:   | FileCheck %s --check-prefix=SPLIT
# Only the arm that calls a unit hooks the call for backward; the joined gathers have none.
# SPLIT:      remark: [rank-uniform-control-flow] branch in {{.*}}Chooser::forward split: each arm also joins the other arm's collectives (2 per call on every rank)
# SPLIT-LABEL: :: forward
# SPLIT:      prim::If(
# SPLIT-NEXT:   block0():
# SPLIT:        %[[PA:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%a
# SPLIT:        %[[A:.*]] : Tensor[] = fsdp::all_gather(%{{.*}}, %{{.*}}, %[[PA]])
# SPLIT-NEXT:   prim::CallMethod[name="forward"](%a
# SPLIT-NEXT:   = fsdp::reshard(%[[A]],
# SPLIT-NEXT:   prim::TupleConstruct
# SPLIT-NEXT:   fsdp::backward_hook(
# SPLIT:        %[[PB:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%b
# SPLIT:        %[[B:.*]] : Tensor[] = fsdp::all_gather(%{{.*}}, %{{.*}}, %[[PB]])
# SPLIT-NEXT:   = fsdp::reshard(%[[B]],
# SPLIT-NEXT:   -> (
# SPLIT-NEXT:   block1():
# SPLIT:        %[[PA2:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%a
# SPLIT:        %[[A2:.*]] : Tensor[] = fsdp::all_gather(%{{.*}}, %{{.*}}, %[[PA2]])
# SPLIT-NEXT:   = fsdp::reshard(%[[A2]],
# SPLIT:        %[[PB2:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%b
# SPLIT:        %[[B2:.*]] : Tensor[] = fsdp::all_gather(%{{.*}}, %{{.*}}, %[[PB2]])
# SPLIT-NEXT:   prim::CallMethod[name="forward"](%b
# SPLIT-NEXT:   = fsdp::reshard(%[[B2]],
# SPLIT-NEXT:   prim::TupleConstruct
# SPLIT-NEXT:   fsdp::backward_hook(
# SPLIT-NEXT:   -> (
#
# Units called in an order chosen by the data: both arms gather a, b (the then arm's order),
# then b, a (the else arm's).
# RUN: fsdp-opt %t/orderer.pt --fsdp-unit=a --fsdp-unit=b --world-size=2 --bucket-bytes=0 --print-ir --method=forward \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,rank-uniform-control-flow,verify-fsdp \
# RUN:   | FileCheck %s --check-prefix=ORDER
# ORDER-LABEL: :: forward
# ORDER:       block0():
# ORDER-COUNT-4: fsdp::all_gather(
# ORDER-NOT:   fsdp::all_gather(
# ORDER:       block1():
# ORDER-COUNT-4: fsdp::all_gather(
# ORDER-NOT:   fsdp::all_gather(
# ORDER:       return
#
# A decoding loop that stops at eos, under a one-block budget (root 10880 + block 50816 bytes),
# so the block gathers stay in it: a `while` loop that runs while any rank goes on; an active
# rank runs the body, a finished one only its two block gathers; one agreement before the loop
# and one per iteration.
# RUN: fsdp-opt %t/stop.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate_until --world-size=2 \
# RUN:   --max-unsharded-bytes=61696 --remarks --stats --print-ir --method=generate_until 2>%t/stop.err | FileCheck %s --check-prefix=LOOP
# RUN: FileCheck %s --check-prefix=LOOP-REMARK < %t/stop.err
# LOOP-REMARK: remark: [rank-uniform-control-flow] loop in {{.*}}StopGPT::generate_until made rank-uniform: ranks agree each iteration whether any continues; a rank that is done joins the collectives only
# LOOP-LABEL: :: generate_until
# LOOP:       %[[ENTER:.*]] : bool = fsdp::rank_any(%{{.*}}, %[[LIKE:[^)]*]])
# LOOP-NEXT:  prim::Loop(%{{.*}}, %[[ENTER]],
# LOOP-NEXT:    block0({{.*}}, %[[ACTIVE:[^ ]*]] : bool, %{{[^ ]*}} : int):
# LOOP-NEXT:      %[[STEP:[^ ]*]] : bool, %{{.*}} = prim::If(%[[ACTIVE]])
# LOOP-NEXT:        block0():
# LOOP:               fsdp::all_gather(
# LOOP-NEXT:          prim::CallMethod[name="forward"](%_0
# LOOP:               fsdp::all_gather(
# LOOP-NEXT:          prim::CallMethod[name="forward"](%_1
# The active arm ends with the loop's values (flag, tokens, step count), then the other arm.
# LOOP:             -> (%{{[^,]*}}, %{{[^,]*}}, %{{[^,)]*}})
# LOOP-NEXT:        block1():
# LOOP-NOT:           prim::CallMethod
# LOOP-NOT:           aten::
# LOOP:               fsdp::all_gather(
# LOOP-NEXT:          fsdp::reshard(
# LOOP-NOT:           prim::CallMethod
# LOOP:               fsdp::all_gather(
# LOOP-NEXT:          fsdp::reshard(
# LOOP-NOT:           fsdp::
# LOOP:               -> (
# LOOP-NEXT:      %{{.*}} : bool = fsdp::rank_any(%[[STEP]], %[[LIKE]])
# The inherited GPT.generate (a counted loop whose count is an argument) is made uniform too.
# LOOP:       control flow made rank-uniform: 2
# One agreement before the loop and one per iteration; the two block gathers once per iteration
# (the finished rank's skeleton is the other arm of the same branch, not extra collectives).
# LOOP:       gathers per call of generate_until: 3 (2 inside loops, once per iteration)
#
# Without a budget the gathers leave the loop: no agreement at all.
# RUN: fsdp-opt %t/stop.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate_until --world-size=2 \
# RUN:   --print-ir --method=generate_until | FileCheck %s --check-prefix=HOISTED
# HOISTED-LABEL: :: generate_until
# HOISTED-NOT:   fsdp::rank_any
# HOISTED:       return
