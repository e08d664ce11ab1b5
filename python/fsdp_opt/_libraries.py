"""Finding and loading libfsdp_runtime.so and libfsdp_passes.so, pass plugins, and the names of
the on-disk format the libraries define."""

import os
import shutil
import sys
from typing import Dict, List, Optional, Tuple

import torch

from ._errors import FsdpOptError, _message


_RUNTIME_LIB = "libfsdp_runtime.so"
_PASSES_LIB = "libfsdp_passes.so"

_loaded_dir: Optional[str] = None


def _package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def _cmake_prefix_path() -> Optional[str]:
    """The package's own directory when `pip install .` put the CMake package in it
    (lib/cmake/FsdpOpt), else None."""
    here = _package_dir()
    return here if os.path.isfile(os.path.join(here, "lib", "cmake", "FsdpOpt", "FsdpOptConfig.cmake")) else None


def build_info() -> Optional[Dict[str, object]]:
    """How `pip install .` built this package: {"version", "torch" (built against),
    "cuda_backend" (bool), "backend_choice" (why)}; None for the package of python/ alone,
    whose libraries come from a CMake build."""
    try:
        from ._build_info import BUILD_INFO
    except ImportError:
        return None
    return dict(BUILD_INFO)


def _candidate_dirs() -> List[Tuple[str, str]]:
    """(directory, why) in search order."""
    env = os.environ.get("FSDP_OPT_LIB_DIR")
    if env:
        return [(env, "FSDP_OPT_LIB_DIR")]  # explicit: nowhere else
    here = _package_dir()
    dirs = [(os.path.join(here, "lib"), "next to the package"),
            (os.path.join(sys.prefix, "lib"), "the Python prefix's lib/")]
    tool = shutil.which("fsdp-opt")
    if tool:
        dirs.append((os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(tool))), "lib"),
                     "the lib/ beside fsdp-opt on PATH"))
    return dirs


def lib_dir() -> str:
    """The directory `load` takes the libraries from (without loading them)."""
    searched = []
    for path, why in _candidate_dirs():
        if all(os.path.isfile(os.path.join(path, name)) for name in (_RUNTIME_LIB, _PASSES_LIB)):
            return os.path.abspath(path)
        searched.append("%s (%s)" % (path, why))
    raise FsdpOptError(
        "cannot find %s and %s; searched: %s. Set FSDP_OPT_LIB_DIR to the lib/ of a build "
        "(build/t2/lib) or of a `cmake --install` prefix"
        % (_RUNTIME_LIB, _PASSES_LIB, "; ".join(searched)))


def load(path: Optional[str] = None) -> str:
    """Loads libfsdp_runtime.so, then libfsdp_passes.so, with torch.ops.load_library, once per
    process; returns their directory. Without `path` they are searched for in order:
      1. $FSDP_OPT_LIB_DIR (only there, when set);
      2. fsdp_opt/lib/ inside this package;
      3. <sys.prefix>/lib (a `cmake --install --prefix` into the venv);
      4. <prefix>/lib of the fsdp-opt found on PATH.
    The libraries must have been built against this very torch."""
    global _loaded_dir
    if _loaded_dir is not None:
        if path is not None and os.path.abspath(path) != _loaded_dir:
            raise FsdpOptError("fsdp-opt libraries already loaded from %s; cannot load %s too"
                               % (_loaded_dir, path))
        return _loaded_dir
    directory = os.path.abspath(path) if path is not None else lib_dir()
    for name in (_RUNTIME_LIB, _PASSES_LIB):
        library = os.path.join(directory, name)
        if not os.path.isfile(library):
            raise FsdpOptError("cannot load %s: no such file" % library)
        try:
            torch.ops.load_library(library)
        except OSError as e:
            raise FsdpOptError("cannot load %s (built against another torch than %s?): %s"
                               % (library, torch.__version__, e)) from None
    _loaded_dir = directory
    return directory


def load_plugin(path: str) -> None:
    """Loads a pass plugin: a shared library exporting fsdp_opt_register_passes() (docs/plugin.md),
    which is called once to add its passes; they can then be named in `passes=`. Loading the
    same library again does nothing."""
    load()
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FsdpOptError("cannot load pass plugin '%s': no such file" % path)
    try:
        torch.ops.fsdp_opt.load_plugin(path)
    except RuntimeError as e:
        raise FsdpOptError(_message(e)) from None




_format_names: Optional[Dict[str, str]] = None


def _format_name(key: str) -> str:
    """A name of the on-disk format (include/fsdp_opt/format.h: "rank_attr" -> "_fsdp_rank", ...),
    as the libraries spell it; loads them."""
    global _format_names
    load()
    if _format_names is None:
        _format_names = dict(torch.ops.fsdp_opt.format_names())
    return _format_names[key]


def _rank_file_path(directory: str, rank: int) -> str:
    """DIR/rank{r}.pt, named by the libraries (format.h); loads them."""
    load()
    return os.path.join(directory, torch.ops.fsdp_opt.rank_file_name(rank))
