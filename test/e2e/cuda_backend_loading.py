# The CUDA backend is a library of its own, loaded only by a process that needs it (runtime/
# data_path.h, registerDevicePath; docs/runtime.md, "CUDA", "Building"):
#   - `fsdp-opt` sharding a model, and `fsdp-opt --version`, load none of the libraries of
#     torch's CUDA part (libtorch_cuda, cuBLAS, cuDNN, NCCL, ...): the glibc loader's own trace
#     (LD_DEBUG=files) lists what each run loaded, and that it lists libtorch_cpu shows the
#     trace works. On a CUDA build of torch these cost some 300 MiB of resident memory
#     (docs/benchmarks.md, section 7);
#   - in a Python process, libfsdp_runtime loads libfsdp_runtime_cuda at the first question
#     about the CUDA path (has_cuda_backend(), or a gather of CUDA tensors), not before, and
#     from its own directory: a copy of libfsdp_runtime alone in a directory has no CUDA
#     backend, the same copy with libfsdp_runtime_cuda beside it has one (the install and pip
#     layouts rely on this);
#   - a build without the CUDA backend says so: has_cuda_backend() is false.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t %cuda_backend

import glob
import os
import shutil
import subprocess
import sys

import fsdp_harness as h
import fsdp_models as fm

# What libtorch_cuda brings. Not libcudart or libcupti: the CUDA wheel's libtorch_cpu needs those
# itself (its profiler), a few MiB.
CUDA_LIBRARIES = ("libtorch_cuda", "libc10_cuda", "libnccl", "libcublas", "libcudnn", "libcufft",
                  "libcusparse", "libcusolver", "libnvrtc", "libfsdp_runtime_cuda")


def loaded_libraries(t, what, cmd, out_dir):
    """Runs `cmd` under LD_DEBUG=files; returns the base names of the shared objects it loaded."""
    prefix = os.path.join(out_dir, "ld-" + what.replace(" ", "-"))
    env = dict(os.environ, LD_DEBUG="files", LD_DEBUG_OUTPUT=prefix)
    r = h.run_tool(cmd, env=env)
    t.check(r.returncode == 0, what + " runs", r.describe() if r.returncode else "")
    names = set()
    for trace in glob.glob(prefix + ".*"):
        for line in open(trace, errors="replace"):
            # "   1234:	file=libtorch_cpu.so [0];  needed by ..." / "...;  dynamically loaded by ..."
            if "file=" in line and ("needed by" in line or "dynamically loaded by" in line):
                names.add(os.path.basename(line.split("file=", 1)[1].split()[0]))
    return names


def check_no_cuda_loaded(t, what, names):
    t.check(any(n.startswith("libtorch_cpu") for n in names), what + ": the loader's trace lists libtorch_cpu",
            "%d libraries traced" % len(names))
    cuda = sorted(n for n in names if n.startswith(CUDA_LIBRARIES))
    t.check(not cuda, what + ": no CUDA library or NCCL loaded", ", ".join(cuda))


PROBE = r"""
import sys, torch
lib = sys.argv[1]
def mapped():
    return "libfsdp_runtime_cuda" in open("/proc/self/maps").read()
torch.ops.load_library(lib)
before = mapped()
has = bool(torch.ops.fsdp.has_cuda_backend())
print("before=%d has=%d after=%d" % (before, has, mapped()))
"""


def probe(lib):
    r = h.run_tool([sys.executable, "-c", PROBE, lib])
    return r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else r.describe()


def main():
    out_dir, cuda_backend = sys.argv[1], sys.argv[2] == "1"
    t = h.Test("cuda_backend_loading")
    model = os.path.join(out_dir, "gpt.pt")
    fm.save(fm.mark(fm.make("gpt", n_layer=2), units=["."], forward_methods={".": ["generate"]}), model)

    fsdp_opt = h.which("fsdp-opt")
    for what, cmd in [
        ("fsdp-opt --version", [fsdp_opt, "--version"]),
        ("fsdp-opt -o at W=2", [fsdp_opt, model, "--fsdp-unit=blocks.*", "--world-size=2", "-o",
                                 os.path.join(out_dir, "w2")]),
    ]:
        check_no_cuda_loaded(t, what, loaded_libraries(t, what, cmd, out_dir))

    runtime = h.runtime_lib()
    plugin = os.path.join(os.path.dirname(runtime), "libfsdp_runtime_cuda.so")
    t.check(os.path.exists(plugin) == cuda_backend,
            "libfsdp_runtime_cuda.so beside libfsdp_runtime exactly when the build has the CUDA backend",
            "build: %s, %s: %s" % ("CUDA" if cuda_backend else "CPU only", plugin, os.path.exists(plugin)))
    want = "before=0 has=%d after=%d" % (cuda_backend, cuda_backend)
    got = probe(runtime)
    t.check(got == want, "the build's libfsdp_runtime: the CUDA backend loaded at has_cuda_backend(), not before",
            "want %r, got %r" % (want, got))
    if cuda_backend:
        alone = os.path.join(out_dir, "alone")
        beside = os.path.join(out_dir, "beside")
        for d in (alone, beside):
            os.makedirs(d)
            shutil.copy(runtime, d)
        shutil.copy(plugin, beside)
        got = probe(os.path.join(alone, os.path.basename(runtime)))
        t.check(got == "before=0 has=0 after=0", "libfsdp_runtime without libfsdp_runtime_cuda beside it has no CUDA backend",
                got)
        got = probe(os.path.join(beside, os.path.basename(runtime)))
        t.check(got == "before=0 has=1 after=1", "libfsdp_runtime finds libfsdp_runtime_cuda in its own directory", got)
    else:
        t.note("built without the CUDA backend: the copies with and without libfsdp_runtime_cuda are not checked")
    return t.finish("CPU work loads no CUDA library; the CUDA backend loads on first use, from beside libfsdp_runtime")


if __name__ == "__main__":
    sys.exit(main())
