# Collective fingerprints (SPEC section 11), at the runtime's ops, without any pass: ranks that
# issue different collectives must each fail at the first difference with ONE error of kind
# `divergence` naming both sides, within seconds (never the timeout, here 60 s), with no data
# moved (every parameter still holds its own shard) and no crash. Scenarios, each on fresh
# processes:
#   units      W=2: rank 0 gathers unit 'a', rank 1 unit 'b', same shapes (so same sizes: only
#              the fingerprint tells them apart); then both gather 'c' together: the group is
#              still usable, because only the fixed-size envelopes went out
#   sizes      W=2: both gather unit 'a', of different shapes (a Gloo all-gather of different sizes
#              would abort the process with the smaller buffer)
#   small      W=2: as `units` with payloads small enough to ride inside the envelope
#   agreement  W=2: rank 0 runs fsdp::rank_any while rank 1 gathers
#   split      W=2: all_gather_start of 'a' vs of 'b': start returns, the wait raises
#   skip       W=2: rank 0 gathers 'x' before 'a', rank 1 gathers 'b' at once
#   pending    W=2: rank 0 starts a gather of 'b' and, before waiting for it, gathers 'a'; rank 1
#              gathers 'a': rank 0 must raise at its gather of 'a' (the mismatch of its start's
#              envelope), not send a second envelope and wait for the timeout; `pending_small`
#              the same with payloads inside the envelope
#   three      W=3: ranks 0 and 1 gather 'a', rank 2 gathers 'b': every rank names ranks 0 and 2
#
# RUN: %python %s

import sys
import time

import fsdp_harness as h

LIMIT_S = 15.0  # "within seconds": far below FSDP_OPT_TIMEOUT_S (60 in lit)


