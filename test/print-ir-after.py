# --print-ir-after=PASS prints the IR right after that pass, to stderr (stdout stays empty
# without --print-ir), under a header naming the pass. It is repeatable; an unknown PASS is an
# error.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models two_blocks -o %t/in.pt
#
# After insert-unit-gathers the calls are wrapped but the rank check (next pass) is not there.
# RUN: fsdp-opt %t/in.pt '--fsdp-unit=layers.*' --print-ir-after=insert-unit-gathers --method=forward \
# RUN:   2>%t/after.err >%t/after.out
# RUN: FileCheck %s < %t/after.err --implicit-check-not='IR after' --implicit-check-not=fsdp::check_rank
# CHECK:         // *** IR after insert-unit-gathers ***
# CHECK-NEXT:    // . : __torch__.TwoBlocks :: forward
# CHECK-COUNT-2: fsdp::all_gather
# RUN: %python -m lit_helpers tree %t/after.out | FileCheck %s --check-prefix=EMPTY
# EMPTY: after.out 0
#
# Two passes: two dumps, in pipeline order (not flag order); the later one has the check.
# RUN: fsdp-opt %t/in.pt '--fsdp-unit=layers.*' --print-ir-after=wrap-entry-methods \
# RUN:   --print-ir-after=specialize-unit-types --method=forward 2>&1 >/dev/null \
# RUN:   | FileCheck %s --check-prefix=TWO --implicit-check-not='IR after'
# TWO:      // *** IR after specialize-unit-types ***
# TWO-NOT:  fsdp::
# TWO:      // *** IR after wrap-entry-methods ***
# TWO-NEXT: // . : __torch__.TwoBlocks :: forward
# TWO:      fsdp::check_rank
#
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --print-ir-after=insert-gathers \
# RUN:   | FileCheck %s --check-prefix=UNKNOWN --implicit-check-not=error: --match-full-lines
# UNKNOWN:      [stdout]
# UNKNOWN-NEXT: [stderr]
# UNKNOWN-NEXT: error: --print-ir-after names unknown pass 'insert-gathers'
# UNKNOWN-NEXT: [exit 1]
