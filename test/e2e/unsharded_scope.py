# Unshard scopes (`with fsdp_opt.unsharded(m):`, docs/runtime.md "Unshard scopes") on the rank
# files of the test GPT (the root and each block a unit), W=2. Every output is compared bitwise
# with the same Python loop run on the original model in this process; the runtime's counters
# (fsdp_opt.stats()) say what each step cost:
#
# - decode: a greedy loop of 8 tokens calling the rank file's `forward` per token inside one
#   scope: the scope issues ONE collective (the whole model fits one 25 MiB bucket), each token
#   none, and after the block nothing is unsharded; the same loop without the scope gathers per
#   token. With --bucket-bytes=0: one collective per unit (3), none per token.
# - exception: a Python exception raised inside the block reshards everything; the next call
#   outside is exact and gathers as a plain call does. fsdp::release_all inside the block (what a
#   TorchScript raise runs) keeps what the scope holds: the calls after it still gather nothing.
# - subset: a scope over the two blocks: one collective for both, then each call gathers the
#   root alone (its bytes exactly).
# - budget: --max-unsharded-bytes = the root + one block: a scope over everything is refused with
#   the error naming the bytes, and nothing is gathered; a scope over the root works (each call
#   gathers the blocks one by one on top, within the budget); a scope over one block makes the
#   call that would gather the root and the other block on top raise the in-scope budget error,
#   leaving the block held, and the next call after the block is exact.
# - grad mode: backward() inside the scope raises the documented error on every rank and writes
#   no .grad; a forward inside the scope with backward() after the block gives the gradients of a
#   plain forward + backward, bit for bit.
# - fingerprint: rank 0 opens a scope while rank 1 calls forward: both fail at once with the
#   divergence error naming the scope's collective, not a hang.
# - wrong file: each rank opens a scope on the other rank's file: the rank check refuses it
#   before anything is gathered.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import json
import os
import sys
import time

import torch

import fsdp_harness as h
import fsdp_models as fm

WORLD = 2
TOKENS = 8


def decode(m, idx, tokens=TOKENS, stats=None):
    """The Python loop under test: greedy decoding calling m.forward once per token; with
    `stats`, the runtime's all_gathers of each call."""
    logits_seen, per_call = [], []
    for _ in range(tokens):
        before = stats()["all_gathers"] if stats else 0
        logits = m(idx)
        if stats:
            per_call.append(stats()["all_gathers"] - before)
        logits_seen.append(logits)
        idx = torch.cat([idx, torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)], dim=1)
    return idx, logits_seen, per_call


def package(ctx):
    return h.fsdp_opt_package()


def error_of(fn):
    try:
        fn()
    except RuntimeError as e:  # FsdpOptError is one
        return str(e)
    return None


# ---- rank side --------------------------------------------------------------------------------

