"""Ranks that start from different weights (SPEC section 11): two ranks started by torchrun
build the test GPT from different seeds and shard it in-process. Without sync_module_states
every rank fails with one error naming the first differing parameter; with it every rank holds
rank 0's model, bit for bit (units' shards and replicated parameters alike), and the input
module is left as it was."""

import json
import os
import subprocess
import sys

from test_torchrun import HERE, free_port, torchrun


def test_different_seeds_fail_or_sync_from_rank_0(fsdp_opt, fm, tmp_path):
    out_dir = tmp_path / "results"
    out_dir.mkdir()
    env = dict(os.environ)
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(fsdp_opt.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_dir, HERE, os.path.dirname(os.path.abspath(fm.__file__))] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["FSDP_OPT_LIB_DIR"] = fsdp_opt.load()
    env.setdefault("FSDP_OPT_TIMEOUT_S", "60")
    command = torchrun(str(tmp_path / "logs")) + [
        "--nnodes=1", "--nproc_per_node=2", "--master_addr=127.0.0.1", "--master_port=%d" % free_port(),
        os.path.join(HERE, "module_states_worker.py"), str(out_dir)]
    proc = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=240)
    assert proc.returncode == 0, "%s\n%s" % (" ".join(command), proc.stdout[-6000:])

    errors = []
    for rank in range(2):
        result = json.loads((out_dir / ("rank%d.json" % rank)).read_text())
        errors.append(result["unsynced_error"])
        assert result["forward"] and result["generate"], result
        assert result["replicated"], result
        assert result["input_untouched"] and result["tied"], result
    # The same error on both ranks, naming a parameter and both ranks, and the way out.
    assert errors[0] == errors[1], errors
    text = errors[0]
    assert text.startswith("the ranks' modules hold different values: parameter '"), text
    assert "' differs between rank 0 and rank 1, and so do " in text, text
    assert "sync_module_states=True" in text, text
