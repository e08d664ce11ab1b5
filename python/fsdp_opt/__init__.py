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

The package's modules, by concern: _libraries (finding and loading the libraries, the format's
names), _markers (mark_unit, register_fsdp_forward_method), _pipeline (transform, shard),
_runtime (stats, unsharded), _training (load_rank_file, full_state_dict), checkpoint (DCP),
_tools (the fsdp-opt and fsdp-run commands of `pip install .`).
The work is done by the TorchScript ops of libfsdp_passes.so (`torch.ops.fsdp_opt.*`) and
libfsdp_runtime.so (`torch.ops.fsdp.*`), loaded with torch.ops.load_library by `load()`, which
every function here calls first. Where the libraries are found: see `load`.
"""

from ._errors import FsdpOptError, FsdpOptWarning
from ._libraries import _cmake_prefix_path, build_info, lib_dir, load, load_plugin
from ._markers import mark_unit, register_fsdp_forward_method
from ._pipeline import default_pipeline, list_passes, shard, transform
from ._runtime import reset_stats, stats, unsharded
from ._training import full_state_dict, load_rank_file
# torch 2.x; their own module: DCP
from .checkpoint import apply_optimizer_param_groups, sharded_optimizer_state_dict, sharded_state_dict

__all__ = [
    "FsdpOptError", "FsdpOptWarning", "load", "load_plugin", "lib_dir", "list_passes", "default_pipeline",
    "mark_unit", "register_fsdp_forward_method", "transform", "shard", "stats", "reset_stats",
    "load_rank_file", "full_state_dict", "sharded_state_dict",
    "sharded_optimizer_state_dict", "apply_optimizer_param_groups", "unsharded", "build_info",
    "cmake_prefix_path",
]
__version__ = "0.1.0"
# After `pip install .`: the prefix for CMAKE_PREFIX_PATH under which find_package(FsdpOpt) finds
# the installed C++ package (as torch.utils.cmake_prefix_path is torch's); None without it.
cmake_prefix_path = _cmake_prefix_path()