def rank_main(ctx):
    torch.set_num_threads(1)
    fsdp_opt = package(ctx)
    a = ctx.args
    idx = h.torch_load(a["inputs"])[0]
    files = {name: fsdp_opt.load_rank_file(d) for name, d in a["dirs"].items()}
    out = {}
    stats = fsdp_opt.stats

    with torch.no_grad():
        # decode, default bucket and one collective per unit
        for name in ("D", "B0"):
            m = files[name]
            fsdp_opt.reset_stats()
            with fsdp_opt.unsharded(m) as scope:
                entered = stats()
                tokens, logits, per_call = decode(m, idx, stats=stats)
            out["decode_" + name] = {"tokens": tokens, "logits": logits, "per_call": per_call,
                                     "entered": entered, "after": stats(), "units": scope.units,
                                     "bytes": scope.bytes, "collectives": scope.collectives}
        fsdp_opt.reset_stats()
        tokens, logits, per_call = decode(files["D"], idx, stats=stats)
        out["decode_plain"] = {"tokens": tokens, "logits": logits, "per_call": per_call}

        m = files["D"]
        # exception inside the block
        fsdp_opt.reset_stats()
        plain = stats()["all_gathers"]
        m(idx)
        plain = stats()["all_gathers"] - plain
        raised = None
        try:
            with fsdp_opt.unsharded(m):
                m(idx)
                raise KeyError("raised inside the scope")
        except KeyError as e:
            raised = str(e)
        after = stats()
        y = m(idx)
        out["exception"] = {"raised": raised, "after": after, "next": y,
                            "next_gathers": stats()["all_gathers"] - after["all_gathers"], "plain": plain}
        # release_all inside the block
        with fsdp_opt.unsharded(m) as scope:
            y1 = m(idx)
            torch.ops.fsdp.release_all()
            held = stats()["unsharded_bytes"]
            before = stats()["all_gathers"]
            y2 = m(idx)
            gathers = stats()["all_gathers"] - before
        out["release_all"] = {"outs": [y1, y2], "held": held, "bytes": scope.bytes, "gathers": gathers,
                              "after": stats()["unsharded_bytes"]}
        # subset
        fsdp_opt.reset_stats()
        with fsdp_opt.unsharded(m, units=["blocks.0", "blocks.1"]) as scope:
            entered = stats()
            calls = []
            for _ in range(2):
                s0 = stats()
                y = m(idx)
                calls.append((y, h.stats_delta(s0, stats())))
        out["subset"] = {"units": scope.units, "collectives": scope.collectives, "entered": entered,
                         "calls": calls, "after": stats()["unsharded_bytes"]}

        # budget
        m = files["BUD"]
        fsdp_opt.reset_stats()

        def everything():
            with fsdp_opt.unsharded(m):
                pass
        refused = error_of(everything)
        refused_stats = stats()
        with fsdp_opt.unsharded(m, units=".") as scope:
            fsdp_opt.reset_stats()
            root_y = m(idx)
            root_stats = stats()
        inner_error, inner_held = None, None
        with fsdp_opt.unsharded(m, units="blocks.0") as scope:
            inner_error = error_of(lambda: m(idx))
            inner_held = (stats()["unsharded_bytes"], scope.bytes)
        next_y = m(idx)
        out["budget"] = {"refused": refused, "refused_stats": refused_stats, "root_y": root_y,
                         "root_stats": root_stats, "inner_error": inner_error, "inner_held": inner_held,
                         "next": next_y, "after": stats()["unsharded_bytes"]}

    # grad mode
    m = files["D"]
    with fsdp_opt.unsharded(m):
        loss = m(idx).sum()
        backward_error = error_of(loss.backward)
    grads_written = [n for n, p in m.named_parameters() if p.grad is not None]
    with fsdp_opt.unsharded(m):
        loss = m(idx).sum()
    loss.backward()
    inside = {n: p.grad.clone() for n, p in h.distinct_named_parameters(m).items()}
    for p in m.parameters():
        p.grad = None
    m(idx).sum().backward()
    plain = {n: p.grad.clone() for n, p in h.distinct_named_parameters(m).items()}
    out["grad"] = {"error": backward_error, "written": grads_written, "inside": inside, "plain": plain,
                   "after": stats()["unsharded_bytes"]}
    return out


def rank_diverge(ctx):
    torch.set_num_threads(1)
    fsdp_opt = package(ctx)
    m = fsdp_opt.load_rank_file(ctx.args["dir"])
    idx = h.torch_load(ctx.args["inputs"])[0]
    t0 = time.monotonic()

    def run():
        if ctx.rank == 0:
            with fsdp_opt.unsharded(m):
                m(idx)
        else:
            m(idx)
    error = error_of(run)
    kind, message = torch.ops.fsdp.last_error()
    return {"error": error, "kind": kind, "message": message, "elapsed": time.monotonic() - t0}


def rank_wrong_file(ctx):
    torch.set_num_threads(1)
    fsdp_opt = package(ctx)
    m = fsdp_opt.load_rank_file(ctx.args["dir"], rank=1 - ctx.rank)

    def run():
        with fsdp_opt.unsharded(m):
            pass
    error = error_of(run)
    return {"error": error, "stats": fsdp_opt.stats()}


# ---- driver -----------------------------------------------------------------------------------

