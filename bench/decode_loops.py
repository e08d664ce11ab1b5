#!/usr/bin/env python3
"""The decode-loop matrix under fsdp-opt vs unsharded and vs eager FSDP2, CPU + Gloo, W=2, in ONE run
(issue 20, item 8).

Loops (test/Inputs/decoders.py), greedy decoding spelled the ways users write it:

  (a) KVDecoder.generate_while     `while` with the eos test in its condition
  (b) KVDecoder.generate_break     `for` + `if eos: break`
  (c) KVDecoder.generate_cached    prefill, then one cached step per token (List[Tensor] KV cache)
  (d) KVDecoder.generate_helpers   the loop body calls helper methods
  (e) KVDecoder.generate_branch    an `if` in the body picks one of two head units
  (f) HFGenerate.generate          a traced Hugging Face GPT-2 (decoders.traced_hf("gpt2"); no cache: every step recomputes
                                   the sequence) inside a scripted loop written as (b)

Configurations, for every loop, on the same weights and the same prompt (batch 1; eos = -1, so
every rank decodes exactly --new-tokens, --hf-new-tokens for (f)):

  unsharded   the scripted model, unsharded; two independent copies at once (one per rank
              process, no communication), so that they share the machine like a W=2 job
  eager       the same weights as an eager nn.Module, unsharded, the same two copies: (a)-(e) run
              the nn.Module's Python method, (f) runs Hugging Face's own
              `model.generate(input_ids, max_new_tokens=N, do_sample=False, use_cache=True)`
              (KV cache) on the GPT2LMHeadModel: what FSDP2 below costs without any FSDP
  fsdp-opt    fsdp-opt MODEL --world-size=2 <unit flags> (decoders.KV_UNIT_FLAGS: the root, every
              Block, head_a, head_b; decoders.HF_UNIT_FLAGS: the GPT2LMHeadModel and every
              GPT2Block), default pipeline, no budget
  scoped      the no-budget rank files, each call inside `with fsdp_opt.unsharded(model):` (entered
              and left outside the timed call): the rewritten program alone, no collective in
              the call. Against `unsharded`: what the rewrite costs besides its one gather
  budget      the same with --max-unsharded-bytes = the smallest budget any schedule can keep
              (fsdp-opt --max-unsharded-bytes=1 names it): root + one layer
  c10d_then   c10d's all_gather_into_tensor of the model's whole parameter bytes (on a Gloo
              group of its own), then the unsharded scripted call, timed as one call on both
              ranks: what the one gather costs a hand-written loop without any runtime, the
              floor of fsdp-opt's no-budget rows on this transport (a `floor` line per loop)
  ... shm     fsdp-opt's rows again with FSDP_OPT_CPU_TRANSPORT=shm (same-host shared memory in
              place of Gloo's loopback TCP), in a launch of their own per round beside the
              unsharded copies (whose samples join the other launch's)
  FSDP2 T     eager FSDP2: fully_shard on every unit fsdp-opt has (the Blocks and both heads, or
              every GPT2Block), then the root, reshard_after_forward=True, and
              register_fsdp_forward_method(root, METHOD) for the loop's method; (a)-(e) call the
              nn.Module's method, (f) calls Hugging Face's generate as `eager` does (which, on an
              FSDP-managed model with W > 1, syncs the ranks with one all-reduce per step)
  FSDP2 F     the same with reshard_after_forward=False; every FSDP module is reshard()ed after
              each call (without a backward FSDP2 never reshards on its own), so every call
              gathers every unit once, like fsdp-opt without a budget

Method (as bench/generate_vs_eager.py): one intra-op thread per process; --rounds rounds, each a
fresh pair of rank processes that sets up every configuration of every loop, warms each up with
--warmup untimed calls, then runs --repeats passes over all of them, one call per configuration
per pass, in an order rotated by one every pass, with a torch.distributed barrier (untimed)
before every timed call. ms per call: the median over timed calls of the slower rank's wall time
(unsharded and eager: of every call of either copy). CPU ms: the same for time.process_time().

Counting: fsdp-opt's rows read torch.ops.fsdp.stats() around every timed call (all_gathers,
agreements, bytes_gathered, peak_unsharded_bytes: the most unit parameter bytes unsharded at
once). FSDP2's rows run one more, untimed call under bench_common.count_eager_call: a
TorchDispatchMode sees every c10d collective (all-gathers; the rest by name), and the peak is
the largest sum of FSDP2 parameters in state UNSHARDED, at full unpadded size, sampled in a
forward pre-hook of every unit (it runs after FSDP2's own unshard) and once after the call.
Every configuration's tokens, on both ranks and every call, must equal the loop's unsharded
run's, bit for bit; the script exits 1 otherwise. After the timed calls, every round also times
an all-gather of each model's whole parameter bytes alone on torch.distributed's Gloo group: what
the one gather of fsdp-opt's no-budget rows costs, for reading the gap to the unsharded rows.

    python bench/decode_loops.py           # full run: table, targets, --json
    python bench/decode_loops.py --quick   # smoke: 2 layers, 4 new tokens, 1 round, 1 repeat
"""

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # rank processes import this file by its path: bench_common is beside it
    sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
