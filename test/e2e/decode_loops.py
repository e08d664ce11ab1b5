# The decode-loop matrix (issue 20 item 5): greedy decoding spelled the ways users write it,
# sharded for W=2 with the flags a user would write, run on ranks whose prompts and eos ids
# differ so that they stop at different steps (i). For every loop and schedule:
#   - each rank's tokens are bitwise its own unsharded run's (the original model, this process,
#     one thread like the ranks);
#   - the collectives the runtime counts per call equal `fsdp-opt --stats`' prediction
#     (N - K + K x iterations, the loop running while any rank goes on);
#   - nothing stays unsharded after the call, and the peak stays within the budget.
# Schedules: the default pipeline with no budget, where every loop costs ONE collective per
# call and no agreement (the planner holds every unit for the whole call, so a data-dependent
# loop has nothing left to agree on), and (h) a budget of the least peak any schedule keeps
# (root + one layer), where the prediction has per-iteration gathers and is still met.
# Loops (test/Inputs/decoders.py): (a) while + eos in the condition, (b) for + break,
# (c) prefill + cached step with a List[Tensor] KV cache, (d) helpers called from the body,
# (e) an if choosing between two head units, (j) (a)-(c) as registered forward methods of a
# unit that is not the root, called from the root; on the torch 2.x leg also (f), traced Hugging
# Face GPT-2 and Llama decoders inside a scripted generate written as (b), with and without a
# budget.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import json
import os
import sys

import torch

import decoders as dl
import fsdp_harness as h

WORLD = 2
MAX_NEW = 8
PROMPT = 5
# Rank r stops once it appended the token its own unsharded run makes at step STOP_AT[r] (or
# the first step after it whose token is new), so the ranks leave the loop at different steps.
STOP_AT = [2, 5]
CALLS = 2


def rank_main(ctx):
    out = {}
    for case in ctx.args["cases"]:
        m = ctx.load(ctx.rank_file(case["dir"]))
        prompt, eos = h.torch_load(case["inputs"])[ctx.rank]
        runs = []
        for _ in range(CALLS):
            ctx.reset_stats()
            before = ctx.stats()
            tokens = getattr(m, case["method"])(prompt, MAX_NEW, eos)
            after = ctx.stats()
            runs.append({"tokens": tokens, "delta": h.stats_delta(before, after), "peak": after["peak_unsharded_bytes"]})
        out[case["name"]] = runs
    return out


def stopping_eos(generated, first_checked, stop_at):
    """An eos id that stops a loop, which checks tokens from index first_checked on, at the
    first step >= stop_at whose token did not come before; -1 (never) when there is none."""
    for step in range(max(stop_at, first_checked), len(generated)):
        if generated[step] not in generated[:step]:
            return generated[step]
    return -1


