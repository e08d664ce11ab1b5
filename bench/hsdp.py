#!/usr/bin/env python3
"""Hybrid sharding (HSDP, --shard-group-size) beside full sharding, CPU + Gloo, W=4, in ONE run.

The W=4 ranks stand for 2 "nodes" of 2 (LOCAL_WORLD_SIZE=2, as torchrun numbers them). Same GPT,
same weights, same per-rank prompts and batches, rank files of one fsdp-opt run each:

  full   --world-size=4: every unit sharded over the 4 ranks (mesh 1 x 4): every gather spans
         both nodes
  hsdp   --world-size=4 --shard-group-size=2 (mesh 2 x 2): sharded within a node, replicated
         across the two; gathers stay in the node, the gradients' average crosses

Two workloads per configuration, interleaved call by call in the same rank processes; each
configuration in processes of its own, the two alternating over --rounds launches:

  decode  `generate` (greedy, --new-tokens tokens) under --max-unsharded-bytes = root + one
          block (from the manifest): every block gathered once per step, as FSDP2 with
          reshard_after_forward=True would
  train   one step of the rank file: zero_grad, forward, cross-entropy, backward, SGD step
          (default pipeline, no budget)

Per call: ms (median over the timed calls of the slowest rank's time), and the bytes each rank
put into collectives (fsdp::stats' bytes_sent_*: envelopes and payloads, an all-gather's or
all-to-all's whole send buffer) split by whether the collective's ranks are all on one node
(within) or not (across): the shard group's collectives are within at hsdp; at full every unit
collective spans both nodes; world and replica-group collectives always cross (at hsdp's decode
only the rank-uniform loop's agreements, fsdp::rank_any, one minimal envelope per step). Correctness: the
decode tokens of both configurations equal (each rank's own), and after the timed steps the
trained parameters (fsdp_opt.full_state_dict) of both are compared (max |diff|: the gradient sums
are added in another order, ((g0 + g1) + (g2 + g3)) against rank order, docs/multi-node.md).

    python bench/hsdp.py                  # full run: table, JSON, docs/bench_hsdp.png
    python bench/hsdp.py --quick          # smoke: tiny model, 2 timed calls, no plot
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
from bench_common import ROOT, fmt_bytes, median  # noqa: E402

WORLD = 4
PER_NODE = 2
CONFIGS = {"full": ("1x4", []), "hsdp": ("2x2", ["--shard-group-size=2"])}
WORKLOADS = ("decode", "train")
COUNTERS = ("bytes_sent_world", "bytes_sent_shard_group", "bytes_sent_replica_group", "agreements")
ENVELOPE_BYTES = 512  # the smallest fingerprint envelope, what one agreement sends (runtime/envelope.h)


def prompt(rank, vocab):
    import torch
    g = torch.Generator().manual_seed(50 + rank)
    return torch.randint(0, vocab, (1, 8), generator=g)


def batch(rank, step, vocab):
    import torch
    g = torch.Generator().manual_seed(1000 * rank + step)
    tokens = torch.randint(0, vocab, (2, 17), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def rank_main(ctx):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % ctx.args["dist_port"],
                            rank=ctx.rank, world_size=ctx.world_size)
    a = ctx.args
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import fsdp_opt
    fsdp_opt.load()
    vocab = a["vocab"]
    x = prompt(ctx.rank, vocab)
    models, opts, calls = {}, {}, {}
    for cfg in a["schedule"]:
        dec = torch.jit.load(os.path.join(a["dirs"][cfg]["decode"], "rank%d.pt" % ctx.rank))
        trn = torch.jit.load(os.path.join(a["dirs"][cfg]["train"], "rank%d.pt" % ctx.rank))
        models[cfg] = trn
        opts[cfg] = torch.optim.SGD(list(trn.parameters()), lr=0.05, foreach=False)
        steps = {"n": 0}

        def decode(dec=dec):
            with torch.no_grad():
                return dec.generate(x, a["new_tokens"])

        def train(trn=trn, opt=opts[cfg], steps=steps):
            opt.zero_grad(set_to_none=True)
            xb, yb = batch(ctx.rank, steps["n"], vocab)
            steps["n"] += 1
            logits = trn(xb)
            F.cross_entropy(logits.reshape(-1, logits.size(-1)), yb.reshape(-1)).backward()
            opt.step()
            return None

        calls[(cfg, "decode")] = decode
        calls[(cfg, "train")] = train
    keys = [(c, w) for c in a["schedule"] for w in WORKLOADS]
    times = {k: [] for k in keys}
    sent = {k: [] for k in keys}
    tokens = {}
    for k in keys:
        for _ in range(a["warmup"]):
            out = calls[k]()
            if k[1] == "decode":
                tokens[k[0]] = out
    for rep in range(a["repeats"]):
        for k in bc.rotated(keys, rep):
            dist.barrier()
            before = fsdp_opt.stats()
            t0 = time.perf_counter()
            out = calls[k]()
            times[k].append(time.perf_counter() - t0)
            after = fsdp_opt.stats()
            sent[k].append({c: after[c] - before[c] for c in COUNTERS})
            if k[1] == "decode" and not torch.equal(out, tokens[k[0]]):
                raise RuntimeError("%s: generate returned different tokens on a repeated call" % (k,))
    params = {}
    for cfg in a["schedule"]:
        manifest = os.path.join(a["dirs"][cfg]["train"], "manifest.json")
        params[cfg] = fsdp_opt.full_state_dict(models[cfg], manifest)
    dist.destroy_process_group()
    return {"times": {"%s/%s" % k: v for k, v in times.items()}, "sent": {"%s/%s" % k: v for k, v in sent.items()},
            "tokens": tokens, "params": params}


def within_across(cfg, sent):
    """Bytes of one call's collectives on one node / spanning nodes (see the module docstring)."""
    if cfg == "full":
        return 0, sent["bytes_sent_world"] + sent["bytes_sent_shard_group"] + sent["bytes_sent_replica_group"]
    return sent["bytes_sent_shard_group"], sent["bytes_sent_world"] + sent["bytes_sent_replica_group"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke mode: tiny model, 1 warmup and 2 timed calls, no plot")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3, help="launches per configuration, alternating")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write the PNG here (default docs/bench_hsdp.png; none with --quick)")
    bc.add_build_args(p)
    a = p.parse_args(argv)
    if a.quick:
        a.n_layer, a.n_embd, a.vocab, a.new_tokens, a.warmup, a.repeats, a.rounds = 2, 32, 67, 4, 1, 2, 1
    plot = a.plot if a.plot is not None else (None if a.quick else os.path.join(ROOT, "docs", "bench_hsdp.png"))
    tool, lib = bc.fsdp_opt_and_runtime(a.build)
    with bc.scratch_dir(a.work, "bench-hsdp.") as work:
        return _run(a, tool, lib, work, plot, argv)


