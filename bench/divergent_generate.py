#!/usr/bin/env python3
"""A stop-divergent generate under fsdp-opt vs eager FSDP2 with HF-style synced decoding, CPU +
Gloo, W=2, in ONE run (SPEC section 11; issue 11, item 6).

StopGPT.generate_until(idx, max_new_tokens, eos) (test/Inputs/divergent_models.py) decodes
greedily and stops once every row emitted `eos`. Both ranks get the same prompt (batch 1); rank
0's eos is the first token the model emits, so its generation stops after 1 token, and rank 1's
eos is -1, so it runs all max_new_tokens steps. Same weights for every configuration:

  a                  the original TorchScript model, unsharded, one process per rank, each
                     running its own arguments, no communication: the limit
  ours               fsdp-opt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate_until
                     --world-size=2 --max-unsharded-bytes=<root + one block> (from manifest.json):
                     the block gathers stay in the decoding loop, and rank-uniform-control-flow
                     makes the loop run while ANY rank continues (one fsdp::rank_any per
                     iteration, plus one before the loop); a finished rank joins the collectives
                     and skips the computation
  ours_nobudget      the same without a budget (default pipeline): every unit is held for the
                     whole call (plan-gather-lifetimes), one collective, and the loop needs no
                     agreement; rank 0 leaves after one step
  fsdp2_synced       FSDP2: fully_shard on every block and the root, reshard_after_forward=True,
                     register_fsdp_forward_method(model, "generate_synced"), where generate_synced
                     is greedy decoding written like Hugging Face's synced_gpus=True loop: every
                     step the ranks all-reduce a "this rank still runs" flag and stop when the sum
                     is 0; a finished rank still runs forward on its last tokens (a dummy step whose
                     result it drops) so that its collectives match the other ranks'
  fsdp2_synced_keep  the same with reshard_after_forward=False (every unit gathered once per call;
                     each FSDP module is reshard()ed after the call, as FSDP2 never reshards on its
                     own without a backward): the memory-equal counterpart of ours_nobudget

Method (as bench/generate_vs_eager.py): one intra-op thread per process; --rounds rounds, each a
fresh pair of rank processes that sets up every configuration, warms each up with --warmup
untimed calls, then runs --repeats passes over all of them, one call per configuration per
pass, in an order rotated by one every pass, with a torch.distributed barrier (untimed) before
every timed call. ms per call is the median over timed calls of max(rank 0's time, rank 1's
time) for EVERY configuration, (a) included: the ranks do different work here (1 step vs all
of them), and a call of the job ends when its slower rank ends. CPU ms is the same for
time.process_time(); it is also given per rank, since rank 0's CPU time is where skipping the
computation (ours) and running dummy forwards (FSDP2) differ.

Counting: ours read torch.ops.fsdp.stats() around every timed call (all_gathers; agreements =
fsdp::rank_any calls). Eager FSDP2 runs one extra, untimed call under the TorchDispatchMode
generate_vs_eager uses too (bench_common.count_eager_call), which sees every c10d collective:
all-gathers and all-reduces (the synced flag). Every configuration's tokens, on each rank and
every call, must equal (a)'s for that rank, bit for bit; ours' agreements must be 1 + the
decoding steps the longer rank runs. The script exits 1 otherwise.

    python bench/divergent_generate.py            # full run: table, bench/results/divergent_generate.json
    python bench/divergent_generate.py --quick    # smoke: tiny model, 4 new tokens, 1 round, 1 repeat
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # rank processes import this file by its path: bench_common is beside it
    sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
from bench_common import ROOT, fmt_bytes, fmt_count, median  # noqa: E402

CONFIGS = {
    "a": "(a) original, unsharded, 1 process per rank",
    "ours": "ours: fsdp-opt, budget = root + 1 layer",
    "ours_nobudget": "ours: fsdp-opt, no budget (held for the call)",
    "fsdp2_synced": "FSDP2 synced, reshard_after_forward=True",
    "fsdp2_synced_keep": "FSDP2 synced, reshard_after_forward=False",
}
OURS = ("ours", "ours_nobudget")
FSDP2 = ("fsdp2_synced", "fsdp2_synced_keep")


# ---- rank side -------------------------------------------------------------------------------

def _synced_stop_gpt(a):
    """The eager model FSDP2 wraps: StopGPT with the same weights as the scripted file, plus
    generate_synced, defined here (not in divergent_models) so that the scripted model and the
    tests stay as they are."""
    import torch
    import torch.distributed as dist
    import divergent_models as dm

    class SyncedStopGPT(dm.StopGPT):
        def generate_synced(self, idx, max_new_tokens: int, eos: int):
            """StopGPT.generate_until's greedy decoding, synced across ranks the way Hugging
            Face's generate(synced_gpus=True) does it: the flag all-reduce at the top of every
            step, and a finished rank's dummy forward, are what FSDP needs there, since the
            forward's all-gathers must be issued by every rank the same number of times."""
            finished = False
            steps = 0
            flag = torch.zeros(1)
            while True:
                # HF's _has_unfinished_sequences: 1.0 while this rank runs, summed over ranks.
                flag.fill_(0.0 if finished else 1.0)
                dist.all_reduce(flag)
                if flag.item() == 0.0:
                    break
                logits = self.forward(idx[:, max(0, idx.size(1) - self.block_size):])
                if finished:
                    continue  # dummy step: only joins the other ranks' collectives (as HF)
                next_token = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
                idx = torch.cat([idx, next_token], dim=1)
                steps += 1
                # StopGPT's two ways out: every row emitted eos, or max_new_tokens reached
                if bool((next_token == eos).all()) or steps == max_new_tokens:
                    finished = True
            return idx

    model = SyncedStopGPT(**a["model"])
    model.load_state_dict(torch.jit.load(a["model_pt"]).state_dict())
    return model.eval()


