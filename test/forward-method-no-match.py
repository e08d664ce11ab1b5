# A --forward-method PATTERN that matches no module is an error (exit 1, one `error:` line
# naming the pattern), even when the METHOD exists elsewhere.
#
# RUN: %python -m fsdp_models gpt -o %t.pt
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=. --forward-method=decoder:generate \
# RUN:   | FileCheck %s --implicit-check-not=error: --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: --forward-method pattern 'decoder' matches no module
# CHECK-NEXT: [exit 1]
#
# `**.generate`-style mistakes (a method where a module is expected) match nothing too.
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=. '--forward-method=*.*.generate:forward' \
# RUN:   | FileCheck %s --check-prefix=DEEP --implicit-check-not=error:
# DEEP:      [stderr]
# DEEP-NEXT: error: --forward-method pattern '*.*.generate' matches no module
# DEEP-NEXT: [exit 1]
