"""One rank of test_module_states.py, started by torchrun: each rank builds the test GPT from
its OWN seed (RANK), as a program that forgot a common seed would, and shards it in-process.
First without sync_module_states (must fail, naming the first differing parameter), then with
it (must hold rank 0's model, bit for bit); and a channels_last convnet synced the same way.
Writes OUT_DIR/rank{RANK}.json.

usage: torchrun --nproc_per_node=2 module_states_worker.py OUT_DIR
"""

import json
import os
import sys
import warnings

import torch

warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)

import fsdp_models as fm  # noqa: E402  (test/Inputs, on PYTHONPATH)
import fsdp_opt  # noqa: E402

from fsdp_test_helpers import same_bits  # noqa: E402


def marked_gpt(seed):
    model = fm.make("gpt", seed=seed)
    fsdp_opt.mark_unit(model)
    for block in model.blocks:
        fsdp_opt.mark_unit(block)
    fsdp_opt.register_fsdp_forward_method(model, "generate")
    return torch.jit.script(model)


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.pointwise = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        return self.pointwise(torch.relu(self.conv(x)))


def marked_channels_last_convnet(seed):
    """A convnet after model.to(memory_format=torch.channels_last): weights that are not row-major
    (the 1x1 kernel's only in its size-1 dims)."""
    torch.manual_seed(seed)
    model = ConvNet().to(memory_format=torch.channels_last)
    fsdp_opt.mark_unit(model)
    return torch.jit.script(model)


def main(out_dir: str) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    scripted = marked_gpt(seed=rank)
    mine_before = scripted.wte.weight.detach().clone()
    x = fm.example_inputs("gpt")[0]
    result = {"rank": rank}

    try:
        fsdp_opt.transform(scripted, world_size=world, rank=rank)
        result["unsynced_error"] = None
    except fsdp_opt.FsdpOptError as e:
        result["unsynced_error"] = str(e)

    sharded = fsdp_opt.transform(scripted, world_size=world, rank=rank, sync_module_states=True)
    rank0 = marked_gpt(seed=0)
    result["forward"] = same_bits(sharded(x), rank0(x))
    result["generate"] = same_bits(sharded.generate(x, 4), rank0.generate(x, 4))
    # The input is left as it was; the tied head still shares the embedding's shard.
    result["input_untouched"] = same_bits(scripted.wte.weight, mine_before)
    result["tied"] = sharded.lm_head.weight.data_ptr() == sharded.wte.weight.data_ptr()
    # Replicated parameters (outside every unit: here the embeddings, the root not being a unit)
    # take rank 0's values too.
    blocks_only = fsdp_opt.transform(torch.jit.script(fm.make("gpt", seed=rank)), units=["blocks.*"],
                                     world_size=world, rank=rank, sync_module_states=True)
    plain0 = torch.jit.script(fm.make("gpt", seed=0))
    result["replicated"] = same_bits(blocks_only(x), plain0(x)) and same_bits(blocks_only.wte.weight, plain0.wte.weight)
    # Rank 0's values broadcast into tensors laid out as the originals: both ranks' shards keep
    # channels_last (else their gathers' layouts differ) and compute as the original does.
    convnet = fsdp_opt.transform(marked_channels_last_convnet(seed=rank), world_size=world, rank=rank,
                                 sync_module_states=True)
    convnet0 = marked_channels_last_convnet(seed=0)
    images = torch.randn(2, 3, 9, 9, generator=torch.Generator().manual_seed(5))
    result["channels_last"] = (same_bits(convnet(images), convnet0(images))
                               and convnet.conv.weight.is_contiguous(memory_format=torch.channels_last)
                               and convnet.pointwise.weight.stride() == convnet0.pointwise.weight.stride())
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
