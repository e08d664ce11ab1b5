"""The pipeline in this process: transform() and shard(), and what the libraries' pass registry holds."""

import os
import warnings
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from ._errors import FsdpOptError, FsdpOptWarning, _message
from ._libraries import _rank_file_path, load
from ._markers import _is_script_module, _recorded


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


def _integer(value, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("%s must be an int, got %r" % (what, value))


def _options(script_module, units, unit_types, min_unit_params, forward_methods, world_size,
             max_unsharded_bytes, bucket_bytes, param_dtype, shard_group_size=None) -> List[str]:
    """The keywords as fsdp-opt's flags ("--name=value"). Python checks only their types; the
    libraries parse the values as the command line's (include/fsdp_opt/passes/options.h), and
    a value they refuse is a ValueError with their text, naming the keyword."""
    if not _is_script_module(script_module):
        raise TypeError("expected a ScriptModule (torch.jit.script(model) or torch.jit.load(path)), got %s"
                        % type(script_module).__name__)
    _integer(world_size, "world_size")
    recorded_units, recorded_methods = _recorded(script_module)
    options = ["--fsdp-unit=" + u for u in _strings(units, "units") + recorded_units]
    options += ["--fsdp-unit-type=" + t for t in _strings(unit_types, "unit_types")]
    options += ["--forward-method=" + m for m in _forward_method_specs(forward_methods) + recorded_methods]
    options.append("--world-size=%d" % world_size)
    for flag, value, what in (("--fsdp-min-unit-params", min_unit_params, "min_unit_params"),
                              ("--shard-group-size", shard_group_size, "shard_group_size")):
        if value is not None:
            _integer(value, what)
            options.append("%s=%d" % (flag, value))
    for flag, value, what in (("--max-unsharded-bytes", max_unsharded_bytes, "max_unsharded_bytes"),
                              ("--bucket-bytes", bucket_bytes, "bucket_bytes")):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise TypeError("%s must be an int (bytes), a size such as '512MiB', or None, got %r" % (what, value))
        options.append("%s=%s" % (flag, value))
    if param_dtype is not None:
        if isinstance(param_dtype, torch.dtype):
            param_dtype = str(param_dtype)[len("torch."):]
        elif not isinstance(param_dtype, str):
            raise TypeError("param_dtype must be a torch.dtype or a str such as 'bf16', got %r" % (param_dtype,))
        options.append("--param-dtype=" + param_dtype)
    error = torch.ops.fsdp_opt.check_options(options)
    if error:
        raise ValueError(error)
    return options


def _passes(passes) -> List[str]:
    if isinstance(passes, str):
        passes = [p for p in passes.split(",") if p]
    return _strings(passes, "passes")


def _report(found: Sequence[Tuple[str, str, str]], diagnostics: Optional[list],
            counts: Sequence[Tuple[str, str]], statistics: Optional[dict]) -> None:
    """`found`: the libraries' (severity, message, line) of each remark and warning; `counts`:
    their (name, value) statistics."""
    for severity, message, _ in found:
        if severity == "warning":
            warnings.warn(message, FsdpOptWarning, stacklevel=3)
    if diagnostics is not None:
        diagnostics.extend(line for _, _, line in found)
    if statistics is not None:
        statistics.update(dict(counts))


def transform(script_module: torch.jit.ScriptModule,
              units: Optional[Iterable[str]] = None,
              forward_methods: Optional[Iterable[ForwardMethod]] = None,
              world_size: int = 1,
              rank: Optional[int] = None,
              passes: Optional[Union[str, Iterable[str]]] = None,
              max_unsharded_bytes: Optional[Union[int, str]] = None,
              bucket_bytes: Optional[Union[int, str]] = None,
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
    max_unsharded_bytes, bucket_bytes: as the command-line flags, in bytes (an int) or a
                      size string ("512MiB", "64KB"); None is their default.
    param_dtype:      gather in this dtype (torch.bfloat16/"bf16", torch.float16/"fp16"),
                      where the libraries support it.
    diagnostics:      a list that receives the remark and warning lines. Warnings are also
                      issued as FsdpOptWarning.
    statistics:       a dict that receives what `fsdp-opt --stats` prints, name -> value text
                      ("units": "3", "gathers per call of forward": "3", ...).

    A keyword of the wrong type raises TypeError; a value the pipeline's option parser refuses
    (world_size=0, bucket_bytes=-5, param_dtype="int8") raises ValueError with its text, the
    command line's with the keyword's name. Errors of the pipeline (a pattern matching no
    module, an unknown pass, a failed verification...) raise FsdpOptError with fsdp-opt's
    error text."""
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
        module, found, counts = torch.ops.fsdp_opt.transform(script_module._c, options, rank, _passes(passes),
                                                             sync_module_states)
    except RuntimeError as e:
        raise FsdpOptError(_message(e)) from None
    _report(found, diagnostics, counts, statistics)
    return torch.jit._recursive.wrap_cpp_module(module)


def shard(script_module: torch.jit.ScriptModule,
          output: str,
          units: Optional[Iterable[str]] = None,
          forward_methods: Optional[Iterable[ForwardMethod]] = None,
          world_size: int = 1,
          passes: Optional[Union[str, Iterable[str]]] = None,
          max_unsharded_bytes: Optional[Union[int, str]] = None,
          bucket_bytes: Optional[Union[int, str]] = None,
          param_dtype=None,
          diagnostics: Optional[list] = None,
          *,
          unit_types: Optional[Iterable[str]] = None,
          min_unit_params: Optional[int] = None,
          statistics: Optional[dict] = None,
          shard_group_size: Optional[int] = None,
          extra_files: Optional[Dict[str, str]] = None) -> List[str]:
    """Runs the pipeline and writes what `fsdp-opt -o OUTPUT` writes: for world_size > 1 the
    directory OUTPUT with rank{r}.pt and manifest.json, otherwise the file OUTPUT. Returns the
    paths of the rank files (torch.jit.load them after fsdp_opt.load()). `extra_files` go into
    every file as torch.jit.save's `_extra_files` do (`fsdp-opt` copies its input's). Arguments
    and errors as for transform()."""
    extra_files = dict(extra_files or {})
    for name, content in extra_files.items():
        if not isinstance(name, str) or not isinstance(content, str):
            raise TypeError("extra_files maps file names to str contents, as torch.jit.save's _extra_files; got "
                            f"{type(name).__name__} -> {type(content).__name__}")
    load()
    options = _options(script_module, units, unit_types, min_unit_params, forward_methods, world_size,
                       max_unsharded_bytes, bucket_bytes, param_dtype, shard_group_size)
    output = os.fspath(output)
    try:
        found, counts = torch.ops.fsdp_opt.save(script_module._c, options, output, _passes(passes), extra_files)
    except RuntimeError as e:
        raise FsdpOptError(_message(e)) from None
    _report(found, diagnostics, counts, statistics)
    if world_size == 1:
        return [output]
    return [_rank_file_path(output, r) for r in range(world_size)]
