# Memory of a training step (SPEC section 10: --max-unsharded-bytes bounds the parameter and
# gradient bytes held at once). On 2 ranks, the GPT under a budget of its root plus one block
# (what forward needs), each rank runs forward in grad mode and backward twice and reads the
# runtime's stats after each:
# - after forward: nothing is unsharded (unsharded_bytes 0) and, what memory really holds, no
#   gather buffer is alive (host_buffer_live_bytes 0), although autograd saved views of the full
#   weights (Linear saves weight.t()): the full storage objects were emptied at reshard and are
#   refilled by the backward's gathers;
# - during backward: parameters and full gradients together within the budget
#   (peak_unsharded_param_and_grad_bytes), prefetch included; full gradients of one block at a
#   time, beside those of the root that came before its last (peak_unsharded_grad_bytes between a
#   block's bytes and the budget): each parameter is let go as its full gradient arrives, so the
#   same budget as forward's fits; one reduction per unit (3: FSDP2's reduce-scatter per unit);
# - after backward: nothing unsharded, no buffer alive, nothing of the gradients either; one
#   reshard per all-gather (a unit's parameters are let go one by one, still one reshard).
# Backward prefetch (the next unit's gather started while the current one's backward runs):
# without a budget at least one, with backward's peak no higher than forward's; under the budget
# only where it fits (the peak check above).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch
import torch.nn.functional as F

import fsdp_harness as h
import fsdp_models as fm

N_EMBD = 32
VOCAB = 67


def rank_main(ctx):
    torch.set_num_threads(1)
    model = ctx.load(ctx.rank_file(ctx.args["dir"]))
    x = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(ctx.rank))
    out = []
    for _ in range(2):
        ctx.reset_stats()
        logits = model(x)
        after_forward = ctx.stats()
        ctx.reset_stats()
        F.cross_entropy(logits.reshape(-1, VOCAB), x.reshape(-1)).backward()
        out.append({"forward": after_forward, "backward": ctx.stats()})
    return out


def main():
    out_dir = sys.argv[1]
    t = h.Test("train_memory")
    model = fm.make("gpt")
    orig = os.path.join(out_dir, "gpt.pt")
    fm.save(model, orig)

    def nbytes(params):
        return sum(p.numel() * p.element_size() for p in {id(p): p for p in params}.values())

    block = nbytes(model.blocks[0].parameters())
    root = nbytes(model.parameters()) - len(model.blocks) * block
    budget = root + block
    units = 1 + len(model.blocks)
    ranks = h.sharded(t, orig, os.path.join(out_dir, "w2"), "--world-size=2", *fm.GPT_UNIT_FLAGS,
                      "--max-unsharded-bytes=%d" % budget)
    if not ranks:
        return t.finish("")
    free = h.sharded(t, orig, os.path.join(out_dir, "w2-free"), "--world-size=2", *fm.GPT_UNIT_FLAGS)
    unbounded = h.run_ranks(2, rank_main, {"dir": free}, timeout=120)
    if t.check(all(x.ok for x in unbounded), "without a budget: both ranks train two steps", h.describe_ranks(unbounded)):
        for res in unbounded:
            for step, s in enumerate(res.value):
                f, b = s["forward"], s["backward"]
                label = "no budget, rank %d step %d" % (res.rank, step)
                t.check(b["in_flight_peak"] >= 1 and b["peak_unsharded_bytes"] <= f["peak_unsharded_bytes"],
                        "%s: backward prefetches (%d in flight at most), its peak %d <= forward's %d"
                        % (label, b["in_flight_peak"], b["peak_unsharded_bytes"], f["peak_unsharded_bytes"]))
                t.check(b["reshards"] == b["all_gathers"], "%s: %d reshards for %d all-gathers"
                        % (label, b["reshards"], b["all_gathers"]))
    results = h.run_ranks(2, rank_main, {"dir": ranks}, timeout=120)
    if not t.check(all(x.ok for x in results), "both ranks train two steps", h.describe_ranks(results)):
        return t.finish("")
    for res in results:
        for step, s in enumerate(res.value):
            f, b = s["forward"], s["backward"]
            label = "rank %d step %d" % (res.rank, step)
            t.check(f["unsharded_bytes"] == 0 and f["host_buffer_live_bytes"] == 0,
                    "%s: after forward nothing unsharded, no full storage alive" % label,
                    "unsharded_bytes %d, host_buffer_live_bytes %d" % (f["unsharded_bytes"], f["host_buffer_live_bytes"]))
            t.check(0 < f["peak_unsharded_bytes"] <= budget, "%s: forward peak %d <= budget %d"
                    % (label, f["peak_unsharded_bytes"], budget))
            t.check(0 < b["peak_unsharded_param_and_grad_bytes"] <= budget,
                    "%s: backward peak of parameters and gradients %d <= budget %d (%d in flight at most)"
                    % (label, b["peak_unsharded_param_and_grad_bytes"], budget, b["in_flight_peak"]))
            t.check(b["reshards"] == b["all_gathers"], "%s: %d reshards for %d all-gathers"
                    % (label, b["reshards"], b["all_gathers"]))
            t.check(block <= b["peak_unsharded_grad_bytes"] <= budget,
                    "%s: full gradients of one block at a time (peak %d bytes, a block %d, the budget %d)"
                    % (label, b["peak_unsharded_grad_bytes"], block, budget))
            t.check(b["grad_reductions"] == units, "%s: %d reductions, one per unit (%d)"
                    % (label, b["grad_reductions"], units))
            t.check(b["unsharded_bytes"] == 0 and b["host_buffer_live_bytes"] == 0 and b["unsharded_grad_bytes"] == 0,
                    "%s: after backward nothing unsharded, nothing alive" % label,
                    str({k: b[k] for k in ("unsharded_bytes", "host_buffer_live_bytes", "unsharded_grad_bytes")}))
    return t.finish("a training step holds what FSDP2's reshard-after-forward holds, within the budget")


if __name__ == "__main__":
    sys.exit(main())
