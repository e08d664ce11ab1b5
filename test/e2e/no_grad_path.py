# Calls without grad mode take specialize-no-grad's copy of an entry method (SPEC section 10:
# "without grad mode nothing of this costs anything"), and a rank's grad mode never changes the
# collectives it issues (SPEC section 11).
#
# fsdp_models' GPT (root and blocks.* units, `generate` registered on the root), default
# pipeline, W=2. Three runs of `forward(prompt)` and `generate(prompt, NEW_TOKENS)`, three calls
# each (the profiling executor's optimised graphs run from the second): both ranks without grad
# mode, both with it, and rank 0 without while rank 1 has it. Every call:
#   - returns the original model's output bit for bit (with grad mode: its values, and forward's
#     logits require grad);
#   - issues the gathers `fsdp-opt --stats` predicts, the same number on both ranks;
#   - runs fsdp::backward_hook (counted by torch.profiler, which records every op the
#     TorchScript interpreter dispatches) never without grad mode and after every unit call with
#     it, and fsdp::check_rank once without grad mode (the copy inlines the entry methods that
#     generate calls, and keeps the first check only).
# The file must hold the copies: fsdp-opt's remark names how many entry methods got one.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch

import fsdp_harness as h
import fsdp_models as fm

WORLD = 2
CALLS = 3
N_LAYER = 2
NEW_TOKENS = 3
MODES = {"both without grad": (False, False), "both with grad": (True, True),
         "rank 0 without, rank 1 with grad": (False, True)}


# ---- rank side --------------------------------------------------------------------------------

def op_counts(profile):
    names = [e.name for e in profile.events()]
    return {op: sum(n == "fsdp::" + op for n in names) for op in ("backward_hook", "check_rank", "all_gather")}


def rank_main(ctx):
    torch = ctx.torch
    m = ctx.load(ctx.rank_file(ctx.args["dir"]))
    prompt = h.torch_load(ctx.args["inputs"])[0]
    out = {}
    for mode, grads in MODES.items():
        for method, args in (("forward", (prompt,)), ("generate", (prompt, NEW_TOKENS))):
            runs = []
            for _ in range(CALLS):
                with torch.set_grad_enabled(grads[ctx.rank]):
                    s0 = ctx.stats()
                    with torch.profiler.profile() as profile:
                        y = getattr(m, method)(*args)
                    s1 = ctx.stats()
                runs.append({"out": y.detach(), "requires_grad": y.requires_grad,
                             "gathers": h.stats_delta(s0, s1)["all_gathers"], "ops": op_counts(profile)})
            out["%s / %s" % (mode, method)] = runs
    return out


# ---- driver -----------------------------------------------------------------------------------

def main():
    out_dir = sys.argv[1]
    t = h.Test("no_grad_path")
    gpt_pt = os.path.join(out_dir, "gpt.pt")
    fm.save(fm.mark(fm.make("gpt", n_layer=N_LAYER), units=["."], forward_methods={".": ["generate"]}), gpt_pt)
    prompt = fm.example_inputs("gpt")[0]
    inputs = os.path.join(out_dir, "inputs.pt")
    fm.save_inputs((prompt,), inputs)
    rank_dir = os.path.join(out_dir, "ranks")
    r = h.fsdp_opt(gpt_pt, "--fsdp-unit=blocks.*", "--world-size=%d" % WORLD, "--remarks", "--stats", "-o", rank_dir)
    if not t.check(r.returncode == 0, "fsdp-opt shards the GPT for W=%d" % WORLD, r.describe()):
        return t.finish("")
    copies = [line for line in r.stderr.splitlines() if "[specialize-no-grad]" in line]
    t.check(len(copies) == 1 and "entry method(s) get a path without training ops" in copies[0],
            "fsdp-opt gives entry methods a path for calls without grad mode: %s" % copies, r.stderr[-2000:])
    predicted = {"forward": h.gathers_per_call(r.stdout, "forward", 1),
                 "generate": h.gathers_per_call(r.stdout, "generate", NEW_TOKENS)}

    original = torch.jit.load(gpt_pt)
    with torch.no_grad():
        expected = {"forward": original.forward(prompt), "generate": original.generate(prompt, NEW_TOKENS)}

    results = h.run_ranks(WORLD, rank_main, {"dir": rank_dir, "inputs": inputs}, timeout=150)
    if not t.check(all(res.ok for res in results), "W=%d: every rank ran every mode" % WORLD,
                   h.describe_ranks(results)):
        return t.finish("")
    for mode, grads in MODES.items():
        for method in ("forward", "generate"):
            key = "%s / %s" % (mode, method)
            wrong = []
            for res in results:
                grad = grads[res.rank]
                for i, run in enumerate(res.value[key]):
                    where = "rank %d call %d" % (res.rank, i + 1)
                    d = h.same_bits(run["out"], expected[method])
                    if d:
                        wrong.append("%s: %s" % (where, d))
                    if run["gathers"] != predicted[method]:
                        wrong.append("%s: %d gathers, --stats predicts %s" % (where, run["gathers"], predicted[method]))
                    ops = run["ops"]
                    if grad and (ops["backward_hook"] == 0 or (method == "forward" and not run["requires_grad"])):
                        wrong.append("%s: with grad mode %s, output requires grad %s" % (where, ops, run["requires_grad"]))
                    if not grad and (ops["backward_hook"] != 0 or ops["check_rank"] != 1):
                        wrong.append("%s: without grad mode %s" % (where, ops))
            t.check(not wrong, "%s, %s: %d calls per rank bitwise the original's, %s gather(s) each as --stats "
                    "predicts, backward hooks only with grad mode" % (mode, method, CALLS, predicted[method]),
                    "; ".join(wrong))
    return t.finish("W=%d: calls without grad mode run no backward hook and one rank check; ranks in either "
                    "grad mode issue the same gathers; all outputs bitwise the original's" % WORLD)


if __name__ == "__main__":
    sys.exit(main())