from bench_common import fmt_bytes, fmt_count, median  # noqa: E402

LOOPS = {
    "a": ("kv", "generate_while", "(a) while"),
    "b": ("kv", "generate_break", "(b) for+break"),
    "c": ("kv", "generate_cached", "(c) KV cache"),
    "d": ("kv", "generate_helpers", "(d) helpers"),
    "e": ("kv", "generate_branch", "(e) branch"),
    "f": ("hf", "generate", "(f) HF GPT-2"),
}
KINDS = {
    "unsharded": "unsharded, scripted",
    "eager": "unsharded, eager",
    "fsdp_opt": "fsdp-opt, no budget",
    "scoped": "fsdp-opt, inside unsharded",
    "budget": "fsdp-opt, root + 1 layer",
    "c10d_then": "c10d all-gather, then unsharded",
    "fsdp2_t": "FSDP2, reshard=True",
    "fsdp2_f": "FSDP2, reshard=False",
    "fsdp_opt_shm": "fsdp-opt, no budget, shm",
    "budget_shm": "fsdp-opt, root + 1 layer, shm",
}
SINGLE_PROCESS = ("unsharded", "eager")
OURS = {"fsdp_opt": "nobudget", "budget": "budget", "fsdp_opt_shm": "nobudget", "budget_shm": "budget"}
# Kinds whose rank processes set FSDP_OPT_CPU_TRANSPORT=shm (docs/runtime.md, "The shared-memory
# transport"): the transport is chosen once per process, so they run in a launch of their own,
# beside the unsharded copies again, in every round.
SHM_KINDS = ("fsdp_opt_shm", "budget_shm")


def config_name(loop, kind):
    return "%s/%s" % (loop, kind)


def label(loop, kind):
    """The configuration column: for (f) the eager rows say that they run Hugging Face's generate."""
    if LOOPS[loop][0] == "hf" and kind == "eager":
        return "unsharded, eager HF generate"
    if LOOPS[loop][0] == "hf" and kind.startswith("fsdp2"):
        return KINDS[kind].replace("FSDP2,", "FSDP2 HF generate,")
    return KINDS[kind]


# ---- rank side -------------------------------------------------------------------------------

def _eager_kv(a):
    import torch
    import decoders as dl
    model = dl.kv_decoder(a["kv"]["n_layer"], a["kv"]["d"])
    model.load_state_dict(torch.jit.load(a["models"]["kv"]).state_dict())
    return model.eval()


def _eager_gpt2(a):
    """GPT2LMHeadModel with the traced model's weights; no eos, so that generate runs exactly
    max_new_tokens steps like the scripted loop with eos = -1."""
    import torch
    import decoders as dl
    model = dl.hf_model("gpt2", a["hf"]["n_layer"])
    model.load_state_dict(torch.jit.load(a["models"]["hf"]).model.state_dict())
    model.generation_config.eos_token_id = None
    return model.eval()


