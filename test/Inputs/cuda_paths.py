"""The CUDA unshard paths every GPU test (test/gpu/*.py) runs its checks on, and their skip rule.
Torch only: a GPU machine may lack the rest of test/Inputs' dependencies."""

import torch

# (label, environment of a child process): the copy-only path (world size 1), then the NCCL path
# on a one-rank communicator under each gather layout (docs/runtime.md, "Gather layouts").
GATHER_PATHS = (
    ("copy-only", {}),
    ("nccl packed", {"FSDP_OPT_CUDA_FORCE_NCCL": "1", "FSDP_OPT_CUDA_GATHER_LAYOUT": "packed"}),
    ("nccl per-param", {"FSDP_OPT_CUDA_FORCE_NCCL": "1", "FSDP_OPT_CUDA_GATHER_LAYOUT": "per-param"}),
)


def load_or_skip(lib):
    """Loads the runtime library `lib`; returns why the GPU tests cannot run here, or None."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    torch.ops.load_library(lib)
    if not torch.ops.fsdp.has_cuda_backend():
        return "%s was built without FSDP_OPT_ENABLE_CUDA" % lib
    return None
