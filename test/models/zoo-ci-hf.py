# The model zoo's CI subset of Hugging Face models (test/models/zoo.py): a GPT-2 decoder and a
# BERT encoder built from small random configs (2 layers, nothing downloaded), traced with
# torch.jit.trace, sharded with their layer type as units and the root a unit (GPT-2's LM head
# stays tied to its token embedding), and the traced forward run on both ranks, twice, bitwise
# equal to the original trace run in this process. GPT-2 also decodes: the same trace in the
# README's scripted greedy generate, sharded with its flags, each rank its own prompt, rank 0
# stopping at an eos after fewer steps than rank 1's 8; each rank's tokens bitwise its own
# unsharded run's, and each call ONE all-gather, as `fsdp-opt --stats` predicts.
#
# REQUIRES: torch2
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/zoo.py --subset ci --source hf --work %t | FileCheck %s
# CHECK: hf/gpt2: EXACT
# CHECK: units 3: root (GPT2LMHeadModel), 2 GPT2Block;
# CHECK: hf/gpt2_generate: EXACT
# CHECK: units 3: 2 GPT2Block, 1 GPT2LMHeadModel;
# CHECK-SAME: gathers generate 1 (loop iterations by rank: {{[1-7]}}, 8);
# CHECK: hf/bert: EXACT
# CHECK: units 3: root (BertModel), 2 BertLayer;
# CHECK: zoo torch2 ci: 3 exact, 0 cannot work, 0 failed
