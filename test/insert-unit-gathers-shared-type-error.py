# insert-unit-gathers assumes specialize-unit-types ran: run alone on a class type shared by a
# unit (`a`) and a plain instance (`b`), it refuses (exit 1, one `error:` line) naming both
# modules and the type, and suggests the pass to run first.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models shared_type -o %t/in.pt
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --passes=insert-unit-gathers --print-ir -o %t/out.pt \
# RUN:   | FileCheck %s --implicit-check-not=error: --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: modules 'a' and 'b' share type __torch__.LinearBlock but need different rewrites; run specialize-unit-types first
# CHECK-NEXT: [exit 1]
# RUN: %python -m lit_helpers tree %t/out.pt | FileCheck %s --check-prefix=NOTHING
# NOTHING: out.pt: missing
#
# With the pass first, the same pipeline succeeds.
# RUN: fsdp-opt %t/in.pt --passes=specialize-unit-types,insert-unit-gathers --print-ir --method=forward \
# RUN:   | FileCheck %s --check-prefix=FIXED
# FIXED-COUNT-1: fsdp::all_gather
# FIXED-NOT:     fsdp::all_gather
