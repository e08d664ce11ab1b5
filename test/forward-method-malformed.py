# --forward-method takes PATTERN:METHOD; anything else is rejected with one `error:` line that
# quotes the bad value, before any output is written.
#
# RUN: %python -m fsdp_models gpt -o %t.pt
# RUN: rm -rf %t.out
#
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=. --forward-method=generate -o %t.out \
# RUN:   | FileCheck %s --check-prefix=NOCOLON --implicit-check-not=error: --match-full-lines
# NOCOLON:      [stdout]
# NOCOLON-NEXT: [stderr]
# NOCOLON-NEXT: error: --forward-method expects PATTERN:METHOD, got 'generate'
# NOCOLON-NEXT: [exit {{[1-9][0-9]*}}]
#
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=. --forward-method=:generate \
# RUN:   | FileCheck %s --check-prefix=NOPATTERN --implicit-check-not=error:
# NOPATTERN:      [stderr]
# NOPATTERN-NEXT: error: --forward-method expects PATTERN:METHOD, got ':generate'
# NOPATTERN-NEXT: [exit {{[1-9][0-9]*}}]
#
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=. --forward-method=.: \
# RUN:   | FileCheck %s --check-prefix=NOMETHOD --implicit-check-not=error:
# NOMETHOD:      [stderr]
# NOMETHOD-NEXT: error: --forward-method expects PATTERN:METHOD, got '.:'
# NOMETHOD-NEXT: [exit {{[1-9][0-9]*}}]
#
# Nothing was written for the first (the only one with -o).
# RUN: %python -m lit_helpers tree %t.out | FileCheck %s --check-prefix=NOTHING
# NOTHING: out: missing
