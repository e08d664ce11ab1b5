"""fsdp_opt: fsdp-opt's FSDP passes, in-process, on TorchScript modules.

    import torch, fsdp_opt

    model = GPT()
    for block in model.blocks:
        fsdp_opt.mark_unit(block)                          # sets block._fsdp_unit = True
    fsdp_opt.mark_unit(model)
    fsdp_opt.register_fsdp_forward_method(model, "generate")
    scripted = torch.jit.script(model)                     # the markers travel with the model

    sharded = fsdp_opt.transform(scripted, world_size=2, rank=int(os.environ["RANK"]))
    sharded.generate(idx, 8)                               # gathers/reshards with the other ranks
    fsdp_opt.stats()                                       # {"all_gathers": ..., ...}

The work is done by the TorchScript ops of libfsdp_passes.so (`torch.ops.fsdp_opt.*`) and
libfsdp_runtime.so (`torch.ops.fsdp.*`), loaded with torch.ops.load_library by `load()`, which
every function here calls first. Where the libraries are found: see `load`.
"""

import os
import shutil
import sys
import warnings
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

__all__ = [
    "FsdpOptError", "FsdpOptWarning", "load", "load_plugin", "lib_dir", "list_passes", "default_pipeline",
    "mark_unit", "register_fsdp_forward_method", "transform", "shard", "stats", "reset_stats",
    "load_rank_file", "full_state_dict", "sharded_state_dict",
    "sharded_optimizer_state_dict", "apply_optimizer_param_groups", "unsharded",
]
__version__ = "0.1.0"

_RUNTIME_LIB = "libfsdp_runtime.so"
_PASSES_LIB = "libfsdp_passes.so"

# Markers recorded on a ScriptModule (whose C++ type cannot take new attributes without
# changing every instance of a shared type): plain Python attributes of the wrapper object,
# read back by transform()/shard() from the root's named_modules().
_RECORDED_UNIT = "_fsdp_opt_recorded_unit"
_RECORDED_METHODS = "_fsdp_opt_recorded_forward_methods"

# The markers of SPEC section 3, set on an nn.Module before scripting.
_UNIT_MARKER = "_fsdp_unit"
_METHODS_MARKER = "_fsdp_forward_methods"


class FsdpOptError(RuntimeError):
    """A transform or shard that failed; the message is fsdp-opt's error text."""


class FsdpOptWarning(UserWarning):
    """A warning of the pipeline (e.g. lint-sharded-reads)."""


# ---- libraries -----------------------------------------------------------------------------

_loaded_dir: Optional[str] = None


def _candidate_dirs() -> List[Tuple[str, str]]:
    """(directory, why) in search order."""
    env = os.environ.get("FSDP_OPT_LIB_DIR")
    if env:
        return [(env, "FSDP_OPT_LIB_DIR")]  # explicit: nowhere else
    here = os.path.dirname(os.path.abspath(__file__))
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


def default_pipeline() -> List[str]:
    """The passes transform() and shard() run when `passes` is not given, in order: a starting
    point for a custom pipeline (insert or drop a pass, pass the list back as `passes`)."""
    load()
    return list(torch.ops.fsdp_opt.default_pipeline())


def list_passes() -> Dict[str, str]:
    """Registered passes (built-in and from loaded plugins): name -> one-line summary."""
    load()
    passes = {}
    for line in torch.ops.fsdp_opt.list_passes():
        name, _, summary = line.partition(": ")
        passes[name] = summary
    return passes


# ---- markers -------------------------------------------------------------------------------

def _is_script_module(module) -> bool:
    return isinstance(module, torch.jit.ScriptModule)


