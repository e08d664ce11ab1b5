# The shared-memory CPU transport (FSDP_OPT_CPU_TRANSPORT=shm; runtime/shm_backend.cpp,
# docs/runtime.md "The shared-memory transport"), at the runtime's ops:
#   exact     W=2,3,4, every rank asks for shm: units of a few bytes to 9 MiB per rank (three
#             rounds of the 4 MiB slots), odd row counts, dtypes of 1 to 8 bytes, gathered
#             twice, each bitwise equal to the full tensor, and the transport really used
#             (fsdp::stats()'s shm_rounds grows, by one round per 4 MiB)
#   mixed     W=2, only rank 0 asks for shm: both ranks use Gloo (shm_rounds stays 0), exact
#   split     W=2, all_gather_start of three units before any wait: exact, in issue order
#   bad       FSDP_OPT_CPU_TRANSPORT=tcp: every rank fails with one error naming the variable
# and the runtime's own suites again over shm: the ops (healthy ranks, the split form, a rank
# that dies, one that dies between start and wait, one that stalls), collective fingerprints
# (divergent ranks get the divergence error, never each other's bytes), exact training (its
# gradient all-to-alls) and HSDP (a shard group and a replica group in one process).
#
# RUN: rm -rf %t && mkdir -p %t/train %t/hsdp
# RUN: %python %s
# RUN: env FSDP_OPT_CPU_TRANSPORT=shm %python %S/runtime_ops.py %runtime_lib --scenarios=main,split,death,deathwait,stall --worlds 1,2,3 --timeout=10
# RUN: env FSDP_OPT_CPU_TRANSPORT=shm %python %S/fingerprint_divergence.py
# RUN: env FSDP_OPT_CPU_TRANSPORT=shm %python %S/train_exact.py --model gpt --worlds 2,3 --optim adamw %t/train
# RUN: env FSDP_OPT_CPU_TRANSPORT=shm %python %S/hsdp.py --cases 2x2 %t/hsdp

import fsdp_harness as h

SLOT = 4 << 20  # bytes per rank and round (kSlotBytes)


def shard(torch, full, world, rank):
    return torch.nn.Parameter(h.expected_shard(full, world, rank), requires_grad=False)


def make_full(torch, shape, dtype, g):
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    return torch.randint(-100, 100, shape, generator=g, dtype=dtype)


def rank_main(ctx):
    torch = ctx.torch
    ctx.load_runtime()
    ops = torch.ops.fsdp
    r, w = ctx.rank, ctx.world_size
    scenario = ctx.args["scenario"]
    g = torch.Generator().manual_seed(7)
    units = {
        "tiny": [((3,), torch.int8), ((5, 3), torch.float64)],
        "mid": [((1001, 17), torch.float32), ((1001,), torch.int64), ((33, 2), torch.float16)],
        # 9 MiB per rank at W=2 and more rounds at W=3 and 4: a collective of several rounds.
        "big": [((w * 9 * 1024 + 1, 256), torch.float32)],
    }
    fulls = {u: [make_full(torch, s, d, g) for s, d in specs] for u, specs in units.items()}
    params = {u: [shard(torch, f, w, r) for f in fulls[u]] for u in units}
    rows = {u: [f.shape[0] for f in fulls[u]] for u in units}
    out = {"exact": True, "rounds": []}

    def check(u):
        same = all(p.shape == f.shape and p.dtype == f.dtype and torch.equal(p, f)
                   for p, f in zip(params[u], fulls[u]))
        out["exact"] = out["exact"] and same

    if scenario == "bad":
        try:
            ops.all_gather(params["tiny"], rows["tiny"], "tiny")
            out["error"] = None
        except RuntimeError as e:
            out["error"] = str(e).splitlines()[0]
        return out
    for _ in range(2):
        for u in units:
            before = dict(ops.stats())["shm_rounds"]
            ops.all_gather(params[u], rows[u], u)
            out["rounds"].append((u, dict(ops.stats())["shm_rounds"] - before))
            check(u)
            ops.reshard(params[u], u)
    if scenario == "split":
        handles = [ops.all_gather_start(params[u], rows[u], u) for u in units]
        for u, handle in zip(units, handles):
            ops.all_gather_wait(handle)
            check(u)
        for u in units:
            ops.reshard(params[u], u)
    return out


def launch(t, what, world, scenario, rank_env):
    """Runs rank_main's `scenario` on `world` ranks; their results, or None (a failed check
    named `what`) when a rank did not return."""
    results = h.run_ranks(world, rank_main, {"scenario": scenario}, timeout=240, rank_env=rank_env)
    ok = t.check(all(res.ok for res in results), "%s: every rank returns" % what, h.describe_ranks(results))
    return results if ok else None


def main():
    t = h.Test("shm_transport")
    shm = {"FSDP_OPT_CPU_TRANSPORT": "shm"}
    for world in (2, 3, 4):
        results = launch(t, "exact W=%d" % world, world, "exact", {r: shm for r in range(world)})
        if results is None:
            continue
        t.check(all(res.value["exact"] for res in results), "exact W=%d: every gather bitwise equal to the full tensors" % world)
        # Every collective's envelope and payload are rounds too (or one round when the payload
        # rides in its envelope); the 9 MiB-per-rank unit's payload needs ceil(bytes / 4 MiB).
        big_bytes = -(-(world * 9 * 1024 + 1) // world) * 256 * 4
        for res in results:
            rounds = dict(res.value["rounds"][:3])
            t.check(all(n >= 1 for n in rounds.values()), "exact W=%d rank %d: every gather went over shm" % (world, res.rank),
                    str(res.value["rounds"]))
            t.check(rounds["big"] >= -(-big_bytes // SLOT), "exact W=%d rank %d: the big unit took %d rounds or more"
                    % (world, res.rank, -(-big_bytes // SLOT)), str(res.value["rounds"]))

    results = launch(t, "mixed", 2, "exact", {0: shm})
    if results is not None:
        t.check(all(res.value["exact"] for res in results), "mixed: exact over Gloo")
        t.check(all(n == 0 for res in results for _, n in res.value["rounds"]),
                "mixed: one rank without FSDP_OPT_CPU_TRANSPORT=shm keeps the group on Gloo",
                str([res.value["rounds"] for res in results]))

    results = launch(t, "split", 2, "split", {0: shm, 1: shm})
    if results is not None:
        t.check(all(res.value["exact"] for res in results), "split: three starts before their waits, exact")

    bad = {"FSDP_OPT_CPU_TRANSPORT": "tcp"}
    results = launch(t, "bad", 2, "bad", {0: bad, 1: bad})
    if results is not None:
        errors = [res.value["error"] for res in results]
        t.check(all(e and "FSDP_OPT_CPU_TRANSPORT must be 'gloo' or 'shm', not 'tcp'" in e for e in errors),
                "bad: the error names the variable and its value", str(errors))
    return t.finish("the shared-memory CPU transport: exact at W=2..4 with multi-round payloads, chosen only "
                    "when every rank asks, the split form, a bad value")


if __name__ == "__main__":
    raise SystemExit(main())
