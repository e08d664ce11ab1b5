"""Ranks that start from different weights (SPEC section 11): two ranks started by torchrun
build the test GPT from different seeds and shard it in-process. Without sync_module_states
every rank fails with one error naming the first differing parameter; with it every rank holds
rank 0's model, bit for bit (units' shards and replicated parameters alike), and the input
module is left as it was. A channels_last convnet synced the same way keeps its layout."""

import json

import pytest

from test_torchrun import run_two_ranks


# The broadcast from rank 0 over both CPU transports (docs/runtime.md, "The shared-memory
# transport").
@pytest.mark.parametrize("transport", ["gloo", "shm"])
def test_different_seeds_fail_or_sync_from_rank_0(fsdp_opt, fm, tmp_path, monkeypatch, transport):
    monkeypatch.setenv("FSDP_OPT_CPU_TRANSPORT", transport)
    out_dir = tmp_path / "results"
    out_dir.mkdir()
    run_two_ranks(fsdp_opt, fm, tmp_path, "module_states_worker.py", str(out_dir))

    errors = []
    for rank in range(2):
        result = json.loads((out_dir / ("rank%d.json" % rank)).read_text())
        errors.append(result["unsynced_error"])
        assert result["forward"] and result["generate"], result
        assert result["replicated"], result
        assert result["input_untouched"] and result["tied"], result
        assert result["channels_last"], result
    # The same error on both ranks, naming a parameter and both ranks, and the way out.
    assert errors[0] == errors[1], errors
    text = errors[0]
    assert text.startswith("the ranks' modules hold different values: parameter '"), text
    assert "' differs between rank 0 and rank 1, and so do " in text, text
    assert "sync_module_states=True" in text, text
