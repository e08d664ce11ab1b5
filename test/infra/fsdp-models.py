# Every model in test/Inputs/fsdp_models.py scripts, saves and loads on this leg's torch,
# gives the same bits eager, scripted and loaded, and keeps what the tests rely on: FSDP
# markers, the GPT's tied weight, one shared class type in SharedType, a deterministic
# greedy generate(), and the module's own command line.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t 2>&1 | FileCheck %s
# RUN: %python -m fsdp_models gpt -o %t/cli.pt --inputs %t/cli.in.pt --unit blocks.1 --forward-method .:generate --arg n_layer=3
# RUN: %python -c "import torch; m = torch.jit.load('%t/cli.pt'); import fsdp_models as fm; print(len(list(m.blocks.children())), fm.submodule(m, 'blocks.1')._fsdp_unit, m._fsdp_forward_methods, len(torch.load('%t/cli.in.pt')))" | FileCheck %s --check-prefix=CLI
# CLI: 3 True ['generate'] 1

import os
import sys

import torch

import fsdp_models as fm

out_dir = sys.argv[1]


def roundtrip(name, model):
    path = os.path.join(out_dir, name + ".pt")
    scripted = fm.save(model, path)
    return scripted, torch.jit.load(path)


def same(model, scripted, loaded, args):
    with torch.no_grad():
        ref = model(*args)
        return torch.equal(ref, scripted(*args)) and torch.equal(ref, loaded(*args))


for name in sorted(fm.MODELS):
    model = fm.make(name)
    scripted, loaded = roundtrip(name, model)
    print(name, "bitwise-equal:", same(model, scripted, loaded, fm.example_inputs(name)))
# CHECK: gpt bitwise-equal: True
# CHECK: nested bitwise-equal: True
# CHECK: resnet bitwise-equal: True
# CHECK: sequential bitwise-equal: True
# CHECK: shared_type bitwise-equal: True
# CHECK: small_dim0 bitwise-equal: True
# CHECK: two_blocks bitwise-equal: True
# CHECK: vit bitwise-equal: True
# CHECK: zero_dim bitwise-equal: True

# Markers survive scripting and saving, as module attributes with their values.
gpt = fm.mark(fm.make("gpt"), units=["blocks.0", "blocks.1"], forward_methods={".": ["generate"]})
_, loaded = roundtrip("gpt-marked", gpt)
print("gpt root:", loaded._c.hasattr("_fsdp_unit"), loaded._c.getattr("_fsdp_forward_methods"))
print("gpt blocks.0:", fm.submodule(loaded, "blocks.0")._c.getattr("_fsdp_unit"), "ln_f:", loaded.ln_f._c.hasattr("_fsdp_unit"))
# CHECK: gpt root: False ['generate']
# CHECK: gpt blocks.0: True ln_f: False

_, loaded = roundtrip("nested-marked", fm.make("nested"))
print("nested:", loaded.outer._c.getattr("_fsdp_unit"), loaded.outer.inner._c.getattr("_fsdp_unit"),
      loaded.head._c.hasattr("_fsdp_unit"))
# CHECK: nested: True True False

# SharedType: one class type for `a` and `b`, the marker differing only in value.
_, loaded = roundtrip("shared_type-marked", fm.make("shared_type"))
print("shared_type: one type:", loaded.a._c._type() == loaded.b._c._type(),
      "a:", loaded.a._c.getattr("_fsdp_unit"), "b:", loaded.b._c.getattr("_fsdp_unit"))
_, unmarked = roundtrip("shared_type-unmarked", fm.make("shared_type", marked=False))
print("shared_type unmarked: one type:", unmarked.a._c._type() == unmarked.b._c._type(),
      unmarked.a._c.hasattr("_fsdp_unit"))
# CHECK: shared_type: one type: True a: True b: False
# CHECK: shared_type unmarked: one type: True False

# The LM head's weight is the token embedding's, before and after a save/load.
loaded = torch.jit.load(os.path.join(out_dir, "gpt-marked.pt"))
print("tied:", gpt.lm_head.weight is gpt.wte.weight,
      loaded.lm_head.weight.data_ptr() == loaded.wte.weight.data_ptr())
# CHECK: tied: True True

# Greedy generate() is deterministic, crops to block_size, and agrees eager/scripted/loaded.
prompt = fm.example_inputs("gpt")[0]
with torch.no_grad():
    eager = gpt.generate(prompt, 20)
    runs = [loaded.generate(prompt, 20) for _ in range(2)]
print("generate:", list(eager.shape), torch.equal(eager, runs[0]), torch.equal(runs[0], runs[1]),
      "differs from prompt-only:", not torch.equal(eager[:, 5:], eager[:, 5:6].expand(-1, 20)))
# CHECK: generate: [2, 25] True True differs from prompt-only: True

# A new instance with the same seed has the same parameters; another seed does not.
def params_equal(m1, m2):
    return all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
print("seeded:", params_equal(fm.make("gpt"), fm.make("gpt")), params_equal(fm.make("gpt"), fm.make("gpt", seed=1)))
# CHECK: seeded: True False

# The shapes the sharding tests lean on.
print("zero_dim scale:", list(fm.make("zero_dim").scale.shape))
print("small_dim0:", {k: list(v.shape) for k, v in fm.make("small_dim0").named_parameters()})
# CHECK: zero_dim scale: []
# CHECK: small_dim0: {'gain': [1], 'fc.weight': [3, 8], 'fc.bias': [3]}

# save_inputs writes what torch.load reads back.
fm.save_inputs(fm.example_inputs("vit"), os.path.join(out_dir, "vit.in.pt"))
back = torch.load(os.path.join(out_dir, "vit.in.pt"))
print("inputs:", type(back).__name__, len(back), torch.equal(back[0], fm.example_inputs("vit")[0]))
# CHECK: inputs: tuple 1 True
# CHECK-NOT: Warning
