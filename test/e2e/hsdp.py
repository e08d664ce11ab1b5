# Hybrid sharding (HSDP, --shard-group-size=S; docs/multi-node.md), inference, on CPU Gloo: W = 4
# ranks as 2 x 2, 1 x 4 and 4 x 1 (replicas x shard group size), and W = 8 as 2 "nodes" x 4
# (LOCAL_WORLD_SIZE=4, GROUP_RANK, as torchrun sets them) with S = 4. The GPT of fsdp_models (root
# a unit, generate registered, the blocks units), each rank with a prompt of its own:
#   - rank r's file holds shard r % S of every unit parameter (check_rank_files);
#   - every rank's generate and forward are bitwise what the original model returns in one process
#     for that rank's prompt (SPEC 8), also with a budget of the root and one block, which keeps
#     the block gathers inside generate's loop;
#   - the gathers stay within the shard group: at S < W nothing goes across groups and over the
#     world only the agreements of a loop made rank-uniform (stats bytes_sent_*), at S = W
#     everything is a world collective, at S = 1 (inference) nothing moves but those agreements;
#   - fingerprints cover the sub-groups' collectives: in a 2 x 2 mesh, ranks 2 and 3 (shard group
#     1) gather different units and both fail with the divergence error naming ranks 2 and 3,
#     while group 0 gathers exactly; then all four agree over the world (still usable);
#   - a rank file run with the wrong mesh fails before any collective, within seconds: ranks whose
#     files come from runs for different meshes (the error names both meshes), and files whose
#     mesh is not the one FSDP_OPT_SHARD_GROUP_SIZE declares.
# Training under HSDP runs from train_hsdp.py. This file is the driver: --cases picks the
# scenarios, and hsdp_meshes.py, hsdp_nodes.py and hsdp_failures.py run the others (each lit
# test stays short on a shared 2-core machine).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s --cases 2x2,2x2-budget %t

import os
import sys
import time

import torch

import fsdp_harness as h
import fsdp_models as fm

N_LAYER = 2
NEW_TOKENS = 6
LIMIT_S = 20.0  # "within seconds": far below FSDP_OPT_TIMEOUT_S
ENVELOPE_BYTES = 512  # the smallest fingerprint envelope (runtime/envelope.h)


def prompt(rank):
    return fm.example_inputs("gpt", input_seed=100 + rank)[0]


def rank_main(ctx):
    torch.set_num_threads(1)
    model = ctx.load(ctx.rank_file(ctx.args["dir"]))
    x = prompt(ctx.rank)
    ctx.reset_stats()
    with torch.no_grad():
        out = {"generate": model.generate(x, NEW_TOKENS), "forward": model(x)}
    out["stats"] = ctx.stats()
    return out


def wrong_mesh_main(ctx):
    torch.set_num_threads(1)
    directory = ctx.args["dirs"][ctx.rank]
    model = ctx.load(ctx.rank_file(directory))
    t0 = time.monotonic()
    out = {"error": None}
    try:
        with torch.no_grad():
            model(prompt(ctx.rank))
    except RuntimeError as e:
        out["error"] = str(e).strip().splitlines()[-1]
    out["elapsed"] = time.monotonic() - t0
    out["stats"] = ctx.stats()
    return out


def sub_group_divergence_main(ctx):
    """At the runtime's ops: a 2 x 2 mesh set by check_rank, then rank 3 gathers 'b' where its
    group's rank 2 gathers 'a'; group 0 gathers 'a' on both ranks."""
    ctx.load_runtime()
    ops = torch.ops.fsdp
    r = ctx.rank
    ops.check_rank(r, 4, 2, "0" * 64)
    g = torch.Generator().manual_seed(5)
    fulls = {"a": torch.randn(10, 4, generator=g), "b": torch.randn(10, 4, generator=g)}
    name = "b" if r == 3 else "a"
    params = [torch.nn.Parameter(fulls[name][(r % 2) * 5:(r % 2) * 5 + 5].clone(), requires_grad=False)]
    out = {"error": None, "kind": None, "exact": None}
    t0 = time.monotonic()
    try:
        full = ops.all_gather(params, [10], name)
        out["exact"] = torch.equal(full[0], fulls[name])
        ops.reshard(full, name)
    except RuntimeError as e:
        out["error"] = str(e).strip().splitlines()[-1]
        out["kind"] = tuple(ops.last_error())[0]
    out["elapsed"] = time.monotonic() - t0
    out["after"] = ops.rank_any(r == 1, torch.zeros(1))  # the world, after the divergence
    return out


