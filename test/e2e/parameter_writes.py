# Parameters written in place, end to end at W=2 (test/Inputs/alias_models.py): the models
# check-parameter-aliases lets through stay exact over consecutive calls that change state, and
# the writes it refuses are refused by the runtime too, where the passes cannot see them.
#   - Counts adds 1 to its `scale` parameter every call, and only `fc` is a unit: `scale` is in
#     no unit's group, so every rank holds it whole and keeps the write. Three calls in a row on
#     each rank equal the original's three calls in a row, bit for bit (they differ from each
#     other: the state is seen).
#   - Copies writes to clones, to activations and to a concatenation that reads a parameter,
#     with the root and `fc` units: three calls in a row, bitwise the original's.
#   - Scales halves `fc.weight` in place every call. Sharded with the default pipeline less
#     check-parameter-aliases, the write lands on the gathered copy; the runtime sees the
#     version move at the reshard and the call raises on every rank, naming the unit, instead
#     of going on from the unwritten shard as if nothing happened.
#   - Inside `with fsdp_opt.unsharded(m):` on Copies' rank file, Python changes `fc.weight` in
#     the three ways FSDP1 users write with summon_full_params: `mul_` under no_grad, a
#     `.data.copy_` of new weights (no version moves) and `.data = t` (new storage). Each time
#     the scope's exit raises FsdpOptError on every rank, saying how the parameter changed,
#     nothing stays gathered, and the next call is exact (the shard kept its values).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch

import alias_models as am
import fsdp_harness as h

CALLS = 3
# %s: the unit as the reshard names it ('fc', or 'fc (unshard scope)' for a scope's)
WRITTEN = "fsdp::reshard(unit '%s'): a parameter ([4, 4] Float) was written in place while gathered"
# how a write inside a scope changes fc.weight -> what the scope's exit says of it
SCOPE_WRITES = {
    "mul_": "was written in place while gathered",
    "data.copy_": "was written through `.data` or `detach()` (this rank's rows differ from its shard) while gathered",
    "data =": "was given other storage (`p.data = t` or `set_`) while gathered",
}


def write_in_scope(weight, how):
    if how == "mul_":
        with torch.no_grad():
            weight.mul_(0.5)
    elif how == "data.copy_":
        weight.data.copy_(torch.full_like(weight, 0.25))
    else:
        weight.data = torch.full_like(weight, 0.25)


def rank_main(ctx):
    m = ctx.load(ctx.rank_file(ctx.args["dir"]))
    x = h.torch_load(ctx.args["inputs"])
    if ctx.args.get("scope"):
        fsdp_opt = h.fsdp_opt_package()
        try:
            with fsdp_opt.unsharded(m):
                write_in_scope(m.fc.weight, ctx.args["scope"])
            error = None
        except fsdp_opt.FsdpOptError as e:
            error = str(e)
        return {"error": error, "unsharded_bytes": ctx.stats()["unsharded_bytes"], "after": m(*x)}
    out = []
    for _ in range(CALLS):
        try:
            out.append(m(*x))
        except RuntimeError as e:
            out.append("error: " + str(e))
    return out


def original_calls(path, inputs):
    m = torch.jit.load(path)
    x = h.torch_load(inputs)
    return [m(*x) for _ in range(CALLS)]


def main():
    out_dir = sys.argv[1]
    t = h.Test("parameter_writes")
    inputs = os.path.join(out_dir, "in.pt")
    torch.save((torch.randn(3, 4),), inputs)
    without_check = [p for p in h.default_pipeline() if p != "check-parameter-aliases"]
    # name, model, units and flags, whether the rewrite must be exact, whether calls change state
    cases = [("Counts", am.Counts(), ["--fsdp-unit=fc"], True, True),
             ("Copies", am.Copies(), ["--fsdp-unit=.", "--fsdp-unit=fc"], True, False),
             ("Scales", am.Scales(), ["--fsdp-unit=.", "--fsdp-unit=fc", "--passes=" + ",".join(without_check)], False, True)]
    for name, model, flags, exact, changes in cases:
        torch.manual_seed(0)
        orig = os.path.join(out_dir, name + ".pt")
        torch.jit.script(model.eval()).save(orig)
        ref = original_calls(orig, inputs)
        t.check((h.same_bits(ref[0], ref[1]) is not None) == changes,
                "%s: the original's second call %s its first" % (name, "differs from" if changes else "repeats"))
        d = os.path.join(out_dir, name)
        r = h.fsdp_opt(orig, "--world-size=2", *flags, "-o", d)
        if not t.check(r.returncode == 0, "%s: fsdp-opt %s" % (name, " ".join(flags[:2])), r.describe() if r.returncode else ""):
            continue
        results = h.run_ranks(2, rank_main, args={"dir": d, "inputs": inputs})
        for res in results:
            if not t.check(res.has_value, "%s rank %d: %d calls ran" % (name, res.rank, CALLS), h.describe_ranks(results)):
                continue
            same = [h.same_bits(got, want, "call %d" % (i + 1)) for i, (got, want) in enumerate(zip(res.value, ref))]
            if exact:
                t.check(all(s is None for s in same), "%s rank %d: %d calls in a row bitwise the original's" % (name, res.rank, CALLS),
                        "; ".join(s for s in same if s))
            else:
                errors = [v for v in res.value if isinstance(v, str)]
                t.check(len(errors) == CALLS and all(WRITTEN % "fc" in e for e in errors),
                        "%s rank %d without the check: every call raises at the reshard, naming unit 'fc'" % (name, res.rank),
                        str(res.value[0])[:600])
        if name != "Copies":
            continue
        for how, said in SCOPE_WRITES.items():
            results = h.run_ranks(2, rank_main, args={"dir": d, "inputs": inputs, "scope": how})
            for res in results:
                if not t.check(res.has_value, "Copies rank %d: a scope with a write (%s) ran" % (res.rank, how),
                               h.describe_ranks(results)):
                    continue
                v = res.value
                want = "fsdp::reshard(unit 'fc (unshard scope)'): a parameter ([4, 4] Float) " + said
                t.check(v["error"] is not None and want in v["error"],
                        "Copies rank %d: a write (%s) inside fsdp_opt.unsharded makes its exit raise, naming unit 'fc'"
                        % (res.rank, how), str(v["error"]))
                t.check(v["unsharded_bytes"] == 0, "Copies rank %d (%s): nothing stays gathered after it" % (res.rank, how),
                        str(v["unsharded_bytes"]))
                t.check(h.same_bits(v["after"], ref[0]) is None,
                        "Copies rank %d (%s): the next call is bitwise the original's (the shard kept its values)"
                        % (res.rank, how), str(h.same_bits(v["after"], ref[0])))
    return t.finish("in-place parameter writes: exact where allowed, refused where they would be lost")


if __name__ == "__main__":
    sys.exit(main())
