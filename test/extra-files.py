# The input's extra files (torch.jit.save's `_extra_files`: a model's config, its tokenizer, any
# bytes) are in every file fsdp-opt writes, byte for byte, as torch.jit.load(_extra_files=...)
# reads them back: a deployment that reads its config from the model file still finds it.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t make
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --fsdp-unit-type=Block --world-size=2 -o %t/w2
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --fsdp-unit-type=Block -o %t/one.pt
# RUN: %python %s %t check | FileCheck %s --match-full-lines
# CHECK:      w2/rank0.pt: config.json, tokenizer.bin: as saved
# CHECK-NEXT: w2/rank1.pt: config.json, tokenizer.bin: as saved
# CHECK-NEXT: one.pt: config.json, tokenizer.bin: as saved
# CHECK-NEXT: w2/rank1.pt holds rank 1's shards: True

import os
import sys

import torch
import torch.nn as nn

import lit_helpers as lh

out, step = sys.argv[1], sys.argv[2]
extra = {
    "config.json": '{"eos_token_id": 2, "name": "tiny"}',
    # Every byte value, NUL and non-UTF-8 included.
    "tokenizer.bin": bytes(range(256)) * 3,
}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


if step == "make":
    torch.manual_seed(0)
    torch.jit.script(Model()).save(os.path.join(out, "in.pt"), _extra_files=extra)
    sys.exit(0)

lh.load_runtime()
expected = {name: value if isinstance(value, bytes) else value.encode() for name, value in extra.items()}
for name in ["w2/rank0.pt", "w2/rank1.pt", "one.pt"]:
    read = dict.fromkeys(extra, "")
    torch.jit.load(os.path.join(out, name), _extra_files=read)
    print("%s: %s: %s" % (name, ", ".join(sorted(read)), "as saved" if read == expected else "DIFFERENT %r" % read))
rank1 = torch.jit.load(os.path.join(out, "w2/rank1.pt"))
original = torch.jit.load(os.path.join(out, "in.pt"))
print("w2/rank1.pt holds rank 1's shards:",
      torch.equal(getattr(rank1.blocks, "0").fc.weight, getattr(original.blocks, "0").fc.weight[4:]))
