# The model zoo's CI subset of Hugging Face models (test/models/zoo.py): a GPT-2 decoder and a
# BERT encoder built from small random configs (2 layers, nothing downloaded), traced with
# torch.jit.trace, sharded with their layer type as units and the root a unit (GPT-2's LM head
# stays tied to its token embedding), and the traced forward run on both ranks, twice, bitwise
# equal to the original trace run in this process.
#
# REQUIRES: torch2
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/zoo.py --subset ci --source hf --work %t | FileCheck %s
# CHECK: hf/gpt2: EXACT
# CHECK: units 3: root (GPT2LMHeadModel), 2 GPT2Block;
# CHECK: hf/bert: EXACT
# CHECK: units 3: root (BertModel), 2 BertLayer;
# CHECK: zoo torch2 ci: 2 exact, 0 cannot work, 0 failed
