"""`fsdp-opt` and `fsdp-run` on the environment's PATH after `pip install .`: console scripts that
run the executables the wheel carries in fsdp_opt/bin/ (they find the package's libraries and
torch's through their RPATH), as the cmake and ninja packages on PyPI do."""

import os
import sys

from ._libraries import _package_dir


def _run(name: str) -> None:
    tool = os.path.join(_package_dir(), "bin", name)
    if not os.access(tool, os.X_OK):
        sys.exit("error: %s is not installed with this fsdp_opt package (%s): `pip install .` at the "
                 "repository root installs it, a CMake build puts it in BUILD/bin" % (name, tool))
    # argv[0] stays the name the user typed, for usage and error lines; fsdp-run finds its own
    # executable through /proc/self/exe.
    os.execv(tool, [name] + sys.argv[1:])


def fsdp_opt() -> None:
    _run("fsdp-opt")


def fsdp_run() -> None:
    _run("fsdp-run")
