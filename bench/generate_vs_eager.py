#!/usr/bin/env python3
"""generate() of a GPT decoder under fsdp-opt vs eager FSDP2/FSDP1, CPU + Gloo, W=2, in ONE run.

Same model, same weights, same inputs, same machine; every configuration's generated tokens are
checked bitwise against (a). Configurations:

  a        the original TorchScript model, unsharded, in one process (the limit)
  a_eager  the same model as an eager nn.Module, unsharded, one process (reference for d/e:
           eager Python vs the TorchScript interpreter, with no FSDP at all)
           Both run as TWO independent copies at once (one per "rank" process, nothing shared,
           no communication), so that they compete for the machine's cores exactly like the
           W=2 configurations do; every call of either copy is one sample. On an idle machine
           with >= 2 cores this is the same as one process alone; on a loaded one, a lone
           process would get about twice the CPU share of each rank of a W=2 job.
  b        fsdp-opt, default pipeline, no budget
  b2       fsdp-opt, --max-unsharded-bytes = root unit bytes + one layer (from manifest.json)
  c        fsdp-opt, core insertion only (--passes=specialize-unit-types,insert-unit-gathers,
           wrap-entry-methods,reshard-on-raise,verify-fsdp)
  d_rt     FSDP2 fully_shard on every block and the root, reshard_after_forward=True,
           register_fsdp_forward_method(model, "generate")
  d_rf     the same with reshard_after_forward=False; every FSDP module is reshard()ed after each
           generate (FSDP2 never reshards on its own in inference: no backward runs)
  d_keep   reshard_after_forward=False and never resharded: after the first call the model
           stays unsharded in every rank (what (d_rf) becomes if the user does not reshard)
  e        FSDP1 (FullyShardedDataParallel on every block and the root) with the composer
           workaround: summon_full_params(model, recurse=False, writeback=False) around generate

Every process uses one intra-op thread (two ranks share two cores). Timing: --rounds rounds;
in each, one fresh pair of rank processes sets up every configuration (fresh models), warms each
up with --warmup untimed calls, then runs --repeats passes over all of them, ONE generate call
per configuration per pass, in an order rotated by one every pass: configurations alternate
call by call, so the load of the shared machine, which drifts over seconds, hits all of them
alike. Before each timed call both ranks meet at a torch.distributed barrier (untimed). ms per
generate is the median over all timed calls of max(rank times of that call) (for a and a_eager,
of every call of both copies). CPU ms is the same for time.process_time() (all threads of the
process, user + sys): the work done, which the other load inflates far less than wall time.
After the rounds, every configuration runs once more alone in fresh processes, for its peak RSS
(--no-isolated skips that; --per-process times every configuration alone in its own processes,
one launch per configuration and round, instead of interleaving).

Counting: ours read torch.ops.fsdp.stats() over the timed calls (all_gathers, bytes_gathered,
peak_unsharded_bytes). Eager FSDP runs one extra, untimed generate under a TorchDispatchMode that
sees every c10d collective (the one CommDebugMode uses): all-gathers counted, bytes = the
collective's output buffer (all ranks' padded shards). Peak unsharded bytes of eager FSDP: the
largest sum, over parameters FSDP holds unsharded at that moment (FSDP2: FSDPParam in state
UNSHARDED, at its full unpadded size; FSDP1: FlatParamHandle not is_sharded, at its unpadded
unsharded size), sampled in a forward pre-hook of every block (runs after FSDP's unshard, while
the root is unsharded) and once after generate returns; ours count the same quantity (bytes of
unsharded parameters alive at once; ties once). Peak RSS: getrusage(RUSAGE_SELF).ru_maxrss of
each rank process of the isolated launch, at its end (torch itself is most of it; every process
imports the same modules, torchvision included, before it sets up a model, and the RSS it has
then is reported too).

    python bench/generate_vs_eager.py                 # full run: table, JSON, docs/bench_generate.png
    python bench/generate_vs_eager.py --quick         # smoke: tiny model, 1 round, 1 repeat
"""

