# The lit configuration itself: substitutions, environment and features that every other
# test relies on.
#
# Tool names become full paths where they are words, not inside other names.
# RUN: echo fsdp-opt fsdp-run FileCheck %runtime_lib fsdp-opt.py x/fsdp-run | FileCheck %s --check-prefix=SUBST
# SUBST: {{^/.+/fsdp-opt /.+/fsdp-run /.+/FileCheck /.+/libfsdp_runtime.so fsdp-opt.py x/fsdp-run$}}
#
# `not` is LLVM's where it starts a command, and left alone inside an argument.
# RUN: not %python -c "import sys; sys.exit(3)"
# RUN: %python -c "print('is not None')" | FileCheck %s --check-prefix=WORD
# WORD: is not None
#
# %python and %PYTHON are the leg's Python, which imports the torch the build links and
# finds test/Inputs on its path; the environment has the test defaults.
# RUN: %PYTHON %s | FileCheck %s
# CHECK: fsdp_models from {{.*}}/test/Inputs/fsdp_models.py
# CHECK: FSDP_OPT_TIMEOUT_S={{[0-9]+}} OMP_NUM_THREADS={{[0-9]+}}
# CHECK: FSDP_OPT_RUNTIME_LIB={{/.+}}/libfsdp_runtime.so

import os

import fsdp_models

print("fsdp_models from", fsdp_models.__file__)
print("FSDP_OPT_TIMEOUT_S=%s OMP_NUM_THREADS=%s"
      % (os.environ["FSDP_OPT_TIMEOUT_S"], os.environ["OMP_NUM_THREADS"]))
print("FSDP_OPT_RUNTIME_LIB=%s" % os.environ["FSDP_OPT_RUNTIME_LIB"])
