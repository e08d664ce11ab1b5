# The README's Hugging Face example, as a user runs it (torch 2.x leg: transformers lives in its
# venv): examples/hf_generate.py traces a GPT2LMHeadModel and saves it wrapped in a scripted
# greedy `generate`, fsdp-opt shards it with the README's flags, and the same file decodes
# under torchrun on 2 processes, each rank its own prompt, twice: `run` calls the scripted
# generate, `python` decodes in a Python loop of forward calls inside fsdp_opt.unsharded.
# Checks: each rank's tokens are the unsharded scripted model's for its prompt (computed here,
# one thread like the ranks), each rank issued exactly ONE all-gather for its 16 tokens (the
# planner holds the model and its blocks for the whole generate call; the scope holds them for
# the loop), and the README shows examples/hf_generate.py and the fsdp-opt command as run here.
#
# REQUIRES: torch2
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import ast
import os
import re
import sys

import torch

import fsdp_harness as h

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = ["--fsdp-unit=model", "--fsdp-unit-type=GPT2Block", "--world-size=2", "-o", "gpt2-sharded/"]


def main():
    work = sys.argv[1]
    torch.set_num_threads(1)
    t = h.Test("hf_generate_example")
    readme, script = h.readme_shows_example(t, REPO, "examples/hf_generate.py")
    t.check("fsdp-opt gpt2-generate.pt " + " ".join(FLAGS) in readme, "README's fsdp-opt command is the one run here")

    env = dict(os.environ, OMP_NUM_THREADS="1", FSDP_OPT_LIB_DIR=os.path.dirname(h.runtime_lib()),
               PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]))
    r = h.run_tool([sys.executable, script, "save"], cwd=work, env=env, timeout=240)
    if not t.check(r.returncode == 0, "python examples/hf_generate.py save", r.describe()):
        return t.finish("")
    r = h.run_tool([h.which("fsdp-opt"), "gpt2-generate.pt", *FLAGS, "--stats"], cwd=work)
    if not t.check(r.returncode == 0, "fsdp-opt as in the README", r.describe()):
        return t.finish("")
    t.check(h.gathers_per_call(r.stdout, "generate", 16) == 1, "--stats predicts 1 gather per generate", r.stdout)
    original = torch.jit.load(os.path.join(work, "gpt2-generate.pt"))
    for mode in ("run", "python"):
        with h.ReservedPort() as master:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                   "--master_port=%d" % master.port, script, mode]
            r = h.run_tool(cmd, cwd=work, env=env, timeout=300)
        if not t.check(r.returncode == 0, "torchrun --nproc_per_node=2 examples/hf_generate.py %s" % mode, r.describe()):
            continue
        for rank in (0, 1):
            found = re.findall(r"rank %d: (\[\[[^]]*\]\]) \((\d+) all-gathers\)" % rank, r.stdout)
            if not t.check(len(found) == 1, "%s: rank %d printed its tokens" % (mode, rank), r.stdout[-1500:]):
                continue
            prompt = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(rank))
            with torch.no_grad():
                want = original.generate(prompt, 16, 50256).tolist()
            t.check(ast.literal_eval(found[0][0]) == want, "%s: rank %d's tokens equal the unsharded model's" % (mode, rank),
                    "%s vs %s" % (found[0][0], want))
            t.check(found[0][1] == "1", "%s: rank %d issued one all-gather for 16 tokens" % (mode, rank), found[0][1])
    return t.finish("the README's Hugging Face example runs as shown, both loops: 2 ranks, unsharded tokens, one gather each")


if __name__ == "__main__":
    sys.exit(main())
