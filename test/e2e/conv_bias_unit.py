# A unit whose parameter group holds an nn.Conv2d bias. TorchScript types Conv2d's `bias`
# attribute Optional[Tensor] (it may be None), unlike nn.Linear's Tensor. fsdp-opt must shard
# it like any parameter: the sharded model on W ranks is bitwise the original, with the conv
# itself a unit and with the root a unit (the conv in the root's group).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch
import torch.nn as nn

import fsdp_harness as h


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.conv = nn.Conv2d(3, 5, 3)        # weight [5, 3, 3, 3], bias [5]: Optional[Tensor]
            self.fc = nn.Linear(5, 7)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def main():
    out_dir = sys.argv[1]
    t = h.Test("conv_bias_unit")
    orig = os.path.join(out_dir, "convnet.pt")
    torch.jit.save(torch.jit.script(ConvNet().eval()), orig)
    inputs = os.path.join(out_dir, "in.pt")
    g = torch.Generator().manual_seed(1)
    torch.save((torch.randn(2, 3, 8, 8, generator=g),), inputs)

    done = []
    for units in (["--fsdp-unit=conv"], ["--fsdp-unit=."]):
        for w in (2, 3):
            label = "W=%d %s" % (w, units[0])
            out = os.path.join(out_dir, "w%d%s" % (w, units[0].replace("--fsdp-unit=", "_").replace(".", "root")))
            r = h.fsdp_opt(orig, "--world-size=%d" % w, *units, "-o", out)
            if not t.check(r.returncode == 0, "%s: fsdp-opt succeeds" % label, r.stderr.strip()[-800:]):
                continue
            h.check_rank_files(t, out, orig, w, label)
            r = h.fsdp_run(out, inputs=inputs, check=orig, repeat=3)
            if h.check_fsdp_run_exact(t, r, "%s forward x3" % label, w, orig):
                done.append(label)
    return t.finish("Conv2d (Optional bias) in a unit: %s bitwise identical on every rank" % ", ".join(done))


if __name__ == "__main__":
    sys.exit(main())
