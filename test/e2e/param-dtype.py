# Mixed precision (--param-dtype): gathers in bf16 / fp16 while the shards keep float32, and the
# results are bitwise those of the original model whose parameters were cast the same way.
#
# RUN: %python -m fsdp_models gpt --arg n_layer=2 -o %t.pt
# RUN: %python %s %t.pt %t.work | FileCheck %s
#
# CHECK: bf16 W=2: shards float32, gathered bytes halved, generate bitwise equal to the bf16-cast original
# CHECK: bf16 W=3: shards float32, gathered bytes halved, generate bitwise equal to the bf16-cast original
import os
import re
import shutil
import subprocess
import sys

import torch

import fsdp_models

model_path, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
torch.ops.load_library(os.environ["FSDP_OPT_RUNTIME_LIB"])
(idx,) = fsdp_models.example_inputs("gpt", n_layer=2)
inputs = os.path.join(work, "inputs.pt")
torch.save((idx, 5), inputs)


def cast_reference(dtype, path):
    """The original model with every parameter (not buffer) cast to dtype."""
    model = torch.jit.load(model_path)
    with torch.no_grad():
        for _, param in model.named_parameters():
            param.data = param.data.to(dtype)
    torch.jit.save(model, path)


def stats_of(output):
    return [dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", line))
            for line in output.splitlines() if " stats: " in line]


# fp16 is accepted too, but torch's CPU LayerNorm has no Half kernel (1.13), so the GPT's
# reference cannot run in fp16 on this machine: both cases use bf16.
for name, dtype, world in [("bf16", torch.bfloat16, 2), ("bf16", torch.bfloat16, 3)]:
    reference = os.path.join(work, "%s-w%d-reference.pt" % (name, world))
    cast_reference(dtype, reference)
    runs = {}
    for label, extra in [("full", []), (name, ["--param-dtype=" + name])]:
        out = os.path.join(work, "%s-w%d-%s" % (name, world, label))
        subprocess.run(["fsdp-opt", model_path, "--fsdp-unit=.", "--fsdp-unit=blocks.*",
                        "--forward-method=.:generate", "--world-size=%d" % world, "-o", out] + extra,
                       check=True)
        check = reference if label == name else model_path
        result = subprocess.run(["fsdp-run", out, "--method", "generate", "--inputs", inputs,
                                 "--check", check, "--stats"], capture_output=True, text=True,
                                timeout=240)
        if result.returncode != 0:
            sys.exit("fsdp-run %s failed:\n%s%s" % (out, result.stdout, result.stderr))
        assert result.stdout.count("bitwise identical") == world, result.stdout
        runs[label] = stats_of(result.stdout)
        shard = torch.jit.load(os.path.join(out, "rank0.pt"))
        assert shard.wte.weight.dtype == torch.float32, "shards must keep their dtype"
    full_bytes = runs["full"][0]["bytes_gathered"]
    low_bytes = runs[name][0]["bytes_gathered"]
    assert low_bytes * 2 == full_bytes, (low_bytes, full_bytes)
    print("%s W=%d: shards float32, gathered bytes halved, generate bitwise equal to the %s-cast original"
          % (name, world, name))
