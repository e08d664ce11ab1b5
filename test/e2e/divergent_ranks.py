# Ranks whose data take different paths (SPEC section 11), W=2, each rank's result compared
# bit for bit with its OWN unsharded run (same method, same arguments, in the driver):
#
# - stop: StopGPT.generate_until where rank 0's prompt stops after 1 token (its eos is the
#   first token it generates) and rank 1's never stops early (max tokens).
#     default pipeline: every unit is held for the call (no gather in the loop), so the loop needs no
#       agreement: rank 0 leaves after one step and no collective is left for rank 1 to wait on;
#     --max-unsharded-bytes = root + one block: the block gathers stay in the loop, which
#       rank-uniform-control-flow rewrites; rank 0 joins rank 1's remaining steps' collectives
#       (agreements counted in the runtime's stats) and still returns its own tokens.
# - chooser: rank 0's input takes unit `a`, rank 1's unit `b` (same shapes: a runtime pairing
#   collectives by size alone would mix their shards silently): by default both are held for
#   the call (plan-gather-lifetimes), no branch rewrite needed; without the planner, merged into
#   one gather of both, and split (--bucket-bytes=0): each arm joins the other's collectives.
# - orderer: a then b on rank 0, b then a on rank 1, split.
# None may hang: every run has a deadline well below lit's.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch

import divergent_models as dm
import fsdp_harness as h
import fsdp_models as fm

WORLD = 2
MAX_NEW = 6


def rank_main(ctx):
    m = ctx.load(ctx.rank_file(ctx.args["dir"]))
    args = h.torch_load(ctx.args["inputs"])[ctx.rank]
    ctx.reset_stats()
    out = getattr(m, ctx.args["method"])(*args)
    return {"out": out, "stats": ctx.stats()}


def main():
    out_dir = sys.argv[1]
    t = h.Test("divergent_ranks")
    cases = []

    # -- stop: per-rank eos -------------------------------------------------------------------
    stop_pt = os.path.join(out_dir, "stop.pt")
    stop = fm.save(dm.make("stop_gpt"), stop_pt)
    prompt = fm.example_inputs("gpt")[0][:1]  # one row: eos ends it
    first = int(stop.generate_until(prompt, 1, -1)[0, -1])
    stop_args = [(prompt, MAX_NEW, first), (prompt, MAX_NEW, -1)]
    stop_in = os.path.join(out_dir, "stop.in.pt")
    torch.save(stop_args, stop_in)
    steps = [stop.generate_until(*a).shape[1] - prompt.shape[1] for a in stop_args]
    t.check(steps == [1, MAX_NEW], "rank 0 stops after 1 token, rank 1 after %d" % MAX_NEW, str(steps))
    units = ["--fsdp-unit=.", "--fsdp-unit=blocks.*", "--forward-method=.:generate_until"]
    r = h.fsdp_opt(stop_pt, *units, "--world-size=2", "--remarks", "-o", os.path.join(out_dir, "probe"))
    if not t.check(r.returncode == 0, "fsdp-opt stop_gpt", r.describe()):
        return t.finish("")
    sizes = {u["path"]: u["bytes"] for u in h.json.load(open(os.path.join(out_dir, "probe", "manifest.json")))["units"]}
    one_layer = sizes["."] + sizes["blocks.0"]
    cases.append(("stop, default pipeline", stop_pt, units, stop_in, "generate_until", "none"))
    cases.append(("stop, one-layer budget", stop_pt, units + ["--max-unsharded-bytes=%d" % one_layer],
                  stop_in, "generate_until", "loop"))

    # -- branches -------------------------------------------------------------------------------
    # The default pipeline's planner holds both units for the whole call: one gather, no branch
    # left to rewrite. The branch rewrites run on the pipeline without it.
    unplanned = "--passes=" + ",".join(p for p in h.default_pipeline() if p != "plan-gather-lifetimes")
    for name in ("chooser", "orderer"):
        pt = os.path.join(out_dir, name + ".pt")
        fm.save(dm.make(name), pt)
        x = torch.randn(2, 8, generator=torch.Generator().manual_seed(3)).abs()
        inputs = os.path.join(out_dir, name + ".in.pt")
        torch.save([(x,), (-x,)], inputs)
        flags = ["--fsdp-unit=a", "--fsdp-unit=b"]
        if name == "chooser":
            cases.append(("chooser, default pipeline", pt, flags, inputs, "forward", "none"))
            cases.append(("chooser, merged", pt, flags + [unplanned], inputs, "forward", "merged"))
        cases.append(("%s, split" % name, pt, flags + [unplanned, "--bucket-bytes=0"], inputs, "forward", "split"))

    for label, pt, flags, inputs, method, rewrite in cases:
        d = os.path.join(out_dir, label.replace(", ", "_").replace(" ", "_"))
        r = h.fsdp_opt(pt, *flags, "--world-size=%d" % WORLD, "--remarks", "-o", d)
        if not t.check(r.returncode == 0 and "warning:" not in r.stderr, "%s: fsdp-opt succeeds" % label, r.describe()):
            continue
        said = [l for l in r.stderr.splitlines() if "[rank-uniform-control-flow]" in l and method in l]
        expect = {"none": [], "loop": ["made rank-uniform"], "merged": ["merged"], "split": ["split"]}[rewrite]
        t.check(len(said) == len(expect) and all(e in l for e, l in zip(expect, said)),
                "%s: rank-uniform-control-flow %s" % (label, rewrite if expect else "leaves it alone"), "\n".join(said))
        original = torch.jit.load(pt)
        want = [getattr(original, method)(*a) for a in h.torch_load(inputs)]
        results = h.run_ranks(WORLD, rank_main, {"dir": d, "inputs": inputs, "method": method}, timeout=90)
        if not t.check(all(res.ok for res in results), "%s: both ranks return (no hang)" % label, h.describe_ranks(results)):
            continue
        diffs = [h.same_bits(res.value["out"], want[res.rank]) for res in results]
        t.check(not any(diffs), "%s: each rank bitwise equal to its own unsharded run" % label, str(diffs))
        agreements = [res.value["stats"]["agreements"] for res in results]
        if rewrite == "loop":
            # one before the loop and one per iteration that any rank runs: 1 + MAX_NEW
            t.check(agreements == [1 + MAX_NEW] * WORLD, "%s: %d agreements on each rank" % (label, 1 + MAX_NEW), str(agreements))
        else:
            t.check(agreements == [0] * WORLD, "%s: no agreement" % label, str(agreements))
        gathers = [res.value["stats"]["all_gathers"] for res in results]
        t.check(gathers[0] == gathers[1], "%s: both ranks issue the same collectives (%s)" % (label, gathers), str(gathers))
    return t.finish("W=%d: stop-divergent generate (hoisted and one-layer budget), data-chosen units "
                    "(merged and split) and data-ordered units, each rank exact, none hanging" % WORLD)


if __name__ == "__main__":
    sys.exit(main())