def references(orig, world):
    torch.set_num_threads(1)
    model = torch.jit.load(orig)
    refs = []
    with torch.no_grad():
        for r in range(world):
            x = prompt(r)
            refs.append({"generate": model.generate(x, NEW_TOKENS), "forward": model(x)})
    return refs


def check_inference(t, orig, out, world, group, label, nodes=1):
    h.check_rank_files(t, out, orig, world, label)
    results = h.run_ranks(world, rank_main, {"dir": out}, timeout=300, nodes=nodes)
    if not t.check(all(x.ok for x in results), "%s: every rank runs generate and forward" % label,
                   h.describe_ranks(results)):
        return
    refs = references(orig, world)
    for res in results:
        for method in ("generate", "forward"):
            d = h.same_bits(res.value[method], refs[res.rank][method], method)
            t.check(not d, "%s rank %d: %s bitwise the original's for its own prompt" % (label, res.rank, method), d)
    stats = [res.value["stats"] for res in results]
    sent = [(s["bytes_sent_shard_group"], s["bytes_sent_world"], s["bytes_sent_replica_group"]) for s in stats]
    if group == 1:
        t.check(all(x == (0, ENVELOPE_BYTES * s["agreements"], 0) for x, s in zip(sent, stats)),
                "%s: S=1, every rank holds everything: nothing moves (but a rank-uniform loop's agreements)" % label,
                str(sent))
    elif group == world:
        t.check(all(x[0] == 0 and x[1] > 0 and x[2] == 0 for x in sent),
                "%s: S=W, the gathers are world collectives" % label, str(sent))
    else:
        # Over the world only the rank-uniform loop's agreements (fsdp::rank_any, one envelope of
        # ENVELOPE_BYTES each): a loop that still gathers per step (the budget) agrees per step.
        t.check(all(x[0] > 0 and x[1] == ENVELOPE_BYTES * s["agreements"] and x[2] == 0 for x, s in zip(sent, stats)),
                "%s: every gather stays within its shard group (over the world only the loop's agreements)" % label,
                str([(x, s["agreements"]) for x, s in zip(sent, stats)]))
    t.check(all(s["all_gathers"] > 0 and s["unsharded_bytes"] == 0 for s in stats),
            "%s: units gathered and all resharded" % label, str([(s["all_gathers"], s["unsharded_bytes"]) for s in stats]))


CASES = ("2x2", "2x2-budget", "1x4", "4x1", "2x4-nodes", "divergence", "wrong-mesh")


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("out")
    a = ap.parse_args()
    cases = a.cases.split(",")
    t = h.Test("hsdp %s" % a.cases)
    work = a.out
    orig = os.path.join(work, "gpt.pt")
    model = fm.mark(fm.make("gpt", n_layer=N_LAYER), units=["."], forward_methods={".": ["generate"]})
    fm.save(model, orig)

    def nbytes(params):
        return sum(p.numel() * p.element_size() for p in {id(p): p for p in params}.values())
    block = nbytes(model.blocks[0].parameters())
    root = nbytes(model.parameters()) - N_LAYER * block

    dirs = {}
    for replicas, group in ((2, 2), (1, 4), (4, 1)):
        name = "%dx%d" % (replicas, group)
        if name not in cases and not (name in ("2x2", "1x4") and "wrong-mesh" in cases):
            continue
        out = h.sharded(t, orig, os.path.join(work, "m" + name), "--world-size=4",
                        "--shard-group-size=%d" % group, "--fsdp-unit=blocks.*")
        if out:
            dirs[(replicas, group)] = out
            if name in cases:
                check_inference(t, orig, out, 4, group, "W=4 as " + name)
    if "2x2-budget" in cases:
        out = h.sharded(t, orig, os.path.join(work, "m2x2.budget"), "--world-size=4", "--shard-group-size=2",
                        "--fsdp-unit=blocks.*", "--max-unsharded-bytes=%d" % (root + block))
        if out:
            check_inference(t, orig, out, 4, 2, "W=4 as 2x2, budget root + one block")
    if "2x4-nodes" in cases:
        out = h.sharded(t, orig, os.path.join(work, "m2x4"), "--world-size=8", "--shard-group-size=4",
                        "--fsdp-unit=blocks.*")
        if out:
            check_inference(t, orig, out, 8, 4, "W=8 as 2 nodes x 4 (LOCAL_WORLD_SIZE=4)", nodes=2)
    if "divergence" in cases:
        check_divergence(t)
    if "wrong-mesh" in cases:
        check_wrong_mesh(t, dirs)
    return t.finish("HSDP runs bitwise at every mesh, its gathers within the shard group")