def _run(a, tool, lib, work, plot, argv):
    load_start = bc.report_load()
    t_start = time.perf_counter()

    import torch
    import fsdp_models
    import fsdp_harness
    model_kwargs = {"n_layer": a.n_layer, "n_embd": a.n_embd, "vocab_size": a.vocab, "block_size": 64}
    model = fsdp_models.make("gpt", **model_kwargs)
    model_pt = os.path.join(work, "gpt.pt")
    fsdp_models.save(model, model_pt)
    print("model: GPT n_layer=%d n_embd=%d vocab=%d, %s; W=%d as 2 nodes x %d"
          % (a.n_layer, a.n_embd, a.vocab, fmt_bytes(sum(q.numel() * 4 for q in model.parameters())), WORLD, PER_NODE))

    def nbytes(params):
        return sum(q.numel() * q.element_size() for q in {id(q): q for q in params}.values())
    block = nbytes(model.blocks[0].parameters())
    root = nbytes(model.parameters()) - a.n_layer * block
    dirs, cmds = {}, {}
    for cfg, (_, flags) in CONFIGS.items():
        dirs[cfg] = {}
        for workload, extra in (("decode", ["--forward-method=.:generate", "--max-unsharded-bytes=%d" % (root + block)]),
                                ("train", [])):
            out = os.path.join(work, "%s.%s" % (cfg, workload))
            cmd = [tool, model_pt, "--fsdp-unit=.", "--fsdp-unit=blocks.*", "--world-size=%d" % WORLD] + flags + extra + ["-o", out]
            r = fsdp_harness.run_tool(cmd, timeout=600)
            if r.returncode != 0:
                sys.exit("error: %s failed:\n%s" % (" ".join(cmd), r.describe()))
            dirs[cfg][workload] = out
            cmds["%s/%s" % (cfg, workload)] = cmd[1:]

    env = bc.rank_env(lib)
    env["FSDP_OPT_LIB_DIR"] = os.path.dirname(lib)  # for the fsdp_opt package in the ranks
    # Each configuration in rank processes of its own, the two alternating round by round: in
    # one process the world's envelopes would be sized by the other configuration's gathers too
    # (their sizer is per group, and the world is one group), which a job running one model
    # never sees.
    values = [{"times": {}, "sent": {}, "tokens": {}, "params": {}} for _ in range(WORLD)]
    for rnd in range(a.rounds):
        for cfg in bc.rotated(list(CONFIGS), rnd):
            with fsdp_harness.ReservedPort() as dist_port:
                args = {"dirs": dirs, "schedule": [cfg], "vocab": a.vocab, "new_tokens": a.new_tokens,
                        "warmup": a.warmup, "repeats": a.repeats, "dist_port": dist_port.port}
                results = fsdp_harness.run_ranks(WORLD, rank_main, args=args, timeout=3600, env=env,
                                                 nodes=WORLD // PER_NODE)
            if any(not r.ok for r in results):
                sys.exit("error: the rank processes failed:\n%s" % fsdp_harness.describe_ranks(results))
            for merged, r in zip(values, results):
                for field in ("times", "sent"):
                    for key, xs in r.value[field].items():
                        merged[field].setdefault(key, []).extend(xs)
                merged["tokens"].update(r.value["tokens"])
                merged["params"].update(r.value["params"])
    timed = a.rounds * a.repeats

    rows = {}
    for cfg in CONFIGS:
        for workload in WORKLOADS:
            key = "%s/%s" % (cfg, workload)
            per_call = [max(v["times"][key][i] for v in values) for i in range(timed)]
            split = [within_across(cfg, s) for s in values[0]["sent"][key]]
            rows[key] = {"ms": 1000 * median(per_call), "within": median([w for w, _ in split]),
                         "across": median([x for _, x in split]), "ms_all": [1000 * t for t in per_call]}
    lines = []
    for cfg, (mesh, _) in CONFIGS.items():
        d, t = rows[cfg + "/decode"], rows[cfg + "/train"]
        lines.append([cfg, mesh, "%.1f" % d["ms"], "%.2f" % (d["ms"] / rows["full/decode"]["ms"]), fmt_bytes(d["within"]),
                      fmt_bytes(d["across"]), "%.1f" % t["ms"], "%.2f" % (t["ms"] / rows["full/train"]["ms"]),
                      fmt_bytes(t["within"]), fmt_bytes(t["across"])])
    table = bc.print_table(["configuration", "mesh", "decode ms/call", "/ full", "decode within node", "decode across nodes",
                            "train ms/step", "/ full", "train within node", "train across nodes"], lines)
    same_tokens = all(torch.equal(v["tokens"]["full"], v["tokens"]["hsdp"]) for v in values)
    print("decode tokens equal under full and hsdp on every rank: %s" % same_tokens)
    diffs = [max((v["params"]["full"][n] - v["params"]["hsdp"][n]).abs().max().item() for n in v["params"]["full"])
             for v in values]
    replicas_equal = all(torch.equal(values[0]["params"]["hsdp"][n], values[r]["params"]["hsdp"][n])
                         for r in range(1, WORLD) for n in values[0]["params"]["hsdp"])
    print("trained parameters, hsdp vs full: max |diff| %.3g; hsdp's equal on every rank: %s"
          % (max(diffs), replicas_equal))
    only_agreements = all(s["bytes_sent_world"] == ENVELOPE_BYTES * s["agreements"] and s["bytes_sent_replica_group"] == 0
                          for v in values for s in v["sent"]["hsdp/decode"])
    print("hsdp decode: across nodes only the decoding loop's agreements (one %d-byte envelope each): %s"
          % (ENVELOPE_BYTES, only_agreements))
    print("across-node bytes per decode call, hsdp / full: %s"
          % ("%.3f" % (rows["hsdp/decode"]["across"] / rows["full/decode"]["across"])
             if rows["full/decode"]["across"] else "-"))
    load_end = os.getloadavg()
    out = {"model": model_kwargs, "world": WORLD, "per_node": PER_NODE, "new_tokens": a.new_tokens,
           "rows": rows, "same_tokens": same_tokens, "max_param_diff": max(diffs), "replicas_equal": replicas_equal,
           "hsdp_decode_across_only_agreements": only_agreements,
           "torch": torch.__version__, "nproc": os.cpu_count(), "cpu": bc.cpu_model(), "git_head": bc.git_head(ROOT),
           "loadavg_start": load_start, "loadavg_end": load_end, "fsdp_opt_cmds": cmds,
           "wall_s": time.perf_counter() - t_start, "argv": sys.argv[1:] if argv is None else argv, "table": table}
    if a.json:
        bc.write_json(a.json, out)
    if plot:
        _plot(out, plot)
        print("plot: %s" % plot)
    if not (same_tokens and replicas_equal and only_agreements):
        return 1
    return 0


def _plot(d, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = d["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, workload in zip(axes, WORKLOADS):
        names = list(CONFIGS)
        within = [rows["%s/%s" % (c, workload)]["within"] / 2 ** 20 for c in names]
        across = [rows["%s/%s" % (c, workload)]["across"] / 2 ** 20 for c in names]
        xs = range(len(names))
        ax.bar(xs, within, color="#4c72b0", label="within a node")
        ax.bar(xs, across, bottom=within, color="#dd8452", label="across nodes")
        for i, c in enumerate(names):
            ax.text(i, within[i] + across[i], "%.1f ms" % rows["%s/%s" % (c, workload)]["ms"], ha="center", va="bottom")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(["%s (%s)" % (c, CONFIGS[c][0]) for c in names])
        ax.set_ylabel("MiB sent per rank per %s" % ("generate call" if workload == "decode" else "training step"))
        ax.set_title(workload)
        ax.legend()
    fig.suptitle("HSDP vs full sharding, W=4 as 2 nodes x 2, CPU Gloo (%s)" % d["torch"])
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
