# The benchmarks (bench/) still run, in their --quick mode: every configuration of
# generate_vs_eager.py (the original model, fsdp-opt's three pipelines, FSDP2 with and without
# resharding, FSDP1 with summon_full_params) runs `generate` on 2 ranks over Gloo and returns
# tokens bitwise equal to the original model's, with the collective counts the schedules imply
# (4 layers, 4 new tokens: 1 + 4 x 4 = 17 gathers unscheduled, 1 when hoisted and bucketed);
# and pass_scaling.py runs the default pipeline in-process and through the CLI. Timings in
# --quick mode mean nothing and are not checked.
#
# REQUIRES: torch2
# RUN: %python %S/../bench/generate_vs_eager.py --quick --work %t.gen | FileCheck %s --check-prefix=GEN
# RUN: %python %S/../bench/pass_scaling.py --quick --work %t.pass | FileCheck %s --check-prefix=PASS
#
# GEN: model: GPT n_layer=4
# GEN: | configuration
# GEN-NEXT: |---
# GEN-NEXT: | (a) original, unsharded, 1 process {{.*}}| yes |
# GEN-NEXT: | (a') eager nn.Module, unsharded, 1 process {{.*}}| yes |
# GEN-NEXT: | (b) fsdp-opt default pipeline, no budget {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{.*}}| yes |
# GEN-NEXT: | (b2) fsdp-opt, budget = root + 1 layer {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 17 {{.*}}| yes |
# GEN-NEXT: | (c) fsdp-opt, core insertion only {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 17 {{.*}}| yes |
# GEN-NEXT: | (d) FSDP2, reshard_after_forward=True {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 17 {{.*}}| yes |
# GEN-NEXT: | (d) FSDP2, reshard_after_forward=False {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 5 {{.*}}| yes |
# GEN-NEXT: | (d') FSDP2, reshard_after_forward=False, never resharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{.*}}| yes |
# GEN-NEXT: | (e) FSDP1 + summon_full_params(recurse=False) {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 17 {{.*}}| yes |
# GEN: target (b2) peak unsharded <= (d, reshard=True) bytes MET
# GEN: bitwise: every configuration's tokens equal (a)'s on every rank
#
# PASS: default pipeline ({{[0-9]+}} passes): specialize-unit-types,
# PASS: | units | torch.jit.load ms | pipeline ms
# PASS: | 4 |
# PASS: | 16 |
# PASS: marginal cost per unit, 4 -> 16 units
# PASS: | specialize-unit-types (+ clone, analysis) |