def mark_unit(module: torch.nn.Module) -> torch.nn.Module:
    """Makes `module` an FSDP unit, as fully_shard(module) would. On an nn.Module (before
    torch.jit.script) it sets the marker `module._fsdp_unit = True`, which scripting keeps; on a
    ScriptModule it records the mark, and transform()/shard() of the root pass it on as a
    unit. Returns the module."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError("mark_unit expects an nn.Module or a ScriptModule, got %s" % type(module).__name__)
    if _is_script_module(module):
        object.__setattr__(module, _RECORDED_UNIT, True)
    else:
        setattr(module, _UNIT_MARKER, True)
    return module


def register_fsdp_forward_method(module: torch.nn.Module, method_name: str) -> None:
    """Registers `method_name` as a forward method of `module` (FSDP2's function of the same
    name): calls of it see the unit's parameters unsharded. On an nn.Module it appends to the
    marker `module._fsdp_forward_methods` (the method must be compiled by torch.jit.script:
    decorate it with @torch.jit.export); on a ScriptModule it records the registration for
    transform()/shard(). On a module that is not a unit it is a no-op (reported as a remark)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError("register_fsdp_forward_method expects an nn.Module or a ScriptModule, got %s"
                        % type(module).__name__)
    if not isinstance(method_name, str) or not method_name:
        raise TypeError("method_name must be a non-empty str, got %r" % (method_name,))
    if _is_script_module(module):
        if not module._c._has_method(method_name):
            raise ValueError("%s has no TorchScript method '%s' (export it with @torch.jit.export "
                             "before scripting)" % (module.original_name, method_name))
        methods = list(getattr(module, _RECORDED_METHODS, []))
        if method_name not in methods:
            methods.append(method_name)
        object.__setattr__(module, _RECORDED_METHODS, methods)
    else:
        if not callable(getattr(module, method_name, None)):
            raise ValueError("%s has no method '%s'" % (type(module).__name__, method_name))
        methods = list(getattr(module, _METHODS_MARKER, []))
        if method_name not in methods:
            methods.append(method_name)
        setattr(module, _METHODS_MARKER, methods)


def _recorded(root) -> Tuple[List[str], List[str]]:
    """Units and PATTERN:METHOD specs recorded on `root` and its submodules."""
    units, methods = [], []
    for name, module in root.named_modules():
        path = name or "."
        if getattr(module, _RECORDED_UNIT, False):
            units.append(path)
        for method in getattr(module, _RECORDED_METHODS, []):
            methods.append("%s:%s" % (path, method))
    return units, methods


# ---- transform and shard -------------------------------------------------------------------

ForwardMethod = Union[str, Tuple[str, str]]


def _strings(value, what: str) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise TypeError("%s must be strings, got %r" % (what, item))
    return items


def _forward_method_specs(forward_methods: Optional[Iterable[ForwardMethod]]) -> List[str]:
    if forward_methods is None:
        return []
    if isinstance(forward_methods, str):
        forward_methods = [forward_methods]
    specs = []
    for item in forward_methods:
        if isinstance(item, str):
            specs.append(item)
        elif isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item):
            specs.append("%s:%s" % tuple(item))
        else:
            raise TypeError("forward_methods takes 'PATTERN:METHOD' strings or (pattern, method) pairs, got %r"
                            % (item,))
    return specs


def _size(value, what: str) -> int:
    if value is None:
        return -1
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("%s must be a non-negative int (bytes) or None, got %r" % (what, value))
    return value


def _message(error: Exception) -> str:
    """The error text without a C++ stack trace."""
    text = str(error)
    for marker in ("\nException raised from", "\nframe #0"):
        if marker in text:
            text = text[:text.index(marker)]
    return text.strip()


def _positive(value, what: str) -> Optional[int]:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("%s must be an int >= 1 or None, got %r" % (what, value))
    return value


