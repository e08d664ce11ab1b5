# -*- Python -*-
# lit configuration for fsdp-opt. Build paths come from the generated lit.site.cfg.py.
#
# A test is a .py file under test/ (not Inputs/ or unit/) with RUN lines, e.g.
#   # RUN: %python %s %t.pt
#   # RUN: fsdp-opt %t.pt --print-ir | FileCheck %s
#   # REQUIRES: torch2          (or torch113, cuda)
#
# Substitutions:
#   %python / %PYTHON  the leg's Python (FSDP_OPT_PYTHON); PYTHONPATH has test/Inputs
#   %runtime_lib       path of libfsdp_runtime.so (also in env FSDP_OPT_RUNTIME_LIB)
#   %cuda_backend      1 when the build has the CUDA backend (libfsdp_runtime_cuda), else 0
#   %plugin_lib        path of libfsdp_test_plugin.so (test/plugin: adds the pass count-gathers)
#   %test_ops_lib      path of libfsdp_test_ops.so (test/ops: registers the op fsdp_test::scaled_tanh)
#   fsdp-opt, fsdp-run, FileCheck   full paths of the built tools and LLVM's FileCheck
#   not                LLVM's `not`, where it stands as a command (line start, after | ; &&)
# Environment: FSDP_OPT_TIMEOUT_S=60 and OMP_NUM_THREADS=1 unless set outside; PATH starts
# with the build's bin/.

import json
import os
import subprocess

import lit.formats

config.name = "fsdp-opt"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".py"]
config.excludes = ["Inputs", "unit", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = os.path.join(config.fsdp_opt_obj_root, "test")

inputs_dir = os.path.join(config.test_source_root, "Inputs")

# ---- environment ---------------------------------------------------------------------------
def prepend_path(var, *dirs):
    old = config.environment.get(var, os.environ.get(var, ""))
    config.environment[var] = os.pathsep.join(list(dirs) + ([old] if old else []))

prepend_path("PATH", config.fsdp_opt_tools_dir, os.path.dirname(config.filecheck_path))
prepend_path("PYTHONPATH", inputs_dir)
config.environment["FSDP_OPT_RUNTIME_LIB"] = config.fsdp_runtime_lib

# Pass through what the tools and torch read from the outside.
# The sanitizer settings too (scripts/sanitize.sh: LD_PRELOAD puts the ASan runtime first in
# the uninstrumented Python that loads an instrumented libfsdp_runtime.so).
for var in ["HOME", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NCCL_DEBUG", "TORCH_SHOW_CPP_STACKTRACES",
            "LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS"]:
    if var in os.environ:
        config.environment[var] = os.environ[var]
for var, value in os.environ.items():
    if var.startswith("FSDP_OPT_") and var != "FSDP_OPT_RUNTIME_LIB":
        config.environment[var] = value
# A collective that cannot complete fails within this time (SPEC section 7), well inside
# lit's per-test timeout. Tests run two at a time on two cores, and multi-rank tests start
# several processes each: one intra-op thread per process keeps them from thrashing.
config.environment.setdefault("FSDP_OPT_TIMEOUT_S", "60")
config.environment["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")

# ---- features from the leg's Python --------------------------------------------------------
probe = ("import json, torch; print(json.dumps({'version': torch.__version__, "
         "'cuda': bool(torch.cuda.is_available())}))")
try:
    out = subprocess.run([config.python_executable, "-c", probe], env=config.environment,
                         check=True, capture_output=True, text=True, timeout=120).stdout
    torch_info = json.loads(out.strip().splitlines()[-1])
except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
    lit_config.fatal("cannot import torch with %s (FSDP_OPT_PYTHON): %s"
                     % (config.python_executable, getattr(e, "stderr", None) or e))

def major_minor(version):
    return tuple(int(p) for p in version.split("+")[0].split(".")[:2])

# The Python must run the torch the C++ was built against, or every loaded archive and op
# schema is suspect: say so once here instead of in every failing test.
if major_minor(torch_info["version"]) != major_minor(config.libtorch_version):
    lit_config.fatal("%s has torch %s but the build uses LibTorch %s; configure with "
                     "-DFSDP_OPT_PYTHON=<the matching python>"
                     % (config.python_executable, torch_info["version"], config.libtorch_version))
config.available_features.add("torch2" if major_minor(torch_info["version"]) >= (2, 0) else "torch113")
if torch_info["cuda"]:
    config.available_features.add("cuda")
lit_config.note("torch %s from %s%s" % (torch_info["version"], config.python_executable,
                                        ", CUDA usable" if torch_info["cuda"] else ""))

# ---- substitutions -------------------------------------------------------------------------
# A tool name is replaced only as a whole word that is not part of a path or file name.
def tool(name):
    return r"(?<![\w\-./%])" + name.replace("-", r"\-") + r"(?![\w\-./])"

config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%PYTHON", config.python_executable))
config.substitutions.append(("%runtime_lib", config.fsdp_runtime_lib))
config.substitutions.append(("%cuda_backend", str(config.fsdp_opt_cuda_backend)))
config.substitutions.append(("%plugin_lib", config.fsdp_test_plugin_lib))
config.substitutions.append(("%test_ops_lib", config.fsdp_test_ops_lib))
config.substitutions.append((tool("fsdp-opt"), config.fsdp_opt_exe))
config.substitutions.append((tool("fsdp-run"), config.fsdp_run_exe))
config.substitutions.append((tool("FileCheck"), config.filecheck_path))
# `not` is an English and Python word: replace it only where it starts a command.
config.substitutions.append((r"(^|\||;|&&)(\s*)not(?=\s)", r"\1\2" + config.not_path))
