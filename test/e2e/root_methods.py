# Root methods a user calls from outside (SPEC section 5: every root method is an entry method),
# none of them registered: with the root a unit, `forward_features` (called from outside only),
# `forward_head` (from outside and from forward) and forward (whose helper `_embed` gathers the
# root again, nested) each give, on every rank of W=2, the original model's output bit for bit,
# with the collectives `fsdp-opt --stats` predicts: the root's and the block's gathers once per
# call in one bucket, never a second collective for a nested gather of the root. `describe` gathers nothing.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch

import fsdp_harness as h
import fsdp_models as fm
import root_methods_model as rm

WORLD = 2
CALLS = 2
# The root and the block held for the whole call and bucketed (plan-gather-lifetimes): one
# collective wherever the rewrite alone issues two.
METHODS = {"forward": 1, "forward_features": 1, "forward_head": 1, "describe": 0}


def rank_main(ctx):
    m = ctx.load(ctx.rank_file(ctx.args["dir"]))
    x = h.torch_load(ctx.args["inputs"])
    out = {}
    for method in ctx.args["methods"]:
        runs = []
        for _ in range(CALLS):
            s0 = ctx.stats()
            y = getattr(m, method)(*([] if method == "describe" else [x]))
            runs.append({"out": y, "delta": h.stats_delta(s0, ctx.stats())})
        out[method] = runs
    return out


def main():
    out_dir = sys.argv[1]
    t = h.Test("root_methods")
    src = os.path.join(out_dir, "model.pt")
    fm.save(rm.RootReaders().eval(), src)
    inputs = os.path.join(out_dir, "x.pt")
    x = rm.example_input()
    torch.save(x, inputs)
    shards = os.path.join(out_dir, "w2")
    r = h.fsdp_opt(src, "--fsdp-unit=.", "--fsdp-unit=block", "--world-size=%d" % WORLD, "--stats", "-o", shards)
    if not t.check(r.returncode == 0 and "warning:" not in r.stderr,
                   "fsdp-opt --fsdp-unit=. --fsdp-unit=block, no method registered: succeeds, no warning",
                   r.describe()):
        return t.finish("")
    predicted = {m: h.gathers_per_call(r.stdout, m, 1) for m in METHODS}
    t.check(predicted == METHODS, "--stats predicts the collectives per call %s" % METHODS, str(predicted))

    original = torch.jit.load(src)
    expected = {m: getattr(original, m)(*([] if m == "describe" else [x])) for m in METHODS}
    results = h.run_ranks(WORLD, rank_main, {"dir": shards, "inputs": inputs, "methods": list(METHODS)}, timeout=120)
    if not t.check(all(res.ok for res in results), "W=%d: every rank ran every method" % WORLD, h.describe_ranks(results)):
        return t.finish("")
    for method, gathers in METHODS.items():
        diffs, counts = [], []
        for res in results:
            for i, run in enumerate(res.value[method]):
                d = h.same_bits(run["out"], expected[method])
                if d:
                    diffs.append("rank %d call %d: %s" % (res.rank, i + 1, d))
                if run["delta"]["all_gathers"] != gathers or run["delta"]["unsharded_bytes"] != 0:
                    counts.append("rank %d call %d: %s" % (res.rank, i + 1, run["delta"]))
        t.check(not diffs, "%s from outside: bitwise the original's on %d ranks, %d calls" % (method, WORLD, CALLS),
                "; ".join(diffs))
        t.check(not counts, "%s: %d collective(s) per call, nothing left unsharded" % (method, gathers),
                "; ".join(counts))
    return t.finish("W=%d: forward, forward_features, forward_head and describe called from outside, "
                    "unregistered, bitwise the original's" % WORLD)


if __name__ == "__main__":
    sys.exit(main())