def _options(script_module, units, unit_types, min_unit_params, forward_methods, world_size,
             max_unsharded_bytes, bucket_bytes, param_dtype, shard_group_size=None) -> List[str]:
    """The keywords as fsdp-opt's flags ("--name=value"): the libraries parse them as the
    command line's, so values and error texts are the same."""
    if not _is_script_module(script_module):
        raise TypeError("expected a ScriptModule (torch.jit.script(model) or torch.jit.load(path)), got %s"
                        % type(script_module).__name__)
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError("world_size must be an int >= 1, got %r" % (world_size,))
    recorded_units, recorded_methods = _recorded(script_module)
    options = ["--fsdp-unit=" + u for u in _strings(units, "units") + recorded_units]
    options += ["--fsdp-unit-type=" + t for t in _strings(unit_types, "unit_types")]
    min_params = _positive(min_unit_params, "min_unit_params")
    if min_params is not None:
        options.append("--fsdp-min-unit-params=%d" % min_params)
    options += ["--forward-method=" + m for m in _forward_method_specs(forward_methods) + recorded_methods]
    options.append("--world-size=%d" % world_size)
    if _positive(shard_group_size, "shard_group_size") is not None:
        options.append("--shard-group-size=%d" % shard_group_size)
    for flag, value, what in (("--max-unsharded-bytes", max_unsharded_bytes, "max_unsharded_bytes"),
                              ("--bucket-bytes", bucket_bytes, "bucket_bytes")):
        if _size(value, what) >= 0:
            options.append("%s=%d" % (flag, value))
    if param_dtype is not None:
        options.append("--param-dtype=" + (param_dtype if isinstance(param_dtype, str) else _dtype_name(param_dtype)))
    return options


def _passes(passes) -> List[str]:
    if isinstance(passes, str):
        passes = [p for p in passes.split(",") if p]
    return _strings(passes, "passes")


def _dtype_name(dtype) -> str:
    names = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    if dtype not in names:
        raise ValueError("param_dtype must be torch.bfloat16 or torch.float16, got %r" % (dtype,))
    return names[dtype]


def _report(lines: Sequence[str], diagnostics: Optional[list], counts: Sequence[str],
            statistics: Optional[dict]) -> None:
    for line in lines:
        if line.startswith("warning: "):
            warnings.warn(line[len("warning: "):], FsdpOptWarning, stacklevel=3)
    if diagnostics is not None:
        diagnostics.extend(lines)
    if statistics is not None:
        statistics.update(line.split(": ", 1) for line in counts)


