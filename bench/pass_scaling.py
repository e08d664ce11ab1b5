#!/usr/bin/env python3
"""How fsdp-opt's default pipeline scales with the number of FSDP units.

Models: a stack of N small Linear blocks (`layers.0` .. `layers.{N-1}`, each `Linear(d, d)` +
ReLU, every block a unit, `--fsdp-unit=layers.*`), N in 16, 128, 1024 by default, W=2.

Measured, in ONE process, interleaved (every repeat visits every N, in a rotated order), median
of --repeats:
  load      torch.jit.load(model.pt)                          (the reference: ratio = pipeline/load)
  pipeline  the default pipeline in-process on a freshly loaded module:
            torch.ops.fsdp_opt.transform(module._c, ["--fsdp-unit=layers.*", "--world-size=2"], -1, [])
            (libfsdp_passes.so; the same C++ entry point as the CLI: clone, plan, passes)
  prefixes  the same with passes = the first k passes of the default pipeline, k = 1..all, so
            prefix(k) - prefix(k-1) is the cost of pass k (prefix 1 also holds the clone of the
            module and the unit/parameter-group analysis every pipeline starts with)
and, as separate processes (wall clock), the CLI end to end: `fsdp-opt model.pt
--fsdp-unit=layers.* --world-size=2` (process start, load, pipeline) and the same with `-o DIR`
(+ writing DIR/rank0.pt, rank1.pt, manifest.json), next to `fsdp-opt --version` (process start
and library loading only).

Cost per unit = time / N. Because a fixed cost dominates small N, the growth check uses the
marginal cost per unit between consecutive sizes, (t(N2) - t(N1)) / (N2 - N1): if it rises
with N the pipeline is super-linear, and the per-pass table says which pass.

    python bench/pass_scaling.py                  # 16, 128, 1024 units; table, JSON, plot
    python bench/pass_scaling.py --quick          # 4, 16 units, 1 repeat (smoke)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # bench_common is beside this file, wherever it is run from
    sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
from bench_common import ROOT, git_head, median  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Stack(nn.Module):
    def __init__(self, n: int, d: int = 8, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.layers = nn.ModuleList([Block(d) for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke: 4 and 16 units, 1 repeat, no plot")
    p.add_argument("--units", default="16,128,1024", help="comma-separated unit counts")
    p.add_argument("--d", type=int, default=8, help="Linear width of every block")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cli-repeats", type=int, default=3)
    p.add_argument("--no-prefixes", action="store_true", help="skip the per-pass prefix timings")
    p.add_argument("--build", help="build directory (bin/fsdp-opt, lib/libfsdp_passes.so); default build/t2")
    p.add_argument("--work", help="scratch directory (default: a temporary one, removed)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="PNG to write (default docs/bench_pass_scaling.png; none with --quick)")
    p.add_argument("--plot-from", metavar="JSON", help="only redraw the plot (--plot) from an earlier run's --json")
    a = p.parse_args(argv)
    if a.plot_from:
        with open(a.plot_from) as f:
            d = json.load(f)
        _plot(d["rows"], d["marginal"], d["pipeline"], a.plot or os.path.join(ROOT, "docs", "bench_pass_scaling.png"))
        return 0
    if a.quick:
        a.units, a.repeats, a.cli_repeats = "4,16", 1, 1
    plot = a.plot if a.plot is not None else (None if a.quick else os.path.join(ROOT, "docs", "bench_pass_scaling.png"))
    sizes = [int(x) for x in a.units.split(",") if x]

    tool = bc.find_built(a.build, "bin", "fsdp-opt")
    runtime_lib = os.environ.get("FSDP_OPT_RUNTIME_LIB")  # lit sets it; libfsdp_passes.so is beside it
    if not a.build and runtime_lib and os.path.exists(os.path.join(os.path.dirname(runtime_lib), "libfsdp_passes.so")):
        passes_lib = os.path.join(os.path.dirname(runtime_lib), "libfsdp_passes.so")
    else:
        passes_lib = bc.find_built(a.build, "lib", "libfsdp_passes.so")
    torch.ops.load_library(passes_lib)
    torch.set_num_threads(1)
    transform = torch.ops.fsdp_opt.transform

    with bc.scratch_dir(a.work, "fsdp-pass-scaling.") as work:
        models = {}
        for n in sizes:
            t0 = time.perf_counter()
            path = os.path.join(work, "stack%d.pt" % n)
            torch.jit.save(torch.jit.script(Stack(n, a.d).eval()), path)
            models[n] = path
            print("scripted and saved %4d units in %.1f s (%d KiB)" % (
                n, time.perf_counter() - t0, os.path.getsize(path) // 1024), flush=True)
        # The default pipeline's pass names in order: the op's pass list [] means "default", and
        # list_passes gives every registered pass, not the default order; --print-ir-after-all
        # names each pass the CLI runs (on the smallest model: the IR goes to stderr).
        r = subprocess.run([tool, models[sizes[0]], "--fsdp-unit=layers.*", "--world-size=2",
                            "--print-ir-after-all"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.exit("error: fsdp-opt failed:\n" + r.stderr)
        pipeline = [line.split("IR after ", 1)[1].split(" ***")[0]
                    for line in r.stderr.splitlines() if line.startswith("// *** IR after ")]
        print("default pipeline (%d passes): %s" % (len(pipeline), ",".join(pipeline)), flush=True)

        def run_transform(n, passes):
            m = torch.jit.load(models[n])
            c0, t0 = time.process_time(), time.perf_counter()
            out, _, _ = transform(m._c, ["--fsdp-unit=layers.*", "--world-size=2"], -1, passes)
            dt = (time.perf_counter() - t0, time.process_time() - c0)
            del out
            return dt

        prefixes = [] if a.no_prefixes else [pipeline[:k] for k in range(1, len(pipeline))]
        load = {n: [] for n in sizes}
        pipe = {n: [] for n in sizes}
        pref = {n: {k: [] for k in range(1, len(prefixes) + 1)} for n in sizes}
        # warm up: first load / first transform pay one-time costs (registry, code caches)
        for n in sizes:
            torch.jit.load(models[n])
            run_transform(n, [])
        t_all = time.perf_counter()
        for rep in range(a.repeats):
            for n in bc.rotated(sizes, rep):
                c0, t0 = time.process_time(), time.perf_counter()
                m = torch.jit.load(models[n])
                load[n].append((time.perf_counter() - t0, time.process_time() - c0))
                del m
                pipe[n].append(run_transform(n, []))
                for k, passes in enumerate(prefixes, 1):
                    pref[n][k].append(run_transform(n, passes))
            print("repeat %d/%d done (%.0f s)" % (rep + 1, a.repeats, time.perf_counter() - t_all), flush=True)

        # The CLI, end to end, as separate processes.
        cli, cli_noout, startup = {n: [] for n in sizes}, {n: [] for n in sizes}, []
        for rep in range(a.cli_repeats):
            t0 = time.perf_counter()
            subprocess.run([tool, "--version"], check=True, capture_output=True, timeout=600)
            startup.append(time.perf_counter() - t0)
            for n in sizes:
                t0 = time.perf_counter()
                r = subprocess.run([tool, models[n], "--fsdp-unit=layers.*", "--world-size=2"],
                                   capture_output=True, text=True, timeout=1800)
                cli_noout[n].append(time.perf_counter() - t0)
                if r.returncode != 0:
                    sys.exit("error: fsdp-opt on %d units failed:\n%s" % (n, r.stderr))
                out = os.path.join(work, "out%d" % n)
                shutil.rmtree(out, ignore_errors=True)
                t0 = time.perf_counter()
                r = subprocess.run([tool, models[n], "--fsdp-unit=layers.*", "--world-size=2", "-o", out],
                                   capture_output=True, text=True, timeout=1800)
                cli[n].append(time.perf_counter() - t0)
                if r.returncode != 0:
                    sys.exit("error: fsdp-opt on %d units failed:\n%s" % (n, r.stderr))

        # In-process numbers are CPU time (time.process_time: this process, one thread of work),
        # which the other load on a shared machine inflates far less than wall time; wall time
        # is kept beside it. The CLI can only be timed by the wall clock.
        rows = []
        for n in sizes:
            row = {"units": n,
                   "load_s": median([c for _, c in load[n]]), "pipeline_s": median([c for _, c in pipe[n]]),
                   "load_wall_s": median([w for w, _ in load[n]]),
                   "pipeline_wall_s": median([w for w, _ in pipe[n]]),
                   "cli_s": median(cli[n]), "cli_noout_s": median(cli_noout[n]),
                   "load_all": load[n], "pipeline_all": pipe[n], "cli_all": cli[n],
                   "cli_noout_all": cli_noout[n]}
            row["ratio"] = row["pipeline_s"] / row["load_s"]
            row["us_per_unit"] = 1e6 * row["pipeline_s"] / n
            row["load_us_per_unit"] = 1e6 * row["load_s"] / n
            row["cli_us_per_unit"] = 1e6 * row["cli_s"] / n
            # per-pass: prefix deltas; the last pass is the full pipeline minus the longest prefix
            # (minimum over repeats: a pass's cost is a difference of two noisy times, and the
            # least-disturbed run of a deterministic computation estimates it best)
            cum = [0.0] + [min(c for _, c in pref[n][k]) for k in range(1, len(prefixes) + 1)] + \
                [min(c for _, c in pipe[n])]
            row["per_pass_s"] = {pipeline[i]: cum[i + 1] - cum[i] for i in range(len(pipeline))} if prefixes else {}
            rows.append(row)

        print()
        head = ("| units | torch.jit.load ms | pipeline ms | pipeline / load | pipeline us/unit | "
                "load us/unit | (wall: load ms, pipeline ms) | CLI, no -o ms | CLI -o DIR ms |")
        table = [head, "|" + "|".join("---" for _ in head.split("|")[1:-1]) + "|"]
        for r in rows:
            table.append("| %d | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f, %.1f | %.0f | %.0f |" % (
                r["units"], 1e3 * r["load_s"], 1e3 * r["pipeline_s"], r["ratio"], r["us_per_unit"],
                r["load_us_per_unit"], 1e3 * r["load_wall_s"], 1e3 * r["pipeline_wall_s"],
                1e3 * r["cli_noout_s"], 1e3 * r["cli_s"]))
        print("\n".join(table))
        print("(CPU time of this process, medians of %d interleaved repeats; wall-clock medians in "
              "parentheses; CLI: wall clock, median of %d, fsdp-opt --version alone takes %.0f ms)"
              % (a.repeats, a.cli_repeats, 1e3 * median(startup)))

        marg = []
        for r1, r2 in zip(rows, rows[1:]):
            dn = r2["units"] - r1["units"]
            m = {"from": r1["units"], "to": r2["units"],
                 "pipeline_us": 1e6 * (r2["pipeline_s"] - r1["pipeline_s"]) / dn,
                 "load_us": 1e6 * (r2["load_s"] - r1["load_s"]) / dn,
                 "cli_us": 1e6 * (r2["cli_s"] - r1["cli_s"]) / dn,
                 "cli_noout_us": 1e6 * (r2["cli_noout_s"] - r1["cli_noout_s"]) / dn,
                 "per_pass_us": {k: 1e6 * (r2["per_pass_s"][k] - r1["per_pass_s"][k]) / dn
                                 for k in r1["per_pass_s"]}}
            marg.append(m)
        print()
        for m in marg:
            print("marginal cost per unit, %d -> %d units: pipeline %.1f us, torch.jit.load %.1f us, "
                  "CLI without -o %.1f us, CLI writing DIR %.1f us"
                  % (m["from"], m["to"], m["pipeline_us"], m["load_us"], m["cli_noout_us"], m["cli_us"]))
        if prefixes:
            print()
            ph = "| pass | " + " | ".join("%d units ms" % r["units"] for r in rows) + " | " + \
                 " | ".join("us/unit %d->%d" % (m["from"], m["to"]) for m in marg) + " |"
            ptable = [ph, "|" + "|".join("---" for _ in ph.split("|")[1:-1]) + "|"]
            for i, name in enumerate(pipeline):
                label = name + (" (+ clone, analysis)" if i == 0 else "")
                ptable.append("| %s | %s | %s |" % (
                    label, " | ".join("%.1f" % (1e3 * r["per_pass_s"][name]) for r in rows),
                    " | ".join("%.1f" % m["per_pass_us"][name] for m in marg)))
            print("\n".join(ptable))
            print("(pass k = CPU time of the first k passes minus that of the first k-1, minimum over "
                  "repeats; the first row includes cloning the module and the unit analysis; noisy, "
                  "can be slightly negative)")

        grows = None
        if len(marg) >= 2:
            first, last = marg[0]["pipeline_us"], marg[-1]["pipeline_us"]
            grows = last > 1.5 * max(first, 1e-9)
            print()
            print("claim 'cost per unit does not grow with model size': %s (marginal %.1f us/unit for %d->%d, "
                  "%.1f us/unit for %d->%d)" % ("DOES NOT HOLD" if grows else "holds", first, marg[0]["from"],
                                                 marg[0]["to"], last, marg[-1]["from"], marg[-1]["to"]))
            if grows and prefixes:
                worst = sorted(marg[-1]["per_pass_us"].items(), key=lambda kv: -kv[1])[:3]
                print("largest marginal per-unit costs at %d->%d: %s" % (
                    marg[-1]["from"], marg[-1]["to"], ", ".join("%s %.1f us" % kv for kv in worst)))

        out = {"sizes": sizes, "d": a.d, "repeats": a.repeats, "cli_repeats": a.cli_repeats,
               "pipeline": pipeline, "rows": rows, "marginal": marg, "grows": grows,
               "startup_s": median(startup), "table": table, "torch": torch.__version__, "git_head": git_head(ROOT),
               "nproc": os.cpu_count(), "loadavg_end": os.getloadavg()}
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        if plot:
            _plot(rows, marg, pipeline, plot)
            print("plot: %s" % plot)
        return 0


def _plot(rows, marg, pipeline, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ns = [r["units"] for r in rows]
    ax = axes[0]
    ax.plot(ns, [r["us_per_unit"] for r in rows], "o-", label="default pipeline, in-process (CPU)")
    ax.plot(ns, [r["load_us_per_unit"] for r in rows], "s-", label="torch.jit.load (CPU)")
    ax.plot(ns, [1e6 * r["cli_noout_s"] / r["units"] for r in rows], "v-", label="fsdp-opt CLI, no -o (wall)")
    ax.plot(ns, [r["cli_us_per_unit"] for r in rows], "^-", label="fsdp-opt CLI, -o DIR W=2 (wall)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ns)
    ax.set_xticklabels([str(n) for n in ns])
    ax.set_xlabel("units (Linear blocks)")
    ax.set_ylabel("time per unit (us)")
    ax.set_title("time / units", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax = axes[1]
    if rows[0]["per_pass_s"]:
        bottoms = [0.0] * len(rows)
        cmap = plt.get_cmap("tab20")
        for i, name in enumerate(pipeline):
            vals = [max(0.0, 1e6 * r["per_pass_s"][name] / r["units"]) for r in rows]
            ax.bar([str(n) for n in ns], vals, bottom=bottoms, label=name, color=cmap(i % 20))
            bottoms = [b + v for b, v in zip(bottoms, vals)]
        ax.set_ylabel("pipeline time per unit (us), by pass")
        ax.set_xlabel("units")
        ax.set_title("per pass (prefix differences; the first includes clone + analysis)", fontsize=10)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
