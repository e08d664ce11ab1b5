"""transform(): the pipeline in-process on a ScriptModule; stats(); errors with fsdp-opt's text."""

import os
import re

import pytest
import torch

from fsdp_test_helpers import same_bits


def test_transform_in_process_is_exact_and_leaves_the_input(fsdp_opt, gpt):
    model, x = gpt
    scripted = torch.jit.script(model)
    rewritten = fsdp_opt.transform(scripted, units=["blocks.*", "."], forward_methods=[(".", "generate")])
    assert isinstance(rewritten, torch.jit.ScriptModule)
    assert "fsdp::all_gather" in str(rewritten.graph)
    assert "fsdp::" not in str(scripted.graph)  # the input keeps its graphs
    assert same_bits(rewritten(x), scripted(x))
    assert same_bits(rewritten.generate(x, 4), scripted.generate(x, 4))


def test_stats_count_the_collectives(fsdp_opt, gpt):
    model, x = gpt
    rewritten = fsdp_opt.transform(torch.jit.script(model), units="blocks.*", bucket_bytes=0)
    fsdp_opt.reset_stats()
    rewritten(x)
    stats = fsdp_opt.stats()
    assert stats["all_gathers"] == 2 and stats["gather_calls"] == 2, stats
    block_bytes = [sum(p.numel() * p.element_size() for p in block.parameters()) for block in model.blocks]
    assert stats["bytes_gathered"] == sum(block_bytes) and stats["unsharded_bytes"] == 0, (stats, block_bytes)
    fsdp_opt.reset_stats()
    assert fsdp_opt.stats()["all_gathers"] == 0


