"""mark_unit / register_fsdp_forward_method on nn.Modules (SPEC markers, kept by scripting) and
on ScriptModules (recorded, passed on by transform)."""

import warnings

import pytest
import torch

from fsdp_test_helpers import same_bits


def unit_remarks(lines):
    return sorted(line for line in lines if "[find-units] unit '" in line)


def test_nn_module_markers_are_the_spec_attributes(fsdp_opt, gpt):
    model, x = gpt
    assert fsdp_opt.mark_unit(model.blocks[0]) is model.blocks[0]
    fsdp_opt.mark_unit(model)
    fsdp_opt.register_fsdp_forward_method(model, "generate")
    fsdp_opt.register_fsdp_forward_method(model, "generate")  # registered once
    assert model.blocks[0]._fsdp_unit is True and model._fsdp_unit is True
    assert model._fsdp_forward_methods == ["generate"]
    assert not hasattr(model.blocks[1], "_fsdp_unit")

    scripted = torch.jit.script(model)
    assert scripted._c.getattr("_fsdp_unit") is True
    assert list(scripted._c.getattr("_fsdp_forward_methods")) == ["generate"]

    lines = []
    rewritten = fsdp_opt.transform(scripted, diagnostics=lines)
    remarks = unit_remarks(lines)
    assert len(remarks) == 2, lines
    assert "unit '.'" in remarks[1] or "unit '.'" in remarks[0]
    assert any("unit 'blocks.0'" in r for r in remarks)
    assert any("generate" in r for r in remarks if "unit '.'" in r)
    assert same_bits(rewritten(x), scripted(x))
    assert same_bits(rewritten.generate(x, 3), scripted.generate(x, 3))


def test_script_module_markers_are_recorded_and_passed_on(fsdp_opt, gpt):
    model, x = gpt
    scripted = torch.jit.script(model)
    block = getattr(scripted.blocks, "1")
    assert fsdp_opt.mark_unit(block) is block
    fsdp_opt.mark_unit(scripted)
    fsdp_opt.register_fsdp_forward_method(scripted, "generate")
    # The ScriptModule itself is unchanged: no new attribute on its (possibly shared) type.
    assert not scripted._c.hasattr("_fsdp_unit") and not block._c.hasattr("_fsdp_unit")

    lines = []
    rewritten = fsdp_opt.transform(scripted, diagnostics=lines)
    remarks = unit_remarks(lines)
    assert len(remarks) == 2, lines
    assert any("unit 'blocks.1'" in r for r in remarks)
    assert any("unit '.'" in r and "generate" in r for r in remarks)
    assert same_bits(rewritten(x), scripted(x))
    assert same_bits(rewritten.generate(x, 3), scripted.generate(x, 3))


def test_recorded_markers_combine_with_patterns(fsdp_opt, gpt):
    model, x = gpt
    scripted = torch.jit.script(model)
    fsdp_opt.mark_unit(getattr(scripted.blocks, "0"))
    lines = []
    rewritten = fsdp_opt.transform(scripted, units=["blocks.1"], diagnostics=lines)
    remarks = unit_remarks(lines)
    assert [r.split("'")[1] for r in remarks] == ["blocks.0", "blocks.1"], lines
    assert same_bits(rewritten(x), scripted(x))


def test_forward_method_on_a_non_unit_is_a_noop_remark(fsdp_opt, gpt):
    model, x = gpt
    scripted = torch.jit.script(model)
    fsdp_opt.register_fsdp_forward_method(scripted, "generate")
    lines = []
    rewritten = fsdp_opt.transform(scripted, units=["blocks.*"], diagnostics=lines)
    assert any("no-op" in line and "generate" in line for line in lines), lines
    assert same_bits(rewritten.generate(x, 2), scripted.generate(x, 2))


def test_marker_errors_are_clear(fsdp_opt, gpt):
    model, _ = gpt
    with pytest.raises(ValueError, match="has no method 'nope'"):
        fsdp_opt.register_fsdp_forward_method(model, "nope")
    scripted = torch.jit.script(model)
    with pytest.raises(ValueError, match="has no TorchScript method 'nope'.*torch.jit.export"):
        fsdp_opt.register_fsdp_forward_method(scripted, "nope")
    with pytest.raises(TypeError, match="expects an nn.Module"):
        fsdp_opt.mark_unit("blocks.0")
    with pytest.raises(TypeError, match="non-empty str"):
        fsdp_opt.register_fsdp_forward_method(model, 3)


def test_lint_warning_and_the_registration_that_fixes_it(fsdp_opt, fm):
    # The wrapper calls backbone._forward_impl, not its forward: a FsdpOptWarning names the fix.
    scripted = torch.jit.script(fm.make("resnet"))
    x = fm.example_inputs("resnet")[0]
    lines = []
    with pytest.warns(fsdp_opt.FsdpOptWarning, match="register it with --forward-method=backbone:_forward_impl"):
        fsdp_opt.transform(scripted, units=["backbone"], diagnostics=lines)
    assert any(line.startswith("warning: method '_forward_impl' of unit 'backbone'") for line in lines), lines

    # Registered on the loaded ScriptModule's submodule: no warning, and the result is exact.
    fsdp_opt.register_fsdp_forward_method(scripted.backbone, "_forward_impl")
    lines = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", fsdp_opt.FsdpOptWarning)
        rewritten = fsdp_opt.transform(scripted, units=["backbone"], diagnostics=lines)
    assert not any(line.startswith("warning:") for line in lines), lines
    assert same_bits(rewritten(x), scripted(x))
