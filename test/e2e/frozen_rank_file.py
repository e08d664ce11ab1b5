# A rank file frozen for inference, as deployments do with any TorchScript model
# (torch.jit.freeze(torch.jit.load(path).eval()), or torch.jit.optimize_for_inference), W=2:
# each call returns the original model's output bit for bit, on every rank, for a Linear stack
# and for conv + BatchNorm blocks (which freezing would fold if the weights were constants: the
# gathers mutate them, so they stay attributes).
#
# Each rank first runs the original model in the same process, as a program checking its rank
# file would. On torch 2.15 that used to crash the ranks (SIGSEGV in c10d's flight recorder,
# which took a TorchScript traceback of the frozen method's first gather); the runtime now sizes
# the recorder 0 unless the environment sizes it (docs/runtime.md, "Process group").
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch
import torch.nn as nn

import fsdp_harness as h

WORLD = 2
CALLS = 3


class LinearBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class LinearStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(LinearBlock(), LinearBlock(), LinearBlock())
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.blocks(x))


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3)
        self.blocks = nn.Sequential(ConvBlock(), ConvBlock())
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def rank_main(ctx):
    torch = ctx.torch
    x = h.torch_load(ctx.args["inputs"])[0]
    original = torch.jit.load(ctx.args["original"])
    want = original(x)  # another TorchScript module runs first in this process
    out = {}
    for how in ("freeze", "optimize_for_inference"):
        m = ctx.load(ctx.rank_file(ctx.args["dir"])).eval()
        frozen = torch.jit.freeze(m) if how == "freeze" else torch.jit.optimize_for_inference(m)
        with torch.no_grad():
            out[how] = [frozen(x) for _ in range(CALLS)]
    return {"want": want.detach(), "out": out}


def main():
    out_dir = sys.argv[1]
    t = h.Test("frozen_rank_file")
    torch.manual_seed(0)
    conv = ConvNet().eval()
    for module in conv.modules():
        if isinstance(module, nn.BatchNorm2d):  # statistics a trained model would have
            module.running_mean.uniform_(-1, 1)
            module.running_var.uniform_(0.5, 2)
    models = {
        "linear": (LinearStack().eval(), ["--fsdp-unit=.", "--fsdp-unit-type=LinearBlock"], torch.randn(2, 8)),
        "conv": (conv, ["--fsdp-unit=.", "--fsdp-unit-type=ConvBlock"], torch.randn(2, 3, 12, 12)),
    }
    for name, (model, units, x) in models.items():
        pt = os.path.join(out_dir, name + ".pt")
        torch.jit.script(model).save(pt)
        inputs = os.path.join(out_dir, name + ".in.pt")
        torch.save((x,), inputs)
        d = os.path.join(out_dir, name)
        r = h.fsdp_opt(pt, *units, "--world-size=%d" % WORLD, "-o", d)
        if not t.check(r.returncode == 0, "%s: fsdp-opt" % name, "" if r.returncode == 0 else r.describe()):
            continue
        results = h.run_ranks(WORLD, rank_main, {"dir": d, "inputs": inputs, "original": pt}, timeout=120)
        if not t.check(all(res.ok for res in results), "%s: both ranks return (no crash, no hang)" % name,
                       h.describe_ranks(results)):
            continue
        for res in results:
            for how, outputs in res.value["out"].items():
                diffs = [h.same_bits(y, res.value["want"]) for y in outputs]
                t.check(not any(diffs), "%s, rank %d, %s: %d calls bitwise equal to the original"
                        % (name, res.rank, how, CALLS), "; ".join(d for d in diffs if d))
    return t.finish("W=%d: frozen and optimize_for_inference'd rank files of a Linear stack and a conv+BN "
                    "net, each call exact on every rank" % WORLD)


if __name__ == "__main__":
    sys.exit(main())
