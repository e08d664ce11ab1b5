# The memory budget of hoist-loop-gathers is a hard bound: for budgets from "root + one layer"
# to unbounded, the runtime's peak of unsharded parameter bytes (fsdp stats) never exceeds the
# budget, results stay bitwise exact, and a larger budget never costs more collectives. One
# byte less than "root + one layer" cannot be kept by any schedule: fsdp-opt refuses it,
# naming root + one layer as the smallest budget, and writes nothing.
#
# RUN: %python -m fsdp_models gpt --arg n_layer=3 -o %t.pt
# RUN: %python %s %t.pt %t.work | FileCheck %s
#
# CHECK: budget root+1 layer - 1: refused, smallest budget {{[0-9]+}} named
# CHECK: budget root+1 layer: peak {{[0-9]+}} <= {{[0-9]+}}, gathers/generate 13, exact
# CHECK: budget root+2 layers: peak {{[0-9]+}} <= {{[0-9]+}}, gathers/generate {{[0-9]+}}, exact
# CHECK: budget unbounded: peak {{[0-9]+}} <= {{[0-9]+}}, gathers/generate 1, exact
import json
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
(idx,) = fsdp_models.example_inputs("gpt", n_layer=3)
steps = 4
inputs = os.path.join(work, "inputs.pt")
torch.save((idx, steps), inputs)


def shard(budget, out):
    cmd = ["fsdp-opt", model_path, "--fsdp-unit=.", "--fsdp-unit=blocks.*",
           "--forward-method=.:generate", "--world-size=2", "-o", out]
    if budget is not None:
        cmd.append("--max-unsharded-bytes=%d" % budget)
    subprocess.run(cmd, check=True)
    with open(os.path.join(out, "manifest.json")) as f:
        return {u["path"]: u["bytes"] for u in json.load(f)["units"]}


def run(out):
    result = subprocess.run(["fsdp-run", out, "--method", "generate", "--inputs", inputs,
                             "--check", model_path, "--stats"],
                            capture_output=True, text=True, timeout=240)
    if result.returncode != 0:
        sys.exit("fsdp-run failed:\n" + result.stdout + result.stderr)
    peaks = [int(p) for p in re.findall(r"peak_unsharded_bytes=(\d+)", result.stdout)]
    gathers = [int(g) for g in re.findall(r" all_gathers=(\d+)", result.stdout)]
    assert len(peaks) == 2 and len(gathers) == 2, result.stdout
    assert "bitwise identical" in result.stdout, result.stdout
    return max(peaks), gathers[0]


units = shard(None, os.path.join(work, "probe"))
root, layer = units["."], units["blocks.0"]

too_small = os.path.join(work, "too_small")
refused = subprocess.run(["fsdp-opt", model_path, "--fsdp-unit=.", "--fsdp-unit=blocks.*",
                          "--forward-method=.:generate", "--world-size=2", "-o", too_small,
                          "--max-unsharded-bytes=%d" % (root + layer - 1)], capture_output=True, text=True)
errors = [l for l in refused.stderr.splitlines() if l.startswith("error:")]
assert refused.returncode == 1 and len(errors) == 1, refused.stderr
assert ("the smallest budget any schedule can keep is %d bytes" % (root + layer)) in errors[0], errors[0]
assert "'.' (%d bytes)" % root in errors[0] and "'blocks." in errors[0], errors[0]
assert not os.path.exists(too_small), "something was written"
print("budget root+1 layer - 1: refused, smallest budget %d named" % (root + layer))
budgets = [("root+1 layer", root + layer), ("root+2 layers", root + 2 * layer),
           ("unbounded", None)]
previous = None
for name, budget in budgets:
    out = os.path.join(work, name.replace(" ", "_").replace("+", "p"))
    shard(budget, out)
    peak, gathers = run(out)
    bound = budget if budget is not None else sum(units.values())
    assert peak <= bound, "%s: peak %d over budget %d" % (name, peak, bound)
    assert previous is None or gathers <= previous, "a larger budget costs more collectives"
    previous = gathers
    print("budget %s: peak %d <= %d, gathers/generate %d, exact" % (name, peak, bound, gathers))