def _setup(ctx, cfg, a, args):
    import torch

    if cfg == "a":
        model = torch.jit.load(a["model_pt"])
        return bc.CallConfig(lambda: model.generate_until(*args))

    if cfg in OURS:
        model = ctx.load(os.path.join(a["dirs"][cfg], "rank%d.pt" % ctx.rank))
        conf = bc.CallConfig(lambda: model.generate_until(*args))
        # the runtime's counters are process-wide: zeroed before each call, read after it
        conf.before = ctx.reset_stats
        conf.after = lambda: conf.per_call.append(ctx.stats())

        def counts():
            calls = conf.per_call
            return {"all_gathers": sum(s["all_gathers"] for s in calls) / len(calls),
                    "agreements": sum(s["agreements"] for s in calls) / len(calls),
                    "agreements_all": sorted({s["agreements"] for s in calls}),
                    "peak_unsharded_bytes": max(s["peak_unsharded_bytes"] for s in calls)}
        conf.counts = counts
        return conf

    if cfg in FSDP2:
        model = _synced_stop_gpt(a)
        reshard = cfg == "fsdp2_synced"
        fsdp_modules = bc.fsdp2_shard_blocks(model, ctx.world_size, reshard, ["generate_synced"])

        def call():
            out = model.generate_synced(*args)
            if not reshard:
                for m in fsdp_modules:
                    m.reshard()
            return out

        def counts():
            c = bc.count_eager_call(call, list(model.blocks), lambda: bc.fsdp2_unsharded_bytes(fsdp_modules))
            c["all_reduces"] = sum(n for name, n in c["other_collectives"].items() if "allreduce" in name)
            return c
        return bc.CallConfig(call, counts=counts)

    raise ValueError("unknown configuration %r" % cfg)


