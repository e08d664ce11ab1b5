"""load_plugin(): passes of a plugin library (test/plugin's count-gathers) in a Python pipeline."""

import os

import pytest
import torch

PLUGIN = os.environ.get("FSDP_OPT_TEST_PLUGIN")


@pytest.mark.skipif(not PLUGIN, reason="FSDP_OPT_TEST_PLUGIN (libfsdp_test_plugin.so) not set")
def test_plugin_pass_runs_in_process(fsdp_opt, gpt):
    model, x = gpt
    fsdp_opt.load_plugin(PLUGIN)
    assert "count-gathers" in fsdp_opt.list_passes()
    lines = []
    fsdp_opt.transform(torch.jit.script(model), units=["blocks.*"], diagnostics=lines,
                       passes=["specialize-unit-types", "insert-unit-gathers", "wrap-entry-methods",
                               "count-gathers", "verify-fsdp"])
    assert "remark: [count-gathers] 2 fsdp::all_gather node(s) in 1 method(s)" in lines, lines


def test_missing_plugin_is_an_error(fsdp_opt, tmp_path):
    with pytest.raises(fsdp_opt.FsdpOptError, match="cannot load pass plugin .*missing.so.*no such file"):
        fsdp_opt.load_plugin(str(tmp_path / "missing.so"))