import argparse
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # rank processes import this file by its path: bench_common is beside it
    sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
from bench_common import ROOT, fmt_bytes, fmt_count, median  # noqa: E402

CORE_PASSES = "specialize-unit-types,insert-unit-gathers,wrap-entry-methods,reshard-on-raise,verify-fsdp"

CONFIGS = {
    "a": "(a) original, unsharded, 1 process",
    "a_eager": "(a') eager nn.Module, unsharded, 1 process",
    "b": "(b) fsdp-opt default pipeline, no budget",
    "b2": "(b2) fsdp-opt, budget = root + 1 layer",
    "c": "(c) fsdp-opt, core insertion only",
    "d_rt": "(d) FSDP2, reshard_after_forward=True",
    "d_rf": "(d) FSDP2, reshard_after_forward=False",
    "d_keep": "(d') FSDP2, reshard_after_forward=False, never resharded",
    "e": "(e) FSDP1 + summon_full_params(recurse=False)",
}
SINGLE_PROCESS = ("a", "a_eager")
OURS = ("b", "b2", "c")


# ---- rank side -------------------------------------------------------------------------------

def _rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _setup(ctx, cfg, a, idx, new_tokens):
    import torch

    if cfg == "a":
        model = torch.jit.load(a["model_pt"])
        return bc.CallConfig(lambda: model.generate(idx, new_tokens))

    if cfg == "a_eager":
        model = bc.eager_gpt(a)
        return bc.CallConfig(lambda: model.generate(idx, new_tokens))

    if cfg in OURS:
        model = ctx.load(os.path.join(a["dirs"][cfg], "rank%d.pt" % ctx.rank))
        conf = bc.CallConfig(lambda: model.generate(idx, new_tokens))
        # The runtime's counters are process-wide: zero them before each call, read after.
        conf.before = ctx.reset_stats
        conf.after = lambda: conf.per_call.append(ctx.stats())

        def counts():
            n = len(conf.per_call)
            return {"all_gathers": sum(s["all_gathers"] for s in conf.per_call) / n,
                    "bytes_gathered": sum(s["bytes_gathered"] for s in conf.per_call) / n,
                    "peak_unsharded_bytes": max(s["peak_unsharded_bytes"] for s in conf.per_call),
                    "stats": conf.per_call[-1]}
        conf.counts = counts
        return conf

    if cfg in ("d_rt", "d_rf", "d_keep"):
        model = bc.eager_gpt(a)
        fsdp_modules = bc.fsdp2_shard_blocks(model, ctx.world_size, cfg == "d_rt", ["generate"])

        def call():
            out = model.generate(idx, new_tokens)
            if cfg == "d_rf":
                for m in fsdp_modules:
                    m.reshard()
            return out
        blocks = list(model.blocks)
        return bc.CallConfig(call, counts=lambda: bc.count_eager_call(
            call, blocks, lambda: bc.fsdp2_unsharded_bytes(fsdp_modules)))

    if cfg == "e":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        model = bc.eager_gpt(a)
        inner_blocks = list(model.blocks)
        fmodel = bc.fsdp1_wrap_blocks(model)
        fsdp_modules = FSDP.fsdp_modules(fmodel)

        def call():
            with FSDP.summon_full_params(fmodel, writeback=False, recurse=False):
                return fmodel.module.generate(idx, new_tokens)
        return bc.CallConfig(call, counts=lambda: bc.count_eager_call(
            call, inner_blocks, lambda: bc.fsdp1_unsharded_bytes(fsdp_modules)))

    raise ValueError("unknown configuration %r" % cfg)


