#!/usr/bin/env python3
"""What an entry call costs beyond its collective: fsdp-opt's call against a raw c10d all-gather
of the same bytes plus the unsharded call, W=2, CPU, Gloo, in ONE run (docs/runtime.md, "The
cost of an entry call"; docs/benchmarks.md section 5).

For each entry call (`generate(ids, 0)`, which gathers and returns at once; `forward(ids)`;
`generate(ids, N)`) six configurations run in the same pair of rank processes, interleaved
call by call (bench_common.time_interleaved, a barrier before every timed call); the entry calls
are timed one after the other (all calls of one, then the next), as a program calling one
entry method in a loop does:

  unsharded  the original TorchScript model's call, in every rank process (no communication)
  raw        ONE torch.distributed all_gather_into_tensor (Gloo) of uint8 buffers of the bytes
             fsdp-opt's call gathers: bytes_gathered / W per rank, rounded up to 16 (fsdp::stats()
             of a warmup call), on a process group of its own, as the runtime's collectives are
  raw_shared the same on the group whose barrier precedes every timed call: printed, not the
             baseline, since the barrier has just woken that group's threads, which fsdp-opt's
             own group does not get (a few percent faster when measured: docs/runtime.md, "The
             cost of an entry call")
  raw_a2a    torch.distributed all_to_all_single moving the same bytes (each rank's bytes to
             every rank), on a group of its own: printed, not the baseline (the issue's baseline
             is an all-gather), since it is the fastest c10d collective that does the same
             exchange on Gloo and what the runtime itself issues for two ranks
  sequence   raw, then the unsharded call, timed as one: what gathering by hand and then calling
             costs, the two sharing the machine as they do inside fsdp-opt's call (on two cores,
             the collective's threads and the other rank still run when the call starts)
  fsdp-opt   the rank file's call (root and every Block a unit, default pipeline, W=2)

Two regimes, each in its own table, timed in the same rank processes: "after a barrier", one
call per timed sample, as above; "in a row", --loop-calls calls back to back per timed sample
(the barrier before the first only), as a Python loop calling a rank file per token makes
them, each configuration's own collectives following each other. ms: the median over all timed
samples of the slower rank's wall time, per call. ratio = fsdp-opt / (unsharded + raw): the
target is at most 1.2; fsdp-opt / sequence is printed beside it.
Collectives per call: the runtime's all_gathers and
agreements (fsdp::rank_any of the rank-uniform decoding loop); a gather's fingerprint envelope
is not counted, and carries the payload itself once the same collectives have come before
(docs/runtime.md, "Collective fingerprints"). Every fsdp-opt call's output is compared with the
unsharded call's, bit for bit. With --lib LABEL=PATH (repeatable) the rank files run under each
runtime library in turn, in fresh rank processes, every round: before/after rows of one run;
with --cpu-transport gloo,shm the same over both of the runtime's CPU transports.

    python bench/entry_cost.py                  # full run; --json bench/results/entry_cost.json
    python bench/entry_cost.py --quick          # smoke: tiny model, 1 round (test/bench-smoke.py)
    python bench/entry_cost.py --lib before=OLD.so --lib after=build/t2/lib/libfsdp_runtime.so
    python bench/entry_cost.py --cpu-transport gloo,shm
    python bench/entry_cost.py --loop-calls 20   # longer runs of calls in a row
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # rank processes import this file by its path: bench_common is beside it
    sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
from bench_common import fmt_bytes, fmt_count, median  # noqa: E402

KINDS = ("unsharded", "raw", "raw_shared", "raw_a2a", "sequence", "fsdp")
REGIMES = (("barrier", "after a barrier"), ("row", "in a row"))


def _entries(new_tokens):
    """(name, method, extra args) of every entry call measured."""
    return [("generate(ids, 0)", "generate", [0]), ("forward(ids)", "forward", []),
            ("generate(ids, %d)" % new_tokens, "generate", [new_tokens])]


def _in_a_row(call, n):
    """call() n times back to back, as one timed sample: the in-a-row regime."""
    def calls():
        for _ in range(n):
            out = call()
        return out
    return calls


# ---- rank side -------------------------------------------------------------------------------

def bench_worker(ctx):
    """Sets up the configurations of every entry call and times them interleaved. Returns
    per configuration its times and CPU times, and per entry call the fsdp-opt call's counters,
    the raw buffer size and whether the outputs matched."""
    import torch
    import torch.distributed as dist
    a = ctx.args
    bc.init_rank(ctx)
    raw_group = dist.new_group(backend="gloo")
    a2a_group = dist.new_group(backend="gloo")
    idx = torch.load(a["inputs"])
    entries = _entries(a["new_tokens"])
    with torch.no_grad():
        original = torch.jit.load(a["model_pt"])
        sharded = ctx.load(os.path.join(a["dir"], "rank%d.pt" % ctx.rank))
        confs, info = {}, {}
        for i, (name, method, extra) in enumerate(entries):
            m_orig, m_sh = getattr(original, method), getattr(sharded, method)
            args = [idx] + extra
            # Counters of one warmup call: how many collectives and bytes the raw baseline gets.
            for _ in range(2):
                m_sh(*args)
            ctx.reset_stats()
            out_sh = m_sh(*args)
            s = ctx.stats()
            per_rank = -(-s["bytes_gathered"] // ctx.world_size)
            per_rank = -(-per_rank // 16) * 16
            send = torch.full((per_rank,), ctx.rank, dtype=torch.uint8)
            recv = torch.empty((per_rank * ctx.world_size,), dtype=torch.uint8)
            send_all = send.repeat(ctx.world_size)  # the all-to-all's input: these bytes to every rank
            recv_all = torch.empty_like(recv)

            def raw(send=send, recv=recv, group=raw_group):
                if send.numel():
                    dist.all_gather_into_tensor(recv, send, group=group)
                return recv

            def raw_a2a(send_all=send_all, recv_all=recv_all):
                if send_all.numel():
                    dist.all_to_all_single(recv_all, send_all, group=a2a_group)
                return recv_all

            calls = {"unsharded": lambda f=m_orig, args=args: f(*args), "raw": raw,
                     "raw_shared": lambda raw=raw: raw(group=None), "raw_a2a": raw_a2a,
                     "sequence": lambda f=m_orig, args=args, raw=raw: (raw(), f(*args))[1],
                     "fsdp": lambda f=m_sh, args=args: f(*args)}
            for regime, _ in REGIMES:
                for kind, call in calls.items():
                    if regime == "row":
                        call = _in_a_row(call, a["loop_calls"])
                    conf = bc.CallConfig(call)
                    if kind == "fsdp":
                        conf.before = ctx.reset_stats
                        conf.after = lambda conf=conf: conf.per_call.append(ctx.stats())
                    confs["%d:%s:%s" % (i, regime, kind)] = conf
            info[i] = {"stats": s, "raw_bytes_per_rank": per_rank,
                       "bitwise_equal": bool(torch.equal(out_sh, m_orig(*args)))}
        # One entry call after the other, each timed interleaved with its five baselines, one
        # regime after the other: a program calling one entry method over and over (a Python
        # loop calling generate per token), whose collectives repeat call after call.
        for i in bc.rotated(list(info), a.get("offset", 0)):
            for regime, _ in REGIMES:
                names = ["%d:%s:%s" % (i, regime, k) for k in KINDS]
                bc.time_interleaved(confs, bc.rotated(names, a.get("offset", 0)), a["warmup"], a["repeats"])
    # Per call: a sample in a row timed loop_calls calls.
    for key, conf in confs.items():
        if ":row:" in key:
            conf.times = [t / a["loop_calls"] for t in conf.times]
            conf.cpu = [t / a["loop_calls"] for t in conf.cpu]
            conf.per_call = [{k: v / a["loop_calls"] for k, v in st.items()} for st in conf.per_call]
    for i in info:
        for regime, _ in REGIMES:
            per_call = confs["%d:%s:fsdp" % (i, regime)].per_call
            for counter in ("all_gathers", "bytes_gathered", "agreements", "shm_rounds"):
                info[i]["%s:%s" % (regime, counter)] = sum(st[counter] for st in per_call) / len(per_call)
            info[i]["bitwise_equal"] = info[i]["bitwise_equal"] and torch.equal(
                confs["%d:%s:fsdp" % (i, regime)].first, confs["%d:%s:unsharded" % (i, regime)].first)
    return {"times": {k: c.times for k, c in confs.items()}, "cpu": {k: c.cpu for k, c in confs.items()},
            "info": info}


# ---- driver side -----------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke mode: tiny model, 1 round, 1 warmup, 2 repeats")
    bc.add_model_args(p, n_embd=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    p.add_argument("--new-tokens", type=int, default=4, help="N of the third entry call, generate(ids, N)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=40, help="timed calls of each configuration per round")
    p.add_argument("--loop-calls", type=int, default=10,
                   help="calls back to back per timed sample in the in-a-row regime")
    p.add_argument("--extra-flags", default="", help="more fsdp-opt flags, space-separated")
    p.add_argument("--lib", action="append", default=[], metavar="LABEL=PATH",
                   help="time the rank files under this libfsdp_runtime.so (repeatable: the libraries take "
                   "turns in every round, one row per library; default: the build's)")
    bc.add_build_args(p)
    p.add_argument("--cpu-transport", default="gloo",
                   help="comma-separated CPU transports of the fsdp runtime to run the rank files over, each in "
                        "its own rank processes every round: gloo (the default), shm (FSDP_OPT_CPU_TRANSPORT=shm, "
                        "docs/runtime.md \"The shared-memory transport\"); the raw all-gather stays "
                        "torch.distributed's Gloo")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--timeout", type=float, default=900, help="seconds per launch of rank processes")
    a = p.parse_args(argv)
    if a.quick:
        bc.use_tiny_model(a)
        a.prompt, a.new_tokens, a.rounds, a.warmup, a.repeats, a.loop_calls = 4, 2, 1, 1, 2, 2
    assert a.prompt + a.new_tokens <= a.block_size, "prompt + new tokens must fit the block size"

    import torch
    import fsdp_models

    tool, lib = bc.fsdp_opt_and_runtime(a.build)
    entries = _entries(a.new_tokens)
    with bc.scratch_dir(a.work, "fsdp-entry-cost.") as work:
        model_kwargs = bc.model_kwargs(a)
        model_pt = os.path.join(work, "gpt.pt")
        fsdp_models.save(fsdp_models.make("gpt", **model_kwargs), model_pt)
        with fsdp_models.seeded(1):
            idx = torch.randint(0, a.vocab, (a.batch, a.prompt))
        inputs = os.path.join(work, "inputs.pt")
        torch.save(idx, inputs)
        out_dir = os.path.join(work, "sharded")
        cmd = [tool, model_pt, "--fsdp-unit=.", "--fsdp-unit-type=Block", "--world-size=%d" % bc.WORLD_SIZE,
               "-o", out_dir, "--stats"] + a.extra_flags.split()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.exit("error: %s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stderr))
        predicted = {line.split("gathers per call of ", 1)[1].split(":")[0]: line.split(":", 1)[1].strip()
                     for line in r.stdout.splitlines() if "gathers per call of " in line}
        with open(os.path.join(out_dir, "manifest.json")) as f:
            units = {u["path"]: u["bytes"] for u in json.load(f)["units"]}
        model_bytes = sum(units.values())
        print("model: GPT n_layer=%d n_embd=%d n_head=%d vocab=%d block=%d, %s of parameters in %d units; "
              "batch %d, prompt %d; W=2, gloo, CPU, 1 thread per rank"
              % (a.n_layer, a.n_embd, a.n_head, a.vocab, a.block_size, fmt_bytes(model_bytes), len(units),
                 a.batch, a.prompt), flush=True)
        print("fsdp-opt --stats, gathers per call: " + "; ".join("%s %s" % kv for kv in sorted(predicted.items())),
              flush=True)

        transports = [t for t in a.cpu_transport.split(",") if t]
        for t in transports:
            if t not in ("gloo", "shm"):
                sys.exit("error: --cpu-transport: unknown transport %r (gloo, shm)" % t)
        # Every runtime library over every transport; a label names both when there is a choice.
        transport_of = {}
        libs = []
        for label, path in [tuple(x.split("=", 1)) for x in a.lib] or [("this build", lib)]:
            for t in transports:
                full = label if len(transports) == 1 else "%s, %s" % (label, t)
                libs.append((full, path))
                transport_of[full] = t
        common = {"model_pt": model_pt, "inputs": inputs, "dir": out_dir, "new_tokens": a.new_tokens,
                  "warmup": a.warmup, "repeats": a.repeats, "loop_calls": a.loop_calls}
        load_start = bc.report_load()
        wall_t0 = time.perf_counter()
        per_call = {label: {} for label, _ in libs}
        cpu_call = {label: {} for label, _ in libs}
        infos = {label: [] for label, _ in libs}
        for rnd in range(a.rounds):
            for label, path in bc.rotated(libs, rnd):  # libraries take turns: the load hits both
                t0 = time.perf_counter()
                env = bc.rank_env(os.path.abspath(path))
                env["FSDP_OPT_CPU_TRANSPORT"] = transport_of[label]
                values = bc.launch_ranks(bench_worker, dict(common, offset=rnd), "round %d (%s)" % (rnd + 1, label),
                                         a.timeout, env)
                for key in values[0]["times"]:
                    per_call[label].setdefault(key, []).extend(bc.slower_rank([v["times"] for v in values], key))
                    cpu_call[label].setdefault(key, []).extend(bc.slower_rank([v["cpu"] for v in values], key))
                infos[label].append([v["info"] for v in values])
                print("round %d/%d, %s: %.1f s; " % (rnd + 1, a.rounds, label, time.perf_counter() - t0) + ", ".join(
                    "%s %.2f ms" % (k, 1e3 * median(per_call[label][k][-a.repeats:])) for k in values[0]["times"]),
                    flush=True)
        wall_s = time.perf_counter() - wall_t0

        rows = []
        all_equal = True
        tables = {}
        for regime, regime_name in REGIMES:
            lines = []
            for label, path in libs:
                for i, (name, method, extra) in enumerate(entries):
                    key = "%d:%s:%%s" % (i, regime)
                    ms = {k: 1e3 * median(per_call[label][key % k]) for k in KINDS}
                    cpu = {k: 1e3 * median(cpu_call[label][key % k]) for k in KINDS}
                    rank_infos = [ri[i] for round_infos in infos[label] for ri in round_infos]
                    equal = all(x["bitwise_equal"] for x in rank_infos)
                    all_equal = all_equal and equal
                    info = rank_infos[-1]
                    base = ms["unsharded"] + ms["raw"]
                    row = {"entry": name, "regime": regime, "runtime": label, "runtime_lib": path,
                           "method": method, "args": extra, "ms": ms, "cpu_ms": cpu,
                           "ms_all": {k: [1e3 * t for t in per_call[label][key % k]] for k in KINDS},
                           "baseline_ms": base, "ratio": ms["fsdp"] / base if base else float("nan"),
                           "ratio_to_sequence": ms["fsdp"] / ms["sequence"] if ms["sequence"] else float("nan"),
                           "ratio_to_a2a": ms["fsdp"] / (ms["unsharded"] + ms["raw_a2a"]),
                           "all_gathers": info[regime + ":all_gathers"], "agreements": info[regime + ":agreements"],
                           "bytes_gathered": info[regime + ":bytes_gathered"],
                           "raw_bytes_per_rank": info["raw_bytes_per_rank"],
                           "predicted_gathers": predicted.get(method), "bitwise_equal": equal,
                           "cpu_transport": transport_of[label], "shm_rounds": info[regime + ":shm_rounds"]}
                    rows.append(row)
                    lines.append(((name + (" [%s]" % label if len(libs) > 1 else "")), "%.3f" % ms["unsharded"],
                                  "%.3f" % ms["raw"], "%.3f" % ms["raw_shared"], "%.3f" % ms["raw_a2a"],
                                  "%.3f" % base, "%.3f" % ms["sequence"], "%.3f" % ms["fsdp"],
                                  "%.2f" % row["ratio"], "%.2f" % row["ratio_to_sequence"],
                                  "%.2f" % row["ratio_to_a2a"],
                                  "%s + %s" % (fmt_count(row["all_gathers"]), fmt_count(row["agreements"])),
                                  fmt_bytes(row["bytes_gathered"]), "yes" if equal else "NO"))
            head = ("entry call", "unsharded ms", "raw all-gather ms", "raw, barrier's group ms",
                    "raw all-to-all ms", "sum ms", "raw then unsharded ms", "fsdp-opt ms", "ratio",
                    "ratio to sequence", "ratio to all-to-all", "gathers + agreements", "bytes gathered",
                    "output == unsharded")
            print("\n%s: %s" % (regime_name, "one call per timed sample, a barrier before it" if regime == "barrier"
                                  else "%d calls back to back per timed sample, a barrier before the first; "
                                  "ms per call" % a.loop_calls))
            tables[regime] = bc.print_table(head, lines)
        n_timed = len(per_call[libs[0][0]]["0:barrier:fsdp"])
        print("ms: median over %d timed samples (%d rounds x %d) of the slower rank's wall time, per call, after "
              "%d warmup samples each; raw all-gather: one torch.distributed all_gather_into_tensor (gloo) of the "
              "call's bytes on a group of its own (raw, barrier's group: on the group of the barrier before every "
              "sample); raw all-to-all: all_to_all_single of the same exchange on a group of its own; sum = "
              "unsharded + raw all-gather; raw then unsharded: the two as one timed call; ratio = fsdp-opt / sum; "
              "ratio to sequence = fsdp-opt / raw then unsharded; ratio to all-to-all = fsdp-opt / (unsharded + "
              "raw all-to-all); gathers + agreements: the collectives of one fsdp-opt call (fsdp::stats() "
              "all_gathers, agreements); %.0f s in all" % (n_timed, a.rounds, a.repeats, a.warmup, wall_s))
        for row in rows:
            ok = row["ratio"] <= 1.2
            print("target %-22s %-15s fsdp-opt <= 1.2 x (unsharded + raw all-gather) %s (ratio %.2f%s)"
                  % (row["entry"], dict(REGIMES)[row["regime"]], "MET" if ok else "NOT MET", row["ratio"],
                     ", " + row["runtime"] if len(libs) > 1 else ""))
        if a.quick:
            print("(--quick: tiny model, few calls: timings and targets mean nothing here)")
        # Each row ran over the transport it names: shared-memory rounds in the shm rows' calls only.
        transport_ok = all((row["shm_rounds"] > 0) == (row["cpu_transport"] == "shm") for row in rows)
        print("transport: %s" % ("every row's collectives went over the transport it names" if transport_ok
                                 else "WRONG: a row's collectives did not use the transport it names"))
        print("bitwise: %s" % ("every fsdp-opt call's output equals the unsharded call's on every rank"
                               if all_equal else "MISMATCH"))
        out = {"model": model_kwargs, "batch": a.batch, "prompt": a.prompt, "new_tokens": a.new_tokens,
               "model_bytes": model_bytes, "units": units, "rounds": a.rounds, "warmup": a.warmup,
               "repeats": a.repeats, "libs": dict(libs), "cpu_transports": transports, "rows": rows,
               "all_bitwise_equal": all_equal, "transport_ok": transport_ok,
               "loop_calls": a.loop_calls,
               **bc.run_record(load_start, os.getloadavg(), {"sharded": {"cmd": cmd}}, wall_s, argv,
                               tables["barrier"] + [""] + tables["row"])}
        if a.json:
            bc.write_json(a.json, out)
        return 0 if all_equal and transport_ok else 1


if __name__ == "__main__":
    sys.exit(main())
