# A --fsdp-unit-type NAME that matches no module's class is an error: exit 1, one `error:` line
# naming it and the classes the model has (the last components users write), nothing written.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models gpt -o %t/in.pt
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit-type=GPT2Block --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --implicit-check-not=error: --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: --fsdp-unit-type 'GPT2Block' matches no module's class (the model's classes: Block, CausalSelfAttention, Embedding, GELU, GPT, LayerNorm, Linear, MLP, ModuleList)
# CHECK-NEXT: [exit 1]
# RUN: %python -m lit_helpers tree %t | FileCheck %s --check-prefix=NOTHING --implicit-check-not=out
# NOTHING: in.pt
#
# An empty NAME is a usage error (the command line's parser, or the options' one from Python).
# RUN: not fsdp-opt %t/in.pt --fsdp-unit-type= 2>&1 | FileCheck %s --check-prefix=EMPTY
# EMPTY: error: --fsdp-unit-type{{.*}} NAME
