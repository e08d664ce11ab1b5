# --fsdp-min-unit-params=N: FSDP1's size_based_auto_wrap_policy. In post-order, a module becomes
# a unit when the parameter elements below it that no nested unit holds reach N; they then no
# longer count for its ancestors, and the root takes what is left. Containers without a forward
# (ModuleList) are never units; nothing inside a MultiheadAttention is.
#
# Sizes: big.{0,1}.fc 110 each, smalls.{0,1,2}.fc 6 each (18 in the ModuleList), attn 80
# (out_proj 20 of it), proj 40, head 10.
# RUN: %python %s %t.pt %t.in.pt
#
# N=100: each big fc reaches it on its own (post-order, so the fc and not its Big parent);
# everything else (148) stays with the root.
# RUN: fsdp-opt %t.pt --fsdp-min-unit-params=100 --remarks 2>&1 | FileCheck %s --check-prefix=N100 --implicit-check-not='[find-units] unit'
# N100:      remark: [find-units] --fsdp-min-unit-params=100 chose 3 module(s): ., big.0.fc, big.1.fc
# N100:      remark: [find-units] unit '.'
# N100-NEXT: remark: [find-units] unit 'big.0.fc'
# N100-NEXT: remark: [find-units] unit 'big.1.fc'
#
# N=10: the ModuleList `smalls` would reach it (18) but is a container, so the root holds
# them; attn.out_proj (20) would reach it but sits inside a MultiheadAttention, whose forward
# reads it directly: attn itself (80) becomes the unit.
# RUN: fsdp-opt %t.pt --fsdp-min-unit-params=10 --remarks 2>&1 | FileCheck %s --check-prefix=N10 --implicit-check-not='[find-units] unit'
# N10:      chose 6 module(s): ., big.0.fc, big.1.fc, attn, proj, head
# N10:      unit '.'
# N10-NEXT: unit 'big.0.fc'
# N10-NEXT: unit 'big.1.fc'
# N10-NEXT: unit 'attn' (__torch__.torch.nn.modules.activation.MultiheadAttention)
# N10-NEXT: unit 'proj'
# N10-NEXT: unit 'head'
#
# Units given otherwise come first and the policy counts what they leave: with smalls.* units,
# nothing is left for the root, which then is no unit.
# RUN: fsdp-opt %t.pt --fsdp-unit='smalls.*' --fsdp-min-unit-params=10 --remarks 2>&1 | FileCheck %s --check-prefix=MIXED --implicit-check-not="unit '.'"
# MIXED: chose 5 module(s): big.0.fc, big.1.fc, attn, proj, head
# MIXED: unit 'smalls.0'
#
# Sharded at W=2: the manifest lists the chosen units, and both ranks compute the original's
# output bit for bit.
# RUN: rm -rf %t.out && fsdp-opt %t.pt --fsdp-min-unit-params=10 --world-size=2 -o %t.out
# RUN: %python -c "import json,sys; print(' '.join(u['path'] for u in json.load(open(sys.argv[1]))['units']))" %t.out/manifest.json | FileCheck %s --check-prefix=MANIFEST
# MANIFEST: {{^}}. big.0.fc big.1.fc attn proj head{{$}}
# RUN: fsdp-run %t.out --inputs=%t.in.pt --check=%t.pt | FileCheck %s --check-prefix=RAN
# RAN-DAG: rank 0: outputs bitwise identical
# RAN-DAG: rank 1: outputs bitwise identical
#
# RUN: not fsdp-opt %t.pt --fsdp-min-unit-params=0 2>&1 | FileCheck %s --check-prefix=BAD
# RUN: not fsdp-opt %t.pt --fsdp-min-unit-params=1e6 2>&1 | FileCheck %s --check-prefix=BAD
# BAD: error: --fsdp-min-unit-params expects a number of parameter elements >= 1, got '{{0|1e6}}'

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Big(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 10)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.big = nn.ModuleList([Big(), Big()])
        self.smalls = nn.ModuleList([Small() for _ in range(3)])
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
        self.proj = nn.Linear(10, 4, bias=False)
        self.head = nn.Linear(4, 2)

    def forward(self, x, y):
        for big in self.big:
            x = big(x)
        for small in self.smalls:
            y = small(y)
        h = self.proj(x).unsqueeze(1)
        a, _ = self.attn(h, h, h)
        return self.head(a.squeeze(1)) + y.sum()


torch.manual_seed(0)
lh.save(Net(), sys.argv[1])
torch.save((torch.randn(3, 10), torch.randn(3, 2)), sys.argv[2])
