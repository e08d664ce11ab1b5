"""Sharded checkpoints of rank files through torch.distributed.checkpoint (DCP), torch 2.x only.

    import torch.distributed.checkpoint as dcp
    sd = fsdp_opt.sharded_state_dict(module, "DIR/manifest.json")   # every rank
    dcp.save(sd, checkpoint_id="ckpt/")                             # W ranks write their rows
    ...
    sd = fsdp_opt.sharded_state_dict(other_module, "OTHER/manifest.json")
    dcp.load(sd, checkpoint_id="ckpt/")                             # in place, any W
    # and the optimizer: sharded_optimizer_state_dict, then apply_optimizer_param_groups

A unit parameter's shard in a rank file is rows [r*c, min((r+1)*c, N)) of the parameter,
zero-padded to c = ceil(N/W) rows (SPEC section 2). Those rows are exactly torch.chunk's chunk r,
which is how DTensor's Shard(0) and FSDP2 split dim 0, so a rank's shard without its padding is
the local tensor of a Shard(0) DTensor of the full shape: a checkpoint written from rank files
loads into rank files of any world size, into an FSDP2 model of the same architecture, and the
reverse. The 1.13 leg has no DTensor: there fsdp_opt.full_state_dict is the only way out.
"""

from typing import Dict, Optional

import torch


