# Ranks that take different paths the compiler does not fix (SPEC section 11): each case must
# end on EVERY rank with the one collective fingerprint error (kind `divergence`), naming what
# each side gathers, within seconds (FSDP_OPT_TIMEOUT_S is 60 in lit), with no hang, no crash
# and no result computed from mixed data (no rank returns). W=2:
#
# - chooser, rank-uniform-control-flow (and plan-gather-lifetimes) left out of --passes: rank
#   0's input takes unit `a`,
#   rank 1's unit `b` (same shapes, so the same sizes: only the fingerprint tells them apart)
# - orderer, the same pipeline: a then b on rank 0, b then a on rank 1
# - entry methods: the default pipeline (the pass is in it, but cannot see outside TorchScript);
#   rank 0 calls `generate`, rank 1 calls `forward`, under a one-layer budget so that each
#   method gathers the layers one by one
# - and, as controls, no error and each rank bitwise equal to its own unsharded run: the chooser
#   with the default pipeline, and what the README advises instead of the entry-method case,
#   `generate` on both ranks with 0 new tokens on rank 1 (with and without the budget).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys
import time

import torch

import divergent_models as dm
import fsdp_harness as h
import fsdp_models as fm

WORLD = 2
LIMIT_S = 20.0


def rank_main(ctx):
    m = ctx.load(ctx.rank_file(ctx.args["dir"]))
    method, args = h.torch_load(ctx.args["inputs"])[ctx.rank]
    t0 = time.monotonic()
    try:
        out = getattr(m, method)(*args)
        return {"out": out, "error": None, "elapsed": time.monotonic() - t0}
    except RuntimeError as e:
        kind, message = ctx.torch.ops.fsdp.last_error()
        return {"out": None, "error": message, "kind": kind, "elapsed": time.monotonic() - t0,
                "raised": str(e)}


def main():
    out_dir = sys.argv[1]
    t = h.Test("divergent_unfixed")
    pipeline = h.default_pipeline()
    # plan-gather-lifetimes goes too: it would hold both units for the whole call, and no rank
    # would then gather inside the branch.
    without = ",".join(p for p in pipeline if p not in ("rank-uniform-control-flow", "plan-gather-lifetimes"))
    t.check("rank-uniform-control-flow" in pipeline, "the default pipeline has rank-uniform-control-flow", str(pipeline))

    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(3)).abs()
    cases = []
    for name in ("chooser", "orderer"):
        pt = os.path.join(out_dir, name + ".pt")
        fm.save(dm.make(name), pt)
        inputs = os.path.join(out_dir, name + ".in.pt")
        torch.save([("forward", (x,)), ("forward", (-x,))], inputs)
        flags = ["--fsdp-unit=a", "--fsdp-unit=b", "--bucket-bytes=0", "--passes=" + without]
        cases.append((name + ", without the pass", pt, flags, inputs,
                      ["rank 0 gathers unit 'a' (#1: 2 parameters, ", "while rank 1 gathers unit 'b' (#1: 2 parameters, "]))
    cases.append(("chooser, default pipeline", os.path.join(out_dir, "chooser.pt"),
                  ["--fsdp-unit=a", "--fsdp-unit=b", "--bucket-bytes=0"], os.path.join(out_dir, "chooser.in.pt"), None))

    gpt_pt = os.path.join(out_dir, "gpt.pt")
    fm.save(fm.make("gpt"), gpt_pt)
    units = ["--fsdp-unit=.", "--fsdp-unit=blocks.*", "--forward-method=.:generate"]
    r = h.fsdp_opt(gpt_pt, *units, "--world-size=2", "-o", os.path.join(out_dir, "probe"))
    if t.check(r.returncode == 0, "fsdp-opt gpt", r.describe()):
        sizes = {u["path"]: u["bytes"] for u in h.json.load(open(os.path.join(out_dir, "probe", "manifest.json")))["units"]}
        idx = fm.example_inputs("gpt")[0]
        inputs = os.path.join(out_dir, "gpt.in.pt")
        torch.save([("generate", (idx, 4)), ("forward", (idx,))], inputs)
        budget = ["--max-unsharded-bytes=%d" % (sizes["."] + sizes["blocks.0"])]
        cases.append(("generate on rank 0, forward on rank 1", gpt_pt, units + budget, inputs,
                      ["ranks issue different collectives: rank 0 ", " while rank 1 "]))
        # What the README tells users instead: generate on every rank, 0 new tokens where there is
        # nothing to generate. Fine with and without a budget.
        zero = os.path.join(out_dir, "gpt.zero.in.pt")
        torch.save([("generate", (idx, 4)), ("generate", (idx, 0))], zero)
        cases.append(("generate 4 tokens on rank 0 and 0 on rank 1", gpt_pt, units, zero, None))
        cases.append(("generate 4 tokens on rank 0 and 0 on rank 1, budget", gpt_pt, units + budget, zero, None))

    for label, pt, flags, inputs, sides in cases:
        d = os.path.join(out_dir, label.replace(", ", "_").replace(" ", "_"))
        r = h.fsdp_opt(pt, *flags, "--world-size=%d" % WORLD, "-o", d)
        if not t.check(r.returncode == 0, "%s: fsdp-opt succeeds" % label, r.describe()):
            continue
        results = h.run_ranks(WORLD, rank_main, {"dir": d, "inputs": inputs}, timeout=120)
        if not t.check(all(res.ok for res in results), "%s: every rank returns or raises (no hang, no crash)" % label,
                       h.describe_ranks(results)):
            continue
        values = [res.value for res in results]
        if sides is None:
            original = torch.jit.load(pt)
            want = [getattr(original, m)(*a) for m, a in h.torch_load(inputs)]
            diffs = [v["error"] or h.same_bits(v["out"], w) for v, w in zip(values, want)]
            t.check(not any(diffs), "%s: no error, each rank bitwise equal to its own unsharded run" % label, str(diffs))
            continue
        t.check(all(v["error"] and v["kind"] == "divergence" for v in values),
                "%s: every rank raises the fingerprint error (kind divergence), none returns a result" % label,
                str([(v.get("kind"), v["error"]) for v in values]))
        t.check(all(v["error"] and all(s in v["error"] for s in sides) and v["error"] in v["raised"] for v in values),
                "%s: every rank names both sides" % label, "\n".join(str(v["error"]) for v in values))
        t.check(len({v["error"].split(": ranks issue different collectives: ", 1)[-1] for v in values}) == 1,
                "%s: one error: the same text on every rank, but for the op that raised it" % label,
                "\n".join(str(v["error"]) for v in values))
        t.check(all(v["elapsed"] < LIMIT_S for v in values), "%s: within %d s" % (label, LIMIT_S),
                str([round(v["elapsed"], 2) for v in values]))
        t.note("%s: %s" % (label, values[0]["error"]))
    return t.finish("W=2: data-chosen and data-ordered units without rank-uniform-control-flow, and generate on "
                    "one rank against forward on the other: one divergence error on every rank, in seconds")


if __name__ == "__main__":
    sys.exit(main())
