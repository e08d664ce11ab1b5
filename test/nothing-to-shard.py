# A run that would shard nothing is refused with one `error:` line saying where the weights are,
# exit 1, nothing written, the input untouched: every rank file would otherwise hold the whole
# model, and a user who asked for sharding finds out only when memory runs out.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t
#
# A model frozen for inference (torch.jit.freeze; optimize_for_inference freezes too): its
# weights are constants in the graph, and its submodules are gone.
# RUN: %python -m lit_helpers run fsdp-opt %t/frozen.pt --fsdp-unit=. --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=FROZEN --implicit-check-not=error: --match-full-lines
# FROZEN:      [stdout]
# FROZEN-NEXT: [stderr]
# FROZEN-NEXT: error: no FSDP unit holds a parameter to shard (units: '.'), so every rank file would hold the whole model: the model's weights are 8 tensor constants (1008 bytes) in its graphs, as torch.jit.freeze and torch.jit.optimize_for_inference leave them; run fsdp-opt on the scripted model before freezing it
# FROZEN-NEXT: [exit 1]
# RUN: %python -m lit_helpers run fsdp-opt %t/optimized.pt --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=OPTIMIZED --implicit-check-not=error: --match-full-lines
# OPTIMIZED:      [stderr]
# OPTIMIZED-NEXT: error: no module is an FSDP unit, so each of the 2 rank files would hold the whole model: the model's weights are {{[0-9]+}} tensor constants ({{[0-9]+}} bytes) in its graphs, as torch.jit.freeze and torch.jit.optimize_for_inference leave them; run fsdp-opt on the scripted model before freezing it
# OPTIMIZED-NEXT: [exit 1]
#
# A dynamically quantized model: its Linear weights are packed objects of a C++ class.
# RUN: %python -m lit_helpers run fsdp-opt %t/quantized.pt --fsdp-unit=. --fsdp-unit-type=Block --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=PACKED --implicit-check-not=error: --match-full-lines
# (torch 2.x warns on loading quantized tensors before the error line.)
# PACKED:      [stderr]
# PACKED:      error: no FSDP unit holds a parameter to shard (units: '.', 'blocks.0', 'blocks.1', 'blocks.2'), so every rank file would hold the whole model: the model keeps its weights in 4 packed object(s) of C++ classes, 'blocks.0.fc._packed_params._packed_params' (quantized.LinearPackedParamsBase) and others, which fsdp-opt cannot shard; shard the model before it is quantized or prepacked
# PACKED-NEXT: [exit 1]
#
# Units that hold no parameter while the model has some: the weights sit above them.
# RUN: %python -m lit_helpers run fsdp-opt %t/float.pt '--fsdp-unit=blocks.*.act' --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=ABOVE --implicit-check-not=error: --match-full-lines
# ABOVE:      [stderr]
# ABOVE-NEXT: error: no FSDP unit holds a parameter to shard (units: 'blocks.0.act', 'blocks.1.act', 'blocks.2.act'), so every rank file would hold the whole model: parameter 'blocks.0.fc.weight' and any others are above every unit; designate the modules that hold them
# ABOVE-NEXT: [exit 1]
#
# No unit at all, from two ranks on.
# RUN: %python -m lit_helpers run fsdp-opt %t/float.pt --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=NONE --implicit-check-not=error: --match-full-lines
# NONE:      [stderr]
# NONE-NEXT: error: no module is an FSDP unit, so each of the 2 rank files would hold the whole model: designate units with --fsdp-unit, --fsdp-unit-type, --fsdp-min-unit-params or a `_fsdp_unit` marker
# NONE-NEXT: [exit 1]
#
# Nothing was written, and every input is as it was.
# RUN: %python -m lit_helpers tree %t/out | FileCheck %s --check-prefix=NOTHING
# NOTHING: out: missing
# RUN: %python %s %t --check-inputs | FileCheck %s --check-prefix=INPUTS
# INPUTS: inputs unchanged: True
#
# At world size 1 a model without units is no error: --print-ir is how one reads its IR, and
# the same float model with its blocks as units shards.
# RUN: fsdp-opt %t/float.pt --print-ir > /dev/null
# RUN: fsdp-opt %t/float.pt --fsdp-unit-type=Block --world-size=2 -o %t/sharded
# RUN: %python -m lit_helpers tree %t/sharded | FileCheck %s --check-prefix=SHARDED
# SHARDED: manifest.json

import json
import os
import sys
import warnings

import torch
import torch.nn as nn

import lit_helpers as lh

warnings.simplefilter("ignore")
out = sys.argv[1]
names = ["frozen.pt", "optimized.pt", "quantized.pt", "float.pt"]

if sys.argv[2:] == ["--check-inputs"]:
    with open(os.path.join(out, "hashes.json")) as f:
        before = json.load(f)
    print("inputs unchanged:", before == {n: lh.sha256(os.path.join(out, n)) for n in names})
    sys.exit(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


torch.manual_seed(0)
model = Model().eval()
torch.jit.freeze(torch.jit.script(model)).save(os.path.join(out, "frozen.pt"))
torch.jit.optimize_for_inference(torch.jit.script(model)).save(os.path.join(out, "optimized.pt"))
quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
torch.jit.script(quantized).save(os.path.join(out, "quantized.pt"))
torch.jit.script(model).save(os.path.join(out, "float.pt"))
with open(os.path.join(out, "hashes.json"), "w") as f:
    json.dump({n: lh.sha256(os.path.join(out, n)) for n in names}, f)