def check_divergence(t):
    """Fingerprints within a shard group."""
    results = h.run_ranks(4, sub_group_divergence_main, {}, timeout=120)
    if t.check(all(x.ok for x in results), "sub-group divergence: every rank returns", h.describe_ranks(results)):
        v = [res.value for res in results]
        t.check(v[0]["exact"] and v[1]["exact"] and not v[0]["error"] and not v[1]["error"],
                "sub-group divergence: shard group 0 (ranks 0, 1) gathers exactly", str(v[:2]))
        t.check(all(x["kind"] == "divergence" and "rank 2 gathers unit 'a'" in x["error"] and
                    "rank 3 gathers unit 'b'" in x["error"] for x in v[2:]),
                "sub-group divergence: ranks 2 and 3 fail with the divergence error naming ranks 2 and 3",
                "\n".join(str(x["error"]) for x in v[2:]))
        t.check(all(x["elapsed"] < LIMIT_S for x in v), "sub-group divergence: within seconds",
                str([round(x["elapsed"], 2) for x in v]))
        t.check(all(x["after"] is True for x in v), "sub-group divergence: the world agrees afterwards")


def check_wrong_mesh(t, dirs):
    if (2, 2) in dirs and (1, 4) in dirs:
        mixed = [dirs[(2, 2)], dirs[(2, 2)], dirs[(1, 4)], dirs[(1, 4)]]
        results = h.run_ranks(4, wrong_mesh_main, {"dirs": mixed}, timeout=120)
        if t.check(all(x.ok for x in results), "mixed meshes: every rank returns", h.describe_ranks(results)):
            v = [res.value for res in results]
            t.check(all(x["error"] and "rank files for different meshes" in x["error"] and "mesh 2x2" in x["error"]
                        and "mesh 1x4" in x["error"] for x in v),
                    "mixed meshes: every rank's error names both meshes", "\n".join(str(x["error"]) for x in v))
            t.check(all(x["elapsed"] < LIMIT_S and x["stats"]["all_gathers"] == 0 for x in v),
                    "mixed meshes: before any collective, within seconds",
                    str([(round(x["elapsed"], 2), x["stats"]["all_gathers"]) for x in v]))
        results = h.run_ranks(4, wrong_mesh_main, {"dirs": [dirs[(2, 2)]] * 4}, timeout=120,
                              env=dict(os.environ, FSDP_OPT_SHARD_GROUP_SIZE="4"))
        if t.check(all(x.ok for x in results), "declared mesh: every rank returns", h.describe_ranks(results)):
            v = [res.value for res in results]
            t.check(all(x["error"] and "FSDP_OPT_SHARD_GROUP_SIZE=4" in x["error"] for x in v),
                    "declared mesh: every rank refuses files for 2x2 where FSDP_OPT_SHARD_GROUP_SIZE=4",
                    "\n".join(str(x["error"]) for x in v))
            t.check(all(x["elapsed"] < LIMIT_S and x["stats"]["all_gathers"] == 0 for x in v),
                    "declared mesh: before any collective, within seconds",
                    str([(round(x["elapsed"], 2), x["stats"]["all_gathers"]) for x in v]))


if __name__ == "__main__":
    sys.exit(main())
