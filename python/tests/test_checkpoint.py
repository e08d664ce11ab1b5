"""sharded_state_dict(): what it refuses before any collective (test/e2e/dcp_checkpoint.py runs
the checkpoints themselves on several ranks)."""

import json

import pytest
import torch


def _has_dtensor():
    try:
        import torch.distributed.tensor  # noqa: F401
        return True
    except ImportError:
        return False


def test_sharded_state_dict_needs_torch_2(fsdp_opt, gpt, tmp_path):
    if _has_dtensor():
        pytest.skip("this torch has DTensor; the refusal is the 1.13 leg's")
    model, _ = gpt
    path = fsdp_opt.shard(torch.jit.script(model), tmp_path / "m.pt", units=["blocks.*"])[0]
    with pytest.raises(fsdp_opt.FsdpOptError, match=r"needs torch.distributed.tensor \(torch 2.x\).*only "
                                                    r"fsdp_opt.full_state_dict"):
        fsdp_opt.sharded_state_dict(torch.jit.load(path))


def test_sharded_state_dict_refusals(fsdp_opt, gpt, tmp_path):
    if not _has_dtensor():
        pytest.skip("torch %s has no DTensor (the 1.13 leg: full_state_dict only)" % torch.__version__)
    import torch.distributed as dist
    assert not dist.is_initialized()
    model, _ = gpt
    scripted = torch.jit.script(model)
    one = torch.jit.load(fsdp_opt.shard(scripted, tmp_path / "m.pt", units=["blocks.*"])[0])
    with pytest.raises(fsdp_opt.FsdpOptError, match="torch.distributed is not initialized"):
        fsdp_opt.sharded_state_dict(one)
    files = fsdp_opt.shard(scripted, tmp_path / "w2", units=["blocks.*"], world_size=2)
    rank0 = torch.jit.load(files[0])
    with pytest.raises(fsdp_opt.FsdpOptError, match="a rank file of world size 2 needs its run's manifest.json"):
        fsdp_opt.sharded_state_dict(rank0)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"units": []}))
    with pytest.raises(fsdp_opt.FsdpOptError, match="is not the manifest of the run this rank file comes from"):
        fsdp_opt.sharded_state_dict(rank0, str(other))
    with pytest.raises(fsdp_opt.FsdpOptError, match="not a rank file of fsdp-opt"):
        fsdp_opt.sharded_state_dict(scripted)
