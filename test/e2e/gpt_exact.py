# GPT-style decoder (tied embedding / LM head, root unit, every block a unit, `generate`
# registered on the root) sharded by fsdp-opt and run by fsdp-run on W local ranks: every
# rank's outputs of `generate` and `forward` are bitwise the original model's, run in one
# process (SPEC section 8). --repeat 3 lets TorchScript's profiling executor optimise the
# graphs: the fsdp ops must survive its passes, and the collective counts show they do: every
# rank's all_gathers per call equal what `fsdp-opt --stats` predicts ("gathers per call of
# METHOD: N (K inside loops)" -> N - K + K x max_new_tokens), between 1 and the unscheduled
# 1 + n_layer x max_new_tokens, and every gather is resharded. (The default pipeline holds every
# unit for the whole call and buckets them, one collective per call of either method, forward's
# 1 + n_layer per-call gathers too; gather_once.py pins the counts down with and without a
# budget.)
#
# Units and the registration come from markers set before scripting (`--designate=markers`,
# blocks from --fsdp-unit=blocks.*) or all from the command line (`--designate=cli`:
# --fsdp-unit=. --fsdp-unit=blocks.* --forward-method=.:generate on an unmarked model).
# With --budget-one-block, fsdp-opt gets --max-unsharded-bytes = the root's bytes + one
# block's, so the block gathers stay inside generate's loop (one per block per token).
# This file is the driver; gpt_exact_w3.py (command line, one-block budget) and
# gpt_exact_w4.py (markers) run it for W=3 and W=4 (each lit test stays short on a shared
# 2-core machine).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s --worlds 1,2 %t

import argparse
import os
import sys

import torch

import fsdp_harness as h
import fsdp_models as fm

N_LAYER = 2
MAX_NEW_TOKENS = 13  # prompt of 5 + 13 > block_size 16: the cropping branch runs too
REPEAT = 3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="1,2,3,4")
    ap.add_argument("--designate", choices=["markers", "cli"], default="markers")
    ap.add_argument("--budget-one-block", action="store_true")
    ap.add_argument("out")
    a = ap.parse_args()
    worlds = [int(w) for w in a.worlds.split(",")]
    t = h.Test("gpt_exact W=%s (%s%s)" % (a.worlds, a.designate, ", one-block budget" if a.budget_one_block else ""))

    model = fm.make("gpt", n_layer=N_LAYER)
    flags = ["--fsdp-unit=blocks.*"]
    if a.designate == "markers":
        fm.mark(model, units=["."], forward_methods={".": ["generate"]})
    else:
        flags += ["--fsdp-unit=.", "--forward-method=.:generate"]
    if a.budget_one_block:
        def nbytes(params):
            return sum(p.numel() * p.element_size() for p in {id(p): p for p in params}.values())
        block = nbytes(model.blocks[0].parameters())
        root = nbytes(model.parameters()) - N_LAYER * block
        flags.append("--max-unsharded-bytes=%d" % (root + block))
    orig = os.path.join(a.out, "gpt.pt")
    fm.save(model, orig)
    (prompt,) = fm.example_inputs("gpt")
    gen_in = os.path.join(a.out, "generate.in.pt")
    fwd_in = os.path.join(a.out, "forward.in.pt")
    fm.save_inputs((prompt, MAX_NEW_TOKENS), gen_in)
    fm.save_inputs((prompt,), fwd_in)

    summary = []
    for w in worlds:
        out = os.path.join(a.out, "gpt.w%d%s" % (w, ".pt" if w == 1 else ""))
        r = h.fsdp_opt(orig, "--world-size=%d" % w, *flags, "--stats", "-o", out)
        if not t.check(r.returncode == 0, "W=%d fsdp-opt" % w, "" if r.returncode == 0 else r.describe()):
            continue
        per_call = {"generate": h.gathers_per_call(r.stdout, "generate", MAX_NEW_TOKENS),
                    "forward": h.gathers_per_call(r.stdout, "forward", 1)}
        t.check(per_call["generate"] is not None and 1 <= per_call["generate"] <= 1 + N_LAYER * MAX_NEW_TOKENS
                and per_call["forward"] == (1 + N_LAYER if a.budget_one_block else 1)
                and (not a.budget_one_block or per_call["generate"] == 1 + N_LAYER * MAX_NEW_TOKENS),
                "W=%d fsdp-opt --stats: %s gathers per call of generate (unscheduled: %d), %s of forward"
                % (w, per_call["generate"], 1 + N_LAYER * MAX_NEW_TOKENS, per_call["forward"]),
                "" if per_call["generate"] else r.stdout)
        if w > 1:
            man = h.check_rank_files(t, out, orig, w, "W=%d" % w)
            units = {u["path"]: u for u in man["units"]}
            root = units.get(".", {"params": [], "forward_methods": []})
            tied = [p for p in root["params"] if p["path"] == "wte.weight"]
            t.check(sorted(units) == [".", "blocks.0", "blocks.1"]
                    and "generate" in root["forward_methods"]
                    and tied and tied[0]["aliases"] == ["lm_head.weight"],
                    "W=%d manifest: units ., blocks.0, blocks.1; generate registered on the root; "
                    "lm_head.weight tied to wte.weight" % w,
                    "units %s, root %s" % (sorted(units), {k: root[k] for k in ("forward_methods",)}))
        for method, inputs in (("generate", gen_in), ("forward", fwd_in)):
            r = h.fsdp_run(out, method=method, inputs=inputs, check=orig, repeat=REPEAT, stats=True)
            if not h.check_fsdp_run_exact(t, r, "W=%d %s x%d" % (w, method, REPEAT), w, orig) \
                    or per_call[method] is None:
                continue
            want = REPEAT * per_call[method]
            bad = {rk: s for rk, s in r.stats.items()
                   if s.get("all_gathers") != want or s.get("reshards") != want
                   or s.get("unsharded_bytes") != 0}
            t.check(len(r.stats) == w and not bad,
                    "W=%d %s: all_gathers == reshards == %d calls x %d (as --stats predicts) on every rank, "
                    "unsharded_bytes 0 after" % (w, method, REPEAT, per_call[method]),
                    "stats %s" % (bad or r.stats[0]))
            summary.append("W=%d %s" % (w, method))
    return t.finish("%s (units and generate via %s%s): every rank bitwise identical to the unsharded model"
                    % (", ".join(summary), a.designate, ", one-block budget" if a.budget_one_block else ""))


if __name__ == "__main__":
    sys.exit(main())
