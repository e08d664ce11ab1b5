# --verify-each must accept every correct pipeline: the default pipeline on a model whose ROOT
# is a unit, at world size 2, succeeds without the flag and must succeed with it.
#
# Regression test (fixed): after insert-unit-gathers the verifier's sharded-read check already runs
# (fsdp ops exist), but the root's gather is only inserted by the next pass, wrap-entry-methods;
# every read of a root-group parameter is reported ("parameter 'head.weight' of unit '.' is
# read while sharded ...", "verification failed after pass 'insert-unit-gathers'"), exit 1.
#
# RUN: %python -m fsdp_models nested -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --world-size=2 --print-ir --method=forward > %t.plain.ir
# RUN: fsdp-opt %t.pt --fsdp-unit=. --world-size=2 --print-ir --method=forward --verify-each > %t.each.ir
# RUN: %python -m lit_helpers diff %t.plain.ir %t.each.ir
# RUN: FileCheck %s < %t.each.ir
# CHECK-LABEL:   // . : __torch__.NestedUnits :: forward
# CHECK:         fsdp::check_rank
# One bucket in the root's forward (the planner holds every unit for the call), and outer.inner's
# own gather left in outer's forward (nested there: no collective).
# CHECK-COUNT-2: fsdp::all_gather
# CHECK-NOT:     fsdp::all_gather
