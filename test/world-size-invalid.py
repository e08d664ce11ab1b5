# --world-size must be a positive integer: 0, negatives and non-integers are rejected with one
# `error:` line quoting the value, non-zero exit, and nothing is written.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models two_blocks -o %t/in.pt
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --world-size=0 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=ZERO --implicit-check-not=error: --match-full-lines
# ZERO:      [stdout]
# ZERO-NEXT: [stderr]
# ZERO-NEXT: error: --world-size must be at least 1, got 0
# ZERO-NEXT: [exit 1]
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --world-size=-2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=NEG --implicit-check-not=error:
# NEG:      error: --world-size must be at least 1, got -2
# NEG-NEXT: [exit 1]
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --world-size=two -o %t/out \
# RUN:   | FileCheck %s --check-prefix=WORD --implicit-check-not=error:
# WORD:      error: {{.*}}--world-size{{.*}}two
# WORD-NEXT: [exit {{[1-9][0-9]*}}]
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --world-size=2.5 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=FRACTION --implicit-check-not=error:
# FRACTION:      error: {{.*}}--world-size{{.*}}2.5
# FRACTION-NEXT: [exit {{[1-9][0-9]*}}]
# RUN: %python -m lit_helpers tree %t/out | FileCheck %s --check-prefix=NOTHING
# NOTHING: out: missing