def test_statistics_are_the_command_lines(fsdp_opt, gpt, tmp_path):
    # One source for the counts: what transform() reports is what `fsdp-opt --stats` prints.
    import subprocess
    model, _ = gpt
    scripted = torch.jit.script(model)
    stats = {}
    fsdp_opt.transform(scripted, units=["blocks.*", "."], forward_methods=[".:generate"], world_size=2,
                       statistics=stats)
    path = str(tmp_path / "gpt.pt")
    scripted.save(path)
    tool = os.path.join(os.path.dirname(fsdp_opt.lib_dir()), "bin", "fsdp-opt")
    out = subprocess.run([tool, path, "--fsdp-unit=blocks.*", "--fsdp-unit=.", "--forward-method=.:generate",
                          "--world-size=2", "--stats"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    printed = dict(line.strip().split(": ", 1) for line in out.stdout.splitlines()[1:])
    assert stats == printed
    # the planner holds the root and both blocks for the call: one bucket
    assert stats["units"] == "3" and stats["gathers per call of forward"] == "1", stats
    assert stats["gathers per call of generate"].startswith("1"), stats


def test_byte_sizes_take_the_command_lines_spelling(fsdp_opt, gpt):
    # The libraries parse the values: "0" and "25MiB" mean what --bucket-bytes=0/25MiB mean.
    model, _ = gpt
    scripted = torch.jit.script(model)

    def gathers(**keywords):
        stats = {}
        fsdp_opt.transform(scripted, units=["blocks.*", "."], world_size=2, statistics=stats, **keywords)
        return stats["gathers per call of forward"]

    assert gathers(bucket_bytes="0") == gathers(bucket_bytes=0) != gathers(bucket_bytes="25MiB")
    assert gathers(bucket_bytes="25MiB") == gathers(bucket_bytes=25 << 20) == "1"


def test_named_pipeline(fsdp_opt, gpt):
    model, x = gpt
    scripted = torch.jit.script(model)
    passes = "specialize-unit-types,insert-unit-gathers,wrap-entry-methods,verify-fsdp"
    lines = []
    rewritten = fsdp_opt.transform(scripted, units=["blocks.*"], passes=passes, diagnostics=lines)
    assert same_bits(rewritten(x), scripted(x))
    # Only the named passes ran: no other pass remarked, and the default pipeline's prefetch
    # (which splits the second block's gather into start/wait) did not.
    origins = {line.split("] ")[0].split("[")[1] for line in lines if line.startswith("remark: [")}
    assert origins <= set(passes.split(",")) | {"find-units", "parameter-groups"}, origins
    ir = str(rewritten.graph)
    assert ir.count("fsdp::all_gather(") == 2 and "fsdp::all_gather_start" not in ir, ir


def test_default_pipeline_is_what_transform_runs(fsdp_opt, gpt):
    model, x = gpt
    scripted = torch.jit.script(model)
    pipeline = fsdp_opt.default_pipeline()
    assert pipeline[0] == "lower-indexed-module-calls" and pipeline[-1] == "verify-fsdp", pipeline
    assert set(pipeline) <= set(fsdp_opt.list_passes()), pipeline

    def ir(module):  # every transform clones its types: their mangled names differ
        return re.sub(r"___torch_mangle_\d+\.", "", str(module.graph))

    implicit = ir(fsdp_opt.transform(scripted, units=["blocks.*"], world_size=2))
    explicit = ir(fsdp_opt.transform(scripted, units=["blocks.*"], world_size=2, passes=pipeline))
    assert explicit == implicit
    # The planner holds both blocks for the call in one bucket: nothing is left to prefetch.
    assert "fsdp::all_gather_start" not in implicit and implicit.count("fsdp::all_gather(") == 1
    # and the list is not ignored: without the planner each block keeps its gather, and
    # prefetch-gathers splits the second one
    fewer = ir(fsdp_opt.transform(scripted, units=["blocks.*"], world_size=2,
                                  passes=[p for p in pipeline if p != "plan-gather-lifetimes"]))
    assert "fsdp::all_gather_start" in fewer


def test_unit_policies_choose_what_fsdp1_would(fsdp_opt, gpt):
    model, x = gpt
    scripted = torch.jit.script(model)
    # By class, as FSDP1's ModuleWrapPolicy({Block}) or `for b in model.blocks: fully_shard(b)`.
    lines = []
    by_type = fsdp_opt.transform(scripted, unit_types=["Block"], units=["."], world_size=2, diagnostics=lines)
    chose = [l for l in lines if "--fsdp-unit-type=Block chose" in l]
    assert chose == ["remark: [find-units] --fsdp-unit-type=Block chose 2 module(s): blocks.0, blocks.1"], lines
    assert by_type.generate.graph is not None and same_bits(by_type(x), scripted(x))
    # By size, as FSDP1's size_based_auto_wrap_policy: with a block's element count as the
    # threshold, each block is a unit (post-order: none of its children reaches it) and the
    # embeddings, the tied head and the last norm stay with the root.
    block = sum(p.numel() for p in model.blocks[0].parameters())
    lines = []
    by_size = fsdp_opt.transform(scripted, min_unit_params=block, diagnostics=lines)
    chose = [l for l in lines if "--fsdp-min-unit-params" in l]
    assert chose == ["remark: [find-units] --fsdp-min-unit-params=%d chose 3 module(s): ., blocks.0, blocks.1" % block], lines
    assert same_bits(by_size(x), scripted(x))


def test_sharding_for_a_rank_in_process(fsdp_opt, gpt):
    model, _ = gpt
    scripted = torch.jit.script(model)
    rank1 = fsdp_opt.transform(scripted, units=["blocks.*"], world_size=2, rank=1)
    fc = getattr(rank1.blocks, "1").mlp.fc
    full = getattr(scripted.blocks, "1").mlp.fc.weight
    assert fc.weight.shape[0] == (full.shape[0] + 1) // 2
    assert same_bits(fc.weight, full[full.shape[0] // 2:])
    assert rank1._fsdp_rank == 1 and rank1._fsdp_world_size == 2


def error_text(excinfo):
    text = str(excinfo.value)
    assert "Exception raised from" not in text and "frame #" not in text, text
    return text


def test_errors_raise_with_fsdp_opt_text(fsdp_opt, gpt):
    model, _ = gpt
    scripted = torch.jit.script(model)
    with pytest.raises(fsdp_opt.FsdpOptError, match="pattern 'nope' matches no module") as e:
        fsdp_opt.transform(scripted, units=["nope"])
    error_text(e)
    with pytest.raises(fsdp_opt.FsdpOptError, match=r"unknown pass 'no-such-pass' \(known passes: .*verify-fsdp") as e:
        fsdp_opt.transform(scripted, units=["blocks.*"], passes=["no-such-pass"])
    error_text(e)
    with pytest.raises(fsdp_opt.FsdpOptError, match="nope") as e:
        fsdp_opt.transform(scripted, units=["blocks.*"], forward_methods=["blocks.*:nope"])
    error_text(e)
    # The keywords' values go through fsdp-opt's own option parser: the command line's error
    # texts, naming the keyword, as ValueError.
    with pytest.raises(ValueError, match="^forward_methods expects PATTERN:METHOD, got 'generate'$"):
        fsdp_opt.transform(scripted, units=["blocks.*"], forward_methods=["generate"])
    with pytest.raises(ValueError, match=r"^param_dtype expects bf16, fp16 or fp32, got 'int8'$"):
        fsdp_opt.transform(scripted, units=["blocks.*"], param_dtype="int8")
    with pytest.raises(ValueError, match=r"^param_dtype expects bf16, fp16 or fp32, got 'int8'$"):
        fsdp_opt.transform(scripted, units=["blocks.*"], param_dtype=torch.int8)
    with pytest.raises(fsdp_opt.FsdpOptError, match=r"--fsdp-unit-type 'Nope' matches no module's class \(the model's classes: Block, "):
        fsdp_opt.transform(scripted, unit_types=["Nope"])
    with pytest.raises(ValueError, match="^min_unit_params expects a number of parameter elements >= 1, got '0'$"):
        fsdp_opt.transform(scripted, min_unit_params=0)
    with pytest.raises(TypeError, match="unit_types must be strings"):
        fsdp_opt.transform(scripted, unit_types=[3])
    with pytest.raises(TypeError, match="expected a ScriptModule"):
        fsdp_opt.transform(model, units=["blocks.*"])
    with pytest.raises(ValueError, match=r"rank must be None or an int in \[0, 2\)"):
        fsdp_opt.transform(scripted, units=["blocks.*"], world_size=2, rank=2)
    with pytest.raises(ValueError, match="^world_size must be at least 1, got 0$"):
        fsdp_opt.transform(scripted, units=["blocks.*"], world_size=0)
    with pytest.raises(ValueError, match="^bucket_bytes expects a size like 0, 64KiB or 25MiB, got '-5'$"):
        fsdp_opt.transform(scripted, units=["blocks.*"], bucket_bytes=-5)
    with pytest.raises(ValueError, match=r"^shard_group_size=3 does not divide world_size=4 \(W ranks form"):
        fsdp_opt.shard(scripted, "unused", units=["blocks.*"], world_size=4, shard_group_size=3)
    with pytest.raises(TypeError, match="^max_unsharded_bytes must be an int"):
        fsdp_opt.transform(scripted, units=["blocks.*"], max_unsharded_bytes=1.5)
    with pytest.raises(TypeError, match="^world_size must be an int, got '2'$"):
        fsdp_opt.transform(scripted, units=["blocks.*"], world_size="2")


def test_library_lookup_errors_name_the_places_searched(fsdp_opt, monkeypatch, tmp_path):
    monkeypatch.setenv("FSDP_OPT_LIB_DIR", str(tmp_path))
    with pytest.raises(fsdp_opt.FsdpOptError, match="cannot find libfsdp_runtime.so.*FSDP_OPT_LIB_DIR"):
        fsdp_opt.lib_dir()


def test_the_installed_package_is_tested(fsdp_opt):
    # ctest installs the package with pip and points FSDP_OPT_EXPECT_PACKAGE_DIR at the copy.
    expected = os.environ.get("FSDP_OPT_EXPECT_PACKAGE_DIR")
    if not expected:
        pytest.skip("not run by ctest")
    assert os.path.dirname(os.path.abspath(fsdp_opt.__file__)) == os.path.abspath(expected)
