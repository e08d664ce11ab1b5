#!/usr/bin/env python3
"""What the collective fingerprints cost per gather (docs/runtime.md, "Collective fingerprints").

    python bench/fingerprint_cost.py --lib fingerprints=build/t113/lib/libfsdp_runtime.so \\
        [--lib before=/path/to/a/runtime/without/them.so] [--rounds 6] [--iters 200] \\
        [--fsdp-opt build/t113/bin/fsdp-opt]

For each library and each unit size (bytes each rank sends), two fresh rank processes (W = 2,
Gloo on loopback, one intra-op thread) time fsdp::all_gather + fsdp::reshard of one unit, then
all_gather_start + all_gather_wait + reshard, then fsdp::rank_any; the libraries take turns
within each round, so a change in the machine's load hits all of them alike. Prints the median
over rounds of the median time per call (of the slower rank), in microseconds, and with two
libraries the difference. With --fsdp-opt, also the median time of one `generate` (32 new
tokens) of the GPT of docs/benchmarks.md section 1 (4 layers, d_model 256) sharded by that
fsdp-opt: without a budget (the layers hoisted out of the loop, a handful of gathers per call)
and with the budget root + one layer (every layer gathered every token, prefetched with
all_gather_start / all_gather_wait): what the fingerprints cost a whole call, where the
prefetched gathers' envelopes overlap the computation.
Run it with the Python whose torch the libraries were built against.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "Inputs"))
from fsdp_harness import ReservedPort  # noqa: E402

SIZES = [256, 4096, 65536, 1 << 20, 16 << 20]  # bytes per rank


def timed(n, call):
    """The median time of one call, in microseconds: on shared cores a preempted call is an
    outlier the mean would carry."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def worker(lib, iters):
    import torch
    torch.set_num_threads(1)
    torch.ops.load_library(lib)
    ops = torch.ops.fsdp
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = {}
    for size in SIZES:
        cols = 64  # float32 rows of 256 bytes
        rows_per_rank = max(1, size // (cols * 4))
        shard = torch.nn.Parameter(torch.full((rows_per_rank, cols), float(rank)), requires_grad=False)
        params, rows = [shard], [rows_per_rank * world]
        n = iters if size < (1 << 20) else max(10, iters // 10)
        for _ in range(10):
            ops.reshard(ops.all_gather(params, rows, "u"), "u")
        out["all_gather %d" % size] = timed(n, lambda: ops.reshard(ops.all_gather(params, rows, "u"), "u"))
        out["start+wait %d" % size] = timed(
            n, lambda: ops.reshard(ops.all_gather_wait(ops.all_gather_start(params, rows, "u")), "u"))
    like = torch.zeros(1)
    for _ in range(10):
        ops.rank_any(False, like)
    out["rank_any"] = timed(iters, lambda: ops.rank_any(rank == 0, like))
    print("RESULT " + json.dumps(out), flush=True)


def gpt_worker(lib, directory, calls):
    import torch
    torch.set_num_threads(1)
    torch.ops.load_library(lib)
    rank = int(os.environ["RANK"])
    m = torch.jit.load(os.path.join(directory, "rank%d.pt" % rank))
    idx, new_tokens = torch.load(os.path.join(directory, "..", "inputs.pt"))
    for _ in range(2):
        m.generate(idx, new_tokens)
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        m.generate(idx, new_tokens)
        times.append(time.perf_counter() - t)
    print("RESULT " + json.dumps({"generate " + os.path.basename(directory): statistics.median(times) * 1e6}),
          flush=True)


def prepare_gpt(fsdp_opt, work):
    """The GPT of docs/benchmarks.md section 1, sharded without and with the one-layer budget."""
    import torch
    import fsdp_models
    model_pt = os.path.join(work, "gpt.pt")
    fsdp_models.save(fsdp_models.make("gpt", vocab_size=1000, block_size=64, n_layer=4, n_head=4, n_embd=256,
                                      seed=0), model_pt)
    with fsdp_models.seeded(1):
        idx = torch.randint(0, 1000, (1, 16))
    torch.save((idx, 32), os.path.join(work, "inputs.pt"))
    flags = [fsdp_opt, model_pt, "--fsdp-unit=.", "--fsdp-unit=blocks.*", "--forward-method=.:generate",
             "--world-size=2"]
    subprocess.run(flags + ["-o", os.path.join(work, "no-budget")], check=True, capture_output=True)
    units = {u["path"]: u["bytes"] for u in json.load(open(os.path.join(work, "no-budget", "manifest.json")))["units"]}
    budget = units["."] + units["blocks.0"]
    subprocess.run(flags + ["--max-unsharded-bytes=%d" % budget, "-o", os.path.join(work, "one-layer")],
                   check=True, capture_output=True)
    return [os.path.join(work, "no-budget"), os.path.join(work, "one-layer")]


def run_pair(lib, iters, gpt=None):
    with ReservedPort() as reserved:
        return run_pair_on(reserved.port, lib, iters, gpt)


def run_pair_on(port, lib, iters, gpt):
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1", FSDP_OPT_TIMEOUT_S="60")
        what = ["--gpt", gpt] if gpt else []
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", lib, "--iters", str(iters)] + what,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (o, e) in zip(procs, outs):
        if p.returncode != 0:
            raise SystemExit("rank failed:\n" + o + e)
    results = [json.loads(l[len("RESULT "):]) for o, _ in outs for l in o.splitlines() if l.startswith("RESULT ")]
    return {k: max(r[k] for r in results) for k in results[0]}  # the slower rank


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", default=[], help="LABEL=PATH of a libfsdp_runtime.so")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--fsdp-opt", default=None, help="also time the GPT's generate, sharded by this fsdp-opt")
    ap.add_argument("--gpt-calls", type=int, default=5)
    ap.add_argument("--worker", default=None)
    ap.add_argument("--gpt", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.worker:
        if args.gpt:
            return gpt_worker(args.worker, args.gpt, args.gpt_calls)
        return worker(args.worker, args.iters)
    libs = [l.split("=", 1) for l in args.lib] or [["fingerprints", "build/t2/lib/libfsdp_runtime.so"]]
    samples = {label: {} for label, _ in libs}
    work = tempfile.mkdtemp(prefix="fingerprint-cost.")
    gpts = prepare_gpt(os.path.abspath(args.fsdp_opt), work) if args.fsdp_opt else []
    t0 = time.time()
    for k in range(args.rounds):
        order = libs if k % 2 == 0 else list(reversed(libs))
        for label, path in order:
            for gpt in [None] + gpts:
                for key, us in run_pair(os.path.abspath(path), args.iters, gpt).items():
                    samples[label].setdefault(key, []).append(us)
    shutil.rmtree(work, ignore_errors=True)
    keys = list(samples[libs[0][0]].keys())
    head = "%-22s" % "us per call (W=2)" + "".join("%14s" % label for label, _ in libs)
    if len(libs) == 2:
        head += "%14s%10s" % ("difference", "ratio")
    print(head)
    table = {}
    for key in keys:
        meds = [statistics.median(samples[label][key]) for label, _ in libs]
        table[key] = dict(zip([label for label, _ in libs], meds))
        line = "%-22s" % key + "".join("%14.1f" % m for m in meds)
        if len(libs) == 2:
            line += "%14.1f%10.2f" % (meds[0] - meds[1], meds[0] / meds[1])
        print(line)
    print("(%d rounds, %.0f s, load average %s)" % (args.rounds, time.time() - t0,
                                                     " ".join("%.1f" % x for x in os.getloadavg())))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"libs": dict(libs), "median_us": table, "samples_us": samples}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
