# --stats "replicated bytes per rank" is the bytes of parameters in no unit's group. When every
# parameter is grouped, that is 0, tied parameters included.
#
# Regression test (fixed): the total is summed over named_parameters() slots, so a tied parameter (the
# GPT's wte.weight / lm_head.weight, 67x32 floats = 8576 bytes) is counted twice in the total
# and once in the groups: "replicated bytes per rank: 8576" although nothing is replicated.
#
# RUN: %python -m fsdp_models gpt -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --world-size=2 --stats | FileCheck %s --match-full-lines
# CHECK:      sharded bytes per rank: {{[0-9]+}} (of 112512)
# CHECK-NEXT: replicated bytes per rank: 0
