# --world-size=N -o DIR writes exactly DIR/rank{r}.pt for r in 0..N-1 and DIR/manifest.json
# (nothing else, no temporary left beside DIR). The manifest records the format version, the
# world size, the input's path and sha256 (equal to the file's sha256 computed here), the entry
# methods, every unit with its forward methods and its parameters' paths, aliases, full shapes,
# dtypes and shard rows, and the tool's version.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models gpt -o %t/in.pt
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. '--fsdp-unit=blocks.*' --forward-method=.:generate --world-size=3 -o %t/out
# RUN: %python -m lit_helpers tree %t | FileCheck %s --check-prefix=TREE --match-full-lines
# TREE:      in.pt {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NEXT: out/
# TREE-NEXT: out/manifest.json {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NEXT: out/rank0.pt {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NEXT: out/rank1.pt {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NEXT: out/rank2.pt {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NOT:  {{.}}
#
# RUN: fsdp-opt --version > %t/version
# RUN: %python %s %t/in.pt %t/out/manifest.json %t/version | FileCheck %s --match-full-lines
# CHECK:      format_version: 1
# CHECK-NEXT: world_size: 3
# CHECK-NEXT: input sha256 matches the file: True
# CHECK-NEXT: input path names in.pt: True
# CHECK-NEXT: tool_version: {{[0-9]+\.[0-9]+\.[0-9]+}}
# CHECK-NEXT: entry methods: ['forward', 'generate']
# CHECK-NEXT: unit . forward_methods=['forward', 'generate'] params=4
# CHECK-NEXT:   wte.weight aliases=['lm_head.weight'] shape=[67, 32] dtype=float32 shard_rows=23
# CHECK-NEXT:   wpe.weight aliases=[] shape=[16, 32] dtype=float32 shard_rows=6
# CHECK-NEXT:   ln_f.weight aliases=[] shape=[32] dtype=float32 shard_rows=11
# CHECK-NEXT:   ln_f.bias aliases=[] shape=[32] dtype=float32 shard_rows=11
# CHECK-NEXT: unit blocks.0 forward_methods=['forward'] params=12
# CHECK-NEXT:   blocks.0.ln1.weight aliases=[] shape=[32] dtype=float32 shard_rows=11
# CHECK-NEXT:   blocks.0.ln1.bias aliases=[] shape=[32] dtype=float32 shard_rows=11
# CHECK-NEXT:   blocks.0.attn.qkv.weight aliases=[] shape=[96, 32] dtype=float32 shard_rows=32
# CHECK:        blocks.0.mlp.fc.weight aliases=[] shape=[128, 32] dtype=float32 shard_rows=43
# CHECK:      unit blocks.1 forward_methods=['forward'] params=12
# CHECK:        blocks.1.mlp.proj.bias aliases=[] shape=[32] dtype=float32 shard_rows=11
# CHECK-NEXT: every parameter slot of the model is listed once: True
# CHECK-NEXT: version matches fsdp-opt --version: True

import json
import os
import sys

import torch

import lit_helpers as lh

input_path, manifest_path = sys.argv[1], sys.argv[2]
with open(manifest_path) as f:
    m = json.load(f)
print("format_version:", m["format_version"])
print("world_size:", m["world_size"])
print("input sha256 matches the file:", m["input"]["sha256"] == lh.sha256(input_path))
print("input path names in.pt:", os.path.basename(m["input"]["path"]) == "in.pt")
print("tool_version:", m["tool_version"])
print("entry methods:", sorted(m["entry_methods"]))
listed = []
for unit in m["units"]:
    print("unit %s forward_methods=%s params=%d" % (unit["path"], sorted(unit["forward_methods"]), len(unit["params"])))
    for p in unit["params"]:
        listed += [p["path"]] + p["aliases"]
        print("  %s aliases=%s shape=%s dtype=%s shard_rows=%d"
              % (p["path"], p["aliases"], p["shape"], p["dtype"], p["shard_rows"]))
model = torch.jit.load(input_path)
slots = []
for prefix, module in model.named_modules():
    for name, _ in module.named_parameters(recurse=False):
        slots.append(prefix + "." + name if prefix else name)
print("every parameter slot of the model is listed once:", sorted(listed) == sorted(slots))
with open(sys.argv[3]) as f:
    print("version matches fsdp-opt --version:", f.read().split()[1] == m["tool_version"])