def transform(script_module: torch.jit.ScriptModule,
              units: Optional[Iterable[str]] = None,
              forward_methods: Optional[Iterable[ForwardMethod]] = None,
              world_size: int = 1,
              rank: Optional[int] = None,
              passes: Optional[Union[str, Iterable[str]]] = None,
              max_unsharded_bytes: Optional[int] = None,
              bucket_bytes: Optional[int] = None,
              param_dtype=None,
              diagnostics: Optional[list] = None,
              *,
              unit_types: Optional[Iterable[str]] = None,
              min_unit_params: Optional[int] = None,
              statistics: Optional[dict] = None,
              sync_module_states: bool = False,
              shard_group_size: Optional[int] = None) -> torch.jit.ScriptModule:
    """Runs fsdp-opt's pipeline in this process and returns the rewritten ScriptModule; the
    input is left as it was (the result shares its parameter tensors until sharded).

    units:            module-path patterns (`--fsdp-unit`), added to the markers in the model
                      and those recorded by mark_unit() on ScriptModules.
    unit_types:       module class names (`--fsdp-unit-type`): every instance is a unit, like
                      FSDP1's ModuleWrapPolicy({Block}); the TorchScript qualified name or its
                      last component ("Block").
    min_unit_params:  units by size (`--fsdp-min-unit-params`), like FSDP1's
                      size_based_auto_wrap_policy(min_num_params=N); the root becomes a unit too.
    forward_methods:  "PATTERN:METHOD" strings or (pattern, method) pairs (`--forward-method`),
                      added to the markers and registrations.
    world_size, rank: with a rank, the units' parameters are replaced by that rank's shards, so
                      the result runs under torchrun with that RANK and WORLD_SIZE. Without one
                      it keeps whole parameters (for world_size 1, or to inspect the rewrite).
                      Under that job every rank must call it: first the ranks compare a hash of
                      every parameter and buffer, and a difference (a model built without a
                      common seed) is an FsdpOptError naming the first differing tensor.
    sync_module_states: instead of that error, take rank 0's values (FSDP1's keyword): the
                      tensors that differ are broadcast from rank 0.
    shard_group_size: hybrid sharding (`--shard-group-size`, FSDP2's 2-D mesh, HSDP): units
                      are sharded over groups of this many consecutive ranks (a node's, as
                      torchrun numbers them) and replicated across the world_size / S groups;
                      None shards over all world_size ranks.
    passes:           pass names (list or "a,b,c") instead of the default pipeline.
    max_unsharded_bytes, bucket_bytes: as the command-line flags; None is their default.
    param_dtype:      gather in this dtype (torch.bfloat16/"bf16", torch.float16/"fp16"),
                      where the libraries support it.
    diagnostics:      a list that receives the remark and warning lines. Warnings are also
                      issued as FsdpOptWarning.
    statistics:       a dict that receives what `fsdp-opt --stats` prints, name -> value text
                      ("units": "3", "gathers per call of forward": "3", ...).

    Errors (a pattern matching no module, an unknown pass, a failed verification...) raise
    FsdpOptError with fsdp-opt's error text."""
    load()
    options = _options(script_module, units, unit_types, min_unit_params, forward_methods, world_size,
                       max_unsharded_bytes, bucket_bytes, param_dtype, shard_group_size)
    if rank is None:
        rank = -1
    elif not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world_size:
        raise ValueError("rank must be None or an int in [0, %d), got %r" % (world_size, rank))
    if not isinstance(sync_module_states, bool):
        raise TypeError("sync_module_states must be a bool, got %r" % (sync_module_states,))
    if sync_module_states and rank == -1:
        raise ValueError("sync_module_states=True needs a rank: it takes rank 0's values when sharding for one")
    try:
        module, lines, counts = torch.ops.fsdp_opt.transform(script_module._c, options, rank, _passes(passes),
                                                             sync_module_states)
    except RuntimeError as e:
        raise FsdpOptError(_message(e)) from None
    _report(lines, diagnostics, counts, statistics)
    return torch.jit._recursive.wrap_cpp_module(module)


def shard(script_module: torch.jit.ScriptModule,
          output: str,
          units: Optional[Iterable[str]] = None,
          forward_methods: Optional[Iterable[ForwardMethod]] = None,
          world_size: int = 1,
          passes: Optional[Union[str, Iterable[str]]] = None,
          max_unsharded_bytes: Optional[int] = None,
          bucket_bytes: Optional[int] = None,
          param_dtype=None,
          diagnostics: Optional[list] = None,
          *,
          unit_types: Optional[Iterable[str]] = None,
          min_unit_params: Optional[int] = None,
          statistics: Optional[dict] = None,
          shard_group_size: Optional[int] = None) -> List[str]:
    """Runs the pipeline and writes what `fsdp-opt -o OUTPUT` writes: for world_size > 1 the
    directory OUTPUT with rank{r}.pt and manifest.json, otherwise the file OUTPUT. Returns the
    paths of the rank files (torch.jit.load them after fsdp_opt.load()). Arguments and errors
    as for transform()."""
    load()
    options = _options(script_module, units, unit_types, min_unit_params, forward_methods, world_size,
                       max_unsharded_bytes, bucket_bytes, param_dtype, shard_group_size)
    output = os.fspath(output)
    try:
        lines, counts = torch.ops.fsdp_opt.save(script_module._c, options, output, _passes(passes))
    except RuntimeError as e:
        raise FsdpOptError(_message(e)) from None
    _report(lines, diagnostics, counts, statistics)
    if world_size == 1:
        return [output]
    return [os.path.join(output, "rank%d.pt" % r) for r in range(world_size)]


# ---- runtime counters ----------------------------------------------------------------------

