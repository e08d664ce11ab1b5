# GPU parity (ctest/lit feature `cuda`): the GPT-style model rewritten by fsdp-opt for world
# size 1 (--fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate), run on the GPU,
# gives outputs bitwise identical to the original model run on the GPU, for `generate` and
# `forward`, three times each (TorchScript's profiling executor optimises the graphs), on the
# copy-only path and again with FSDP_OPT_CUDA_FORCE_NCCL=1 under each gather layout: packed
# (copy-in, a one-rank NCCL all-gather, copy-out) and per-param (one grouped NCCL all-gather per
# parameter, no copy-out). A third run has TorchScript's GPU fusers off: if only the default runs differ, the
# difference comes from fusion groups the fsdp ops split (a fused kernel may round differently),
# not from the gathered parameters. Prints "skipped: no CUDA device" without a GPU.
#
#   gpt_parity_cuda.py RUNTIME_LIB FSDP_OPT OUTDIR    make the model and its rewrite, then check
#   gpt_parity_cuda.py --prepare FSDP_OPT DIR         only make them (no GPU needed): DIR/gpt.pt,
#                                                     DIR/gpt.w1.pt, DIR/prepared.json
#   gpt_parity_cuda.py --prepared DIR RUNTIME_LIB     only check, on files made by --prepare
#
# The split is for scripts/gpu-check.sh: a GPU machine may lack fsdp-opt's CPU-side dependencies
# (nlohmann_json, CLI11, OpenSSL), so its dry run prepares the files on the CI machine and the
# GPU run gets them carried along (docs/runtime.md, "Testing on a GPU").
#
# REQUIRES: cuda
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %runtime_lib fsdp-opt %t

import json
import os
import shutil
import subprocess
import sys
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Inputs"))
from cuda_paths import GATHER_PATHS, load_or_skip  # noqa: E402

try:
    import fsdp_models as fm
except ImportError:
    # test/Inputs/fsdp_models.py imports torchvision for its image models only; a GPU machine
    # without torchvision can still build the GPT.
    sys.modules.setdefault("torchvision", types.ModuleType("torchvision"))
    import fsdp_models as fm

MAX_NEW_TOKENS = 13
REPEAT = 3


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a = a.detach().cpu().contiguous().view(-1).view(torch.uint8)
    b = b.detach().cpu().contiguous().view(-1).view(torch.uint8)
    return torch.equal(a, b)


def fusers_off():
    for name, arg in (("_jit_set_texpr_fuser_enabled", False), ("_jit_override_can_fuse_on_gpu", False),
                      ("_jit_set_nvfuser_enabled", False)):
        try:
            getattr(torch._C, name)(arg)
        except (AttributeError, RuntimeError):
            pass


def run_parity(lib, orig_path, rewritten_path, label):
    if "no fusers" in label:
        fusers_off()
    torch.ops.load_library(lib)
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    orig = torch.jit.load(orig_path, map_location=dev).eval()
    rewritten = torch.jit.load(rewritten_path, map_location=dev).eval()
    (idx,) = fm.example_inputs("gpt", batch=3)
    idx = idx.to(dev)
    failures = 0
    torch.ops.fsdp.reset_stats()
    with torch.no_grad():
        for i in range(REPEAT):
            for name, call in (("generate", lambda m: m.generate(idx, MAX_NEW_TOKENS)),
                               ("forward", lambda m: m(idx))):
                want = call(orig)
                got = call(rewritten)
                ok = same_bits(got, want)
                failures += not ok
                print("%s: %s run %d: %s" % (label, name, i + 1,
                                             "bitwise identical" if ok else "MISMATCH"))
    torch.cuda.synchronize()
    s = dict(torch.ops.fsdp.stats())
    print("%s: stats %s" % (label, s))
    if s["all_gathers"] == 0 or s["all_gathers"] != s["reshards"] or s["unsharded_bytes"] != 0:
        print("%s: FAIL: gathers and reshards do not match" % label)
        failures += 1
    for p in rewritten.parameters():
        if p.device != dev:
            print("%s: FAIL: a parameter is on %s" % (label, p.device))
            failures += 1
            break
    return failures


def prepare(fsdp_opt, out):
    """Writes the original GPT and its rewrite for world size 1 into `out`, atomically."""
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    model = fm.make("gpt", n_layer=4, n_embd=64, n_head=4)
    orig = os.path.join(tmp, "gpt.pt")
    fm.save(model, orig)
    cmd = [fsdp_opt, orig, "--fsdp-unit=.", "--fsdp-unit=blocks.*", "--forward-method=.:generate",
           "--world-size=1", "-o", os.path.join(tmp, "gpt.w1.pt")]
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    version = subprocess.run([fsdp_opt, "--version"], check=True, capture_output=True,
                             text=True).stdout.strip()
    with open(os.path.join(tmp, "prepared.json"), "w") as f:
        json.dump({"torch": torch.__version__, "fsdp_opt": version,
                   "command": " ".join(os.path.basename(c) if os.path.isabs(c) else c
                                       for c in cmd)}, f, indent=1)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    print("prepared %s (torch %s, %s)" % (out, torch.__version__, version))


def check(lib, prepared):
    info_path = os.path.join(prepared, "prepared.json")
    if os.path.exists(info_path):
        with open(info_path) as f:
            info = json.load(f)
        print("rank files made with torch %s by %s; running torch %s"
              % (info["torch"], info["fsdp_opt"], torch.__version__))
    orig = os.path.join(prepared, "gpt.pt")
    rewritten = os.path.join(prepared, "gpt.w1.pt")
    failures = 0
    for label, env in GATHER_PATHS + (("copy-only, no fusers", {}),):
        e = dict(os.environ)
        e.update(env)
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", lib, orig,
                            rewritten, label], env=e)
        failures += r.returncode != 0
    print("gpt_parity_cuda: %s" % ("PASS" if failures == 0 else "FAIL"))
    return 1 if failures else 0


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--child":
        _, _, lib, orig, rewritten, label = sys.argv
        sys.exit(1 if run_parity(lib, orig, rewritten, label) else 0)
    if len(sys.argv) == 4 and sys.argv[1] == "--prepare":
        prepare(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "--prepared":
        prepared, lib = sys.argv[2:4]
    elif len(sys.argv) == 4:
        lib, fsdp_opt, out = sys.argv[1:4]
        prepared = os.path.join(out, "prepared")
    else:
        sys.exit("usage: gpt_parity_cuda.py RUNTIME_LIB FSDP_OPT OUTDIR | --prepare FSDP_OPT DIR "
                 "| --prepared DIR RUNTIME_LIB")
    skip = load_or_skip(lib)
    if skip:
        print("skipped: " + skip)
        return 0
    if sys.argv[1] != "--prepared":
        prepare(fsdp_opt, prepared)
    return check(lib, prepared)


if __name__ == "__main__":
    sys.exit(main())