def _runtime_counts(per_call):
    """Per call, from fsdp::stats() read after each timed call (zeroed before it)."""
    n = len(per_call)
    return {"all_gathers": sum(s["all_gathers"] for s in per_call) / n,
            "other": {"agreements": sum(s["agreements"] for s in per_call) / n},
            "bytes_gathered": sum(s["bytes_gathered"] for s in per_call) / n,
            "shm_rounds": sum(s["shm_rounds"] for s in per_call) / n,
            "peak_unsharded_bytes": max(s["peak_unsharded_bytes"] for s in per_call),
            "left_unsharded": max(s["unsharded_bytes"] for s in per_call)}


def _setup(ctx, cfg, a, prompts):
    import torch
    loop, kind = cfg.split("/")
    model_key, method, _ = LOOPS[loop]
    idx = prompts[model_key]
    new = a[model_key]["new_tokens"]

    if kind == "unsharded":
        model = torch.jit.load(a["models"][model_key])
        return bc.CallConfig(lambda: getattr(model, method)(idx, new, -1))

    if kind == "c10d_then":
        # What a hand-written loop pays for the one gather over Gloo without any runtime: c10d's
        # all_gather_into_tensor of the model's whole parameter bytes, on a group of its own as
        # the runtime's collectives run on theirs, then the unsharded call, timed as one call.
        # The floor of the no-budget rows on this transport and machine.
        import torch.distributed as dist
        model = torch.jit.load(a["models"][model_key])
        group = dist.new_group(backend="gloo")
        w = dist.get_world_size()
        nbytes = a["probe_bytes"][model_key]
        shard = torch.zeros((nbytes // 4 + w - 1) // w)
        full = torch.empty(shard.numel() * w)

        def gather_then_call():
            dist.all_gather_into_tensor(full, shard, group=group)
            return getattr(model, method)(idx, new, -1)
        gathered = full.numel() * full.element_size()
        return bc.CallConfig(gather_then_call, counts=lambda: {
            "all_gathers": 1, "other": {}, "bytes_gathered": gathered, "peak_unsharded_bytes": gathered})

    if kind in OURS or kind == "scoped":
        model = ctx.load(os.path.join(a["dirs"][model_key][OURS.get(kind, "nobudget")], "rank%d.pt" % ctx.rank))
        conf = bc.CallConfig(lambda: getattr(model, method)(idx, new, -1))
        # The runtime's counters are process-wide: zero them before each call, read after.
        conf.before = ctx.reset_stats
        conf.after = lambda: conf.per_call.append(ctx.stats())
        conf.counts = lambda: _runtime_counts(conf.per_call)
        if kind == "scoped":  # the same calls, each inside an unshard scope opened before it
            import fsdp_harness
            scope = fsdp_harness.fsdp_opt_package().unsharded(model)

            def enter():
                scope.__enter__()
                ctx.reset_stats()

            def leave():
                conf.per_call.append(ctx.stats())
                scope.__exit__(None, None, None)
            conf.before, conf.after = enter, leave
        return conf

    if model_key == "kv":
        model = _eager_kv(a)
        units = list(model.blocks) + [model.head_a, model.head_b]

        def run():
            return getattr(model, method)(idx, new, -1)
    else:
        model = _eager_gpt2(a)
        units = list(model.transformer.h)

        def run():
            return model.generate(idx, max_new_tokens=new, do_sample=False, use_cache=True)

    if kind == "eager":
        return bc.CallConfig(run)

    fsdp_modules = bc.fsdp2_shard_units(model, units, ctx.world_size, kind == "fsdp2_t", [method])

    def call():
        out = run()
        if kind == "fsdp2_f":
            for m in fsdp_modules:
                m.reshard()
        return out

    def counts():
        c = bc.count_eager_call(call, units, lambda: bc.fsdp2_unsharded_bytes(fsdp_modules))
        return {"all_gathers": c["all_gathers"], "other": c["other_collectives"],
                "bytes_gathered": c["bytes_gathered"], "peak_unsharded_bytes": c["peak_unsharded_bytes"]}
    return bc.CallConfig(call, counts=counts)


def bench_worker(ctx):
    """Sets up every configuration of ctx.args["schedule"] and times them interleaved call by
    call (bench_common.time_interleaved). Returns one result dict per configuration."""
    import torch
    import transformers  # noqa: F401  (every process carries the same modules)
    a = ctx.args
    prompts = torch.load(a["prompts"])
    bc.init_rank(ctx)
    schedule = a["schedule"]
    with torch.no_grad():
        confs = {cfg: _setup(ctx, cfg, a, prompts) for cfg in schedule}
        bc.time_interleaved(confs, schedule, a["warmup"], a["repeats"])
        results = []
        for cfg in schedule:
            conf = confs[cfg]
            counts = conf.counts() if conf.counts else None
            results.append({"config": cfg, "rank": ctx.rank, "tokens": conf.first, "times": conf.times,
                            "cpu": conf.cpu, "counts": counts})
        results.append({"config": "probe", "times": _probe_gathers(a["probe_bytes"], a["repeats"] * 2)})
    return results


def _probe_gathers(probe_bytes, n):
    """Seconds each of n all-gathers of every model's whole parameter bytes takes alone on
    torch.distributed's Gloo group (not the fsdp runtime's, which splits large gathers over its
    threads): the price of the one gather fsdp-opt's no-budget rows pay per call."""
    import torch
    import torch.distributed as dist
    out = {}
    for key, nbytes in probe_bytes.items():
        w = dist.get_world_size()
        shard = torch.zeros((nbytes // 4 + w - 1) // w)
        full = torch.empty(shard.numel() * w)
        times = []
        for i in range(n + 2):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_gather_into_tensor(full, shard)
            if i >= 2:
                times.append(time.perf_counter() - t0)
        out[key] = times
    return out


# ---- driver side -----------------------------------------------------------------------------

def _fsdp_opt(tool, src, flags, out=None):
    cmd = [tool, src, "--world-size=%d" % bc.WORLD_SIZE] + flags + (["--stats", "-o", out] if out else [])
    return cmd, subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def shard(tool, src, unit_flags, work, name):
    """fsdp-opt without a budget and with the least one: the rank files, the commands, --stats
    and the unit sizes the manifest records."""
    import json
    opt = {}
    out = os.path.join(work, name + "-nobudget")
    cmd, r = _fsdp_opt(tool, src, unit_flags, out)
    if r.returncode:
        sys.exit("error: %s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stderr))
    opt["nobudget"] = {"cmd": cmd, "dir": out, "stats": r.stdout}
    cmd, r = _fsdp_opt(tool, src, unit_flags + ["--max-unsharded-bytes=1"])
    marker = "smallest budget any schedule can keep is "
    if r.returncode == 0 or marker not in r.stderr:
        sys.exit("error: %s did not name the smallest budget:\n%s" % (" ".join(cmd), r.stderr))
    least = int(r.stderr.split(marker)[1].split()[0])
    out = os.path.join(work, name + "-budget")
    cmd, r = _fsdp_opt(tool, src, unit_flags + ["--max-unsharded-bytes=%d" % least], out)
    if r.returncode:
        sys.exit("error: %s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stderr))
    opt["budget"] = {"cmd": cmd, "dir": out, "stats": r.stdout}
    with open(os.path.join(out, "manifest.json")) as f:
        units = {u["path"]: u["bytes"] for u in json.load(f)["units"]}
    return opt, least, units


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke mode: 2 layers, d=32, prompt 4, 4 new tokens, 1 round, 2 warmups, 1 repeat")
    p.add_argument("--n-layer", type=int, default=4, help="KVDecoder layers")
    p.add_argument("--d", type=int, default=128, help="KVDecoder width")
    p.add_argument("--new-tokens", type=int, default=32, help="KVDecoder tokens per call")
    p.add_argument("--hf-n-layer", type=int, default=4, help="GPT-2 layers")
    p.add_argument("--hf-new-tokens", type=int, default=16, help="GPT-2 tokens per call")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens (batch 1)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3, help="untimed calls per configuration and round (TorchScript optimises a graph on its second call)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per configuration and round")
    p.add_argument("--loops", default=",".join(LOOPS), help="comma-separated subset of " + ",".join(LOOPS))
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS))
    bc.add_build_args(p)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per launch of rank processes")
    a = p.parse_args(argv)
    if a.quick:
        a.n_layer, a.d, a.new_tokens, a.hf_n_layer, a.hf_new_tokens = 2, 32, 4, 2, 4
        a.prompt, a.rounds, a.warmup, a.repeats = 4, 1, 2, 1
    loops = bc.parse_configs(a.loops, LOOPS)
    kinds = bc.parse_configs(a.kinds, KINDS)
    for k in ("unsharded", "fsdp2_t"):  # the ratios' denominators
        if k not in kinds:
            kinds.append(k)
    kinds = [k for k in KINDS if k in kinds]

    import torch
    import decoders as dl
    import fsdp_harness
    if "f" in loops:
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("note: no transformers in this Python: loop (f) left out")
            loops.remove("f")

    tool, lib = bc.fsdp_opt_and_runtime(a.build)
    with bc.scratch_dir(a.work, "fsdp-bench-decode.") as work:
        assert a.prompt + max(a.new_tokens, a.hf_new_tokens) <= 64, "prompt + new tokens must fit 64 positions"
        models, prompts, opt, dirs, budgets, units = {}, {}, {}, {}, {}, {}
        shapes = {"kv": {"n_layer": a.n_layer, "d": a.d, "new_tokens": a.new_tokens},
                  "hf": {"n_layer": a.hf_n_layer, "new_tokens": a.hf_new_tokens}}
        wanted = [k for k in ("kv", "hf") if any(LOOPS[lp][0] == k for lp in loops)]
        t0 = time.perf_counter()
        for key in wanted:
            models[key] = os.path.join(work, key + ".pt")
            if key == "kv":
                scripted = torch.jit.script(dl.kv_decoder(a.n_layer, a.d))
                vocab, flags = 67, dl.KV_UNIT_FLAGS
            else:
                scripted = torch.jit.script(dl.HFGenerate(dl.traced_hf("gpt2", a.hf_n_layer)))
                vocab, flags = 128, dl.HF_UNIT_FLAGS["gpt2"]
            scripted.save(models[key])
            prompts[key] = torch.randint(0, vocab, (1, a.prompt), generator=torch.Generator().manual_seed(1))
            o, budgets[key], units[key] = shard(tool, models[key], flags, work, key)
            dirs[key] = {k: v["dir"] for k, v in o.items()}
            for k, v in o.items():
                opt["%s-%s" % (key, k)] = v
        prompts_pt = os.path.join(work, "prompts.pt")
        torch.save(prompts, prompts_pt)
        for key in wanted:
            u = units[key]
            root = "." if key == "kv" else "model"
            layer = "blocks.0" if key == "kv" else "model.transformer.h.0"
            layer = layer if layer in u else max(u, key=lambda p: u[p] if p != root else -1)
            print("model %s: %s; %s of parameters in %d units (root %s, one layer %s); least budget "
                  "%d bytes (root + one layer = %d); %d new tokens per call"
                  % (key, "KVDecoder n_layer=%d d=%d vocab=67" % (a.n_layer, a.d) if key == "kv" else
                     "traced GPT-2 n_layer=%d n_embd=64 vocab=128" % a.hf_n_layer,
                     fmt_bytes(sum(u.values())), len(u), fmt_bytes(u[root]), fmt_bytes(u[layer]),
                     budgets[key], u[root] + u[layer], shapes[key]["new_tokens"]), flush=True)
        print("prompt: batch 1, %d tokens, eos -1; W=%d, gloo, CPU, 1 thread per process; setup %.1f s"
              % (a.prompt, bc.WORLD_SIZE, time.perf_counter() - t0), flush=True)

        configs = [config_name(lp, k) for lp in loops for k in kinds]
        probe_bytes = {key: sum(units[key].values()) for key in wanted}
        common = {"models": models, "prompts": prompts_pt, "dirs": dirs, "kv": shapes["kv"], "hf": shapes["hf"],
                  "warmup": a.warmup, "repeats": a.repeats, "probe_bytes": probe_bytes}
        env = bc.rank_env(lib)
        samples = {c: [] for c in configs}
        probes = {key: [] for key in wanted}
        load_start = bc.report_load()
        wall_t0 = time.perf_counter()
        launches = [("gloo", [c for c in configs if c.split("/")[1] not in SHM_KINDS], env)]
        shm_configs = [c for c in configs if c.split("/")[1] in SHM_KINDS]
        if shm_configs:
            shm_env = dict(env, FSDP_OPT_CPU_TRANSPORT="shm")
            launches.append(("shm", [c for c in configs if c.split("/")[1] == "unsharded"] + shm_configs, shm_env))
        for rnd in range(a.rounds):
            for transport, launch_configs, launch_env in bc.rotated(launches, rnd):
                t0 = time.perf_counter()
                schedule = bc.rotated(launch_configs, rnd)
                values = bc.launch_ranks(bench_worker, dict(common, schedule=schedule),
                                         "round %d (%s)" % (rnd + 1, transport), a.timeout, launch_env)
                for i, cfg in enumerate(schedule):
                    samples[cfg].append([v[i] for v in values])
                for key in wanted:  # the probe: after the configurations, on the same processes
                    probes[key] += [max(ts) for ts in zip(*[v[-1]["times"][key] for v in values])]
                print("round %d/%d (%s): %.1f s" % (rnd + 1, a.rounds, transport, time.perf_counter() - t0), flush=True)
        wall_s = time.perf_counter() - wall_t0
        load_end = os.getloadavg()

        # ---- aggregate ------------------------------------------------------------------------
        rows = {}
        for cfg in configs:
            loop, kind = cfg.split("/")
            model_key, method, _ = LOOPS[loop]
            want = samples[config_name(loop, "unsharded")][0][0]["tokens"]
            per_call, cpu_call = bc.call_times(samples[cfg], kind in SINGLE_PROCESS)
            mismatches = []
            for values in samples[cfg]:
                for v in values:
                    t = v["tokens"]
                    if t.dtype != want.dtype or t.shape != want.shape or not torch.equal(t, want):
                        mismatches.append("rank %d" % v["rank"])
            counts = samples[cfg][-1][0]["counts"] or {}
            predicted = None
            if kind in OURS:
                iterations = dl.loop_iterations(method, a.prompt, want.size(1))
                predicted = fsdp_harness.gathers_per_call(opt["%s-%s" % (model_key, OURS[kind])]["stats"],
                                                             method, iterations)
            # The two unsharded copies also meet at the barrier before every call, so their slower
            # copy per call is the same statistic as a W=2 row's: what two ranks in lockstep cost
            # with no collective at all. Without it a W=2 row pays for the wait on the later rank
            # that an independent copy's median never sees.
            lockstep, _ = bc.call_times(samples[cfg], False)
            rows[cfg] = {"loop": loop, "kind": kind, "method": method, "model": model_key,
                         "ms_lockstep": 1e3 * median(lockstep),
                         "label": label(loop, kind), "ms": 1e3 * median(per_call), "ms_all": [1e3 * t for t in per_call],
                         "cpu_ms": 1e3 * median(cpu_call), "n_timed": len(per_call),
                         "all_gathers": counts.get("all_gathers"), "other_collectives": counts.get("other", {}),
                         "bytes_gathered": counts.get("bytes_gathered"), "shm_rounds": counts.get("shm_rounds"),
                         "peak_unsharded_bytes": counts.get("peak_unsharded_bytes"),
                         "left_unsharded_bytes": counts.get("left_unsharded"),
                         "predicted_gathers": predicted, "tokens": want[0].tolist(),
                         "bitwise_equal": not mismatches, "mismatches": mismatches}
        for r in rows.values():
            base, ref = rows[config_name(r["loop"], "unsharded")], rows[config_name(r["loop"], "fsdp2_t")]
            r["vs_unsharded"] = r["ms"] / base["ms"]
            r["vs_unsharded_lockstep"] = r["ms"] / base["ms_lockstep"]
            r["vs_fsdp2_t"] = r["ms"] / ref["ms"]
            r["cpu_vs_unsharded"] = r["cpu_ms"] / base["cpu_ms"]
            r["cpu_vs_fsdp2_t"] = r["cpu_ms"] / ref["cpu_ms"]

        # ---- table ----------------------------------------------------------------------------
        def other(r):
            o = {k.replace("c10d.", ""): v for k, v in r["other_collectives"].items() if v}
            return ", ".join("%s %s" % (fmt_count(v), k) for k, v in sorted(o.items())) or "0"

        head = ("loop", "configuration", "ms/call", "/ unsharded", "/ lockstep", "/ FSDP2 T", "CPU ms", "all-gathers",
                "other collectives", "bytes gathered", "peak unsharded", "tokens equal")
        lines = []
        for cfg in configs:
            r = rows[cfg]
            counted = r["kind"] not in SINGLE_PROCESS
            lines.append((LOOPS[r["loop"]][2], r["label"], "%.1f" % r["ms"], "%.2f" % r["vs_unsharded"],
                          "%.2f" % r["vs_unsharded_lockstep"], "%.2f" % r["vs_fsdp2_t"], "%.1f" % r["cpu_ms"],
                          fmt_count(r["all_gathers"]) if counted else "0", other(r) if counted else "0",
                          fmt_bytes(r["bytes_gathered"]) if counted else "-",
                          fmt_bytes(r["peak_unsharded_bytes"]) if counted else "-",
                          "yes" if r["bitwise_equal"] else "NO (%s)" % ", ".join(r["mismatches"])))
        table = bc.print_table(head, lines)
        print("ms/call: median over %s timed calls (%d rounds x %d) of the slower rank's wall time (unsharded "
              "rows: of every call of both copies); / lockstep: over the unsharded copies' slower copy per call "
              "(both meet at the barrier before every call, as the ranks do); CPU ms: the same for process "
              "CPU time; counts per call; "
              "%.0f s in all; load average %.1f %.1f %.1f at start, %.1f %.1f %.1f at the end"
              % ("/".join(sorted({str(r["n_timed"]) for r in rows.values()})), a.rounds, a.repeats, wall_s,
                 *load_start, *load_end))

        # ---- targets --------------------------------------------------------------------------
        targets = []

        def target(loop, name, metric, ok, detail):
            targets.append({"loop": loop, "target": name, "metric": metric, "met": bool(ok), "detail": detail})
            print("target %-13s %-52s %-5s %-7s (%s)" % (LOOPS[loop][2], name, metric, "MET" if ok else "NOT MET",
                                                          detail))

        for loop in loops:
            r = {k: rows.get(config_name(loop, k)) for k in KINDS}
            for key, metric in (("ms", "wall"), ("cpu_ms", "CPU")):
                u, t = r["unsharded"][key], r["fsdp2_t"][key]
                for no_budget, budget, over in (("fsdp_opt", "budget", ""), ("fsdp_opt_shm", "budget_shm", " (shm)")):
                    if r[no_budget]:
                        b = r[no_budget][key]
                        target(loop, "no budget%s within 1.1x of unsharded" % over, metric, b <= 1.1 * u,
                               "%.2fx" % (b / u))
                        if key == "ms":
                            ul = r["unsharded"]["ms_lockstep"]
                            target(loop, "no budget%s within 1.1x of unsharded lockstep" % over, metric,
                                   b <= 1.1 * ul, "%.2fx" % (b / ul))
                        target(loop, "no budget%s >= 3x faster than FSDP2 T" % over, metric, t >= 3 * b,
                               "%.2fx" % (t / b))
                    if r[budget]:
                        b2 = r[budget][key]
                        target(loop, "budget%s faster than FSDP2 T" % over, metric, b2 < t, "%.2fx" % (t / b2))
            for kind in ("budget", "budget_shm"):
                if r[kind]:
                    pb, pt = r[kind]["peak_unsharded_bytes"], r["fsdp2_t"]["peak_unsharded_bytes"]
                    target(loop, "%s peak unsharded <= FSDP2 T" % kind.replace("_shm", " (shm)"), "bytes", pb <= pt,
                           "%d vs %d" % (pb, pt))
        probe_ms = {key: 1e3 * median(probes[key]) for key in wanted}
        print("one all-gather of the whole model alone (torch.distributed gloo, median of %d, slower rank): %s"
              % (len(probes[wanted[0]]), "; ".join("%s %s in %.1f ms" % (key, fmt_bytes(probe_bytes[key]), probe_ms[key])
                                                  for key in wanted)))
        print("fsdp-opt --stats, gathers per call predicted / counted: " + "; ".join(
            "%s %s %s/%s" % (LOOPS[r["loop"]][2], r["kind"].replace("fsdp_opt", "no budget").replace("_shm", " (shm)"),
                             r["predicted_gathers"], fmt_count(r["all_gathers"]))
            for r in rows.values() if r["kind"] in OURS))
        for loop in loops:
            r = {k: rows.get(config_name(loop, k)) for k in ("unsharded", "scoped", "fsdp_opt")}
            if not (r["scoped"] and r["fsdp_opt"]):
                continue
            u, g = r["unsharded"]["ms"], probe_ms[LOOPS[loop][0]]
            print("gap %-13s fsdp-opt %.1f ms = %.2fx unsharded; inside unsharded (the rewrite, no collective) "
                  "%.2fx; unsharded + one raw all-gather %.2fx; the rest %.1f ms"
                  % (LOOPS[loop][2], r["fsdp_opt"]["ms"], r["fsdp_opt"]["ms"] / u, r["scoped"]["ms"] / u, (u + g) / u,
                     r["fsdp_opt"]["ms"] - r["scoped"]["ms"] - g))
        for loop in loops:
            r = {k: rows.get(config_name(loop, k)) for k in ("unsharded", "c10d_then", "fsdp_opt")}
            if not (r["c10d_then"] and r["fsdp_opt"]):
                continue
            u, c = r["unsharded"]["ms"], r["c10d_then"]["ms"]
            print("floor %-13s c10d all-gather then unsharded %.1f ms = %.2fx unsharded (%.2fx lockstep); "
                  "fsdp-opt no budget %.2fx of it"
                  % (LOOPS[loop][2], c, c / u, c / r["unsharded"]["ms_lockstep"], r["fsdp_opt"]["ms"] / c))
        # Inside a scope the calls gather nothing (docs/runtime.md, "Unshard scopes").
        counts_ok = all((r["predicted_gathers"] == r["all_gathers"] and not r["left_unsharded_bytes"])
                        if r["kind"] in OURS else r["all_gathers"] == 0
                        for r in rows.values() if r["kind"] in OURS or r["kind"] == "scoped")
        print("fsdp-opt counts: %s" % ("as --stats predicts, nothing left unsharded after a call, none inside a scope"
                                       if counts_ok
                                       else "DIFFER from --stats or something stayed unsharded"))
        # The transport each row claims is the one that ran: shm rounds in every call of the shm
        # rows, none in the others.
        transport_ok = all((r["shm_rounds"] or 0) > 0 if r["kind"] in SHM_KINDS else not r["shm_rounds"]
                           for r in rows.values() if r["kind"] in OURS or r["kind"] == "scoped")
        print("transport: %s" % ("the shm rows went over shared memory, the others over Gloo" if transport_ok
                                 else "WRONG: a row's collectives did not use the transport it names"))
        same_kv = sorted({str(rows[config_name(lp, "unsharded")]["tokens"]) for lp in loops if lp in "abcd"})
        if len(same_kv) > 1:
            print("note: loops (a)-(d) of the KVDecoder decode different tokens from each other")
        all_equal = all(r["bitwise_equal"] for r in rows.values())
        print("tokens: %s" % ("every configuration of each loop equals its unsharded run on both ranks, every call"
                              if all_equal else "MISMATCH in " + ", ".join(c for c in configs
                                                                          if not rows[c]["bitwise_equal"])))
        if a.quick:
            print("(--quick: tiny models, 2 warmup calls, 1 timed: timings and targets mean nothing here)")

        out = {"shapes": shapes, "prompt": a.prompt, "budgets": budgets, "units": units,
               "rounds": a.rounds, "warmup": a.warmup, "repeats": a.repeats, "loops": loops, "kinds": kinds,
               "rows": rows, "targets": targets, "probe_bytes": probe_bytes, "probe_gather_ms": probe_ms, "all_bitwise_equal": all_equal, "counts_as_predicted": counts_ok, "transport_ok": transport_ok,
               **bc.run_record(load_start, load_end, opt, wall_s, argv, table)}
        if a.json:
            bc.write_json(a.json, out)
        return 0 if all_equal and counts_ok and transport_ok else 1


if __name__ == "__main__":
    sys.exit(main())
