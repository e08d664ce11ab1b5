# A --fsdp-unit PATTERN that matches no module is an error: exit 1, nothing on stdout, and ONE
# `error:` line on stderr that names the pattern.
#
# RUN: %python -m fsdp_models gpt -o %t.pt
#
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=blocks.7 --print-ir \
# RUN:   | FileCheck %s --check-prefix=NONE --implicit-check-not=error: --match-full-lines
# NONE:      [stdout]
# NONE-NEXT: [stderr]
# NONE-NEXT: error: --fsdp-unit pattern 'blocks.7' matches no module
# NONE-NEXT: [exit 1]
#
# `*` never crosses a dot, so `*.qkv` (qkv sits three levels down) matches nothing either, even
# beside a pattern that does match.
# RUN: %python -m lit_helpers run fsdp-opt %t.pt '--fsdp-unit=blocks.*' '--fsdp-unit=*.qkv' \
# RUN:   | FileCheck %s --check-prefix=STAR --implicit-check-not=error: --match-full-lines
# STAR:      [stdout]
# STAR-NEXT: [stderr]
# STAR-NEXT: error: --fsdp-unit pattern '*.qkv' matches no module
# STAR-NEXT: [exit 1]
#
# Two bad patterns: still one `error:` line (the rest are notes), both patterns named.
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=nope --fsdp-unit=wte.weight \
# RUN:   | FileCheck %s --check-prefix=TWO --implicit-check-not=error:
# TWO:      [stderr]
# TWO-NEXT: error: --fsdp-unit pattern 'nope' matches no module
# TWO-NEXT: note: --fsdp-unit pattern 'wte.weight' matches no module
# TWO-NEXT: [exit 1]
