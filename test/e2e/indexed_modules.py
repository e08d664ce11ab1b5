# Containers indexed with a value known only when the program runs (TorchScript's spelling: the
# element annotated with a module interface), sharded at W=2, each rank picking a different
# element (SPEC section 11): lower-indexed-module-calls makes the call one branch per element,
# and each rank's result equals its own unsharded run bit for bit.
#
# - tables: a ModuleList of nn.Embedding units indexed by an int (rank 0 takes table 0, rank 1
#   table 2). Before the lowering this ran on shards and rank 1 looked up the wrong rows silently.
# - heads: a ModuleDict of Linear head units keyed by a task name, after a trunk unit (rank 0
#   "sum", rank 1 "max").
# Each in the default pipeline (every unit held for the call: one gather, as --stats predicts)
# and under a tight budget (the rest and one element) (the elements' gathers stay in the branch arms,
# which rank-uniform-control-flow makes every rank issue alike). Then a key that names no
# element on rank 1: rank 1 raises IndexError / KeyError, rank 0 returns its result, and the
# next call is exact on both (nothing left gathered, no collective left waiting).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import json
import os
import sys
from typing import Dict

import torch
import torch.nn as nn

import fsdp_harness as h

WORLD = 2


@torch.jit.interface
class Lookup(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        pass


@torch.jit.interface
class Head(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        pass


class Tables(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList([nn.Embedding(11, 6) for _ in range(3)])
        self.out = nn.Linear(6, 3)

    def forward(self, ids, table: int):
        chosen: Lookup = self.tables[table]
        return self.out(chosen.forward(ids))


class Trunk(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 7)

    def forward(self, x):
        return torch.tanh(self.fc(x))


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = Trunk()
        self.heads = nn.ModuleDict({"sum": nn.Linear(7, 2), "max": nn.Linear(7, 4), "mean": nn.Linear(7, 3)})

    def forward(self, x, task: str):
        head: Head = self.heads[task]
        return head.forward(self.trunk(x))


def rank_main(ctx):
    m = ctx.load(ctx.rank_file(ctx.args["dir"]))
    calls = h.torch_load(ctx.args["inputs"])
    out = []
    for per_rank in calls:
        ctx.reset_stats()
        try:
            value = m(*per_rank[ctx.rank])
        except Exception as e:  # noqa: BLE001
            value = "raised %s" % " ".join(str(e).split())[-160:]
        out.append({"out": value, "stats": ctx.stats()})
    return out


def main():
    out_dir = sys.argv[1]
    t = h.Test("indexed_modules")
    torch.manual_seed(0)
    ids = torch.tensor([[1, 4, 10, 7]])
    x = torch.randn(2, 5)
    models = {
        "tables": (Tables(), ["--fsdp-unit=.", "--fsdp-unit=tables.*"],
                   [[(ids, 0), (ids, 2)], [(ids, 1), (ids, 7)], [(ids, 2), (ids, 1)]],
                   "IndexError"),
        "heads": (Heads(), ["--fsdp-unit=trunk", "--fsdp-unit=heads.*"],
                  [[(x, "sum"), (x, "max")], [(x, "mean"), (x, "min")], [(x, "max"), (x, "sum")]],
                  "KeyError"),
    }
    for name, (model, units, calls, missing) in models.items():
        pt = os.path.join(out_dir, name + ".pt")
        torch.jit.script(model).save(pt)
        original = torch.jit.load(pt)
        inputs = os.path.join(out_dir, name + ".in.pt")
        torch.save(calls, inputs)
        probe = os.path.join(out_dir, name + "-probe")
        r = h.fsdp_opt(pt, *units, "--world-size=%d" % WORLD, "-o", probe)
        if not t.check(r.returncode == 0, "%s: fsdp-opt" % name, "" if r.returncode == 0 else r.describe()):
            continue
        sizes = {u["path"]: u["bytes"] for u in json.load(open(os.path.join(probe, "manifest.json")))["units"]}
        elements = [p for p in sizes if p.startswith(("tables.", "heads."))]
        least = sizes.get(".", 0) + sizes.get("trunk", 0) + max(sizes[p] for p in elements)
        for label, budget in (("default pipeline", []), ("tight budget", ["--max-unsharded-bytes=%d" % least])):
            case = "%s, %s" % (name, label)
            d = os.path.join(out_dir, case.replace(", ", "_").replace(" ", "_"))
            r = h.fsdp_opt(pt, *units, *budget, "--world-size=%d" % WORLD, "--remarks", "--stats", "-o", d)
            ok = r.returncode == 0 and "warning:" not in r.stderr
            if not t.check(ok, "%s: fsdp-opt" % case, "" if ok else r.describe()):
                continue
            t.check("[lower-indexed-module-calls]" in r.stderr and "became one branch per element (3)" in r.stderr,
                    "%s: the indexed call became one branch per element" % case)
            predicted = [l.split(": ", 1)[1] for l in r.stdout.splitlines() if "gathers per call of forward" in l]
            results = h.run_ranks(WORLD, rank_main, {"dir": d, "inputs": inputs}, timeout=120)
            if not t.check(all(res.ok for res in results), "%s: both ranks return (no hang)" % case,
                           h.describe_ranks(results)):
                continue
            for k, per_rank in enumerate(calls):
                for res in results:
                    args = per_rank[res.rank]
                    got = res.value[k]["out"]
                    try:
                        want = original(*args)
                    except Exception:  # noqa: BLE001
                        want = None
                    what = "%s: call %d, rank %d, key %r" % (case, k, res.rank, args[1])
                    if want is None:
                        ok = isinstance(got, str) and missing in got
                        t.check(ok, "%s raises %s" % (what, missing), "" if ok else str(got)[:300])
                    else:
                        ok = not isinstance(got, str) and not h.same_bits(got, want)
                        t.check(ok, "%s: bitwise equal to its own unsharded run" % what, "" if ok else str(got)[:300])
                gathers = [res.value[k]["stats"]["all_gathers"] for res in results]
                t.check(gathers[0] == gathers[1], "%s: call %d, both ranks issue the same gathers (%s)" % (case, k, gathers))
                if not budget:
                    t.check(predicted == ["1"] and gathers == [1, 1],
                            "%s: call %d, one gather per call, as --stats predicts" % (case, k), "%s %s" % (predicted, gathers))
    return t.finish("W=%d: a ModuleList indexed by int and a ModuleDict by name, a different element on "
                    "each rank, default pipeline and a tight budget, each rank exact; a missing key raises on "
                    "its rank only" % WORLD)


if __name__ == "__main__":
    sys.exit(main())