def main():
    out_dir = sys.argv[1]
    torch.set_num_threads(1)
    t = h.Test("decode_loops")
    models = {"kv": (os.path.join(out_dir, "kv.pt"), dl.KV_UNIT_FLAGS, dl.KV_METHODS, 67)}
    torch.jit.script(dl.kv_decoder()).save(models["kv"][0])
    models["unit"] = (os.path.join(out_dir, "unit.pt"), dl.UNIT_DECODER_FLAGS, dl.UNIT_DECODER_METHODS, 67)
    torch.jit.script(dl.UnitDecoders(dl.kv_decoder())).save(models["unit"][0])
    has_hf = torch.__version__ >= "2"
    if has_hf:
        for family in ("gpt2", "llama"):
            hf_pt = os.path.join(out_dir, family + ".pt")
            torch.jit.script(dl.HFGenerate(dl.traced_hf(family))).save(hf_pt)
            models[family] = (hf_pt, dl.HF_UNIT_FLAGS[family], ["generate"], 128)

    cases = []
    expected = {}
    for model, (src, flags, methods, vocab) in models.items():
        original = torch.jit.load(src)
        prompts = [torch.randint(0, vocab, (1, PROMPT), generator=torch.Generator().manual_seed(10 + r))
                   for r in range(WORLD)]
        manifests = {}
        stats_text = {}
        for schedule in ("roomy", "budget"):
            d = os.path.join(out_dir, "%s-%s" % (model, schedule))
            extra = []
            if schedule == "budget":
                # The least peak any schedule keeps: the rewrite's (check-unsharded-budget).
                probe = h.fsdp_opt(src, "--world-size=%d" % WORLD, *flags, "--max-unsharded-bytes=1")
                least = [int(w) for w in probe.stderr.split("smallest budget any schedule can keep is ")[1].split()[:1]]
                extra = ["--max-unsharded-bytes=%d" % least[0]]
                budget = least[0]
            r = h.fsdp_opt(src, "--world-size=%d" % WORLD, *flags, *extra, "--stats", "-o", d)
            if not t.check(r.returncode == 0, "%s %s: fsdp-opt %s" % (model, schedule, " ".join(flags + extra)),
                           r.describe() if r.returncode else ""):
                return t.finish("")
            manifests[schedule] = h.check_rank_files(t, d, src, WORLD, "%s %s" % (model, schedule))
            stats_text[schedule] = r.stdout
            for method in methods:
                name = "%s-%s-%s" % (model, schedule, method)
                inputs = os.path.join(out_dir, name + ".in.pt")
                per_rank, want = [], []
                for rank in range(WORLD):
                    free = getattr(original, method)(prompts[rank], MAX_NEW, -1)[0, PROMPT:].tolist()
                    eos = stopping_eos(free, 1 if method == "generate_cached" else 0, STOP_AT[rank])
                    per_rank.append((prompts[rank], eos))
                    want.append(getattr(original, method)(prompts[rank], MAX_NEW, eos))
                torch.save(per_rank, inputs)
                iterations = max(dl.loop_iterations(method, PROMPT, w.size(1)) for w in want)
                cases.append({"name": name, "dir": d, "inputs": inputs, "method": method,
                              "predicted": h.gathers_per_call(r.stdout, method, iterations),
                              "budget": budget if schedule == "budget" else None,
                              "stops": [w.size(1) - PROMPT for w in want]})
                expected[name] = want

    results = h.run_ranks(WORLD, rank_main, {"cases": [{k: c[k] for k in ("name", "dir", "inputs", "method")}
                                                       for c in cases]}, timeout=240)
    if not t.check(all(r.ok for r in results), "W=%d: all ranks ran every case" % WORLD, h.describe_ranks(results)):
        return t.finish("")
    for c in cases:
        wrong, counts = [], []
        for r in results:
            for i, run in enumerate(r.value[c["name"]]):
                diff = h.same_bits(run["tokens"], expected[c["name"]][r.rank])
                if diff:
                    wrong.append("rank %d call %d: %s" % (r.rank, i + 1, diff))
                delta = run["delta"]
                ok = delta["all_gathers"] == c["predicted"] and delta["unsharded_bytes"] == 0
                if c["budget"] is None:
                    ok = ok and delta["agreements"] == 0 and delta["all_gathers"] == 1
                else:
                    ok = ok and run["peak"] <= c["budget"]
                if not ok:
                    counts.append("rank %d call %d: %d all_gathers, %d agreements, peak %d" % (
                        r.rank, i + 1, delta["all_gathers"], delta["agreements"], run["peak"]))
        t.check(not wrong, "%s: ranks stopping after %s new tokens, each bitwise its own unsharded run"
                % (c["name"], "/".join(map(str, c["stops"]))), "; ".join(wrong))
        what = ("1 collective and no agreement per call" if c["budget"] is None
                else "peak within %d bytes" % c["budget"])
        t.check(not counts, "%s: %s all-gathers per call as --stats predicts, %s, nothing left unsharded"
                % (c["name"], c["predicted"], what), "; ".join(counts))
    return t.finish("W=%d: %d decode loops x {no budget, root + one layer}, ranks stopping at different steps, "
                    "bitwise, gathers per call as --stats predicts (one without a budget)%s"
                    % (WORLD, len(cases) // 2, "" if has_hf else "; traced GPT-2 and Llama on the torch 2.x leg only"))


if __name__ == "__main__":
    sys.exit(main())
