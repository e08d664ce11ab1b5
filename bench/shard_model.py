#!/usr/bin/env python3
"""Sharding a model without holding it twice: `fsdp-opt -o` at W=2 and W=8 beside
`torch.jit.load` + `save` of the same file, each in a process of its own, in ONE run
(docs/benchmarks.md section 7; include/fsdp_opt/passes/deferred_load.h).

The model is a scripted GPT of at least 1 GiB (fsdp_models.GPT: 22 layers, d=1024, vocabulary
8192; root and every block a unit, generate registered), saved once into the scratch directory
and read once before the first round, so that every configuration finds it in the page cache.
Configurations, each run --rounds times, interleaved (the order rotates every round); before
each command, untimed, its previous output is deleted and the page cache's dirty pages written
back (os.sync), so that no command pays for another's writeback:

  load+save    python: torch.jit.load(model), then .save() to another file. Two figures: the
               process's wall time (what `python script.py` costs, interpreter and torch import
               included) and the load + save calls alone, timed inside it.
  fsdp-opt W   fsdp-opt MODEL --world-size=W -o DIR (the default pipeline): the process's wall.

Peak RSS is the process's ru_maxrss (wait4). Two more rows say what the libraries alone cost
(a torch 2.x CUDA wheel's CUDA libraries take about 0.35 GB in any process that loads them, as
`import torch` does; fsdp-opt loads only torch's CPU libraries): `fsdp-opt --version` and
`python -c "import torch"`. Targets (issue 18, item 2): fsdp-opt's peak RSS at W=8 at most 0.5x the model's bytes, and its wall time at most load+save's, the stricter of its
two figures (the calls alone). After the rounds, the rank files of every W are checked against
the model, bit for bit: each rank's shard of every unit parameter, every other tensor whole.

    python bench/shard_model.py                 # full run; --json bench/results/shard_model.json
    python bench/shard_model.py --quick         # smoke: a 64 MiB GPT, 1 round (test/bench-smoke.py)
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402

LOAD_SAVE = r"""
import sys, time, warnings
warnings.filterwarnings("ignore")
import torch
t0 = time.perf_counter()
m = torch.jit.load(sys.argv[1])
t1 = time.perf_counter()
m.save(sys.argv[2])
t2 = time.perf_counter()
print("load_s=%.6f save_s=%.6f" % (t1 - t0, t2 - t1))
"""


# Runs argv[1:] and prints its wall time, peak RSS and exit code last. A child's ru_maxrss
# starts from its parent's RSS at fork (Linux carries the old mm's high-water mark across exec),
# so each command is forked from this small process, not from the benchmark that holds the model.
MEASURE = r"""
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execv(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
sys.stdout.flush()
print("measured wall_s=%.6f maxrss_kib=%d rc=%d" % (time.perf_counter() - t0, usage.ru_maxrss,
                                                    os.waitstatus_to_exitcode(status)))
"""


def run_with_rusage(cmd):
    """Runs `cmd` (stderr discarded); returns (wall s, its peak RSS in bytes, its stdout, its
    exit code)."""
    p = subprocess.run([sys.executable, "-S", "-c", MEASURE] + cmd, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines or not lines[-1].startswith("measured "):
        sys.exit("error: could not measure %s" % " ".join(cmd))
    fields = dict(kv.split("=") for kv in lines[-1].split()[1:])
    return (float(fields["wall_s"]), int(fields["maxrss_kib"]) * 1024, "\n".join(lines[:-1]),
            int(fields["rc"]))


def settle(output, keep, wait_s):
    """Before a timed command, untimed: its output of an earlier round deleted and every dirty
    page written back, so that no command pays for another's writeback or deletes a GiB of its
    own previous output (the kernel's writeback after a run that wrote 1 GiB moved the next
    run's wall time by seconds, in both directions); then `wait_s` of nothing, so that every
    command starts with the same free memory. On a virtual machine whose balloon device reports
    free pages to the host (virtio-balloon's free page reporting, which hands back free blocks
    about 2 s after they are freed), writing 1 GiB into memory freed 0-0.5 s before took 0.3-0.7
    s and into memory freed 3-5 s before 3.4-4.6 s: without the wait, whichever command wrote
    sooner after the deletion (fsdp-opt, in 0.5 s, against load+save after importing torch and
    loading) reused the pages just freed and the other paid for fresh ones."""
    import shutil
    if output is None or keep:
        pass
    elif os.path.isdir(output):
        shutil.rmtree(output)
    elif os.path.exists(output):
        os.remove(output)
    os.sync()
    time.sleep(wait_s)


def make_model(path, a):
    import fsdp_models as fm
    model = fm.GPT(vocab_size=a.vocab, block_size=64, n_layer=a.n_layer, n_head=16, n_embd=a.n_embd, seed=0)
    fm.save(fm.mark(model, units=["."], forward_methods={".": ["generate"]}), path)


def check_rank_files(model_pt, out_dir, world, runtime_lib):
    """Problems found comparing every rank file of `out_dir` with `model_pt` (empty: exact)."""
    import torch
    import fsdp_harness as h
    torch.ops.load_library(runtime_lib)
    original = torch.jit.load(model_pt)
    params = dict(original.named_parameters())
    buffers = dict(original.named_buffers())
    with open(os.path.join(out_dir, "manifest.json")) as f:
        sharded = {p["path"] for u in json.load(f)["units"] for p in u["params"] + [
            {"path": alias} for q in u["params"] for alias in q["aliases"]]}
    problems = []
    for r in range(world):
        m = torch.jit.load(os.path.join(out_dir, "rank%d.pt" % r))
        for name, p in m.named_parameters():
            want = h.expected_shard(params[name], world, r) if name in sharded else params[name]
            if d := h.same_bits(p, want, "rank%d.pt %s" % (r, name)):
                problems.append(d)
        for name, b in m.named_buffers():
            if name in buffers and (d := h.same_bits(b, buffers[name], "rank%d.pt %s" % (r, name))):
                problems.append(d)
        del m
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke mode: a 64 MiB GPT, 1 round")
    p.add_argument("--n-layer", type=int, default=22)
    p.add_argument("--n-embd", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--worlds", default="2,8")
    p.add_argument("--rerun", action="store_true",
                   help="leave each command's output of the round before in place (a command run again: "
                        "load+save overwrites its file, fsdp-opt replaces its directory); only the sync")
    p.add_argument("--settle-s", type=float, default=5.0,
                   help="seconds of nothing before each command, after its old output is deleted (see settle)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot-from", metavar="LABEL=JSON,...",
                   help="only draw --plot from earlier runs' --json files (one group of bars each)")
    p.add_argument("--plot", help="the PNG --plot-from writes (default docs/bench_shard_model.png)")
    bc.add_build_args(p)
    a = p.parse_args()
    if a.plot_from:
        runs = []
        for item in a.plot_from.split(","):
            label, path = item.split("=", 1)
            with open(path) as f:
                runs.append((label, json.load(f)))
        plot = a.plot or os.path.join(bc.ROOT, "docs", "bench_shard_model.png")
        _plot(runs, plot)
        print("plot: %s" % plot)
        return 0
    if a.quick:
        a.n_layer, a.n_embd, a.vocab, a.rounds, a.settle_s = 4, 512, 8192, 1, 0.0
    worlds = [int(w) for w in a.worlds.split(",")]
    tool, runtime = bc.fsdp_opt_and_runtime(a.build)

    with bc.scratch_dir(a.work, "fsdp-opt-shard-model-") as work:
        model_pt = os.path.join(work, "gpt.pt")
        make_model(model_pt, a)
        model_bytes = os.path.getsize(model_pt)
        with open(model_pt, "rb") as f:  # into the page cache, for every configuration alike
            while f.read(1 << 24):
                pass
        print("model: GPT n_layer=%d n_embd=%d vocab=%d, %s on disk (%.2f GiB); fsdp-opt %s"
              % (a.n_layer, a.n_embd, a.vocab, bc.fmt_bytes(model_bytes), model_bytes / 2 ** 30,
                 bc.git_head(bc.ROOT)))
        configs = ["load+save"] + ["fsdp-opt W=%d" % w for w in worlds] + ["libraries: python, import torch",
                                                                           "libraries: fsdp-opt --version"]
        walls = {c: [] for c in configs}
        calls = []
        peaks = {c: 0 for c in configs}
        for rnd in range(a.rounds):
            for c in bc.rotated(configs, rnd):
                output = None
                if c == "load+save":
                    output = os.path.join(work, "resaved.pt")
                    cmd = [sys.executable, "-c", LOAD_SAVE, model_pt, output]
                elif c.startswith("libraries: python"):
                    cmd = [sys.executable, "-c", "import torch"]
                elif c.startswith("libraries: fsdp-opt"):
                    cmd = [tool, "--version"]
                else:
                    w = int(c.split("=")[1])
                    output = os.path.join(work, "w%d" % w)
                    cmd = [tool, model_pt, "--world-size=%d" % w, "-o", output]
                settle(output, a.rerun, a.settle_s)
                wall, peak, out, rc = run_with_rusage(cmd)
                if rc != 0:
                    sys.exit("error: %s exited %d: %s" % (c, rc, " ".join(cmd)))
                walls[c].append(wall)
                peaks[c] = max(peaks[c], peak)
                if c == "load+save":
                    fields = dict(kv.split("=") for kv in out.split())
                    calls.append(float(fields["load_s"]) + float(fields["save_s"]))

        base_wall, base_calls = bc.median(walls["load+save"]), bc.median(calls)
        rows = []
        print("\n| configuration | wall s | / load+save process | / load+save calls | peak RSS | / model |")
        print("|---|---|---|---|---|---|")
        for c in configs:
            wall = bc.median(walls[c])
            rows.append({"configuration": c, "wall_s": wall, "peak_rss_bytes": peaks[c],
                         "wall_over_load_save_process": wall / base_wall,
                         "wall_over_load_save_calls": wall / base_calls,
                         "peak_over_model": peaks[c] / model_bytes, "walls_s": walls[c]})
            print("| %s | %.2f | %.2f | %.2f | %s | %.2f |" % (c, wall, wall / base_wall, wall / base_calls,
                                                             bc.fmt_bytes(peaks[c]), peaks[c] / model_bytes))
        print("load+save calls alone (inside the process): %.2f s" % base_calls)
        print("every round's wall s: %s; load+save calls: %s" % (
            "; ".join("%s %s" % (c, " ".join("%.2f" % w for w in walls[c])) for c in configs),
            " ".join("%.2f" % x for x in calls)))

        exact = {}
        for w in worlds:
            problems = check_rank_files(model_pt, os.path.join(work, "w%d" % w), w, runtime)
            exact[w] = not problems
            print("W=%d rank files: %s" % (w, "every tensor bitwise the model's shard"
                                           if not problems else "MISMATCH: " + "; ".join(problems[:5])))

        top = max(worlds)
        top_row = next(r for r in rows if r["configuration"] == "fsdp-opt W=%d" % top)
        slowest = max(r["wall_s"] for r in rows if r["configuration"].startswith("fsdp-opt"))
        targets = {
            "peak RSS at W=%d <= 0.5x the model" % top: top_row["peak_over_model"] <= 0.5,
            "wall <= load+save (calls alone) at every W": slowest <= base_calls,
            "wall <= load+save (process) at every W": slowest <= base_wall,
        }
        for name, met in targets.items():
            print("target %s %s" % (name, "MET" if met else "NOT MET"))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"model_bytes": model_bytes, "n_layer": a.n_layer, "n_embd": a.n_embd, "vocab": a.vocab,
                           "rounds": a.rounds, "rerun": a.rerun, "settle_s": a.settle_s, "commit": bc.git_head(bc.ROOT), "cpu": bc.cpu_model(),
                           "load_save_calls_s": base_calls, "load_save_calls_each_s": calls, "rows": rows,
                           "targets": targets, "exact": {str(w): v for w, v in exact.items()}}, f, indent=2)
        return 0 if all(exact.values()) else 1


def _plot(runs, path):
    """Peak RSS and wall time of every configuration, relative to the model's size and to the
    load+save process, one group of bars per run (a LibTorch leg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    configs = [r["configuration"] for r in runs[0][1]["rows"] if not r["configuration"].startswith("libraries")]
    width = 0.8 / len(runs)
    for k, (label, d) in enumerate(runs):
        rows = {r["configuration"]: r for r in d["rows"]}
        xs = [i + k * width for i in range(len(configs))]
        axes[0].bar(xs, [rows[c]["peak_over_model"] for c in configs], width, label=label)
        axes[1].bar(xs, [rows[c]["wall_over_load_save_process"] for c in configs], width, label=label)
    for ax, title, target in ((axes[0], "peak RSS / model size", 0.5), (axes[1], "wall time / load+save process", 1.0)):
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(configs))])
        ax.set_xticklabels(configs)
        ax.axhline(target, color="k", ls="--", lw=1)
        ax.set_title(title)
        ax.legend()
    d = runs[0][1]
    fig.suptitle("fsdp-opt -o on a %.2f GiB GPT beside torch.jit.load + save (dashed: issue 18's targets)"
                 % (d["model_bytes"] / 2 ** 30))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