def bench_worker(ctx):
    """Sets up every configuration of ctx.args["schedule"] in this process and times them
    interleaved call by call (bench_common.time_interleaved). Returns one result dict per
    configuration, in schedule order."""
    import torch
    import fsdp_models  # noqa: F401  (and torchvision): every process carries the same modules,
    # so that the RSS of different configurations differs only by what they do
    a = ctx.args
    idx, new_tokens = torch.load(a["inputs"])
    bc.init_rank(ctx)
    schedule = a["schedule"]
    rss_before = _rss_mib()
    with torch.no_grad():
        confs = {cfg: _setup(ctx, cfg, a, idx, new_tokens) for cfg in schedule}
        bc.time_interleaved(confs, schedule, a["warmup"], a["repeats"])
        results = []
        for cfg in schedule:
            conf = confs[cfg]
            counts = conf.counts() if conf.counts else {"all_gathers": 0, "bytes_gathered": 0,
                                                        "peak_unsharded_bytes": None}
            results.append({"config": cfg, "rank": ctx.rank, "tokens": conf.first, "times": conf.times,
                            "cpu": conf.cpu, "counts": counts, "rss_mib": _rss_mib(),
                            "rss_before_mib": rss_before})
    return results


# ---- driver side -----------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke mode: tiny model, 4 new tokens, 1 round, 1 warmup, 1 repeat, "
                   "--no-isolated, no plot")
    bc.add_model_args(p, n_embd=256)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5, help="timed generate calls per process")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ",".join(CONFIGS))
    bc.add_build_args(p)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write the PNG here (default docs/bench_generate.png; none with --quick)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per launch of rank processes")
    p.add_argument("--per-process", action="store_true",
                   help="time every configuration in fresh rank processes of its own, once per "
                   "round, instead of all configurations of a round one after the other in one "
                   "pair of rank processes (the default: finer interleaving, no import cost per "
                   "configuration; peak RSS then comes from one extra isolated launch each)")
    p.add_argument("--no-isolated", action="store_true",
                   help="skip the isolated launch per configuration that measures peak RSS (the "
                   "RSS column is then the shared processes' high-water mark; --quick sets it)")
    p.add_argument("--plot-from", metavar="JSON", help="only redraw the plot (--plot) from an earlier run's --json")
    a = p.parse_args(argv)
    if a.plot_from:
        _plot_from(a.plot_from, a.plot or os.path.join(ROOT, "docs", "bench_generate.png"))
        return 0
    if a.quick:
        bc.use_tiny_model(a)
        a.prompt, a.new_tokens, a.rounds, a.warmup, a.repeats = 4, 4, 1, 1, 1
        a.per_process, a.no_isolated = False, True
    plot = a.plot if a.plot is not None else (None if a.quick else os.path.join(ROOT, "docs", "bench_generate.png"))
    configs = bc.parse_configs(a.configs, CONFIGS)
    if "a" not in configs:
        configs.insert(0, "a")

    import torch
    import fsdp_models

    tool, lib = bc.fsdp_opt_and_runtime(a.build)
    with bc.scratch_dir(a.work, "fsdp-bench.") as work:
        model_kwargs = bc.model_kwargs(a)
        assert a.prompt + a.new_tokens <= a.block_size, "prompt + new tokens must fit the block size"
        model_pt = os.path.join(work, "gpt.pt")
        fsdp_models.save(fsdp_models.make("gpt", **model_kwargs), model_pt)
        with fsdp_models.seeded(1):
            idx = torch.randint(0, a.vocab, (a.batch, a.prompt))
        inputs = os.path.join(work, "inputs.pt")
        torch.save((idx, a.new_tokens), inputs)

        # fsdp-opt: (b) first, its manifest gives the unit bytes for (b2)'s budget.
        dirs, opt = {}, {}
        opt_t0 = time.perf_counter()
        dirs["b"] = os.path.join(work, "b")
        opt["b"] = bc.shard_gpt(tool, model_pt, "generate", dirs["b"])
        units = {u["path"]: u["bytes"] for u in opt["b"]["manifest"]["units"]}
        budget = units["."] + units["blocks.0"]
        dirs["b2"] = os.path.join(work, "b2")
        opt["b2"] = bc.shard_gpt(tool, model_pt, "generate", dirs["b2"], "--max-unsharded-bytes=%d" % budget)
        dirs["c"] = os.path.join(work, "c")
        opt["c"] = bc.shard_gpt(tool, model_pt, "generate", dirs["c"], "--passes=" + CORE_PASSES)
        opt_s = time.perf_counter() - opt_t0
        model_bytes = sum(units.values())
        print("model: GPT n_layer=%d n_embd=%d n_head=%d vocab=%d block=%d, %s of parameters "
              "(root unit %s, one layer %s); batch %d, prompt %d, %d new tokens; W=2, gloo, CPU"
              % (a.n_layer, a.n_embd, a.n_head, a.vocab, a.block_size, fmt_bytes(model_bytes),
                 fmt_bytes(units["."]), fmt_bytes(units["blocks.0"]), a.batch, a.prompt,
                 a.new_tokens), flush=True)
        print("fsdp-opt: 3 pipelines in %.1f s; (b2) budget --max-unsharded-bytes=%d" % (opt_s, budget),
              flush=True)

        env = bc.rank_env(lib)
        common = {"model_pt": model_pt, "inputs": inputs, "dirs": dirs, "model": model_kwargs,
                  "warmup": a.warmup, "repeats": a.repeats}
        samples = {c: [] for c in configs}

        isolated = {c: [] for c in configs}

        def launch(schedule, what, into, extra=None):
            t0 = time.perf_counter()
            results = bc.launch_ranks(bench_worker, dict(common, schedule=schedule, **(extra or {})), what,
                                      a.timeout, env)
            for i, cfg in enumerate(schedule):
                values = [r[i] for r in results]
                into[cfg].append(values)
                print("%-20s %-7s median %7.1f ms wall, %7.1f ms CPU" % (
                    what, cfg, 1e3 * median(bc.slower_rank(values, "times")),
                    1e3 * median(bc.slower_rank(values, "cpu"))), flush=True)
            print("%-20s %.1f s wall" % (what, time.perf_counter() - t0), flush=True)

        load_start = bc.report_load()
        wall_t0 = time.perf_counter()
        for rnd in range(a.rounds):
            order = bc.rotated(configs, rnd)
            what = "round %d/%d" % (rnd + 1, a.rounds)
            if a.per_process:
                for cfg in order:
                    launch([cfg], what, samples)
            else:
                launch(order, what, samples)
        if not a.per_process and not a.no_isolated:
            for cfg in configs:  # fresh processes per configuration: its own peak RSS
                launch([cfg], "isolated (RSS)", isolated, {"repeats": 1})
        wall_s = time.perf_counter() - wall_t0

        # ---- aggregate ------------------------------------------------------------------------
        want = samples["a"][0][0]["tokens"]
        rows = {}
        for cfg in configs:
            per_call, cpu_call = bc.call_times(samples[cfg], cfg in SINGLE_PROCESS)
            mismatches = []
            rss = {}
            for values in samples[cfg] + isolated[cfg]:
                for v in values:
                    if v["tokens"].dtype != want.dtype or v["tokens"].shape != want.shape or \
                            not torch.equal(v["tokens"], want):
                        mismatches.append("rank %d" % v["rank"])
            # peak RSS: the isolated launch's processes if there was one, else the processes the
            # configuration ran in (shared with the others of its round unless --per-process)
            rss_start = {}
            for values in isolated[cfg] or samples[cfg]:
                for v in values:
                    rss[v["rank"]] = max(rss.get(v["rank"], 0.0), v["rss_mib"])
                    rss_start[v["rank"]] = max(rss_start.get(v["rank"], 0.0), v["rss_before_mib"])
            counts = samples[cfg][-1][0]["counts"]
            rows[cfg] = {
                "label": CONFIGS[cfg],
                "ms": 1e3 * median(per_call),
                "ms_all": [1e3 * t for t in per_call],
                "cpu_ms": 1e3 * median(cpu_call),
                "cpu_ms_all": [1e3 * t for t in cpu_call],
                "n_timed": len(per_call),
                "all_gathers": counts["all_gathers"],
                "bytes_gathered": counts["bytes_gathered"],
                "peak_unsharded_bytes": counts["peak_unsharded_bytes"],
                "rss_mib": [rss[r] for r in sorted(rss)],
                "rss_start_mib": [rss_start[r] for r in sorted(rss_start)],
                "rss_isolated": bool(isolated[cfg]) or a.per_process,
                "bitwise_equal": not mismatches,
                "mismatches": mismatches,
                "other_collectives": counts.get("other_collectives", {}),
                "predicted_gathers": opt[cfg]["predicted_gathers"] if cfg in opt else None,
            }
        base = rows["a"]["ms"]
        ref_d = rows["d_rt"]["ms"] if "d_rt" in rows else None
        for r in rows.values():
            r["vs_a"] = r["ms"] / base
            r["vs_d_rt"] = r["ms"] / ref_d if ref_d else None

        # ---- table ----------------------------------------------------------------------------
        head = ("configuration", "ms/generate", "/ (a)", "/ (d,T)", "CPU ms", "all-gathers", "bytes gathered",
                "peak unsharded", "peak RSS r0/r1 MiB (+growth)", "tokens == (a)")
        lines = []
        for cfg in configs:
            r = rows[cfg]
            lines.append((r["label"], "%.1f" % r["ms"], "%.2f" % r["vs_a"],
                          "%.2f" % r["vs_d_rt"] if r["vs_d_rt"] else "-", "%.1f" % r["cpu_ms"],
                          fmt_count(r["all_gathers"]), fmt_bytes(r["bytes_gathered"]),
                          fmt_bytes(r["peak_unsharded_bytes"]),
                          "/".join("%.0f" % x for x in r["rss_mib"]) + ("" if r["rss_isolated"] else "*") +
                          " (+" + "/+".join("%.0f" % (x - y) for x, y in zip(r["rss_mib"], r["rss_start_mib"])) + ")",
                          "yes" if r["bitwise_equal"] else "NO (%s)" % ", ".join(r["mismatches"])))
        table = bc.print_table(head, lines)
        print("ms/generate: median over %s timed calls (%d rounds x %d calls of each configuration, "
              "each after %d untimed warmup calls) of the slower rank's wall time; / (a), / (d,T): that median divided by "
              "(a)'s, (d, reshard=True)'s; CPU ms: the same median of the process's CPU time (all "
              "threads, user+sys), which a loaded machine inflates less; all-gathers and bytes per "
              "generate; peak RSS of each rank process%s, in parentheses its growth over the RSS "
              "the process had before setting up any model (torch, torchvision and torch.distributed's gloo "
              "group loaded); %.0f s in all"
              % ("/".join(sorted({str(r["n_timed"]) for r in rows.values()})), a.rounds, a.repeats,
                 a.warmup, " (*: of processes shared with the other configurations: a high-water mark, not "
                 "this configuration's)" if a.no_isolated and not a.per_process else " (fresh processes "
                 "running only this configuration)", wall_s))

        # ---- targets --------------------------------------------------------------------------
        # Judged on wall time (what was asked) and, separately, on CPU time (less sensitive to
        # the other load on a shared machine); the peak is exact either way.
        targets = []

        def target(name, metric, ok, detail):
            targets.append({"target": name, "metric": metric, "met": bool(ok), "detail": detail})
            print("target %-42s %-5s %-7s (%s)" % (name, metric, "MET" if ok else "NOT MET", detail))

        for key, metric in (("ms", "wall"), ("cpu_ms", "CPU")):
            if all(k in rows for k in ("b", "d_rt", "d_rf")):
                b, dt, df = rows["b"][key], rows["d_rt"][key], rows["d_rf"][key]
                target("(b) >= 2x faster than (d, reshard=True)", metric, dt >= 2 * b,
                       "(d,T)/(b) = %.2f" % (dt / b))
                target("(b) faster than (d, reshard=False)", metric, df > b, "(d,F)/(b) = %.2f" % (df / b))
            if all(k in rows for k in ("b2", "d_rt")):
                b2, dt = rows["b2"][key], rows["d_rt"][key]
                target("(b2) faster than (d, reshard=True)", metric, dt > b2, "(d,T)/(b2) = %.2f" % (dt / b2))
            if "b" in rows:
                target("(b) within 1.2x of (a)", metric, rows["b"][key] <= 1.2 * rows["a"][key],
                       "(b)/(a) = %.2f" % (rows["b"][key] / rows["a"][key]))
        if all(k in rows for k in ("b2", "d_rt")):
            b2, dt = rows["b2"]["peak_unsharded_bytes"], rows["d_rt"]["peak_unsharded_bytes"]
            target("(b2) peak unsharded <= (d, reshard=True)", "bytes", b2 <= dt, "%d vs %d" % (b2, dt))
        if any(c in opt for c in configs):
            print("fsdp-opt --stats, gathers per call of generate: " + "; ".join(
                "(%s) %s" % (c, opt[c]["predicted_gathers"]) for c in configs if c in opt))
        all_equal = all(r["bitwise_equal"] for r in rows.values())
        if a.quick:
            print("(--quick: tiny model, 1 warmup call: timings and targets mean nothing here)")
        print("bitwise: %s" % ("every configuration's tokens equal (a)'s on every rank" if all_equal
                               else "MISMATCH in " + ", ".join(c for c in configs if not rows[c]["bitwise_equal"])))

        out = {"model": model_kwargs, "batch": a.batch, "prompt": a.prompt, "new_tokens": a.new_tokens,
               "model_bytes": model_bytes, "units": units, "budget_b2": budget,
               "rounds": a.rounds, "warmup": a.warmup, "repeats": a.repeats, "configs": configs,
               "rows": rows, "targets": targets, "all_bitwise_equal": all_equal,
               **bc.run_record(load_start, os.getloadavg(), opt, wall_s, argv, table)}
        if a.json:
            bc.write_json(a.json, out)
        if plot:
            _plot(rows, configs, plot, a)
            print("plot: %s" % plot)
        return 0 if all_equal else 1


