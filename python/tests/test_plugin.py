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


def test_a_library_without_the_entry_point_is_no_plugin(fsdp_opt):
    runtime = os.path.join(fsdp_opt.lib_dir(), "libfsdp_runtime.so")
    with pytest.raises(fsdp_opt.FsdpOptError,
                       match="libfsdp_runtime.so' is not a pass plugin: it does not export fsdp_opt_register_passes"):
        fsdp_opt.load_plugin(runtime)


@pytest.mark.skipif(not PLUGIN, reason="FSDP_OPT_TEST_PLUGIN (libfsdp_test_plugin.so) not set")
def test_pass_registered_twice_is_refused_in_process(tmp_path):
    # Two copies of one plugin register `count-gathers` twice. The CLI refuses that; the
    # in-process pipeline must too, instead of running whichever copy came first. In a
    # subprocess: the duplicate would stay registered for every later test of this one.
    import shutil
    import subprocess
    import sys
    copy = tmp_path / "copy.so"
    shutil.copy(PLUGIN, copy)
    script = (
        "import torch, fsdp_opt, sys\n"
        "fsdp_opt.load_plugin(sys.argv[1]); fsdp_opt.load_plugin(sys.argv[2])\n"
        "m = torch.jit.script(torch.nn.Linear(2, 2))\n"
        "try:\n"
        "    fsdp_opt.transform(m, units=['.'])\n"
        "except fsdp_opt.FsdpOptError as e:\n"
        "    print(e); sys.exit(3)\n"
    )
    r = subprocess.run([sys.executable, "-c", script, PLUGIN, str(copy)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "pass 'count-gathers' is registered twice" in r.stdout, r.stdout