def bench_worker(ctx):
    """Sets up every configuration of ctx.args["schedule"] and times them interleaved call by
    call (bench_common.time_interleaved). Returns one result dict per configuration, in
    schedule order."""
    import torch
    a = ctx.args
    args = tuple(torch.load(a["inputs"])[ctx.rank])  # (prompt, max_new_tokens, this rank's eos)
    bc.init_rank(ctx)
    schedule = a["schedule"]
    with torch.no_grad():
        confs = {cfg: _setup(ctx, cfg, a, args) for cfg in schedule}
        bc.time_interleaved(confs, schedule, a["warmup"], a["repeats"])
        results = []
        for cfg in schedule:
            conf = confs[cfg]
            counts = conf.counts() if conf.counts else {"all_gathers": 0}
            results.append({"config": cfg, "rank": ctx.rank, "tokens": conf.first, "times": conf.times,
                            "cpu": conf.cpu, "counts": counts})
    return results


# ---- driver side -----------------------------------------------------------------------------

def _fsdp_opt(tool, model_pt, out, *extra):
    """fsdp-opt with --remarks: whether rank-uniform-control-flow rewrote the loop is what
    this benchmark is about."""
    r = bc.shard_gpt(tool, model_pt, "generate_until", out, "--remarks", *extra)
    r["rank_uniform"] = [l for l in r["stderr"].splitlines()
                         if "[rank-uniform-control-flow]" in l and "generate_until" in l]
    return r


