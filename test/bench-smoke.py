# The benchmarks (bench/) still run, in their --quick mode: every configuration of
# generate_vs_eager.py (the original model, fsdp-opt's three pipelines, FSDP2 with and without
# resharding, FSDP1 with summon_full_params) runs `generate` on 2 ranks over Gloo and returns
# tokens bitwise equal to the original model's, with the collective counts the schedules imply
# (4 layers, 4 new tokens: 1 + 4 x 4 = 17 gathers unscheduled, 1 when hoisted and bucketed);
# pass_scaling.py runs the default pipeline in-process and through the CLI; and
# divergent_generate.py runs a stop-divergent generate_until (rank 0 stops after 1 token, rank 1
# after all 4) under fsdp-opt and under FSDP2 with HF-style synced decoding: every
# configuration's tokens equal the original model's on each rank, both ranks issue the same
# collectives (1 + 4 x 4 = 17 gathers with one unit unsharded at a time, fsdp-opt's and FSDP2's
# alike), and fsdp-opt's rank-uniform loop agrees 1 + 4 times per call (once before the loop,
# once per step that any rank runs), as HF's flag all-reduce does; train_step.py trains the GPT
# for 2 steps (forward, backward, AdamW) under fsdp-opt (no budget, and root + 1 block), FSDP2
# (reshard_after_forward True and False) and FSDP1 on the same batches: every configuration's
# gathered parameters match FSDP2's (reshard=True), ours issue 5 + 5 all-gathers and one gradient
# all-to-all per unit (5), and the budgeted one keeps at most root + 1 block unsharded;
# entry_cost.py times three entry calls of the GPT (root and every Block a unit) against a raw
# torch.distributed all-gather of their bytes plus the unsharded call, one call after a barrier
# and two in a row, with their collectives: each gathers the whole model once and agrees never
# (plan-gather-lifetimes holds every unit for the call), each output bitwise the unsharded call's; decode_loops.py runs the decode-loop matrix (KVDecoder loops (a)-(e) with 2 layers and 4 new
# tokens, a traced 2-layer GPT-2 (f)) unsharded, under fsdp-opt with no budget and with root + one
# layer (each again over the shared-memory transport, FSDP_OPT_CPU_TRANSPORT=shm, in a launch of its
# own, whose rows must show shm rounds and the others none), and under FSDP2 reshard True and
# False (Hugging Face's generate for (f)): every row's
# tokens equal its loop's unsharded run on both ranks, fsdp-opt gathers once per call without a
# budget (none at all inside `fsdp_opt.unsharded`) and 1 + 4 x (2 layers + head) = 13 times with it
# (GPT-2: 1 + 4 x 2 = 9), as --stats predicts, agreeing 1 + once per loop iteration (4; 3 in the cached loop, whose prefill makes the
# first token), at FSDP2 reshard=True's peak; shard_model.py shards a 64 MiB GPT at W=2 and W=8 with
# fsdp-opt beside torch.jit.load + save in processes of their own, and every rank file's tensors
# are bitwise the model's shards; hsdp.py runs generate under a budget and a training step at W=4
# as 2 nodes x 2, fully sharded (1 x 4) and HSDP (2 x 2): hsdp's decode sends nothing across
# nodes but the loop's agreements, the tokens agree and HSDP's replicas train to equal parameters;
# hook_cost.py runs the KVDecoder's rank file at W=1 without grad mode, made without
# specialize-no-grad (as is, with its backward hooks under a grad-mode guard, with them removed)
# and as written: every variant decodes the original's tokens, and the optimised graph keeps no
# hook once they are removed. Timings and peaks in
# --quick mode mean nothing and are not checked.
#
# REQUIRES: torch2
# RUN: %python %S/../bench/generate_vs_eager.py --quick --work %t.gen | FileCheck %s --check-prefix=GEN
# RUN: %python %S/../bench/pass_scaling.py --quick --work %t.pass | FileCheck %s --check-prefix=PASS
# RUN: %python %S/../bench/divergent_generate.py --quick --work %t.div | FileCheck %s --check-prefix=DIV
# RUN: %python %S/../bench/train_step.py --quick --work %t.train | FileCheck %s --check-prefix=TRAIN
# RUN: %python %S/../bench/entry_cost.py --quick --cpu-transport gloo,shm --work %t.entry | FileCheck %s --check-prefix=ENTRY
# RUN: %python %S/../bench/decode_loops.py --quick --work %t.decode | FileCheck %s --check-prefix=DECODE
# RUN: %python %S/../bench/shard_model.py --quick --work %t.shard | FileCheck %s --check-prefix=SHARD
# RUN: %python %S/../bench/hsdp.py --quick --work %t.hsdp | FileCheck %s --check-prefix=HSDP
# RUN: %python %S/../bench/hook_cost.py --quick --work %t.hook | FileCheck %s --check-prefix=HOOK
# RUN: %python %S/../bench/gloo_stall.py --quick | FileCheck %s --check-prefix=STALL
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
# PASS: default pipeline ({{[0-9]+}} passes): lower-indexed-module-calls,expand-parameter-lists,specialize-unit-types,
# PASS: | units | torch.jit.load ms | pipeline ms
# PASS: | 4 |
# PASS: | 16 |
# PASS: marginal cost per unit, 4 -> 16 units
# PASS: | lower-indexed-module-calls (+ clone, analysis) |
# PASS: | expand-parameter-lists |
# PASS: | specialize-unit-types |
#
# Columns after the label: ms, / (a), / FSDP2 synced, CPU ms, CPU ms r0/r1, then the counts.
# DIV: model: StopGPT n_layer=4 {{.*}} rank 0 stops after 1 token(s) (eos={{[0-9]+}}), rank 1 after 4 (eos=-1)
# DIV: loop in {{.*}}generate_until made rank-uniform
# DIV: | configuration
# DIV-NEXT: |---
# DIV-NEXT: | (a) original, unsharded, 1 process per rank {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0/0 | -/- | -/- | - | yes |
# DIV-NEXT: | ours: fsdp-opt, budget = root + 1 layer {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 17/17 | 5/5 | -/- |{{[^|]*}}| yes |
# DIV-NEXT: | ours: fsdp-opt, no budget (held for the call) {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1/1 | 0/0 | -/- |{{[^|]*}}| yes |
# DIV-NEXT: | FSDP2 synced, reshard_after_forward=True {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 17/17 | -/- | 5/5 |{{[^|]*}}| yes |
# DIV-NEXT: | FSDP2 synced, reshard_after_forward=False {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 5/5 | -/- | 5/5 |{{[^|]*}}| yes |
# DIV: bitwise: every configuration's tokens equal (a)'s on every rank
# DIV-NEXT: ours: 5/5 agreements per call on each rank, 1 + 4 decoding steps
# DIV-NOT: FAILED
#
# Columns after the label: ms/step, / FSDP2 (T), CPU ms, fwd / bwd / opt, then peak unsharded
# params and grads, all-gathers, grad reductions, collectives per step, max |diff| vs FSDP2 (T).
# Without a budget forward gathers once (the planner holds every unit for the call), backward
# once per unit: 1 + 5.
# TRAIN: model: GPT n_layer=4 n_embd=32 {{.*}} 52 tensors (root unit 10.62 KiB, one block 49.62 KiB)
# TRAIN: | configuration
# TRAIN-NEXT: |---
# TRAIN-NEXT: | (limit) original, unsharded, no communication {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| - {{ *}}| - {{ *}}| 0 {{ *}}| 0 {{ *}}| 0 {{ *}}| - {{ *}}|
# TRAIN-NEXT: | ours: fsdp-opt default pipeline, no budget {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| {{[0-9.]+}} KiB {{ *}}| {{[0-9.]+}} KiB {{ *}}| 6 {{ *}}| 5 {{ *}}| 11 {{ *}}| {{[0-9.e+-]+}} {{ *}}|
# TRAIN-NEXT: | ours: fsdp-opt, budget = root + 1 block {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 60.25 KiB {{ *}}| {{[0-9.]+}} KiB {{ *}}| 10 {{ *}}| 5 {{ *}}| 15 {{ *}}| {{[0-9.e+-]+}} {{ *}}|
# TRAIN-NEXT: | FSDP2, reshard_after_forward=True {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| {{[0-9.]+}} KiB {{ *}}| {{[0-9.]+}} KiB {{ *}}| {{[0-9]+}} {{ *}}| {{[0-9]+}} {{ *}}| {{[0-9]+}} {{ *}}| 0 {{ *}}|
# TRAIN-NEXT: | FSDP2, reshard_after_forward=False {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 209.12 KiB {{ *}}| {{[0-9.]+}} KiB {{ *}}| {{[0-9]+}} {{ *}}| {{[0-9]+}} {{ *}}| {{[0-9]+}} {{ *}}| {{[0-9.e+-]+}} {{ *}}|
# TRAIN-NEXT: | FSDP1, FULL_SHARD {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*}}| {{[0-9.]+}} KiB {{ *}}| {{[0-9.]+}} KiB {{ *}}| {{[0-9]+}} {{ *}}| {{[0-9]+}} {{ *}}| {{[0-9]+}} {{ *}}| {{[0-9.e+-]+}} {{ *}}|
# TRAIN: target ours_b peak unsharded <= FSDP2 reshard=True {{ *}}bytes MET
# TRAIN: correctness: parameters match FSDP2 reshard_after_forward=True's within 0.0001 after 2 steps: ours {{[^,]+}}, ours_b {{[^,]+}}, d_rf {{[^,]+}}, e {{.+}}
# TRAIN-NEXT: ours with and without budget: parameters bitwise equal
# TRAIN-NEXT: collectives alone (torch.distributed gloo, {{.*}}): 52 all-to-alls, one per parameter: {{.*}}; 5 all-to-alls, one per unit: {{.*}}; 5 reduce-scatters, one per unit: {{.*}}; 5 all-gathers, one per unit:
#
# Columns after the label: ten timings and ratios (unsharded, the three raw collectives, their
# sum, raw then unsharded, fsdp-opt, the three ratios), then the collectives, bytes and the
# bitwise check; one table per regime, after a barrier and in a row.
# ENTRY: model: GPT n_layer=4 n_embd=32 {{.*}} in 5 units
# Every call holds the whole model for the call (plan-gather-lifetimes), one bucket, and its loop
# needs no agreement: 1 + 0 whatever the number of tokens, over Gloo and over the shared-memory
# transport alike, one call at a time or many in a row.
# ENTRY: after a barrier: one call per timed sample
# ENTRY: | entry call
# ENTRY-NEXT: |---
# ENTRY-NEXT: | generate(ids, 0) [this build, gloo] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY-NEXT: | forward(ids) [this build, gloo] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY-NEXT: | generate(ids, 2) [this build, gloo] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY-NEXT: | generate(ids, 0) [this build, shm] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY-NEXT: | forward(ids) [this build, shm] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY-NEXT: | generate(ids, 2) [this build, shm] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY: in a row: 2 calls back to back per timed sample
# ENTRY: | entry call
# ENTRY-NEXT: |---
# ENTRY-NEXT: | generate(ids, 0) [this build, gloo] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY-NEXT: | forward(ids) [this build, gloo] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY-NEXT: | generate(ids, 2) [this build, gloo] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY-NEXT: | generate(ids, 0) [this build, shm] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY-NEXT: | forward(ids) [this build, shm] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY-NEXT: | generate(ids, 2) [this build, shm] {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 + 0 {{ *}}| 209.12 KiB {{ *}}| yes {{ *}}|
# ENTRY: transport: every row's collectives went over the transport it names
# ENTRY-NEXT: bitwise: every fsdp-opt call's output equals the unsharded call's on every rank
# Columns after loop and configuration: ms, / unsharded, / lockstep, / FSDP2 T, CPU ms, then all-gathers,
# other collectives, bytes gathered, peak unsharded, tokens equal.
# DECODE: model kv: KVDecoder n_layer=2 d=32 {{.*}} least budget 51200 bytes (root + one layer = 51200)
# DECODE-NEXT: model hf: traced GPT-2 n_layer=2 {{.*}} least budget 249600 bytes (root + one layer = 249600)
# DECODE: | loop
# DECODE-NEXT: |---
# DECODE-NEXT: | (a) while {{ *}}| unsharded, scripted {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (a) while {{ *}}| unsharded, eager {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (a) while {{ *}}| fsdp-opt, no budget {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (a) while {{ *}}| fsdp-opt, inside unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (a) while {{ *}}| fsdp-opt, root + 1 layer {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 5 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (a) while {{ *}}| c10d all-gather, then unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (a) while {{ *}}| FSDP2, reshard=True {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (a) while {{ *}}| FSDP2, reshard=False {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 4 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (a) while {{ *}}| fsdp-opt, no budget, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (a) while {{ *}}| fsdp-opt, root + 1 layer, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 5 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (b) for+break {{ *}}| unsharded, scripted {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (b) for+break {{ *}}| unsharded, eager {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (b) for+break {{ *}}| fsdp-opt, no budget {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (b) for+break {{ *}}| fsdp-opt, inside unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (b) for+break {{ *}}| fsdp-opt, root + 1 layer {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 5 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (b) for+break {{ *}}| c10d all-gather, then unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (b) for+break {{ *}}| FSDP2, reshard=True {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (b) for+break {{ *}}| FSDP2, reshard=False {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 4 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (b) for+break {{ *}}| fsdp-opt, no budget, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (b) for+break {{ *}}| fsdp-opt, root + 1 layer, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 5 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (c) KV cache {{ *}}| unsharded, scripted {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (c) KV cache {{ *}}| unsharded, eager {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (c) KV cache {{ *}}| fsdp-opt, no budget {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (c) KV cache {{ *}}| fsdp-opt, inside unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (c) KV cache {{ *}}| fsdp-opt, root + 1 layer {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 4 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (c) KV cache {{ *}}| c10d all-gather, then unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (c) KV cache {{ *}}| FSDP2, reshard=True {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (c) KV cache {{ *}}| FSDP2, reshard=False {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 4 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (c) KV cache {{ *}}| fsdp-opt, no budget, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (c) KV cache {{ *}}| fsdp-opt, root + 1 layer, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 4 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (d) helpers {{ *}}| unsharded, scripted {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (d) helpers {{ *}}| unsharded, eager {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (d) helpers {{ *}}| fsdp-opt, no budget {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (d) helpers {{ *}}| fsdp-opt, inside unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (d) helpers {{ *}}| fsdp-opt, root + 1 layer {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 5 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (d) helpers {{ *}}| c10d all-gather, then unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (d) helpers {{ *}}| FSDP2, reshard=True {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (d) helpers {{ *}}| FSDP2, reshard=False {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 4 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (d) helpers {{ *}}| fsdp-opt, no budget, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (d) helpers {{ *}}| fsdp-opt, root + 1 layer, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 5 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (e) branch {{ *}}| unsharded, scripted {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (e) branch {{ *}}| unsharded, eager {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (e) branch {{ *}}| fsdp-opt, no budget {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (e) branch {{ *}}| fsdp-opt, inside unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (e) branch {{ *}}| fsdp-opt, root + 1 layer {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 5 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (e) branch {{ *}}| c10d all-gather, then unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (e) branch {{ *}}| FSDP2, reshard=True {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (e) branch {{ *}}| FSDP2, reshard=False {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 5 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (e) branch {{ *}}| fsdp-opt, no budget, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (e) branch {{ *}}| fsdp-opt, root + 1 layer, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 13 {{ *}}| 5 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (f) HF GPT-2 {{ *}}| unsharded, scripted {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (f) HF GPT-2 {{ *}}| unsharded, eager HF generate {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (f) HF GPT-2 {{ *}}| fsdp-opt, no budget {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (f) HF GPT-2 {{ *}}| fsdp-opt, inside unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 0 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (f) HF GPT-2 {{ *}}| fsdp-opt, root + 1 layer {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 9 {{ *}}| 5 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (f) HF GPT-2 {{ *}}| c10d all-gather, then unsharded {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (f) HF GPT-2 {{ *}}| FSDP2 HF generate, reshard=True {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 12 {{ *}}| 5 allreduce_ {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (f) HF GPT-2 {{ *}}| FSDP2 HF generate, reshard=False {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 3 {{ *}}| 5 allreduce_ {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (f) HF GPT-2 {{ *}}| fsdp-opt, no budget, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 1 {{ *}}| 0 {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE-NEXT: | (f) HF GPT-2 {{ *}}| fsdp-opt, root + 1 layer, shm {{ *}}|{{[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*}}| 9 {{ *}}| 5 agreements {{ *}}|{{[^|]*\|[^|]*}}| yes {{ *}}|
# DECODE: target (a) while     budget peak unsharded <= FSDP2 T {{ *}}bytes MET     (51200 vs 51200)
# DECODE: target (b) for+break budget peak unsharded <= FSDP2 T {{ *}}bytes MET     (51200 vs 51200)
# DECODE: target (c) KV cache  budget peak unsharded <= FSDP2 T {{ *}}bytes MET     (51200 vs 51200)
# DECODE: target (d) helpers   budget peak unsharded <= FSDP2 T {{ *}}bytes MET     (51200 vs 51200)
# DECODE: target (e) branch    budget peak unsharded <= FSDP2 T {{ *}}bytes MET     (51200 vs 51200)
# DECODE: target (f) HF GPT-2  budget peak unsharded <= FSDP2 T {{ *}}bytes MET     (249600 vs 249600)
# DECODE: gap (a) while     fsdp-opt {{.*}} inside unsharded (the rewrite, no collective)
# DECODE: floor (a) while     c10d all-gather then unsharded {{[0-9.]+}} ms = {{[0-9.]+}}x unsharded ({{[0-9.]+}}x lockstep); fsdp-opt no budget {{[0-9.]+}}x of it
# DECODE: floor (f) HF GPT-2  c10d all-gather then unsharded {{[0-9.]+}} ms
# DECODE: fsdp-opt counts: as --stats predicts, nothing left unsharded after a call, none inside a scope
# DECODE-NEXT: transport: the shm rows went over shared memory, the others over Gloo
# DECODE-NEXT: tokens: every configuration of each loop equals its unsharded run on both ranks, every call
#
# SHARD: model: GPT n_layer=4 n_embd=512 vocab=8192
# SHARD: | configuration | wall s | / load+save process | / load+save calls | peak RSS | / model |
# SHARD: | load+save |
# SHARD-NEXT: | fsdp-opt W=2 |
# SHARD-NEXT: | fsdp-opt W=8 |
# SHARD: W=2 rank files: every tensor bitwise the model's shard
# SHARD-NEXT: W=8 rank files: every tensor bitwise the model's shard
# SHARD: target peak RSS at W=8 <= 0.5x the model
#
# HSDP: model: GPT n_layer=2 n_embd=32 vocab=67
# HSDP: | configuration | mesh | decode ms/call | / full | decode within node | decode across nodes | train ms/step | / full | train within node | train across nodes |
# HSDP: | full {{ *}}| 1x4  | {{[0-9.]+}} {{ *}}| 1.00 {{ *}}| 0 B {{ *}}| {{[0-9.]+}} {{K?i?B}}
# HSDP-NEXT: | hsdp {{ *}}| 2x2  | {{[0-9.]+}} {{ *}}| {{[0-9.]+}} {{ *}}| {{[0-9.]+}} {{K?i?B}} {{ *}}| {{[0-9.]+}} {{K?i?B}} {{ *}}|
# HSDP: decode tokens equal under full and hsdp on every rank: True
# HSDP-NEXT: trained parameters, hsdp vs full: max |diff| {{.*}}; hsdp's equal on every rank: True
# HSDP-NEXT: hsdp decode: across nodes only the decoding loop's agreements (one 512-byte envelope each): True
#
# HOOK: | rank file
# HOOK-NEXT: |---
# HOOK-NEXT: | original {{ *}}| - {{.*}}| yes {{ *}}|
# HOOK-NEXT: | one path {{ *}}| {{[1-9][0-9]*}} {{ *}}|{{[^|]*\|[^|]*}}| {{[1-9][0-9]*}} {{ *}}|{{[^|]*}}| yes {{ *}}|
# HOOK-NEXT: | one path, hooks guarded {{ *}}| {{[1-9][0-9]*}} {{ *}}|{{.*}}| yes {{ *}}|
# HOOK-NEXT: | as written {{ *}}| {{[1-9][0-9]*}} {{ *}}|{{.*}}| yes {{ *}}|
# HOOK-NEXT: | hooks removed {{ *}}| {{[1-9][0-9]*}} {{ *}}|{{[^|]*\|[^|]*}}| 0 {{ *}}|{{[^|]*}}| yes {{ *}}|
#
# STALL: 1 launch(es) x 20 iterations, 1048576 bytes per rank and peer
# STALL: | configuration
# STALL-NEXT: |---
# STALL-NEXT: | compute alone {{ *}}| - {{.*}}| - {{ *}}|
# STALL-NEXT: | idle after {{ *}}| {{[0-9.]+}} {{.*}}| {{[0-9]+}} of 20 {{ *}}| {{[0-9.]+}} {{ *}}| - {{ *}}|
# STALL-NEXT: | compute after {{ *}}| {{[0-9.]+}} {{.*}}| {{[0-9]+}} of 20 {{ *}}| {{[0-9.]+}} {{ *}}| {{[-+][0-9.]+}} {{ *}}|
# STALL-NEXT: | compute after, sleep 50 us {{ *}}| {{[0-9.]+}} {{.*}}| {{[0-9]+}} of 20 {{ *}}| {{[0-9.]+}} {{ *}}| {{[-+][0-9.]+}} {{ *}}|
# STALL: bytes: every exchange received the peer's fill