def _plot_from(json_path, path):
    """Redraws the plot of an earlier run from its --json file."""
    with open(json_path) as f:
        d = json.load(f)
    a = argparse.Namespace(n_layer=d["model"]["n_layer"], n_embd=d["model"]["n_embd"],
                           vocab=d["model"]["vocab_size"], prompt=d["prompt"], new_tokens=d["new_tokens"])
    _plot(d["rows"], d["configs"], path, a)


def _plot(rows, configs, path, a):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    labels = [rows[c]["label"] for c in configs]
    colors = ["#888888" if c.startswith("a") else "#1f77b4" if c in OURS else
              "#d62728" if c.startswith("d") else "#ff7f0e" for c in configs]
    ys = list(range(len(configs)))[::-1]
    for ax, key, title in ((axes[0], "ms", "wall ms per generate (slower rank)"),
                           (axes[1], "cpu_ms", "CPU ms per generate (all threads)")):
        ax.barh(ys, [rows[c][key] for c in configs], color=colors)
        for y, c in zip(ys, configs):
            pts = rows[c][key + "_all"]
            ax.plot(pts, [y] * len(pts), "k.", ms=3, alpha=0.4)
            note = " %.0f" % rows[c][key]
            if key == "ms":
                note += " (%s gathers)" % fmt_count(rows[c]["all_gathers"])
            ax.text(max(pts + [rows[c][key]]), y, note, va="center", fontsize=8)
        ax.set_xlim(0, max(max(rows[c][key + "_all"]) for c in configs) * 1.45)
        ax.set_xlabel(title + "\nbar: median; dots: every timed call", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(ys)
    axes[0].set_yticklabels(labels, fontsize=8)
    fig.suptitle("GPT n_layer=%d d_model=%d vocab=%d, prompt %d, generate %d tokens; W=2, gloo, CPU "
                 "(torch %s)" % (a.n_layer, a.n_embd, a.vocab, a.prompt, a.new_tokens,
                                 __import__("torch").__version__.split("+")[0]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
