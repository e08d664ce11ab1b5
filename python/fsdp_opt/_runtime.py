"""The runtime seen from Python: its counters, and unshard scopes (`with fsdp_opt.unsharded(m):`)."""

import warnings
from typing import Dict, List

import torch

from ._errors import FsdpOptError, FsdpOptWarning, _message
from ._libraries import _format_name, load
from ._markers import _is_script_module


def stats() -> Dict[str, int]:
    """The runtime's counters (process-wide): all_gathers (collectives issued), gather_calls,
    bytes_gathered, unsharded_bytes, peak_unsharded_bytes, reshards, ... (docs/runtime.md)."""
    load()
    return dict(torch.ops.fsdp.stats())


def reset_stats() -> None:
    """Zeroes the counters (unsharded_bytes is state and keeps its value)."""
    load()
    torch.ops.fsdp.reset_stats()


def _unit_name(unit) -> str:
    if isinstance(unit, str):
        return unit
    if isinstance(unit, torch.nn.Module):
        attr = _format_name("unit_path_attr")
        path = getattr(unit, attr, None)
        if isinstance(path, str):
            return path
        raise ValueError("unsharded: %s is not a unit of a module rewritten by fsdp-opt (it has no %s)"
                         % (type(unit).__name__, attr))
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
    "Unshard scopes"). The parameters inside are gathered copies: writing one (an optimizer
    step, `copy_` of new weights, `p.data.copy_(w)`) or giving it new data (`p.data = w`) makes
    the exit raise, since the reshard drops the write (docs/runtime.md, "Writes to gathered
    parameters").

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
