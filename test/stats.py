# --stats prints counts to stdout: units, sharded parameters (a tied one counted once), world
# size, sharded bytes per rank (sum over parameters of ceil(rows / W) * bytes per row) of the
# full bytes, replicated bytes per rank, call sites rewritten, and the collectives one call of
# each entry method issues (noting those inside loops).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models nested -o %t/nested.pt
# RUN: fsdp-opt %t/nested.pt --world-size=3 --stats | FileCheck %s --match-full-lines
# outer.pre, outer.post, outer.inner.fc: 8x8 + 8 floats each; 3 rows of 8 (or 1 of 3) per rank.
# `head` (72 floats = 288 bytes) is in no unit: replicated.
# CHECK:      stats:
# CHECK-NEXT:   units: 2
# CHECK-NEXT:   sharded parameters: 6
# CHECK-NEXT:   world size: 3
# CHECK-NEXT:   sharded bytes per rank: 324 (of 864)
# CHECK-NEXT:   replicated bytes per rank: 288
# CHECK-NEXT:   call sites rewritten: 2
# (counters of the scheduling passes, if any, come here; the planner holds outer and
# outer.inner for the whole call, and bucket-gathers makes that one collective)
# CHECK:        gathers per call of forward: 1
# CHECK-NOT:  {{.}}
#
# GPT, root and blocks as units, W=3 (vocab 67 -> 23 rows per rank, 128 -> 43, 96 -> 32, ...).
# generate calls forward in a loop and is not registered: the root is gathered in the loop.
# (The pipeline stops before the scheduling passes, which would move gathers out of loops.)
# RUN: %python -m fsdp_models gpt -o %t/gpt.pt
# RUN: fsdp-opt %t/gpt.pt --fsdp-unit=. '--fsdp-unit=blocks.*' --world-size=3 --stats \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods | FileCheck %s --check-prefix=GPT --match-full-lines
# GPT:      stats:
# GPT-NEXT:   units: 3
# GPT-NEXT:   sharded parameters: 28
# GPT-NEXT:   world size: 3
# GPT-NEXT:   sharded bytes per rank: 38208 (of 112512)
# GPT-NEXT:   replicated bytes per rank: {{[0-9]+}}
# GPT-NEXT:   call sites rewritten: 4
# GPT-NEXT:   gathers per call of forward: 3
# GPT-NEXT:   gathers per call of generate: 3 (3 inside loops, once per iteration)
#
# Registered, generate gathers the root once outside the loop, the blocks in it.
# RUN: fsdp-opt %t/gpt.pt --fsdp-unit=. '--fsdp-unit=blocks.*' --forward-method=.:generate --stats \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods | FileCheck %s --check-prefix=REG --match-full-lines
# REG: gathers per call of generate: 3 (2 inside loops, once per iteration)
#
# No stats without the flag.
# RUN: fsdp-opt %t/nested.pt | FileCheck %s --check-prefix=NONE --allow-empty
# NONE-NOT: stats:
