"""One rank of test_torchrun.py, started by torchrun: scripts the test GPT, transforms it
in-process for this RANK and WORLD_SIZE, runs forward and generate, and does the same with the
rank file the test wrote with fsdp_opt.shard(). Writes OUT_DIR/rank{RANK}.json.

usage: torchrun --nproc_per_node=2 torchrun_worker.py OUT_DIR SHARD_DIR
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


def main(out_dir: str, shard_dir: str) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    model = fm.make("gpt")
    x = fm.example_inputs("gpt")[0]
    fsdp_opt.mark_unit(model)
    for block in model.blocks:
        fsdp_opt.mark_unit(block)
    fsdp_opt.register_fsdp_forward_method(model, "generate")
    scripted = torch.jit.script(model)
    expected = {"forward": scripted(x), "generate": scripted.generate(x, 4)}

    result = {"rank": rank, "world_size": world}
    sharded = fsdp_opt.transform(scripted, world_size=world, rank=rank)
    result["wte_rows"] = sharded.wte.weight.shape[0]
    fsdp_opt.reset_stats()
    result["in_process"] = {"forward": same_bits(sharded(x), expected["forward"]),
                            "generate": same_bits(sharded.generate(x, 4), expected["generate"])}
    result["stats"] = fsdp_opt.stats()

    from_file = torch.jit.load(os.path.join(shard_dir, "rank%d.pt" % rank))
    result["rank_file"] = {"forward": same_bits(from_file(x), expected["forward"]),
                           "generate": same_bits(from_file.generate(x, 4), expected["generate"])}
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
