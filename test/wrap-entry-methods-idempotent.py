# wrap-entry-methods documents itself as idempotent: a second run must add neither a second
# rank check nor a second gather of the root unit.
#
# Regression test (fixed): the pass looks for fsdp::check_rank as the FIRST node of the body, but the
# first nodes are the prim::GetAttr reads of its operands, so every rerun inserts another check
# (and, for a root unit, another nested gather/reshard pair).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models two_blocks -o %t/in.pt
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --passes=wrap-entry-methods --print-ir > %t/once.ir
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --passes=wrap-entry-methods,wrap-entry-methods --print-ir > %t/twice.ir
# RUN: FileCheck %s < %t/twice.ir
# RUN: FileCheck %s --check-prefix=GATHER < %t/twice.ir
# CHECK-LABEL:   // . : __torch__.TwoBlocks :: forward
# CHECK-COUNT-1: fsdp::check_rank
# CHECK-NOT:     fsdp::check_rank
# CHECK:         return
# GATHER-LABEL:   // . : __torch__.TwoBlocks :: forward
# GATHER-COUNT-1: fsdp::all_gather
# GATHER-NOT:     fsdp::all_gather
# GATHER:         return
# RUN: %python -m lit_helpers diff %t/once.ir %t/twice.ir
