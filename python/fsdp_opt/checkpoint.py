"""Sharded checkpoints of rank files through torch.distributed.checkpoint (DCP), torch 2.x only.

    import torch.distributed.checkpoint as dcp
    sd = fsdp_opt.sharded_state_dict(module, "DIR/manifest.json")   # every rank
    dcp.save(sd, checkpoint_id="ckpt/")                             # W ranks write their rows
    ...
    sd = fsdp_opt.sharded_state_dict(other_module, "OTHER/manifest.json")
    dcp.load(sd, checkpoint_id="ckpt/")                             # in place, any W

A unit parameter's shard in a rank file is rows [r*c, min((r+1)*c, N)) of the parameter,
zero-padded to c = ceil(N/W) rows (SPEC section 2). Those rows are exactly torch.chunk's chunk r,
which is how DTensor's Shard(0) and FSDP2 split dim 0, so a rank's shard without its padding is
the local tensor of a Shard(0) DTensor of the full shape: a checkpoint written from rank files
loads into rank files of any world size, into an FSDP2 model of the same architecture, and the
reverse. The 1.13 leg has no DTensor: there fsdp_opt.full_state_dict is the only way out.
"""

from typing import Dict, Optional

import torch


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
    DeviceMesh of the rank file's world size (default: one over the default process group, which
    torch.distributed must have, on the parameters' device type)."""
    from . import FsdpOptError, _attribute, _manifest_units
    try:
        from torch.distributed.tensor import DTensor, Shard
        from torch.distributed.device_mesh import init_device_mesh
    except ImportError as e:  # torch 1.13
        raise FsdpOptError("sharded_state_dict needs torch.distributed.tensor (torch 2.x); this torch %s has "
                           "only fsdp_opt.full_state_dict (%s)" % (torch.__version__, e)) from None
    import torch.distributed as dist

    rank = int(getattr(module, "_fsdp_rank", 0))
    world = int(getattr(module, "_fsdp_world_size", 1))
    units = _manifest_units(module, manifest, "sharded_state_dict")
    if units is None and world != 1:
        raise FsdpOptError("sharded_state_dict: a rank file of world size %d needs its run's manifest.json" % world)
    if mesh is None:
        if not dist.is_initialized():
            raise FsdpOptError("sharded_state_dict: torch.distributed is not initialized; call "
                               "torch.distributed.init_process_group (DCP needs it) or pass a mesh")
        first = next(iter(module.parameters()), None)
        device_type = first.device.type if first is not None else "cpu"
        mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    if mesh.ndim != 1 or mesh.size() != world or mesh.get_local_rank() != rank:
        raise FsdpOptError("sharded_state_dict: the mesh (size %d, this process at %d) does not match the rank "
                           "file (rank %d of world size %d)" % (mesh.size(), mesh.get_local_rank(), rank, world))
    if units is None:  # world size 1: every parameter whole
        params = [(name, [], list(p.shape)) for name, p in module.named_parameters() if p.dim() > 0]
    else:
        params = [(p["path"], list(p["aliases"]), [int(d) for d in p["shape"]]) for u in units for p in u["params"]]

    state: Dict[str, torch.Tensor] = {}
    for path, aliases, shape in params:
        shard = _attribute(module, path).detach()
        rows = shape[0]
        chunk = -(-rows // world)
        begin = min(rank * chunk, rows)
        count = min(chunk, rows - begin)
        if list(shard.shape[1:]) != shape[1:] or shard.shape[0] != chunk:
            raise FsdpOptError("sharded_state_dict: %s has shape %s, not a shard of %s for world size %d (is a "
                               "unit gathered?)" % (path, list(shard.shape), shape, world))
        stride = torch.empty(shape, device="meta").stride()
        local = shard.narrow(0, 0, count)
        dtensor = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size(shape),
                                     stride=stride)
        for name in [path] + aliases:
            state[name] = dtensor
    for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
        if name not in state:
            state[name] = tensor.detach()
    return state
