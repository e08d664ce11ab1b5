#!/usr/bin/env python3
"""What an entry call costs beyond its collective: fsdp-opt's call against a raw c10d all-gather
of the same bytes plus the unsharded call, W=2, CPU, Gloo, in ONE run (docs/runtime.md, "The
cost of an entry call"; docs/benchmarks.md section 5).

For each entry call (`generate(ids, 0)`, which gathers and returns at once; `forward(ids)`;
`generate(ids, N)`) five configurations run in the same pair of rank processes, interleaved
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
  sequence   raw, then the unsharded call, timed as one: what gathering by hand and then calling
             costs, the two sharing the machine as they do inside fsdp-opt's call (on two cores,
             the collective's threads and the other rank still run when the call starts)
  fsdp-opt   the rank file's call (root and every Block a unit, default pipeline, W=2)

ms: the median over all timed calls of the slower rank's wall time. ratio = fsdp-opt /
(unsharded + raw): the target is at most 1.2; fsdp-opt / sequence is printed beside it.
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

KINDS = ("unsharded", "raw", "raw_shared", "sequence", "fsdp")


def _entries(new_tokens):
    """(name, method, extra args) of every entry call measured."""
    return [("generate(ids, 0)", "generate", [0]), ("forward(ids)", "forward", []),
            ("generate(ids, %d)" % new_tokens, "generate", [new_tokens])]


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

            def raw(send=send, recv=recv, group=raw_group):
                if send.numel():
                    dist.all_gather_into_tensor(recv, send, group=group)
                return recv

            fsdp = bc.CallConfig(lambda f=m_sh, args=args: f(*args))
            fsdp.before = ctx.reset_stats
            fsdp.after = lambda conf=fsdp: conf.per_call.append(ctx.stats())
            confs["%d:unsharded" % i] = bc.CallConfig(lambda f=m_orig, args=args: f(*args))
            confs["%d:raw" % i] = bc.CallConfig(raw)
            confs["%d:raw_shared" % i] = bc.CallConfig(lambda raw=raw: raw(group=None))
            confs["%d:sequence" % i] = bc.CallConfig(lambda f=m_orig, args=args, raw=raw: (raw(), f(*args))[1])
            confs["%d:fsdp" % i] = fsdp
            info[i] = {"stats": s, "raw_bytes_per_rank": per_rank,
                       "bitwise_equal": bool(torch.equal(out_sh, m_orig(*args)))}
        # One entry call after the other, each timed interleaved with its four baselines: a
        # program calling one entry method over and over (a Python loop calling generate per
        # token), whose collectives repeat call after call.
        for i in bc.rotated(list(info), a.get("offset", 0)):
            names = ["%d:%s" % (i, k) for k in KINDS]
            bc.time_interleaved(confs, bc.rotated(names, a.get("offset", 0)), a["warmup"], a["repeats"])
    for i in info:
        per_call = confs["%d:fsdp" % i].per_call
        info[i]["all_gathers"] = sum(s["all_gathers"] for s in per_call) / len(per_call)
        info[i]["bytes_gathered"] = sum(s["bytes_gathered"] for s in per_call) / len(per_call)
        info[i]["agreements"] = sum(s["agreements"] for s in per_call) / len(per_call)
        info[i]["shm_rounds"] = sum(s["shm_rounds"] for s in per_call) / len(per_call)
        info[i]["bitwise_equal"] = info[i]["bitwise_equal"] and torch.equal(
            confs["%d:fsdp" % i].first, confs["%d:unsharded" % i].first)
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
        a.prompt, a.new_tokens, a.rounds, a.warmup, a.repeats = 4, 2, 1, 1, 2
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
                  "warmup": a.warmup, "repeats": a.repeats}
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

        rows, lines = [], []
        all_equal = True
        for label, path in libs:
            for i, (name, method, extra) in enumerate(entries):
                ms = {k: 1e3 * median(per_call[label]["%d:%s" % (i, k)]) for k in KINDS}
                cpu = {k: 1e3 * median(cpu_call[label]["%d:%s" % (i, k)]) for k in KINDS}
                rank_infos = [ri[i] for round_infos in infos[label] for ri in round_infos]
                equal = all(x["bitwise_equal"] for x in rank_infos)
                all_equal = all_equal and equal
                info = rank_infos[-1]
                base = ms["unsharded"] + ms["raw"]
                row = {"entry": name, "runtime": label, "runtime_lib": path, "method": method, "args": extra,
                       "ms": ms, "cpu_ms": cpu,
                       "ms_all": {k: [1e3 * t for t in per_call[label]["%d:%s" % (i, k)]] for k in KINDS},
                       "baseline_ms": base, "ratio": ms["fsdp"] / base if base else float("nan"),
                       "ratio_to_sequence": ms["fsdp"] / ms["sequence"] if ms["sequence"] else float("nan"),
                       "all_gathers": info["all_gathers"], "agreements": info["agreements"],
                       "bytes_gathered": info["bytes_gathered"], "raw_bytes_per_rank": info["raw_bytes_per_rank"],
                       "predicted_gathers": predicted.get(method), "bitwise_equal": equal,
                       "cpu_transport": transport_of[label], "shm_rounds": info["shm_rounds"]}
                rows.append(row)
                lines.append(((name + (" [%s]" % label if len(libs) > 1 else "")), "%.3f" % ms["unsharded"],
                              "%.3f" % ms["raw"], "%.3f" % ms["raw_shared"], "%.3f" % base,
                              "%.3f" % ms["sequence"], "%.3f" % ms["fsdp"],
                              "%.2f" % row["ratio"], "%.2f" % row["ratio_to_sequence"],
                              "%s + %s" % (fmt_count(row["all_gathers"]), fmt_count(row["agreements"])),
                              fmt_bytes(row["bytes_gathered"]), "yes" if equal else "NO"))
        head = ("entry call", "unsharded ms", "raw all-gather ms", "raw, barrier's group ms", "sum ms",
                "raw then unsharded ms", "fsdp-opt ms", "ratio", "ratio to sequence",
                "gathers + agreements", "bytes gathered", "output == unsharded")
        table = bc.print_table(head, lines)
        n_timed = len(per_call[libs[0][0]]["0:fsdp"])
        print("ms: median over %d timed calls (%d rounds x %d) of the slower rank's wall time, after %d warmup "
              "calls each; raw all-gather: one torch.distributed all_gather_into_tensor (gloo) of the call's "
              "bytes on a group of its own (raw, barrier's group: on the group of the barrier before every "
              "call); sum = unsharded + raw all-gather; raw then unsharded: the two as one timed call; "
              "ratio = fsdp-opt / sum; ratio to sequence = "
              "fsdp-opt / raw then unsharded; gathers + agreements: the collectives of one fsdp-opt call "
              "(fsdp::stats() all_gathers, agreements); %.0f s in all" % (n_timed, a.rounds, a.repeats, a.warmup, wall_s))
        for row in rows:
            ok = row["ratio"] <= 1.2
            print("target %-22s fsdp-opt <= 1.2 x (unsharded + raw all-gather) %s (ratio %.2f%s)"
                  % (row["entry"], "MET" if ok else "NOT MET", row["ratio"],
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
               **bc.run_record(load_start, os.getloadavg(), {"sharded": {"cmd": cmd}}, wall_s, argv, table)}
        if a.json:
            bc.write_json(a.json, out)
        return 0 if all_equal and transport_ok else 1


if __name__ == "__main__":
    sys.exit(main())