def shard(torch, full, world, rank):
    n = full.shape[0]
    c = -(-n // world)
    rows = full[min(rank * c, n):min((rank + 1) * c, n)]
    pad = torch.zeros((c - rows.shape[0],) + tuple(full.shape[1:]), dtype=full.dtype)
    return torch.nn.Parameter(torch.cat([rows, pad]), requires_grad=False)


class Unit:
    def __init__(self, torch, name, shapes, world, rank, seed):
        g = torch.Generator().manual_seed(seed)
        self.name = name
        self.full = [torch.randn(*s, generator=g) for s in shapes]
        self.params = [shard(torch, f, world, rank) for f in self.full]
        self.shards = [p.detach().clone() for p in self.params]
        self.rows = [f.shape[0] for f in self.full]

    def gather(self, ops):
        return ops.all_gather(self.params, self.rows, self.name)

    def sharded(self, torch):
        return all(p.shape == s.shape and torch.equal(p, s) for p, s in zip(self.params, self.shards))


def rank_main(ctx):
    torch = ctx.torch
    ctx.load_runtime()
    ops = torch.ops.fsdp
    r, w = ctx.rank, ctx.world_size
    scenario = ctx.args["scenario"]
    big = [(64, 16), (64,)]  # 2.1 KiB per rank at W=2: a payload of its own after the envelope
    tiny = [(6, 2), (3,)]  # fits in the envelope
    shapes = tiny if scenario in ("small", "pending_small") else big
    a = Unit(torch, "a", shapes, w, r, seed=1)
    b = Unit(torch, "b", shapes, w, r, seed=2)
    mine = {"sizes": Unit(torch, "a", [(64, 16)] if r == 0 else [(32, 16)], w, r, seed=3),
            "three": b if r == 2 else a}.get(scenario, a if r == 0 else b)
    out = {"error": None, "kind": None, "sharded": None, "after": None}
    t0 = time.monotonic()
    try:
        if scenario.startswith("pending"):
            mine = a
            if r == 0:
                ops.all_gather_start(b.params, b.rows, b.name)
                out["start_returned"] = True
            a.gather(ops)
        elif scenario == "agreement" and r == 0:
            ops.rank_any(True, a.params[0])
        elif scenario == "split":
            handle = ops.all_gather_start(mine.params, mine.rows, mine.name)
            out["start_returned"] = True
            ops.all_gather_wait(handle)
        else:
            if scenario == "skip" and r == 0:
                x = Unit(torch, "x", big, w, r, seed=4)
                x.gather(ops)
            mine.gather(ops)
    except RuntimeError as e:
        out["error"] = str(e).strip().splitlines()[-1]
        out["kind"] = tuple(ops.last_error())[0]
    out["elapsed"] = time.monotonic() - t0
    out["sharded"] = mine.sharded(torch) and a.sharded(torch) and b.sharded(torch)
    if scenario == "units":
        c = Unit(torch, "c", big, w, r, seed=5)
        c.gather(ops)
        out["after"] = all(torch.equal(p, f) for p, f in zip(c.params, c.full))
        ops.reshard(c.params, "c")
    return out


def expect_error(t, label, results, sides):
    texts = [res.value["error"] if res.ok else None for res in results]
    if not t.check(all(res.ok for res in results), "%s: every rank returns (no crash, no hang)" % label,
                   h.describe_ranks(results)):
        return
    values = [res.value for res in results]
    t.check(all(v["kind"] == "divergence" for v in values), "%s: every rank's error is of kind divergence" % label,
            str([(v["kind"], v["error"]) for v in values]))
    t.check(all(e and "ranks issue different collectives: " + sides in e for e in texts),
            "%s: every rank names both sides" % label, "\n".join(map(str, texts)))
    slow = [v["elapsed"] for v in values if v["elapsed"] > LIMIT_S]
    t.check(not slow, "%s: within %d s" % (label, LIMIT_S), str([round(v["elapsed"], 2) for v in values]))
    t.check(all(v["sharded"] for v in values), "%s: no data moved: every parameter keeps its shard" % label)


def main():
    t = h.Test("fingerprint_divergence")
    big = "2.1 KiB per rank, float32)"
    cases = [
        ("units", 2, "rank 0 gathers unit 'a' (#1: 2 parameters, %s while rank 1 gathers unit 'b' (#1: 2 parameters, %s" % (big, big)),
        ("sizes", 2, "rank 0 gathers unit 'a' (#1: 1 parameter, 2 KiB per rank, float32) while rank 1 gathers unit 'a' (#1: 1 parameter, 1 KiB per rank, float32)"),
        ("small", 2, "rank 0 gathers unit 'a' (#1: 2 parameters, 48 bytes per rank, float32) while rank 1 gathers unit 'b' (#1: 2 parameters, 48 bytes per rank, float32)"),
        ("agreement", 2, "rank 0 agrees whether any rank goes on (fsdp::rank_any) (#1) while rank 1 gathers unit 'b' (#1: 2 parameters, %s" % big),
        ("split", 2, "rank 0 gathers unit 'a' (#1: 2 parameters, %s while rank 1 gathers unit 'b' (#1: 2 parameters, %s" % (big, big)),
        ("skip", 2, "rank 0 gathers unit 'x' (#1: 2 parameters, %s while rank 1 gathers unit 'b' (#1: 2 parameters, %s" % (big, big)),
        ("pending", 2, "rank 0 gathers unit 'b' (#1: 2 parameters, %s while rank 1 gathers unit 'a' (#1: 2 parameters, %s" % (big, big)),
        ("pending_small", 2, "rank 0 gathers unit 'b' (#1: 2 parameters, 48 bytes per rank, float32) while rank 1 gathers unit 'a' (#1: 2 parameters, 48 bytes per rank, float32)"),
        ("three", 3, "rank 0 gathers unit 'a' (#1: 2 parameters, 1.5 KiB per rank, float32) while rank 2 gathers unit 'b' (#1: 2 parameters, 1.5 KiB per rank, float32)"),
    ]
    for scenario, world, sides in cases:
        results = h.run_ranks(world, rank_main, {"scenario": scenario}, timeout=90)
        expect_error(t, scenario, results, sides)
        if scenario == "units" and all(res.ok for res in results):
            t.check(all(res.value["after"] for res in results),
                    "units: the group still works after the mismatch (a later common gather is exact)")
        if scenario == "split" and all(res.ok for res in results):
            t.check(all(res.value.get("start_returned") for res in results), "split: all_gather_start returns, the wait raises")
    return t.finish("W=2/3: different units, sizes, tiny payloads, an agreement against a gather, the split "
                    "form, a skipped collective, a start not waited yet: one divergence error on every rank "
                    "naming both sides, in seconds")


if __name__ == "__main__":
    sys.exit(main())
