# Training with parts that do not train (SPEC section 10), GPT on 2 ranks:
# - frozen: every parameter of unit blocks.0 has requires_grad=False (as in the original the
#   reference trains): after 2 SGD steps every rank's trainable parameters are bitwise their rows
#   of the reference's, blocks.0 keeps its values and gets no .grad, and backward reduces one
#   unit fewer (no reduce-scatter for a frozen unit) and leaves nothing unsharded;
# - no_grad: a forward under torch.no_grad() costs no backward machinery: no reduction, nothing
#   held, and the parameters' .grad untouched.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch
import torch.nn.functional as F

import fsdp_harness as h
import fsdp_models as fm

VOCAB = 67
STEPS = 2


def frozen_names(named):
    return [n for n in named if n.startswith("blocks.0.")]


def batch(rank, step):
    g = torch.Generator().manual_seed(100 * rank + step)
    tokens = torch.randint(0, VOCAB, (2, 7), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


def rank_main(ctx):
    torch.set_num_threads(1)
    model = ctx.load(ctx.rank_file(ctx.args["dir"]))
    params = h.distinct_named_parameters(model)
    for n in frozen_names(params):
        params[n].requires_grad_(False)
    before = {n: p.detach().clone() for n, p in params.items()}
    opt = torch.optim.SGD([p for p in params.values() if p.requires_grad], lr=0.05, momentum=0.9, foreach=False)
    ctx.reset_stats()
    for step in range(STEPS):
        opt.zero_grad()
        x, y = batch(ctx.rank, step)
        loss_of(model, x, y).backward()
        opt.step()
    trained_stats = ctx.stats()
    grads = {n: p.grad.detach().clone() for n, p in params.items() if p.grad is not None}
    ctx.reset_stats()
    with torch.no_grad():
        model(batch(ctx.rank, 0)[0])
    no_grad_stats = ctx.stats()
    same_grads = all(torch.equal(params[n].grad, g) for n, g in grads.items())
    return {"params": {n: p.detach().clone() for n, p in params.items()}, "before": before,
            "grad_names": sorted(grads), "stats": trained_stats, "no_grad": no_grad_stats,
            "grads_untouched": same_grads}


def main():
    out_dir = sys.argv[1]
    t = h.Test("train_frozen")
    orig = os.path.join(out_dir, "gpt.pt")
    fm.save(fm.make("gpt"), orig)
    ranks = h.sharded(t, orig, os.path.join(out_dir, "w2"), "--world-size=2", *fm.GPT_UNIT_FLAGS)
    if not ranks:
        return t.finish("")
    res = h.run_ranks(2, rank_main, {"dir": ranks}, timeout=180)
    if not t.check(all(x.ok for x in res), "both ranks train with blocks.0 frozen", h.describe_ranks(res)):
        return t.finish("")

    torch.set_num_threads(1)
    ref = h.MeanGradientReference(orig, world=2)
    params = ref.params
    frozen = set(frozen_names(params))
    for copy in ref.copies:
        for n, p in h.distinct_named_parameters(copy).items():
            if n in frozen:
                p.requires_grad_(False)
    opt = torch.optim.SGD([p for p in params.values() if p.requires_grad], lr=0.05, momentum=0.9, foreach=False)
    for step in range(STEPS):
        opt.zero_grad()
        ref.backward(lambda rank, module: loss_of(module, *batch(rank, step)).backward())
        opt.step()
        ref.sync()
    manifest = h.json.load(open(os.path.join(ranks, "manifest.json")))
    sharded = {name for u in manifest["units"] for p in u["params"] for name in [p["path"]] + p["aliases"]}
    for x in res:
        v = x.value
        bad = [n for n, p in params.items()
               if not torch.equal(v["params"][n], h.expected_shard(p.detach(), 2, x.rank) if n in sharded else p.detach())]
        t.check(not bad, "rank %d: after %d steps every parameter equals its rows of the reference's, bitwise"
                % (x.rank, STEPS), str(bad))
        t.check(all(torch.equal(v["params"][n], v["before"][n]) for n in frozen) and not frozen & set(v["grad_names"]),
                "rank %d: the frozen unit kept its values and got no gradient" % x.rank)
        s = v["stats"]
        t.check(s["grad_reductions"] == 2 * STEPS, "rank %d: %d reductions, 2 units per step (blocks.0 frozen)"
                % (x.rank, s["grad_reductions"]))
        t.check(s["unsharded_bytes"] == 0 and s["host_buffer_live_bytes"] == 0,
                "rank %d: nothing left unsharded or alive" % x.rank, str(s))
        n = v["no_grad"]
        t.check(n["grad_reductions"] == 0 and n["unsharded_bytes"] == 0 and n["unsharded_grad_bytes"] == 0
                and v["grads_untouched"], "rank %d: a forward under no_grad reduces nothing and leaves .grad alone" % x.rank,
                str(n))
    return t.finish("frozen units and no_grad forwards cost no gradient work, and training stays exact")


if __name__ == "__main__":
    sys.exit(main())
