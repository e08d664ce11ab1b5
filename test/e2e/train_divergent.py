# Backwards that differ per rank (SPEC sections 10 and 11): the gradient collectives carry
# fingerprints like the gathers. A model with two units of the same shapes, 'a' and 'b', both
# called in forward on both ranks (the same gathers); W=2:
# - diverge: rank 0's loss uses only a's output, rank 1's only b's. Backward gathers 'a' again on
#   rank 0 and 'b' on rank 1, then reduces their gradients: collectives of the same sizes, which a
#   runtime pairing collectives by size would silently mix (a's gradient rows summed with b's).
#   Each rank must fail within seconds (the collective timeout is 60 s) with the one divergence
#   error naming both units, with no .grad written;
# - then, in the same processes, with the first step's loss (and so its graph) still alive, a
#   step whose losses use both outputs (different inputs per rank) gives each rank exactly its
#   rows of the mean of the two ranks' one-process gradients: the group and the module are
#   usable after the error, and backward prefetch does not reach into the kept graph (which
#   differs per rank: a1's on rank 0, b1's on rank 1).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys
import time

import torch

import fsdp_harness as h

LIMIT_S = 15.0


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.a(x), self.b(x)


def input_of(rank):
    return torch.randn(4, 16, generator=torch.Generator().manual_seed(10 + rank))


def full_loss(ya, yb):
    return ya.pow(2).sum() + yb.sum()


def rank_main(ctx):
    torch.set_num_threads(1)
    model = ctx.load(ctx.rank_file(ctx.args["dir"]))
    x = input_of(ctx.rank)
    result = {"error": None}
    ya, yb = model(x)
    loss = ya.sum() if ctx.rank == 0 else yb.sum()
    result["error"], result["seconds"] = h.timed_error(loss.backward)
    result["grads_after_error"] = [p.grad is not None for p in model.parameters()]
    ya, yb = model(x)
    full_loss(ya, yb).backward()
    result["grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
    result["stats"] = ctx.stats()
    return result


def main():
    out_dir = sys.argv[1]
    t = h.Test("train_divergent")
    torch.manual_seed(0)
    original = torch.jit.script(TwoHeads())
    orig = os.path.join(out_dir, "two.pt")
    original.save(orig)
    ranks = h.sharded(t, orig, os.path.join(out_dir, "w2"), "--world-size=2", "--fsdp-unit=a", "--fsdp-unit=b")
    if not ranks:
        return t.finish("")
    t0 = time.monotonic()
    res = h.run_ranks(2, rank_main, {"dir": ranks}, timeout=150)
    elapsed = time.monotonic() - t0
    if not t.check(all(x.ok for x in res), "both ranks finish, none hangs (%.1f s)" % elapsed, h.describe_ranks(res)):
        return t.finish("")
    for x in res:
        v = x.value
        err = v["error"] or ""
        t.check("ranks issue different collectives" in err and "rank 0 gathers unit 'a'" in err
                and "rank 1 gathers unit 'b'" in err and "backward of unit" in err,
                "rank %d: the divergence error names both units and backward" % x.rank, err[:800])
        t.check(v["seconds"] < LIMIT_S, "rank %d: fails within %.0f s (%.1f s)" % (x.rank, LIMIT_S, v["seconds"]))
        t.check(not any(v["grads_after_error"]), "rank %d: no .grad written by the failed backward" % x.rank,
                str(v["grads_after_error"]))
        t.check(v["stats"]["unsharded_bytes"] == 0, "rank %d: nothing left unsharded" % x.rank)
    # The one-process reference: each rank's gradients of the original, summed in rank order and
    # divided by 2, as SPEC section 10 says.
    per_rank = []
    for rank in range(2):
        model = torch.jit.load(orig)
        full_loss(*model(input_of(rank))).backward()
        per_rank.append({n: p.grad for n, p in model.named_parameters()})
    for x in res:
        g = x.value["grads"]
        same = set(g) == set(per_rank[0]) and all(
            torch.equal(g[n], h.expected_shard((per_rank[0][n] + per_rank[1][n]) / 2, 2, x.rank)) for n in g)
        t.check(same, "rank %d: the next step's gradients are its rows of the ranks' mean, bitwise" % x.rank,
                str({n: tuple(v.shape) for n, v in g.items()}))
    return t.finish("backwards that differ per rank end in the fingerprint error; the next step is exact")


if __name__ == "__main__":
    sys.exit(main())