def stats() -> Dict[str, int]:
    """The runtime's counters (process-wide): all_gathers (collectives issued), gather_calls,
    bytes_gathered, unsharded_bytes, peak_unsharded_bytes, reshards, ... (docs/runtime.md)."""
    load()
    return dict(torch.ops.fsdp.stats())


def reset_stats() -> None:
    """Zeroes the counters (unsharded_bytes is state and keeps its value)."""
    load()
    torch.ops.fsdp.reset_stats()


# ---- training -----------------------------------------------------------------------------

def load_rank_file(directory: str, rank: Optional[int] = None) -> torch.jit.ScriptModule:
    """Loads this rank's file of an `fsdp-opt -o DIR` run for training or inference: the
    runtime library first, then DIR/rank<RANK>.pt (rank: the argument, else $RANK as torchrun
    sets it). Its parameters are leaf tensors of the shard's shape: give them to an optimizer
    as they are (SPEC section 10)."""
    load()
    if rank is None:
        if "RANK" not in os.environ:
            raise FsdpOptError("load_rank_file: no rank given and $RANK is not set (run under torchrun or fsdp-run)")
        rank = int(os.environ["RANK"])
    path = os.path.join(directory, "rank%d.pt" % rank)
    if not os.path.isfile(path):
        raise FsdpOptError("load_rank_file: no rank file %s" % path)
    return torch.jit.load(path)


def _attribute(module, dotted: str):
    for name in dotted.split("."):
        module = getattr(module, name)
    return module


def _manifest_units(module, manifest: Optional[str], what: str) -> Optional[list]:
    """The units of the manifest.json of the run `module`'s rank file comes from, checked by the
    sha256 the file carries; None for `manifest` None (a caller that allows it)."""
    import hashlib
    import json

    expected = getattr(module, "_fsdp_manifest_sha256", None)
    if expected is None:
        raise FsdpOptError("%s: the module is not a rank file of fsdp-opt (no _fsdp_manifest_sha256)" % what)
    if manifest is None:
        return None
    with open(manifest, "rb") as f:
        raw = f.read()
    if expected and hashlib.sha256(raw).hexdigest() != expected:
        raise FsdpOptError("%s: %s is not the manifest of the run this rank file comes from "
                           "(sha256 differs)" % (what, manifest))
    return json.loads(raw.decode("utf-8"))["units"]


def _check_rank_file(module: torch.jit.ScriptModule) -> None:
    """What an entry method does first (fsdp::check_rank): the file against the process group,
    and an HSDP file's mesh made the one the gathers use."""
    if not hasattr(module, "_fsdp_rank"):
        return
    rank, world, sha = int(module._fsdp_rank), int(module._fsdp_world_size), str(module._fsdp_manifest_sha256)
    group = getattr(module, "_fsdp_shard_group_size", None)
    if group is None:
        torch.ops.fsdp.check_rank(rank, world, sha)
    else:
        torch.ops.fsdp.check_rank(rank, world, int(group), sha)


def full_state_dict(module: torch.jit.ScriptModule, manifest: str) -> Dict[str, torch.Tensor]:
    """The unsharded state of a rank file's module, as the original model's state_dict() names
    it: every unit's parameters gathered (one collective per unit, in the manifest's order: a
    collective call, every rank must make it), tied parameters under each of their names, and
    the replicated parameters and buffers as this rank holds them. `manifest` is the
    manifest.json of the run the module's file comes from (checked by its sha256). What it
    returns is a copy, on the parameters' device; load it into the original model with
    `original.load_state_dict(...)` and save that (test/e2e/train_exact.py checks it)."""
    load()
    units = _manifest_units(module, manifest, "full_state_dict")
    _check_rank_file(module)
    state: Dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for unit in units:
            params = [_attribute(module, p["path"]) for p in unit["params"]]
            rows = [int(p["shape"][0]) for p in unit["params"]]
            full = torch.ops.fsdp.all_gather(params, rows, unit["path"])
            try:
                for p, tensor in zip(unit["params"], full):
                    copy = tensor.detach().clone()
                    for name in [p["path"]] + list(p["aliases"]):
                        state[name] = copy
            finally:
                torch.ops.fsdp.reshard(full, unit["path"])
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if name not in state:
                state[name] = tensor.detach().clone()
    return state