def main():
    out_dir = sys.argv[1]
    t = h.Test("unsharded_scope")
    gpt_pt = os.path.join(out_dir, "gpt.pt")
    fm.save(fm.make("gpt"), gpt_pt)
    inputs = os.path.join(out_dir, "inputs.pt")
    fm.save_inputs(fm.example_inputs("gpt"), inputs)
    idx = fm.example_inputs("gpt")[0]

    dirs = {}

    def shard(name, *flags):
        d = os.path.join(out_dir, name)
        r = h.fsdp_opt(gpt_pt, *fm.GPT_UNIT_FLAGS, "--world-size=%d" % WORLD, *flags, "-o", d)
        if t.check(r.returncode == 0, "fsdp-opt %s %s" % (name, " ".join(flags)), r.describe() if r.returncode else ""):
            dirs[name] = d
            return json.load(open(os.path.join(d, "manifest.json")))
        return None

    manifest = shard("D")
    if manifest is None:
        return t.finish("")
    sizes = {u["path"]: u["bytes"] for u in manifest["units"]}
    budget = sizes["."] + sizes["blocks.0"]
    total = sum(sizes.values())
    if shard("B0", "--bucket-bytes=0") is None or \
            shard("BUD", "--bucket-bytes=0", "--max-unsharded-bytes=%d" % budget) is None:
        return t.finish("")

    original = torch.jit.load(gpt_pt)
    with torch.no_grad():
        want_tokens, want_logits, _ = decode(original, idx)
        want_y = original(idx)

    results = h.run_ranks(WORLD, rank_main, {"dirs": dirs, "inputs": inputs}, timeout=200)
    if not t.check(all(r.ok for r in results), "W=%d: every rank ran every case" % WORLD, h.describe_ranks(results)):
        return t.finish("")

    def each(what, pred, show):
        bad = ["rank %d: %s" % (r.rank, show(r.value)) for r in results if not pred(r.value)]
        t.check(not bad, what, "; ".join(bad))

    def exact(what, got_of, want):
        each(what, lambda v: h.same_bits(got_of(v), want) is None, lambda v: h.same_bits(got_of(v), want))

    exact("decode: %d tokens under one scope bitwise equal to the original's loop" % TOKENS,
          lambda v: (v["decode_D"]["tokens"], v["decode_D"]["logits"]), (want_tokens, want_logits))
    each("decode: the scope is ONE collective, every token none, nothing unsharded after",
         lambda v: v["decode_D"]["collectives"] == 1 and v["decode_D"]["entered"]["all_gathers"] == 1 and
         v["decode_D"]["per_call"] == [0] * TOKENS and v["decode_D"]["after"]["all_gathers"] == 1 and
         v["decode_D"]["after"]["unsharded_bytes"] == 0 and v["decode_D"]["after"]["reshards"] == 1,
         lambda v: {k: v["decode_D"][k] for k in ("collectives", "entered", "per_call", "after")})
    each("decode: the scope holds every unit, %d bytes" % total,
         lambda v: v["decode_D"]["units"] == [".", "blocks.0", "blocks.1"] and v["decode_D"]["bytes"] == total and
         v["decode_D"]["entered"]["unsharded_bytes"] == total,
         lambda v: (v["decode_D"]["units"], v["decode_D"]["bytes"], v["decode_D"]["entered"]["unsharded_bytes"]))
    exact("decode --bucket-bytes=0: bitwise equal", lambda v: v["decode_B0"]["tokens"], want_tokens)
    each("decode --bucket-bytes=0: one collective per unit (3), every token none",
         lambda v: v["decode_B0"]["collectives"] == 3 and v["decode_B0"]["per_call"] == [0] * TOKENS and
         v["decode_B0"]["after"]["unsharded_bytes"] == 0,
         lambda v: {k: v["decode_B0"][k] for k in ("collectives", "per_call")})
    exact("decode without a scope: bitwise equal", lambda v: v["decode_plain"]["tokens"], want_tokens)
    each("decode without a scope gathers on every token (what the scope saves)",
         lambda v: all(n > 0 for n in v["decode_plain"]["per_call"]), lambda v: v["decode_plain"]["per_call"])

    each("exception: raised through the block, everything resharded",
         lambda v: v["exception"]["raised"] == "'raised inside the scope'" and
         v["exception"]["after"]["unsharded_bytes"] == 0,
         lambda v: (v["exception"]["raised"], v["exception"]["after"]))
    exact("exception: the next call is exact", lambda v: v["exception"]["next"], want_y)
    each("exception: the next call gathers as a plain call does",
         lambda v: v["exception"]["next_gathers"] == v["exception"]["plain"] > 0,
         lambda v: (v["exception"]["next_gathers"], v["exception"]["plain"]))
    exact("release_all inside the block: calls before and after it exact",
          lambda v: v["release_all"]["outs"], [want_y, want_y])
    each("release_all inside the block keeps the scope's units: the next call gathers nothing",
         lambda v: v["release_all"]["held"] == v["release_all"]["bytes"] == total and
         v["release_all"]["gathers"] == 0 and v["release_all"]["after"] == 0,
         lambda v: v["release_all"])

    exact("subset: calls inside a scope over the blocks exact", lambda v: [c[0] for c in v["subset"]["calls"]],
          [want_y, want_y])
    each("subset: one collective for both blocks; each call gathers the root alone (%d bytes)" % sizes["."],
         lambda v: v["subset"]["units"] == ["blocks.0", "blocks.1"] and v["subset"]["collectives"] == 1 and
         all(c[1]["all_gathers"] == 1 and c[1]["bytes_gathered"] == sizes["."] for c in v["subset"]["calls"]) and
         v["subset"]["after"] == 0,
         lambda v: (v["subset"]["units"], v["subset"]["collectives"], [c[1] for c in v["subset"]["calls"]]))

    refusal = ("unshard scope of units '.', 'blocks.0', 'blocks.1': would hold %d bytes unsharded at once (%d bytes "
               "to gather for the scope), over the rank file's --max-unsharded-bytes=%d" % (total, total, budget))
    each("budget: a scope over everything is refused naming the bytes, nothing gathered",
         lambda v: v["budget"]["refused"] is not None and refusal in v["budget"]["refused"] and
         v["budget"]["refused_stats"]["all_gathers"] == 0 and v["budget"]["refused_stats"]["unsharded_bytes"] == 0,
         lambda v: (v["budget"]["refused"], v["budget"]["refused_stats"]))
    exact("budget: a call inside a scope over the root exact", lambda v: v["budget"]["root_y"], want_y)
    each("budget: inside the root's scope each call gathers the 2 blocks, within %d bytes" % budget,
         lambda v: v["budget"]["root_stats"]["all_gathers"] == 2 and
         v["budget"]["root_stats"]["peak_unsharded_bytes"] <= budget,
         lambda v: v["budget"]["root_stats"])
    each("budget: a scope over one block makes the call raise the in-scope budget error, the block still held",
         lambda v: v["budget"]["inner_error"] is not None and "inside an unshard scope" in v["budget"]["inner_error"]
         and "--max-unsharded-bytes=%d" % budget in v["budget"]["inner_error"] and
         tuple(v["budget"]["inner_held"]) == (sizes["blocks.0"],) * 2 and v["budget"]["after"] == 0,
         lambda v: (v["budget"]["inner_error"], v["budget"]["inner_held"], v["budget"]["after"]))
    exact("budget: the next call after it exact", lambda v: v["budget"]["next"], want_y)

    each("grad mode: backward inside the scope raises the documented error, no .grad written",
         lambda v: v["grad"]["error"] is not None and "backward while an unshard scope is open" in v["grad"]["error"]
         and v["grad"]["written"] == [],
         lambda v: (v["grad"]["error"], v["grad"]["written"]))
    each("grad mode: forward inside the scope, backward after it: a plain step's gradients, bitwise",
         lambda v: h.same_bits(v["grad"]["inside"], v["grad"]["plain"]) is None and v["grad"]["after"] == 0,
         lambda v: h.same_bits(v["grad"]["inside"], v["grad"]["plain"]))

    diverged = h.run_ranks(WORLD, rank_diverge, {"dir": dirs["D"], "inputs": inputs}, timeout=90)
    ok = all(r.ok for r in diverged)
    if t.check(ok, "fingerprint: both ranks returned", h.describe_ranks(diverged)):
        for r in diverged:
            v = r.value
            t.check(v["error"] is not None and v["kind"] == "divergence" and "ranks issue different collectives" in
                    v["message"] and "(unshard scope)" in v["message"] and v["elapsed"] < 20,
                    "fingerprint: rank %d (%s) fails with the divergence error naming the scope, %.1f s"
                    % (r.rank, "opens a scope" if r.rank == 0 else "calls forward", v["elapsed"]),
                    "%s: %s" % (v["kind"], v["message"] or v["error"]))

    wrong = h.run_ranks(WORLD, rank_wrong_file, {"dir": dirs["D"]}, timeout=90)
    if t.check(all(r.ok for r in wrong), "wrong file: both ranks returned", h.describe_ranks(wrong)):
        for r in wrong:
            v = r.value
            t.check(v["error"] is not None and "fsdp::check_rank: this model file is rank %d" % (1 - r.rank) in v["error"]
                    and v["stats"]["all_gathers"] == 0,
                    "wrong file: rank %d refused by the rank check, nothing gathered" % r.rank,
                    "%s; %s" % (v["error"], v["stats"]))
    return t.finish("W=%d: a %d-token Python decode under fsdp_opt.unsharded is exact with one collective for "
                    "the scope and none per token; exceptions, subsets, budgets, grad mode, fingerprints and "
                    "the rank check behave as documented" % (WORLD, TOKENS))


if __name__ == "__main__":
    sys.exit(main())
