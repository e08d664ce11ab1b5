# The README's training example, as a user runs it: the GPT sharded with the README's flags,
# examples/train.py under torchrun on 2 processes (its own rendezvous port), then checks that
# every rank ran its 10 steps, that rank 0 wrote gpt-trained.pt, an unsharded TorchScript model
# whose parameters moved from the original's and that runs, and that the README shows
# examples/train.py as it is.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import re
import subprocess
import sys

import torch

import fsdp_harness as h
import fsdp_models as fm

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    work = sys.argv[1]
    t = h.Test("train_example")
    readme, script = h.readme_shows_example(t, REPO, "examples/train.py")
    t.check("fsdp-opt gpt.pt --fsdp-unit=. --fsdp-unit-type=Block --world-size=2 -o gpt-sharded/" in readme,
            "README's fsdp-opt command is the one run here")

    fm.save(fm.make("gpt"), os.path.join(work, "gpt.pt"))
    r = h.run_tool([h.which("fsdp-opt"), "gpt.pt", "--fsdp-unit=.", "--fsdp-unit-type=Block", "--world-size=2",
                    "-o", "gpt-sharded/"], cwd=work)
    if not t.check(r.returncode == 0, "fsdp-opt as in the README", r.describe()):
        return t.finish("")
    env = dict(os.environ, OMP_NUM_THREADS="1", FSDP_OPT_LIB_DIR=os.path.dirname(h.runtime_lib()),
               PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]))
    master = h.ReservedPort()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=%d" % master.port]
    from torch.distributed.elastic.multiprocessing.api import Std
    if Std.from_str("0") is None:
        # Debian's torch 1.13 on Python 3.11 (python/tests/test_torchrun.py): torchrun dies
        # unless the workers' stdout is redirected and teed.
        cmd += ["--redirects", "1", "--tee", "1", "--log_dir", os.path.join(work, "logs")]
    cmd.append(script)
    with master:
        r = h.run_tool(cmd, cwd=work, env=env, timeout=300)
    if not t.check(r.returncode == 0, "torchrun --nproc_per_node=2 examples/train.py", r.describe()):
        return t.finish("")
    for rank in (0, 1):
        steps = re.findall(r"rank %d step (\d+) loss [0-9.]+" % rank, r.stdout)
        t.check(steps == [str(s) for s in range(10)], "rank %d trained 10 steps" % rank, r.stdout[-1500:])
    trained_path = os.path.join(work, "gpt-trained.pt")
    if t.check(os.path.isfile(trained_path), "rank 0 wrote gpt-trained.pt"):
        original = torch.jit.load(os.path.join(work, "gpt.pt"))
        trained = torch.jit.load(trained_path)
        before, after = original.state_dict(), trained.state_dict()
        t.check(set(before) == set(after) and all(before[n].shape == after[n].shape for n in before),
                "gpt-trained.pt has the original's names and full shapes")
        t.check(not torch.equal(before["blocks.0.mlp.fc.weight"], after["blocks.0.mlp.fc.weight"]),
                "its weights moved")
        t.check(trained(fm.example_inputs("gpt")[0]).shape == original(fm.example_inputs("gpt")[0]).shape,
                "it runs unsharded")
    return t.finish("the README's training example runs as shown")


if __name__ == "__main__":
    sys.exit(main())
