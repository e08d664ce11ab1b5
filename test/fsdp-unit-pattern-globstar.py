# --fsdp-unit=PATTERN: `**` matches any number of dotted components, zero included.
#
# RUN: %python -m fsdp_models gpt -o %t.pt
#
# `**.proj` reaches `proj` at every depth: the attention's and the MLP's, in both blocks.
# RUN: fsdp-opt %t.pt '--fsdp-unit=**.proj' --remarks 2>&1 \
# RUN:   | FileCheck %s --check-prefix=PROJ --implicit-check-not='[find-units] unit'
# PROJ:      remark: [find-units] unit 'blocks.0.attn.proj'
# PROJ-NEXT: remark: [find-units] unit 'blocks.0.mlp.proj'
# PROJ-NEXT: remark: [find-units] unit 'blocks.1.attn.proj'
# PROJ-NEXT: remark: [find-units] unit 'blocks.1.mlp.proj'
#
# `**` standing for zero components (`**.ln_f` is the top-level ln_f), and in the middle
# (`blocks.**.fc`: one or more components between, here `0.mlp`).
# RUN: fsdp-opt %t.pt '--fsdp-unit=**.ln_f' '--fsdp-unit=blocks.**.fc' --remarks 2>&1 \
# RUN:   | FileCheck %s --check-prefix=MIXED --implicit-check-not='[find-units] unit'
# MIXED:      remark: [find-units] unit 'blocks.0.mlp.fc'
# MIXED-NEXT: remark: [find-units] unit 'blocks.1.mlp.fc'
# MIXED-NEXT: remark: [find-units] unit 'ln_f'
#
# `**` alone is every module, the root included: the root's group takes the tied embedding.
# RUN: fsdp-opt %t.pt '--fsdp-unit=**' --remarks --stats 2>&1 | FileCheck %s --check-prefix=ALL
# ALL: remark: [find-units] unit '.' ({{.*}}GPT), forward methods: forward
# ALL: remark: [find-units] unit 'blocks.1.mlp.proj'
# ALL: remark: [parameter-groups] tied parameter 'wte.weight', 'lm_head.weight' joins the group of unit '.'
# ALL: units: 26
