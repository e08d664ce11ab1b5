# --passes with a name that no pass has is an error (exit 1, one `error:` line) naming it and
# listing the known passes (sorted), before anything runs or is written.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models two_blocks -o %t/in.pt
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --passes=specialize-unit-types,insert-gathers --print-ir -o %t/out.pt \
# RUN:   | FileCheck %s --implicit-check-not=error: --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: unknown pass 'insert-gathers' (known passes: {{([a-z-]+, )*}}insert-unit-gathers, lint-sharded-reads, {{([a-z-]+, )*}}reshard-on-raise, specialize-no-grad, specialize-unit-types, verify-fsdp, wrap-entry-methods)
# CHECK-NEXT: [exit 1]
# RUN: %python -m lit_helpers tree %t/out.pt | FileCheck %s --check-prefix=NOTHING
# NOTHING: out.pt: missing
#
# --passes replaces the default pipeline: with only reshard-on-raise there is no rank check.
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --passes=reshard-on-raise --print-ir | FileCheck %s --check-prefix=ONLY --implicit-check-not=fsdp::
# ONLY: // . : __torch__.TwoBlocks :: forward
#
# An empty element is skipped; spaces are not trimmed away into a valid name.
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt '--passes=wrap-entry-methods, verify-fsdp' \
# RUN:   | FileCheck %s --check-prefix=SPACE
# SPACE: error: unknown pass ' verify-fsdp'
# SPACE: [exit 1]
