"""Training with rank files: loading this rank's file, and the full state dict of a trained one."""

import os
from typing import Dict, Optional

import torch

from ._errors import FsdpOptError
from ._libraries import _format_name, _rank_file_path, load


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
    path = _rank_file_path(directory, rank)
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

    attr = _format_name("manifest_sha256_attr")
    expected = getattr(module, attr, None)
    if expected is None:
        raise FsdpOptError("%s: the module is not a rank file of fsdp-opt (no %s)" % (what, attr))
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
    if not hasattr(module, _format_name("rank_attr")):
        return
    rank = int(getattr(module, _format_name("rank_attr")))
    world = int(getattr(module, _format_name("world_size_attr")))
    sha = str(getattr(module, _format_name("manifest_sha256_attr")))
    group = getattr(module, _format_name("shard_group_size_attr"), None)
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
