"""shard(): rank files and manifest, as `fsdp-opt -o` writes them."""

import json
import os

import pytest
import torch

from fsdp_test_helpers import same_bits


def test_shard_writes_rank_files(fsdp_opt, gpt, tmp_path):
    model, x = gpt
    fsdp_opt.mark_unit(model)
    fsdp_opt.register_fsdp_forward_method(model, "generate")
    scripted = torch.jit.script(model)
    out = tmp_path / "sharded"
    files = fsdp_opt.shard(scripted, out, units=["blocks.*"], world_size=2)
    assert files == [str(out / "rank0.pt"), str(out / "rank1.pt")]
    assert sorted(os.listdir(out)) == ["manifest.json", "rank0.pt", "rank1.pt"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["world_size"] == 2
    vocab = scripted.wte.weight.shape[0]
    for rank, path in enumerate(files):
        loaded = torch.jit.load(path)
        assert loaded._fsdp_rank == rank and loaded._fsdp_world_size == 2
        assert loaded.wte.weight.shape[0] == (vocab + 1) // 2  # the root unit's tied embedding


def test_shard_world_size_one_is_one_file(fsdp_opt, gpt, tmp_path):
    model, x = gpt
    scripted = torch.jit.script(model)
    files = fsdp_opt.shard(scripted, tmp_path / "m.pt", units=["blocks.*"])
    assert files == [str(tmp_path / "m.pt")]
    loaded = torch.jit.load(files[0])
    assert same_bits(loaded(x), scripted(x))


def test_shard_errors(fsdp_opt, gpt, tmp_path):
    model, _ = gpt
    scripted = torch.jit.script(model)
    with pytest.raises(fsdp_opt.FsdpOptError, match="matches no module"):
        fsdp_opt.shard(scripted, tmp_path / "out", units=["nope"], world_size=2)
    assert not (tmp_path / "out").exists()


def test_shard_writes_extra_files_into_every_file(fsdp_opt, gpt, tmp_path):
    # As torch.jit.save(_extra_files=...): a deployment reads its config from the file it loads.
    model, _ = gpt
    scripted = torch.jit.script(model)
    extra = {"config.json": '{"eos": 2}', "notes/readme.txt": "sharded twice"}
    files = fsdp_opt.shard(scripted, tmp_path / "w2", units=["blocks.*"], world_size=2, extra_files=extra)
    files += fsdp_opt.shard(scripted, tmp_path / "one.pt", units=["blocks.*"], extra_files=extra)
    for path in files:
        read = dict.fromkeys(extra, "")
        torch.jit.load(path, _extra_files=read)
        assert read == {name: text.encode() for name, text in extra.items()}, (path, read)
    with pytest.raises(TypeError, match="extra_files maps file names to str contents"):
        fsdp_opt.shard(scripted, tmp_path / "bad", units=["blocks.*"], world_size=2, extra_files={"a": b"\0"})
    assert not (tmp_path / "bad").exists()


def test_shard_refuses_units_that_hold_nothing(fsdp_opt, gpt, tmp_path):
    model, _ = gpt
    frozen = torch.jit.freeze(torch.jit.script(model).eval())
    with pytest.raises(fsdp_opt.FsdpOptError, match="tensor constants .* run fsdp-opt on the scripted model before freezing"):
        fsdp_opt.shard(frozen, tmp_path / "out", units=["."], world_size=2)
    with pytest.raises(fsdp_opt.FsdpOptError, match="no module is an FSDP unit"):
        fsdp_opt.shard(torch.jit.script(model), tmp_path / "out", world_size=2)
    assert not (tmp_path / "out").exists()
