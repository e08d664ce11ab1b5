#!/usr/bin/env python3
"""Does this machine stall a Gloo exchange when the ranks compute right after it?
(docs/runtime.md, "The shared-memory transport", why; docs/benchmarks.md section 10.)

Issue 20's items 7 and 8 compare an entry call with c10d's own all-gather plus the unsharded
call. On a host where two ranks and Gloo's threads share few CPUs, a loopback exchange that a
rank follows with computation sometimes waits a scheduler tick for the last bytes, and the
same exchange followed by a wait does not: c10d's own collective then costs more before a
computation than alone, and no runtime built on it can beat that. This probe measures it
with torch.distributed only (no fsdp-opt), so that a run on another machine says at once
whether those targets can be judged over Gloo there.

Two rank processes, one intra-op thread each, Gloo. Every configuration is a loop iteration
of: a barrier; `all_to_all_single` of --bytes per rank on a group of its own (the exchange the
runtime issues for two ranks); then either nothing (`idle after`: the next barrier, a wait) or
a computation of about --compute-ms (`compute after`: 128x128 matmuls, the same count on both
ranks), optionally preceded by a sleep of --settle-us microseconds that gives this CPU away so
that work queued on it for the peer (the kernel's loopback delivery, a woken Gloo thread) runs
first. `compute alone` is the computation without an exchange. Configurations are interleaved
iteration by iteration in an order rotated every iteration.

Columns, over the slower rank of every iteration: the exchange's median, 90th percentile and
mean (sleep included), how many exchanges took over 2 ms, the iteration's mean, and
`excess`: the iteration's mean minus the exchange alone (`idle after`) and the computation
alone, in ms: what following the exchange with computation costs beyond the two. Every
exchange's bytes are checked (each rank receives the peer's fill).

    python bench/gloo_stall.py                 # 3 launches x 300 iterations
    python bench/gloo_stall.py --quick         # smoke: 1 launch x 20 iterations
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402

SLOW_S = 2e-3


def compute_steps(target_ms):
    """How many 128x128 matmul + tanh steps take about target_ms on this process: the median
    of five timings of 50 steps, after a warm-up."""
    import torch
    a, b = torch.randn(128, 128), torch.randn(128, 128)

    def run(n):
        x = a
        t0 = time.perf_counter()
        for _ in range(n):
            x = torch.tanh(x @ b)
        return time.perf_counter() - t0

    run(50)
    per_step = bc.median([run(50) / 50 for _ in range(5)])
    return max(1, int(round(target_ms * 1e-3 / per_step)))


def rank_worker(ctx):
    import torch
    import torch.distributed as dist
    bc.init_rank(ctx)
    a = ctx.args
    group = dist.new_group(backend="gloo")
    nbytes, world = a["bytes"], ctx.world_size
    send = torch.full((nbytes * world,), ctx.rank + 1, dtype=torch.uint8)
    recv = torch.empty(nbytes * world, dtype=torch.uint8)
    want = torch.arange(1, world + 1, dtype=torch.uint8).repeat_interleave(nbytes)
    steps = torch.tensor([compute_steps(a["compute_ms"])])
    dist.broadcast(steps, 0)  # the same work on both ranks
    ma, mb = torch.randn(128, 128), torch.randn(128, 128)

    def compute():
        x = ma
        for _ in range(int(steps)):
            x = torch.tanh(x @ mb)

    configs = a["configs"]
    times = {name: {"exchange": [], "iteration": []} for name, _, _, _ in configs}
    bad = 0
    for it in range(a["warmup"] + a["iters"]):
        for name, exchange, computes, settle_us in bc.rotated(configs, it):
            dist.barrier()
            t0 = time.perf_counter()
            if exchange:
                dist.all_to_all_single(recv, send, group=group)
                if settle_us:
                    time.sleep(settle_us * 1e-6)
            t1 = time.perf_counter()
            if computes:
                compute()
            t2 = time.perf_counter()
            if exchange and not torch.equal(recv, want):
                bad += 1
            if it >= a["warmup"]:
                times[name]["exchange"].append(t1 - t0)
                times[name]["iteration"].append(t2 - t0)
    return {"times": times, "bad": bad, "steps": int(steps)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 launch x 20 iterations (smoke)")
    p.add_argument("--rounds", type=int, default=3, help="launches of a fresh pair of rank processes")
    p.add_argument("--iters", type=int, default=300, help="timed iterations per launch")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--bytes", type=int, default=1 << 20, help="bytes each rank sends each peer")
    p.add_argument("--compute-ms", type=float, default=2.0)
    p.add_argument("--settle-us", default="0,50", help="comma-separated sleeps after the exchange")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--timeout", type=float, default=1800)
    a = p.parse_args()
    if a.quick:
        a.rounds, a.iters, a.warmup = 1, 20, 3
    try:
        settles = [int(s) for s in a.settle_us.split(",") if s != ""]
    except ValueError:
        sys.exit("error: --settle-us: expected comma-separated integers, got %r" % a.settle_us)
    if not settles or any(s < 0 for s in settles):
        sys.exit("error: --settle-us: expected one or more integers >= 0, got %r" % a.settle_us)
    # (name, exchange, computation after it, sleep in us between the two)
    configs = [("compute alone", False, True, 0), ("idle after", True, False, 0)]
    configs += [("compute after" + (", sleep %d us" % s if s else ""), True, True, s) for s in settles]

    load_start = bc.report_load()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t_start = time.perf_counter()
    merged = {name: ([], []) for name, _, _, _ in configs}
    bad, steps = 0, []
    for rnd in range(a.rounds):
        args = {"bytes": a.bytes, "compute_ms": a.compute_ms, "configs": configs, "iters": a.iters,
                "warmup": a.warmup}
        per_rank = bc.launch_ranks(rank_worker, args, "launch %d" % (rnd + 1), a.timeout, env)
        bad += sum(r["bad"] for r in per_rank)
        steps.append(per_rank[0]["steps"])
        for name, _, _, _ in configs:
            of_config = [r["times"][name] for r in per_rank]
            merged[name][0].extend(bc.slower_rank(of_config, "exchange"))
            merged[name][1].extend(bc.slower_rank(of_config, "iteration"))

    def mean(xs):
        return sum(xs) / len(xs)

    def pct(xs, q):
        v = sorted(xs)
        return v[int(q * (len(v) - 1))]

    alone = mean(merged["compute alone"][1])
    idle = mean(merged["idle after"][0])
    head = ["configuration", "exchange median ms", "p90 ms", "mean ms", "over 2 ms", "iteration mean ms", "excess ms"]
    lines, rows = [], []
    for name, exchange, computes, settle in configs:
        ex, tot = merged[name]
        slow = sum(1 for x in ex if x > SLOW_S)
        excess = mean(tot) - alone - idle if exchange and computes else None
        lines.append([name, "%.3f" % (bc.median(ex) * 1e3) if exchange else "-",
                      "%.3f" % (pct(ex, 0.9) * 1e3) if exchange else "-",
                      "%.3f" % (mean(ex) * 1e3) if exchange else "-",
                      "%d of %d" % (slow, len(ex)) if exchange else "-",
                      "%.3f" % (mean(tot) * 1e3), "-" if excess is None else "%+.3f" % (excess * 1e3)])
        rows.append({"configuration": name, "exchange": exchange, "settle_us": settle, "exchange_s": ex,
                     "iteration_s": tot, "over_2ms": slow})
    print("%d launch(es) x %d iterations, %d bytes per rank and peer, computation %s matmul steps (~%.1f ms)"
          % (a.rounds, a.iters, a.bytes, "/".join(map(str, steps)), a.compute_ms))
    table = bc.print_table(head, lines)
    print("excess: iteration mean - computation alone - exchange alone (idle after)")
    print("bytes: %s" % ("every exchange received the peer's fill" if bad == 0 else "%d exchanges received wrong bytes" % bad))
    wall = time.perf_counter() - t_start
    if a.json:
        out = {"rows": rows, "bad_exchanges": bad, "steps": steps}
        out.update(bc.run_record(load_start, os.getloadavg(), {}, wall, None, table))
        bc.write_json(a.json, out)
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