def _pair(values, fmt="%s"):
    return "/".join(fmt % v if v is not None else "-" for v in values)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke mode: tiny model, 4 new tokens, 1 round, 1 warmup, 1 repeat, no JSON")
    bc.add_model_args(p, n_embd=128)
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens (batch 1, the same on both ranks)")
    p.add_argument("--new-tokens", type=int, default=32, help="max_new_tokens: rank 1 runs all of them")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10, help="timed calls per configuration and round")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ",".join(CONFIGS))
    bc.add_build_args(p)
    p.add_argument("--json", help="write the results here (default bench/results/divergent_generate.json; "
                   "none with --quick)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per launch of rank processes")
    a = p.parse_args(argv)
    if a.quick:
        bc.use_tiny_model(a)
        a.prompt, a.new_tokens, a.rounds, a.warmup, a.repeats = 4, 4, 1, 1, 1
    json_path = a.json if a.json is not None else (
        None if a.quick else os.path.join(ROOT, "bench", "results", "divergent_generate.json"))
    configs = bc.parse_configs(a.configs, CONFIGS)
    if "a" not in configs:
        configs.insert(0, "a")
    if a.prompt + a.new_tokens > a.block_size:
        sys.exit("error: prompt + new tokens must fit the block size")

    import torch
    import divergent_models as dm
    import fsdp_models

    tool, lib = bc.fsdp_opt_and_runtime(a.build)
    with bc.scratch_dir(a.work, "fsdp-bench-div.") as work:
        model_kwargs = bc.model_kwargs(a)
        model_pt = os.path.join(work, "stop_gpt.pt")
        scripted = fsdp_models.save(dm.make("stop_gpt", **model_kwargs), model_pt)
        with fsdp_models.seeded(1):
            prompt = torch.randint(0, a.vocab, (1, a.prompt))
        first = int(scripted.generate_until(prompt, 1, -1)[0, -1])
        rank_args = [(prompt, a.new_tokens, first), (prompt, a.new_tokens, -1)]
        inputs = os.path.join(work, "inputs.pt")
        torch.save(rank_args, inputs)
        # what each rank must return, and the decoding steps each runs, from the original model
        want = [scripted.generate_until(*r) for r in rank_args]
        steps = [w.shape[1] - a.prompt for w in want]
        if steps != [1, a.new_tokens]:
            sys.exit("error: rank 0 must stop after 1 token and rank 1 after %d, got %s" % (a.new_tokens, steps))
        loop_steps = max(steps)  # a rank-uniform loop runs while any rank continues

        dirs, opt = {}, {}
        dirs["ours_nobudget"] = os.path.join(work, "ours_nobudget")
        opt["ours_nobudget"] = _fsdp_opt(tool, model_pt, dirs["ours_nobudget"])
        units = {u["path"]: u["bytes"] for u in opt["ours_nobudget"]["manifest"]["units"]}
        budget = units["."] + units["blocks.0"]
        dirs["ours"] = os.path.join(work, "ours")
        opt["ours"] = _fsdp_opt(tool, model_pt, dirs["ours"], "--max-unsharded-bytes=%d" % budget)
        # Without the rewrite the benchmark would measure nothing of section 11 (and hang or fail
        # in the collective fingerprint check): say so and stop.
        if not any("made rank-uniform" in l for l in opt["ours"]["rank_uniform"]):
            sys.exit("error: rank-uniform-control-flow did not rewrite generate_until's loop under the "
                     "budget:\n%s" % "\n".join(opt["ours"]["rank_uniform"]))
        model_bytes = sum(units.values())
        print("model: StopGPT n_layer=%d n_embd=%d n_head=%d vocab=%d block=%d, %s of parameters "
              "(root unit %s, one layer %s); batch 1, prompt %d; rank 0 stops after %d token(s) "
              "(eos=%d), rank 1 after %d (eos=-1); W=2, gloo, CPU"
              % (a.n_layer, a.n_embd, a.n_head, a.vocab, a.block_size, fmt_bytes(model_bytes),
                 fmt_bytes(units["."]), fmt_bytes(units["blocks.0"]), a.prompt, steps[0], first,
                 steps[1]), flush=True)
        print("ours: --max-unsharded-bytes=%d; %s" % (budget, "; ".join(
            l.split("] ", 1)[-1] for l in opt["ours"]["rank_uniform"])), flush=True)

        env = bc.rank_env(lib)
        common = {"model_pt": model_pt, "inputs": inputs, "dirs": dirs, "model": model_kwargs,
                  "warmup": a.warmup, "repeats": a.repeats}
        samples = {c: [] for c in configs}

        load_start = bc.report_load()
        wall_t0 = time.perf_counter()
        for rnd, order, results, seconds in bc.launch_rounds(bench_worker, common, configs, a.rounds,
                                                             a.timeout, env):
            for i, cfg in enumerate(order):
                samples[cfg].append([r[i] for r in results])
            print("round %d/%d: %.1f s" % (rnd, a.rounds, seconds), flush=True)
        wall_s = time.perf_counter() - wall_t0
        load_end = os.getloadavg()

        # ---- aggregate ------------------------------------------------------------------------
        rows = {}
        failures = []
        for cfg in configs:
            per_call, cpu_call, cpu_rank = [], [], [[], []]
            mismatches = []
            for values in samples[cfg]:
                per_call += bc.slower_rank(values, "times")
                cpu_call += bc.slower_rank(values, "cpu")
                for v in values:
                    cpu_rank[v["rank"]] += v["cpu"]
                    got, exp = v["tokens"], want[v["rank"]]
                    if got.dtype != exp.dtype or got.shape != exp.shape or not torch.equal(got, exp):
                        mismatches.append("rank %d" % v["rank"])
            last = {v["rank"]: v["counts"] for v in samples[cfg][-1]}
            rows[cfg] = {
                "label": CONFIGS[cfg],
                "ms": 1e3 * median(per_call),
                "ms_all": [1e3 * t for t in per_call],
                "cpu_ms": 1e3 * median(cpu_call),
                "cpu_ms_rank": [1e3 * median(c) for c in cpu_rank],
                "n_timed": len(per_call),
                "all_gathers": [last[r]["all_gathers"] for r in (0, 1)],
                "agreements": [last[r].get("agreements") for r in (0, 1)],
                "all_reduces": [last[r].get("all_reduces") for r in (0, 1)],
                "peak_unsharded_bytes": [last[r].get("peak_unsharded_bytes") for r in (0, 1)],
                "bitwise_equal": not mismatches,
                "mismatches": sorted(set(mismatches)),
                "predicted_gathers": opt[cfg]["predicted_gathers"] if cfg in opt else None,
            }
            if mismatches:
                failures.append("%s: tokens differ from (a) on %s" % (cfg, ", ".join(sorted(set(mismatches)))))
        if "ours" in rows:
            # one agreement before the loop and one per iteration that any rank runs, on every
            # rank and every call (agreements_all: the distinct per-call values seen)
            seen = {n for v in samples["ours"][-1] for n in v["counts"]["agreements_all"]}
            if seen != {1 + loop_steps}:
                failures.append("ours: agreements per call %s, expected %d (1 + %d steps)"
                                % (sorted(seen), 1 + loop_steps, loop_steps))
        for cfg, r in rows.items():
            if r["all_gathers"][0] != r["all_gathers"][1]:
                failures.append("%s: the ranks issued different numbers of all-gathers %s" % (cfg, r["all_gathers"]))
        ref = rows["fsdp2_synced"]["ms"] if "fsdp2_synced" in rows else None
        for r in rows.values():
            r["vs_a"] = r["ms"] / rows["a"]["ms"]
            r["vs_fsdp2_synced"] = r["ms"] / ref if ref else None

        # ---- table ----------------------------------------------------------------------------
        head = ("configuration", "ms/call", "/ (a)", "/ FSDP2 synced", "CPU ms", "CPU ms r0/r1",
                "all-gathers r0/r1", "agreements r0/r1", "flag all-reduces r0/r1", "peak unsharded",
                "tokens == (a)")
        lines = []
        for cfg in configs:
            r = rows[cfg]
            peak = max([x for x in r["peak_unsharded_bytes"] if x is not None], default=None)
            lines.append((r["label"], "%.1f" % r["ms"], "%.2f" % r["vs_a"],
                          "%.2f" % r["vs_fsdp2_synced"] if r["vs_fsdp2_synced"] else "-",
                          "%.1f" % r["cpu_ms"], _pair(r["cpu_ms_rank"], "%.1f"),
                          _pair([fmt_count(x) for x in r["all_gathers"]]),
                          _pair([fmt_count(x) if x is not None else None for x in r["agreements"]]),
                          _pair([fmt_count(x) if x is not None else None for x in r["all_reduces"]]),
                          fmt_bytes(peak),
                          "yes" if r["bitwise_equal"] else "NO (%s)" % ", ".join(r["mismatches"])))
        table = bc.print_table(head, lines)
        print("ms/call: median over %s timed calls (%d rounds x %d calls, each after %d untimed warmup "
              "calls) of the slower rank's wall time; CPU ms: the same for process CPU time (all threads), "
              "and per rank its own median; all-gathers, agreements (fsdp::rank_any) and the synced "
              "flag's all-reduces per call; %.0f s in all; load average %.1f at start, %.1f at the end"
              % ("/".join(sorted({str(r["n_timed"]) for r in rows.values()})), a.rounds, a.repeats, a.warmup,
                 wall_s, load_start[0], load_end[0]))
        if opt:
            print("fsdp-opt --stats, gathers per call of generate_until: " + "; ".join(
                "%s %s" % (c, opt[c]["predicted_gathers"]) for c in configs if c in opt))
        if a.quick:
            print("(--quick: tiny model, 1 warmup call: timings mean nothing here)")
        print("bitwise: %s" % ("every configuration's tokens equal (a)'s on every rank"
                               if all(r["bitwise_equal"] for r in rows.values()) else "MISMATCH"))
        if "ours" in rows:
            print("ours: %s agreements per call on each rank, 1 + %d decoding steps"
                  % (_pair([fmt_count(x) for x in rows["ours"]["agreements"]]), loop_steps))
        for f in failures:
            print("FAILED: " + f)

        if json_path:
            out = {"model": model_kwargs, "prompt": a.prompt, "new_tokens": a.new_tokens,
                   "eos": [first, -1], "steps": steps, "model_bytes": model_bytes, "units": units,
                   "budget": budget, "rounds": a.rounds, "warmup": a.warmup, "repeats": a.repeats,
                   "configs": configs, "rows": rows, "failures": failures,
                   **bc.run_record(load_start, load_end, opt, wall_s, argv, table)}
            os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
            bc.write_json(json_path, out)
            print("json: %s" % json_path)
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