class _Layout:
    """How a rank file's tensors map to checkpoint tensors on this rank: a unit parameter (or a
    tensor of its shape, such as its optimizer state) becomes a Shard(0) DTensor of the full
    shape over this rank's unpadded rows; anything else stays a plain tensor (replicated)."""

    def __init__(self, module, manifest, mesh, what):
        from ._errors import FsdpOptError
        from ._libraries import _format_name
        from ._training import _manifest_units
        try:
            from torch.distributed.tensor import DTensor, Replicate, Shard
            from torch.distributed.device_mesh import init_device_mesh
        except ImportError as e:  # torch 1.13
            raise FsdpOptError("%s needs torch.distributed.tensor (torch 2.x); this torch %s has only "
                               "fsdp_opt.full_state_dict (%s)" % (what, torch.__version__, e)) from None
        import torch.distributed as dist

        self.rank = int(getattr(module, _format_name("rank_attr"), 0))
        self.world = int(getattr(module, _format_name("world_size_attr"), 1))
        # An HSDP file (--shard-group-size) holds shard r % S of S; its mesh is 2-D, (R, S).
        self.group = int(getattr(module, _format_name("shard_group_size_attr"), self.world))
        self.shard = self.rank % self.group
        shape = (self.world,) if self.group == self.world else (self.world // self.group, self.group)
        units = _manifest_units(module, manifest, what)
        if units is None and self.world != 1:
            raise FsdpOptError("%s: a rank file of world size %d needs its run's manifest.json" % (what, self.world))
        if mesh is None:
            if not dist.is_initialized():
                raise FsdpOptError("%s: torch.distributed is not initialized; call "
                                   "torch.distributed.init_process_group (DCP needs it) or pass a mesh" % what)
            first = next(iter(module.parameters()), None)
            device_type = first.device.type if first is not None else "cpu"
            if dist.get_world_size() != self.world:
                raise FsdpOptError("%s: torch.distributed has world size %d, the rank file %d"
                                   % (what, dist.get_world_size(), self.world))
            mesh = init_device_mesh(device_type, shape)
        if tuple(mesh.shape) != shape or list(mesh.get_coordinate() or []) != list(divmod(self.rank, self.group))[2 - len(shape):]:
            raise FsdpOptError("%s: the mesh (shape %s, this process at %s) does not match the rank file (rank %d "
                               "of world size %d, shard group size %d: mesh %s)"
                               % (what, tuple(mesh.shape), mesh.get_coordinate(), self.rank, self.world, self.group,
                                  shape))
        self.placements = [Shard(0)] if len(shape) == 1 else [Replicate(), Shard(0)]
        self.mesh, self._dtensor, self._what = mesh, DTensor, what
        if units is None:  # world size 1: every parameter whole
            self.params = [(name, [], list(p.shape)) for name, p in module.named_parameters() if p.dim() > 0]
        else:
            self.params = [(p["path"], list(p["aliases"]), [int(d) for d in p["shape"]])
                           for u in units for p in u["params"]]
        self.full_shape = {name: shape for path, aliases, shape in self.params for name in [path] + aliases}

    def wrap(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` (the shard of parameter `name`, or a tensor of its shape) for the checkpoint."""
        from ._errors import FsdpOptError
        tensor = tensor.detach()
        shape = self.full_shape.get(name)
        if shape is None:
            return tensor
        chunk, _, count = torch.ops.fsdp_opt.shard_rows(shape[0], self.group, self.shard)  # format.h
        if list(tensor.shape[1:]) != shape[1:] or tensor.shape[0] != chunk:
            raise FsdpOptError("%s: %s has shape %s, not a shard of %s for shard group size %d (is a unit gathered?)"
                               % (self._what, name, list(tensor.shape), shape, self.group))
        stride = torch.empty(shape, device="meta").stride()
        return self._dtensor.from_local(tensor.narrow(0, 0, count), self.mesh, self.placements, run_check=False,
                                        shape=torch.Size(shape), stride=stride)


def sharded_state_dict(module: torch.jit.ScriptModule, manifest: Optional[str] = None,
                       mesh=None) -> Dict[str, torch.Tensor]:
    """This rank's state of a rank file's module for torch.distributed.checkpoint, named as the
    original model's state_dict() names it (tied parameters under each of their names): every
    unit parameter as a DTensor of its full shape with placement Shard(0) over `mesh`, whose
    local tensor is this rank's rows of the shard (without the zero padding); every other
    parameter and every buffer as a plain tensor (replicated: DCP writes it once). The tensors
    share storage with the module, so `dcp.load` into the dict loads the module in place (save
    the module afterwards to keep it as a rank file). Call it between entry calls (the units
    sharded). `manifest`: the run's manifest.json (not needed at world size 1). `mesh`: a 1-D
    DeviceMesh of the rank file's world size, or for an HSDP file (--shard-group-size=S) a 2-D
    one of shape (W / S, S), the unit parameters then (Replicate(), Shard(0)) as FSDP2's HSDP
    lays them out (default: one over the default process group, which torch.distributed must
    have, on the parameters' device type)."""
    from ._training import _attribute
    layout = _Layout(module, manifest, mesh, "sharded_state_dict")
    state: Dict[str, torch.Tensor] = {}
    for path, aliases, _ in layout.params:
        dtensor = layout.wrap(path, _attribute(module, path))
        for name in [path] + aliases:
            state[name] = dtensor
    for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
        if name not in state:
            state[name] = tensor.detach()
    return state


def _ensure_state(optimizer: torch.optim.Optimizer) -> None:
    """Creates the state an optimizer makes at its first step, without changing a parameter:
    one step on zero gradients at learning rate 0 (what torch.distributed.checkpoint.state_dict
    does before loading into a fresh optimizer)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if all(optimizer.state.get(p) for p in params):
        return
    saved_grads = [p.grad for p in params]
    saved_lrs = [group.get("lr") for group in optimizer.param_groups]
    try:
        for p in params:
            p.grad = torch.zeros_like(p)
        for group in optimizer.param_groups:
            if "lr" in group:
                group["lr"] = torch.tensor(0.0) if torch.is_tensor(group["lr"]) else 0.0
        with torch.no_grad():
            optimizer.step()
    finally:
        for p, grad in zip(params, saved_grads):
            p.grad = grad
        for group, lr in zip(optimizer.param_groups, saved_lrs):
            if lr is not None:
                group["lr"] = lr


def sharded_optimizer_state_dict(module: torch.jit.ScriptModule, optimizer: torch.optim.Optimizer,
                                 manifest: Optional[str] = None, mesh=None) -> Dict[str, object]:
    """The optimizer's state of a rank file's parameters for torch.distributed.checkpoint, laid
    out as torch.distributed.checkpoint.state_dict.get_optimizer_state_dict lays out FSDP2's
    (`{"state": {name: {...}}, "param_groups": [{..., "params": [names]}]}`, a tied parameter under
    its first name): each state tensor of a unit parameter's shape (Adam's moments, SGD's momentum)
    as a Shard(0) DTensor over this rank's rows, like the parameter itself; scalars ("step") plain.
    The tensors are the optimizer's own, so `dcp.load` into the dict loads them in place; then
    apply_optimizer_param_groups(optimizer, the dict) takes the loaded hyperparameters (a
    scheduler's learning rate). An optimizer that has not stepped yet gets its state first (one
    step on zero gradients at learning rate 0, parameters unchanged)."""
    from ._errors import FsdpOptError
    layout = _Layout(module, manifest, mesh, "sharded_optimizer_state_dict")
    names = {}
    for name, p in module.named_parameters():
        names.setdefault(id(p), name)
    _ensure_state(optimizer)
    state: Dict[str, Dict[str, object]] = {}
    groups = []
    for group in optimizer.param_groups:
        entry = {k: v for k, v in group.items() if k != "params"}
        entry["params"] = []
        for p in group["params"]:
            name = names.get(id(p))
            if name is None:
                raise FsdpOptError("sharded_optimizer_state_dict: the optimizer holds a tensor that is not a "
                                   "parameter of the module")
            entry["params"].append(name)
            state[name] = {k: (layout.wrap(name, v) if torch.is_tensor(v) and v.dim() > 0 and v.shape == p.shape
                               else v)
                           for k, v in optimizer.state[p].items()}
        groups.append(entry)
    return {"state": state, "param_groups": groups}


def apply_optimizer_param_groups(optimizer: torch.optim.Optimizer, optimizer_state: Dict[str, object]) -> None:
    """After dcp.load into a sharded_optimizer_state_dict: the optimizer takes the loaded
    hyperparameters of each parameter group (the tensors are already loaded in place)."""
    from ._errors import FsdpOptError
    groups = optimizer_state["param_groups"]
    if len(groups) != len(optimizer.param_groups):
        raise FsdpOptError("apply_optimizer_param_groups: the checkpoint has %d parameter groups, the optimizer %d"
                           % (len(groups), len(optimizer.param_groups)))
    for group, loaded in zip(optimizer.param_groups, groups):
        group.update({k: v for k, v in loaded.items() if k != "params"})