# ---- unshard scopes -------------------------------------------------------------------------

def _unit_name(unit) -> str:
    if isinstance(unit, str):
        return unit
    if isinstance(unit, torch.nn.Module):
        path = getattr(unit, "_fsdp_unit_path", None)
        if isinstance(path, str):
            return path
        raise ValueError("unsharded: %s is not a unit of a module rewritten by fsdp-opt (it has no _fsdp_unit_path)"
                         % type(unit).__name__)
    raise TypeError("unsharded: units are unit paths ('blocks.0', '.' for the root) or unit submodules, got %r"
                    % (unit,))


class unsharded:
    """An unshard scope: `with fsdp_opt.unsharded(module):` keeps the units of `module` (a rank
    file of `fsdp-opt -o DIR`, or what `transform` returns) gathered for the block, so a loop of
    entry calls inside it (a greedy decode calling `forward` per token) issues no collective;
    FSDP2's `FSDPModule.unshard()` / `reshard()`, FSDP1's `summon_full_params`.

    Entering does what an entry method does first (the process group initialised, the file
    checked against it), then gathers every unit, or only `units` (paths as `--stats` names them,
    "blocks.0", "." for the root, or the unit submodules themselves), in as few collectives as
    the file's --bucket-bytes allows, each fingerprinted like any gather: every rank must enter
    and leave the same scopes in the same order. Leaving reshards them, on an exception too.
    A scope whose units do not fit the file's --max-unsharded-bytes (with what is unsharded
    already) is refused with an FsdpOptError naming the bytes, before anything is gathered.
    Under grad mode, forward calls inside the scope are fine, but a backward() while the scope is
    open raises: run backward and the optimizer step after the block (docs/runtime.md,
    "Unshard scopes").

    The object entered (`with fsdp_opt.unsharded(m) as scope:`) tells what it holds:
    `scope.units` (paths), `scope.bytes` (their full bytes), `scope.collectives` (the gathers
    entering issued). It can be entered again once it has been left."""

    def __init__(self, module: torch.jit.ScriptModule, units=None):
        if not _is_script_module(module):
            raise TypeError("unsharded expects a ScriptModule rewritten by fsdp-opt (a rank file, or what "
                            "fsdp_opt.transform returns), got %s" % type(module).__name__)
        if units is not None and (isinstance(units, (str, torch.nn.Module)) or not hasattr(units, "__iter__")):
            units = [units]
        self.module = module
        self._requested = None if units is None else [_unit_name(u) for u in units]
        if self._requested is not None and not self._requested:
            raise ValueError("unsharded: units is empty (None means every unit)")
        self._id = None
        self.units: List[str] = []
        self.bytes = 0
        self.collectives = 0

    def __enter__(self) -> "unsharded":
        if self._id is not None:
            raise FsdpOptError("unsharded: this scope is open already")
        load()
        try:
            self._id, units, self.bytes, self.collectives = torch.ops.fsdp.unsharded_scope_open(
                self.module._c, self._requested or [])
        except RuntimeError as e:
            raise FsdpOptError(_message(e)) from None
        self.units = list(units)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        scope, self._id = self._id, None
        if scope is None:
            return False
        try:
            torch.ops.fsdp.unsharded_scope_close(scope)
        except RuntimeError as e:
            if exc is None:
                raise FsdpOptError(_message(e)) from None
            warnings.warn("fsdp_opt.unsharded: resharding at the end of the scope failed: %s" % _message(e),
                          FsdpOptWarning, stacklevel=2)
        return False


# torch 2.x; their own module: DCP
from .checkpoint import apply_optimizer_param_groups, sharded_optimizer_state_dict, sharded_state_dict  # noqa: E402
