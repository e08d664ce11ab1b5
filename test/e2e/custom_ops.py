# Models that call ops of their own libraries (docs/runtime.md, "Models with custom ops"): a
# user's C++ extension and torchvision's detection ops. Python registers them when the package
# is imported; fsdp-opt and fsdp-run load them with --load-op-library.
#
# - Scaled: two blocks calling fsdp_test::scaled_tanh (test/ops), taking a List[Tensor] as
#   torch.save writes it. Without the flag, fsdp-opt and fsdp-run each fail with one error line
#   that names the op and the flag, and write nothing; a library that does not load is one error
#   line too. With it, the rank files at W=2 are bitwise the original over two runs, and the
#   rank files still call the op.
# - torchvision's Faster R-CNN (mobilenet_v3_large_320_fpn, random weights, every box kept so
#   that the detections are not empty), scripted as torchvision documents, sharded with the root
#   and every InvertedResidual block as units, called with two images of different sizes: at W=2
#   both ranks' losses and detections are bitwise the original's (fsdp-run --check, two runs).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t %test_ops_lib

import glob
import os
import sys
from typing import List

import torch
import torch.nn as nn

import fsdp_harness as h

OPS_LIB = sys.argv[2]
torch.ops.load_library(OPS_LIB)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return torch.ops.fsdp_test.scaled_tanh(self.fc(x), 0.5)


class Scaled(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(2)])
        self.head = nn.Linear(d, 3)

    def forward(self, xs: List[torch.Tensor]) -> torch.Tensor:
        h = torch.cat(xs)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def torchvision_ops_library():
    """torchvision's op library (the _C*.so beside its __init__.py), or None."""
    try:
        import torchvision
    except ImportError:
        return None
    found = sorted(glob.glob(os.path.join(os.path.dirname(torchvision.__file__), "_C*.so")))
    return found[0] if found else None


def main():
    out = sys.argv[1]
    t = h.Test("custom_ops")
    torch.manual_seed(0)
    orig = os.path.join(out, "scaled.pt")
    torch.jit.script(Scaled().eval()).save(orig)
    inputs = os.path.join(out, "in.pt")
    torch.save(([torch.randn(3, 16), torch.randn(2, 16)],), inputs)
    before = open(orig, "rb").read()
    flags = ["--world-size=2", "--fsdp-unit=.", "--fsdp-unit=blocks.*"]

    missing = os.path.join(out, "missing")
    r = h.fsdp_opt(orig, *flags, "-o", missing)
    t.check(r.returncode == 1 and r.stderr.count("error:") == 1 and r.stderr.startswith("error: ")
            and "Unknown builtin op: fsdp_test::scaled_tanh" in r.stderr and "--load-op-library=PATH" in r.stderr
            and not os.path.exists(missing),
            "fsdp-opt without the op's library: one error naming the op and the flag, nothing written", r.describe())
    bad = os.path.join(out, "bad")
    r = h.fsdp_opt(orig, "--load-op-library=" + os.path.join(out, "nope.so"), *flags, "-o", bad)
    t.check(r.returncode == 1 and r.stderr.count("error:") == 1
            and ("cannot load op library '%s'" % os.path.join(out, "nope.so")) in r.stderr and not os.path.exists(bad),
            "fsdp-opt with a library that does not load: one error naming it, nothing written", r.describe())

    sharded = os.path.join(out, "scaled")
    r = h.fsdp_opt(orig, "--load-op-library=" + OPS_LIB, *flags, "-o", sharded)
    if t.check(r.returncode == 0, "fsdp-opt --load-op-library=libfsdp_test_ops.so", r.describe()):
        torch.ops.load_library(h.runtime_lib())
        rank1 = torch.jit.load(os.path.join(sharded, "rank1.pt"))
        t.check("fsdp_test::scaled_tanh" in str(getattr(rank1.blocks, "0").graph), "the rank files still call the op")
        r = h.fsdp_run(sharded, inputs=inputs, check=orig)
        t.check(r.returncode == 2 and r.stderr.count("error:") == 1
                and "fsdp_test::scaled_tanh" in r.stderr and "--load-op-library" in r.stderr,
                "fsdp-run without the op's library: one error naming the op and the flag", r.describe())
        r = h.fsdp_run(sharded, inputs=inputs, check=orig, repeat=2, extra=["--load-op-library=" + OPS_LIB])
        h.check_fsdp_run_exact(t, r, "a List[Tensor] argument from torch.save, the op's library loaded", 2, orig)
    t.check(open(orig, "rb").read() == before, "the input file is unchanged")

    tv_lib = torchvision_ops_library()
    if tv_lib is None:
        print("SKIP torchvision's Faster R-CNN: torchvision or its op library is not installed")
        return t.finish("custom ops: loaded with --load-op-library, exact")
    import torchvision
    torch.manual_seed(0)
    detector = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=5, box_score_thresh=0.0).eval()
    det_pt = os.path.join(out, "frcnn.pt")
    torch.jit.script(detector).save(det_pt)
    g = torch.Generator().manual_seed(1)
    det_in = os.path.join(out, "frcnn_in.pt")
    images = [torch.rand(3, 160, 200, generator=g), torch.rand(3, 120, 150, generator=g)]
    torch.save((images,), det_in)
    with torch.no_grad():
        _, detections = torch.jit.load(det_pt)(images)
    t.check(all(d["boxes"].shape[0] > 0 for d in detections), "the original detects boxes in both images",
            str([tuple(d["boxes"].shape) for d in detections]))
    det_out = os.path.join(out, "frcnn")
    r = h.fsdp_opt(det_pt, "--load-op-library=" + tv_lib, "--world-size=2", "--fsdp-unit=.",
                   "--fsdp-unit-type=InvertedResidual", "-o", det_out)
    if t.check(r.returncode == 0, "fsdp-opt Faster R-CNN --load-op-library=" + os.path.basename(tv_lib), r.describe()):
        r = h.fsdp_run(det_out, inputs=det_in, check=det_pt, repeat=2, extra=["--load-op-library=" + tv_lib])
        h.check_fsdp_run_exact(t, r, "Faster R-CNN, two images", 2, det_pt)
    return t.finish("custom ops: loaded with --load-op-library, exact")


if __name__ == "__main__":
    sys.exit(main())
