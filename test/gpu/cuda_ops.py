# The fsdp:: ops on CUDA tensors from Python and TorchScript (lit feature `cuda`), at world size 1,
# against a CPU reference: all_gather with and without param_dtype (bitwise `full.to(dtype)`),
# all_gather_start / all_gather_wait with work queued between them on another stream, a
# scripted module using both, and release_all dropping a started gather; then the same again
# with FSDP_OPT_CUDA_FORCE_NCCL=1 (the NCCL path on a one-rank communicator), once per gather
# layout (FSDP_OPT_CUDA_GATHER_LAYOUT=packed, per-param). Prints "skipped: no CUDA device"
# without a GPU.
#
#   cuda_ops.py RUNTIME_LIB
#
# REQUIRES: cuda
# RUN: %python %s %runtime_lib

import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Inputs"))
from cuda_paths import GATHER_PATHS, load_or_skip  # noqa: E402


def finite(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    x = x * torch.pow(2.0, torch.randint(-150, 90, shape, generator=g).to(torch.float64))
    return x.to(dtype)


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a = a.detach().cpu().contiguous().view(-1).view(torch.uint8)
    b = b.detach().cpu().contiguous().view(-1).view(torch.uint8)
    return torch.equal(a, b)


class Checks:
    def __init__(self, label):
        self.label = label
        self.failed = 0

    def check(self, name, fn):
        try:
            fn()
            print("%s: PASS %s" % (self.label, name))
        except Exception as e:  # noqa: BLE001
            self.failed += 1
            print("%s: FAIL %s: %s" % (self.label, name, e))


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def tests(label):
    ops = torch.ops.fsdp
    dev = torch.device("cuda")
    c = Checks(label)
    specs = [((10, 3), torch.float32), ((2, 5), torch.float64), ((1, 4, 2), torch.float16),
             ((13,), torch.bfloat16), ((300, 70), torch.float32), ((7,), torch.int64)]

    def unit(seed):
        fulls = [finite(s, d, seed + i) if d.is_floating_point else torch.arange(s[0], dtype=d)
                 for i, (s, d) in enumerate(specs)]
        params = [torch.nn.Parameter(f.to(dev), requires_grad=f.is_floating_point()) for f in fulls]
        return fulls, params, [f.shape[0] for f in fulls]

    def want(f, pd):
        return f.to(pd) if (pd is not None and f.is_floating_point()) else f

    for pd in (None, torch.bfloat16, torch.float16, torch.float64):
        def gather(pd=pd):
            fulls, params, rows = unit(1)
            ptrs = [p.data_ptr() for p in params]
            ops.all_gather(params, rows, "u", pd)
            for p, f in zip(params, fulls):
                expect(same_bits(p, want(f, pd)), "not bitwise full.to(%s)" % pd)
            ops.reshard(params, "u")
            for p, f, ptr in zip(params, fulls, ptrs):
                expect(same_bits(p, f) and p.data_ptr() == ptr, "reshard did not restore the shard")
        c.check("all_gather_%s" % pd, gather)

    def start_wait():
        fulls, params, rows = unit(2)
        side = torch.cuda.Stream()
        h = ops.all_gather_start(params, rows, "s", torch.bfloat16)
        with torch.cuda.stream(side):
            x = torch.randn(1024, 1024, device=dev)
            y = x @ x
        ops.all_gather_wait(h)
        for p, f in zip(params, fulls):
            expect(same_bits(p, want(f, torch.bfloat16)), "start/wait result differs")
        ops.reshard(params, "s")
        torch.cuda.synchronize()
        expect(y.shape == (1024, 1024), "side-stream work")
    c.check("start_wait", start_wait)

    def scripted():
        class M(torch.nn.Module):
            def __init__(self, a, b):
                super().__init__()
                self.a = a
                self.b = b

            def forward(self, x):
                h = torch.ops.fsdp.all_gather_start([self.b], [64], "b", torch.bfloat16)
                fa = torch.ops.fsdp.all_gather([self.a], [64], "a", torch.bfloat16)
                y = x @ self.a.t()
                torch.ops.fsdp.reshard(fa, "a")
                fb = torch.ops.fsdp.all_gather_wait(h)
                z = y @ self.b.t()
                torch.ops.fsdp.reshard(fb, "b")
                return z
        a = finite((64, 64), torch.float32, 3).clamp(-1, 1)
        b = finite((64, 64), torch.float32, 4).clamp(-1, 1)
        m = torch.jit.script(M(torch.nn.Parameter(a.to(dev)), torch.nn.Parameter(b.to(dev))))
        x = torch.randn(8, 64, device=dev, dtype=torch.bfloat16)
        ref = (x @ a.to(dev, torch.bfloat16).t()) @ b.to(dev, torch.bfloat16).t()
        for _ in range(3):
            expect(same_bits(m(x), ref), "scripted result differs")
        expect(m.a.dtype == torch.float32, "left gathered")
    c.check("torchscript_start_wait", scripted)

    def release_all():
        fulls, params, rows = unit(5)
        ops.all_gather_start(params, rows, "r", torch.float16)
        ops.release_all()
        for p, f in zip(params, fulls):
            expect(same_bits(p, f), "release_all left a parameter changed")
        s = dict(ops.stats())
        expect(s["in_flight"] == 0 and s["unsharded_bytes"] == 0, "stats %s" % s)
    c.check("release_all", release_all)
    return c.failed


def main():
    lib = sys.argv[1]
    skip = load_or_skip(lib)
    if skip:
        print("skipped: " + skip)
        return 0
    if len(sys.argv) > 2 and sys.argv[2] == "--child":
        return 1 if tests(sys.argv[3]) else 0
    failed = 0
    for label, env in GATHER_PATHS:
        e = dict(os.environ)
        e.update(env)
        failed += subprocess.run([sys.executable, os.path.abspath(__file__), lib, "--child", label],
                                 env=e).returncode != 0
    print("cuda_ops: %s" % ("PASS" if failed == 0 else "FAIL"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
