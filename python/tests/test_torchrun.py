"""A model scripted, transformed in-process and run on 2 processes started by torchrun (torch's
own launcher), with outputs bitwise identical to the original model's (SPEC section 8)."""

import json
import os
import subprocess
import sys

import torch

from fsdp_harness import ReservedPort  # test/Inputs (conftest.py)

HERE = os.path.dirname(os.path.abspath(__file__))


def torchrun(log_dir: str):
    """torchrun next to this Python (the leg's), else `python -m torch.distributed.run`.

    Debian's torch 1.13 on Python 3.11: torch.distributed.elastic's Std.from_str("0") returns
    None (Python 3.11 no longer iterates the zero flag of an IntFlag), so torchrun dies in
    to_map() with "'NoneType' object has no attribute 'get'" unless --redirects/--tee name a
    non-zero stream: redirect the workers' stdout to log files and tee it to the console."""
    exe = os.path.join(os.path.dirname(sys.executable), "torchrun")
    command = [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "torch.distributed.run"]
    from torch.distributed.elastic.multiprocessing.api import Std
    if Std.from_str("0") is None:
        command += ["--redirects", "1", "--tee", "1", "--log_dir", log_dir]
    return command


def run_two_ranks(fsdp_opt, fm, tmp_path, worker: str, *args: str) -> None:
    """Runs HERE/worker with `args` on 2 ranks under torchrun, fsdp_opt and fsdp_models
    importable and the runtime library found, and asserts that it succeeded."""
    env = dict(os.environ)
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(fsdp_opt.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_dir, HERE, os.path.dirname(os.path.abspath(fm.__file__))] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["FSDP_OPT_LIB_DIR"] = fsdp_opt.load()
    env.setdefault("FSDP_OPT_TIMEOUT_S", "60")
    with ReservedPort() as master:  # held until torchrun's agent has listened on it and ended
        command = torchrun(str(tmp_path / "logs")) + [
            "--nnodes=1", "--nproc_per_node=2", "--master_addr=127.0.0.1", "--master_port=%d" % master.port,
            os.path.join(HERE, worker)] + list(args)
        proc = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=240)
    assert proc.returncode == 0, "%s\n%s" % (" ".join(command), proc.stdout[-6000:])


def test_transform_in_process_on_two_ranks_with_torchrun(fsdp_opt, fm, tmp_path):
    # The rank files for the second half of the check, from the same deterministic model.
    model = fm.make("gpt")
    fsdp_opt.mark_unit(model)
    for block in model.blocks:
        fsdp_opt.mark_unit(block)
    fsdp_opt.register_fsdp_forward_method(model, "generate")
    shard_dir = tmp_path / "shards"
    fsdp_opt.shard(torch.jit.script(model), shard_dir, world_size=2)

    out_dir = tmp_path / "results"
    out_dir.mkdir()
    run_two_ranks(fsdp_opt, fm, tmp_path, "torchrun_worker.py", str(out_dir), str(shard_dir))

    vocab = model.wte.weight.shape[0]
    for rank in range(2):
        result = json.loads((out_dir / ("rank%d.json" % rank)).read_text())
        assert result["rank"] == rank and result["world_size"] == 2
        assert result["wte_rows"] == (vocab + 1) // 2  # sharded in process
        assert result["in_process"] == {"forward": True, "generate": True}, result
        assert result["rank_file"] == {"forward": True, "generate": True}, result
        assert result["stats"]["all_gathers"] > 0 and result["stats"]["unsharded_bytes"] == 0, result
