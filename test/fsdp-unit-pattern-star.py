# --fsdp-unit=PATTERN: `*` matches within ONE dotted component of the module path, never
# across a dot, and may stand for part of a component.
#
# RUN: %python -m fsdp_models gpt -o %t.pt
#
# `blocks.*` names the blocks themselves, not the ModuleList and not anything below a block.
# RUN: fsdp-opt %t.pt '--fsdp-unit=blocks.*' --remarks 2>&1 \
# RUN:   | FileCheck %s --check-prefix=BLOCKS --implicit-check-not='[find-units] unit'
# BLOCKS:      remark: [find-units] unit 'blocks.0' ({{.*}}Block), forward methods: forward
# BLOCKS-NEXT: remark: [find-units] unit 'blocks.1' ({{.*}}Block), forward methods: forward
#
# `*` inside a component: `*.*.a*` is the attention module of each block (not `mlp`, not the
# `act` one level deeper, not `blocks.0.attn.qkv`).
# RUN: fsdp-opt %t.pt '--fsdp-unit=*.*.a*' --remarks 2>&1 \
# RUN:   | FileCheck %s --check-prefix=ATTN --implicit-check-not='[find-units] unit'
# ATTN:      remark: [find-units] unit 'blocks.0.attn' ({{.*}}CausalSelfAttention), forward methods: forward
# ATTN-NEXT: remark: [find-units] unit 'blocks.1.attn' ({{.*}}CausalSelfAttention), forward methods: forward
#
# `*.0` is one component then `0`: only blocks.0, and the call of it is the only rewritten one.
# RUN: fsdp-opt %t.pt '--fsdp-unit=*.0' --remarks 2>&1 \
# RUN:   | FileCheck %s --check-prefix=ZERO --implicit-check-not='[find-units] unit' --implicit-check-not='call site rewritten'
# ZERO: remark: [find-units] unit 'blocks.0' ({{.*}}Block), forward methods: forward
# ZERO: remark: [insert-unit-gathers] call site rewritten: unit 'blocks.0' method forward in __torch__.GPT__fsdp{{[0-9]+}}::forward
#
# `*` alone is every top-level child and never the root nor a grandchild.
# RUN: %python -m fsdp_models nested --arg marked=0 -o %t.nested.pt
# RUN: fsdp-opt %t.nested.pt '--fsdp-unit=*' --remarks 2>&1 \
# RUN:   | FileCheck %s --check-prefix=TOP --implicit-check-not='[find-units] unit'
# TOP:      remark: [find-units] unit 'outer' ({{.*}}Outer), forward methods: forward
# TOP-NEXT: remark: [find-units] unit 'head' ({{.*}}Linear), forward methods: forward
