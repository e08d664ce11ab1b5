#!/usr/bin/env python3
"""A training step of a GPT decoder under fsdp-opt vs eager FSDP2/FSDP1, CPU + Gloo, W=2, in ONE run.

One step = zero_grad(set_to_none=True), forward, cross-entropy loss, backward, AdamW step
(foreach=False). Same model, same initial weights, same per-rank batches (rank r's batch s is the
same for every configuration), same machine, interleaved step by step. Configurations:

  a        the original TorchScript model, unsharded, in each rank process, trained on that
           rank's batches with NO communication (no gradient averaging): the compute limit,
           not a data-parallel run; its parameters are not compared
  ours     fsdp-opt --fsdp-unit=. --fsdp-unit=blocks.* --world-size=2: default pipeline, no
           budget; the rank files trained as they are (parameters are shard-shaped leaves,
           backward re-gathers each unit and leaves the rank's rows of the mean gradient)
  ours_b   the same with --max-unsharded-bytes = root unit + one block (from manifest.json)
  d_rt     FSDP2: fully_shard on every block and the root, reshard_after_forward=True
  d_rf     the same with reshard_after_forward=False
  e        FSDP1: FullyShardedDataParallel (FULL_SHARD) on every block and the root

Harness as in generate_vs_eager.py: every process uses one intra-op thread (two ranks share
two cores); --rounds rounds, each one fresh pair of rank processes that sets up every
configuration, runs --warmup untimed steps of each, then --repeats passes over all of them,
ONE step per configuration per pass, in an order rotated by one every pass, with a
torch.distributed barrier (untimed) before each step. ms/step is the median over all timed
steps of max(rank times of that step); CPU ms the same of time.process_time(). The phases
(forward + loss, backward, zero_grad + optimizer step) are timed inside each step, each
reported as the median of the slower rank's time.

Counting. Ours: torch.ops.fsdp.stats() zeroed before and read after every timed step:
all_gathers (forward and backward), grad_reductions (one all-to-all per parameter that
requires grad, docs/design.md "Training"), peak_unsharded_bytes, peak_unsharded_grad_bytes.
Eager FSDP: the last warmup step runs under a TorchDispatchMode that sees every op: c10d
collectives are counted by kind (all-gathers; reduce-scatters and all-reduces), and before
every op the unsharded bytes are sampled, forward and backward alike (FSDP2: parameters in state
UNSHARDED plus those of groups whose all-gather was issued and not yet waited, i.e. backward
prefetch; FSDP1: FlatParamHandles not sharded, at their unpadded size), and the unsharded
gradient bytes (FSDP2: .grad of the unsharded parameters; FSDP1: a flat parameter's .grad of
unsharded size), the quantity ours count (ours also count a started gather's full buffers).

Correctness. After the timed steps, every configuration's parameters are gathered in full
(ours: fsdp_opt.full_state_dict; FSDP2: DTensor.full_tensor(); FSDP1: summon_full_params) and
compared on the driver with FSDP2 reshard_after_forward=True's: max |diff| over all parameters.
All configurations took the same steps on the same batches from the same weights.

    python bench/train_step.py                 # full run: table, JSON, docs/bench_train.png
    python bench/train_step.py --quick         # smoke: tiny model, 1 round, 2 steps
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # rank processes import this file by its path: bench_common is beside it
    sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
from bench_common import ROOT, fmt_bytes, fmt_count, median  # noqa: E402

PYTHON_DIR = os.path.join(ROOT, "python")

CONFIGS = {
    "a": "(limit) original, unsharded, no communication",
    "ours": "ours: fsdp-opt default pipeline, no budget",
    "ours_b": "ours: fsdp-opt, budget = root + 1 block",
    "d_rt": "FSDP2, reshard_after_forward=True",
    "d_rf": "FSDP2, reshard_after_forward=False",
    "e": "FSDP1, FULL_SHARD",
}
OURS = ("ours", "ours_b")
EAGER = ("d_rt", "d_rf", "e")
REF = "d_rt"  # the configuration every other is compared with (timing ratio, parameters)
PHASES = ("fwd", "bwd", "opt")


# ---- rank side -------------------------------------------------------------------------------

def _loss(logits, y):
    import torch.nn.functional as F
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def _optimizer(params, lr):
    import torch
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.1, foreach=False)


def _fsdp2_inflight_bytes(modules):
    """Bytes of FSDP2 parameters whose group's all-gather was issued (backward prefetch) but not
    waited yet, so not UNSHARDED: their full all-gather output exists already."""
    from torch.distributed.fsdp._fully_shard._fsdp_param import ShardedState
    total = 0
    for m in modules:
        for group in m._get_fsdp_state()._fsdp_param_groups:
            if getattr(group, "_all_gather_result", None) is None:
                continue
            for p in group.fsdp_params:
                if p.sharded_state != ShardedState.UNSHARDED:
                    total += p._orig_size.numel() * (p.param_dtype or p.orig_dtype).itemsize
    return total


def _fsdp2_grad_bytes(modules):
    """Bytes of full-shaped gradients on FSDP2's unsharded parameters (before reduce-scatter)."""
    total = 0
    seen = set()
    for m in modules:
        for group in m._get_fsdp_state()._fsdp_param_groups:
            for p in group.fsdp_params:
                up = getattr(p, "_unsharded_param", None)
                if up is None or id(up) in seen:
                    continue
                seen.add(id(up))
                if up.grad is not None:
                    total += up.grad.numel() * up.grad.element_size()
    return total


def _fsdp1_grad_bytes(modules):
    """Bytes of FSDP1 flat parameters' gradients of unsharded size (before reduce-scatter)."""
    total = 0
    for m in modules:
        h = m._handle
        if h is None:
            continue
        g = h.flat_param.grad
        if g is not None and g.numel() > h.flat_param._sharded_size.numel():
            total += h.flat_param._unpadded_unsharded_size.numel() * g.element_size()
    return total


class _Config:
    """One configuration, set up in this rank process. step(x, y) runs one training step and
    returns its phase times; count_step(x, y) runs one under the sampler (eager FSDP only);
    full_state() gathers the parameters (a collective: every rank calls it)."""

    def __init__(self):
        self.model = self.opt = None
        self.before = self.after = None
        self.counts = None
        self.times, self.cpu, self.phases, self.per_step, self.losses = [], [], {k: [] for k in PHASES}, [], []

    def forward(self, x):
        return self.model(x)

    def step(self, x, y):
        import torch
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        loss = _loss(self.forward(x), y)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        self.opt.step()
        t4 = time.perf_counter()
        with torch.no_grad():
            self.losses.append(float(loss))
        return {"fwd": t2 - t1, "bwd": t3 - t2, "opt": (t1 - t0) + (t4 - t3)}


def _setup(ctx, cfg, a):
    import torch
    conf = _Config()
    lr = a["lr"]

    if cfg == "a":
        conf.model = torch.jit.load(a["model_pt"])
        conf.opt = _optimizer(list({id(p): p for p in conf.model.parameters()}.values()), lr)
        conf.counts = lambda: {"all_gathers": 0, "reductions": 0, "peak_unsharded_bytes": None,
                               "peak_unsharded_grad_bytes": None}
        conf.full_state = lambda: None
        return conf

    if cfg in OURS:
        sys.path.insert(0, a["python_dir"])
        import fsdp_opt
        ctx.load_runtime()
        conf.model = torch.jit.load(os.path.join(a["dirs"][cfg], "rank%d.pt" % ctx.rank))
        # distinct parameters (the tied lm_head.weight is wte.weight)
        params = list({id(p): p for p in conf.model.parameters()}.values())
        conf.opt = _optimizer(params, lr)
        conf.before = ctx.reset_stats
        conf.after = lambda: conf.per_step.append(ctx.stats())

        def counts():
            n = len(conf.per_step)
            s = conf.per_step
            return {"all_gathers": sum(x["all_gathers"] for x in s) / n,
                    "reductions": sum(x["grad_reductions"] for x in s) / n,
                    "peak_unsharded_bytes": max(x["peak_unsharded_bytes"] for x in s),
                    "peak_unsharded_grad_bytes": max(x["peak_unsharded_grad_bytes"] for x in s),
                    "bytes_gathered": sum(x["bytes_gathered"] for x in s) / n,
                    "stats": s[-1]}
        conf.counts = counts

        def full_state():
            state = fsdp_opt.full_state_dict(conf.model, os.path.join(a["dirs"][cfg], "manifest.json"))
            return {k: v for k, v in state.items() if k in a["param_names"]}
        conf.full_state = full_state
        return conf

    if cfg in ("d_rt", "d_rf"):
        from torch.distributed.tensor import DTensor
        model = bc.eager_gpt(a)
        modules = bc.fsdp2_shard_blocks(model, ctx.world_size, cfg == "d_rt")
        conf.model = model
        conf.opt = _optimizer(list(model.parameters()), lr)
        conf.param_bytes = lambda: bc.fsdp2_unsharded_bytes(modules) + _fsdp2_inflight_bytes(modules)
        conf.grad_bytes = lambda: _fsdp2_grad_bytes(modules)

        def full_state():
            out = {}
            for k, v in model.state_dict().items():
                if k in a["param_names"]:
                    out[k] = (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
            return out
        conf.full_state = full_state
        return conf

    if cfg == "e":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        fmodel = bc.fsdp1_wrap_blocks(bc.eager_gpt(a))
        conf.model = fmodel
        conf.opt = _optimizer(list(fmodel.parameters()), lr)
        modules = FSDP.fsdp_modules(fmodel)
        conf.param_bytes = lambda: bc.fsdp1_unsharded_bytes(modules)
        conf.grad_bytes = lambda: _fsdp1_grad_bytes(modules)

        def full_state():
            out = {}
            with FSDP.summon_full_params(fmodel, writeback=False):
                for k, v in fmodel.named_parameters():
                    k = k.replace("_fsdp_wrapped_module.", "")
                    if k in a["param_names"]:
                        out[k] = v.detach().clone()
            return out
        conf.full_state = full_state
        return conf

    raise ValueError("unknown configuration %r" % cfg)


def _count_step(conf, x, y):
    """One step of an eager FSDP configuration under the collective counter, sampling
    unsharded parameter and gradient bytes around every op; returns its phase times."""
    peak = {"params": 0, "grads": 0}

    def sample():
        peak["params"] = max(peak["params"], conf.param_bytes())
        peak["grads"] = max(peak["grads"], conf.grad_bytes())

    mode = bc.collective_counter(sample)
    with mode:
        phases = conf.step(x, y)
    # either kind is one gradient reduction, the counterpart of ours' grad_reductions
    reductions = {n: k for n, k in mode.other.items() if "reduce_scatter" in n or "allreduce" in n}
    conf.counts_value = {"all_gathers": mode.all_gathers, "reductions": sum(reductions.values()),
                         "peak_unsharded_bytes": peak["params"], "peak_unsharded_grad_bytes": peak["grads"],
                         "other_collectives": {n: k for n, k in mode.other.items() if n not in reductions},
                         "ops_sampled": mode.ops}
    conf.counts = lambda: conf.counts_value
    return phases


def _probe(ctx, a):
    """The collectives alone, on torch.distributed's Gloo group: the gradients' all-to-alls one
    per parameter (each its full gradient padded to W shards of rows, what our runtime issued
    before adbcd3c) and one per unit of the same bytes (what it issues since), FSDP's one
    reduce-scatter per unit, and one all-gather per unit (forward's, or backward's). Interleaved, a barrier before each; returns {kind: [seconds per repetition]}."""
    import torch
    import torch.distributed as dist
    import fsdp_models
    model = fsdp_models.make("gpt", **a["model"])
    w = ctx.world_size

    def padded(p):
        rows = -(-p.shape[0] // w) * w if p.dim() else w
        return rows * (p.numel() // p.shape[0] if p.dim() else 1)

    units = [[p for n, p in model.named_parameters() if not n.startswith("blocks.")]]
    units += [list(b.parameters()) for b in model.blocks]
    per_param = [torch.zeros(padded(p)) for u in units for p in u]
    per_unit = [torch.zeros(sum(padded(p) for p in u)) for u in units]
    outs = {id(t): torch.empty_like(t) for t in per_param + per_unit}
    shards = {id(t): torch.empty(t.numel() // w) for t in per_unit}

    def a2a(ts):
        for t in ts:
            dist.all_to_all_single(outs[id(t)], t)

    def rs(ts):
        for t in ts:
            dist.reduce_scatter_tensor(shards[id(t)], t)

    def ag(ts):
        for t in ts:
            dist.all_gather_into_tensor(outs[id(t)], shards[id(t)])

    kinds = {"a2a_per_param": lambda: a2a(per_param), "a2a_per_unit": lambda: a2a(per_unit),
             "rs_per_unit": lambda: rs(per_unit), "ag_per_unit": lambda: ag(per_unit)}
    times = {k: [] for k in kinds}
    for k, fn in kinds.items():  # warm up
        dist.barrier()
        fn()
    for _ in range(a["probe_repeats"]):
        for k, fn in kinds.items():
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {"times": times, "counts": {"a2a_per_param": len(per_param), "a2a_per_unit": len(per_unit),
                                       "rs_per_unit": len(per_unit), "ag_per_unit": len(per_unit)},
            "bytes": sum(t.numel() * 4 for t in per_param)}


def bench_worker(ctx):
    """Sets up every configuration of ctx.args["schedule"] in this process, runs the warmup
    steps (the last one of each eager FSDP configuration under the sampler), then times the
    configurations interleaved step by step, and finally gathers every configuration's
    parameters. Returns one result dict per configuration, in schedule order (full parameters
    on rank 0 only)."""
    import torch
    import torch.distributed as dist
    a = ctx.args
    batches = torch.load(a["inputs"])[ctx.rank]  # [(x, y)] per step
    bc.init_rank(ctx)
    schedule = a["schedule"]
    confs = {cfg: _setup(ctx, cfg, a) for cfg in schedule}
    steps = {cfg: 0 for cfg in schedule}

    def run(cfg, timed, count=False):
        conf = confs[cfg]
        x, y = batches[steps[cfg]]
        steps[cfg] += 1
        if timed and conf.before:
            conf.before()
        dist.barrier()
        if count:
            _count_step(conf, x, y)
            return
        c0 = time.process_time()
        t0 = time.perf_counter()
        phases = conf.step(x, y)
        dt = time.perf_counter() - t0
        dc = time.process_time() - c0
        if timed:
            conf.times.append(dt)
            conf.cpu.append(dc)
            for k in PHASES:
                conf.phases[k].append(phases[k])
            if conf.after:
                conf.after()

    for cfg in schedule:
        for w in range(a["warmup"]):
            run(cfg, False, count=(cfg in EAGER and w == a["warmup"] - 1))
    for rep in range(a["repeats"]):
        for cfg in bc.rotated(schedule, rep):
            run(cfg, True)
    dist.barrier()
    probe = _probe(ctx, a) if a["probe_repeats"] else None
    results = []
    for cfg in schedule:
        conf = confs[cfg]
        with torch.no_grad():
            state = conf.full_state()  # collective for the sharded configurations
        results.append({"config": cfg, "rank": ctx.rank, "times": conf.times, "cpu": conf.cpu,
                        "phases": conf.phases, "counts": conf.counts(), "losses": conf.losses,
                        "steps": steps[cfg], "state": state if ctx.rank == 0 else None})
    return {"configs": results, "probe": probe}


# ---- driver side -----------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke mode: tiny model, 1 round, 2 steps per configuration (1 warmup, 1 timed), no plot")
    bc.add_model_args(p, n_embd=128)
    p.add_argument("--batch", type=int, default=4, help="sequences per rank per step (of --block-size tokens)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per configuration and round")
    p.add_argument("--repeats", type=int, default=10, help="timed steps per configuration and round")
    p.add_argument("--probe-repeats", type=int, default=10,
                   help="repetitions per round of the reductions alone on torch.distributed's Gloo (0: none)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ",".join(CONFIGS))
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="max |diff| of parameters vs FSDP2 reshard=True called a match")
    bc.add_build_args(p)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write the PNG here (default docs/bench_train.png; none with --quick)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per launch of rank processes")
    p.add_argument("--plot-from", metavar="JSON", help="only redraw the plot (--plot) from an earlier run's --json")
    a = p.parse_args(argv)
    if a.plot_from:
        with open(a.plot_from) as f:
            d = json.load(f)
        _plot(d, a.plot or os.path.join(ROOT, "docs", "bench_train.png"))
        return 0
    if a.quick:
        bc.use_tiny_model(a)
        a.batch = 2
        a.rounds, a.warmup, a.repeats, a.probe_repeats = 1, 1, 1, 1
    plot = a.plot if a.plot is not None else (None if a.quick else os.path.join(ROOT, "docs", "bench_train.png"))
    configs = bc.parse_configs(a.configs, CONFIGS)

    import torch
    import fsdp_models

    need_ours = any(c in OURS for c in configs)
    tool, lib = bc.fsdp_opt_and_runtime(a.build) if need_ours else (None, bc.runtime_lib(a.build))
    with bc.scratch_dir(a.work, "fsdp-bench-train.") as work:
        model_kwargs = bc.model_kwargs(a)
        model = fsdp_models.make("gpt", **model_kwargs)
        param_names = sorted(n for n, _ in model.named_parameters())  # tied lm_head.weight: once
        block_bytes = sum(p.numel() * p.element_size() for p in model.blocks[0].parameters())
        model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        root_bytes = model_bytes - a.n_layer * block_bytes
        n_params = len(list(model.parameters()))
        model_pt = os.path.join(work, "gpt.pt")
        fsdp_models.save(model, model_pt)
        steps = a.warmup + a.repeats
        g = torch.Generator().manual_seed(1)
        batches = []
        for _ in range(2):
            rank = []
            for _ in range(steps):
                tokens = torch.randint(0, a.vocab, (a.batch, a.block_size + 1), generator=g)
                rank.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
            batches.append(rank)
        inputs = os.path.join(work, "inputs.pt")
        torch.save(batches, inputs)

        dirs, opt = {}, {}
        budget = root_bytes + block_bytes
        if need_ours:
            dirs["ours"] = os.path.join(work, "ours")
            opt["ours"] = bc.shard_gpt(tool, model_pt, "forward", dirs["ours"])
            units = {u["path"]: u["bytes"] for u in opt["ours"]["manifest"]["units"]}
            budget = units["."] + units["blocks.0"]
            if "ours_b" in configs:
                dirs["ours_b"] = os.path.join(work, "ours_b")
                opt["ours_b"] = bc.shard_gpt(tool, model_pt, "forward", dirs["ours_b"], "--max-unsharded-bytes=%d" % budget)
        print("model: GPT n_layer=%d n_embd=%d n_head=%d vocab=%d block=%d, %s of parameters in %d tensors "
              "(root unit %s, one block %s); batch %d x %d tokens per rank; AdamW(foreach=False); W=2, gloo, CPU"
              % (a.n_layer, a.n_embd, a.n_head, a.vocab, a.block_size, fmt_bytes(model_bytes), n_params,
                 fmt_bytes(root_bytes), fmt_bytes(block_bytes), a.batch, a.block_size), flush=True)
        if "ours_b" in configs:
            print("ours_b: --max-unsharded-bytes=%d (root + one block)" % budget, flush=True)

        env = bc.rank_env(lib)
        env["FSDP_OPT_LIB_DIR"] = os.path.dirname(lib)
        common = {"model_pt": model_pt, "inputs": inputs, "dirs": dirs, "model": model_kwargs,
                  "warmup": a.warmup, "repeats": a.repeats, "lr": a.lr, "python_dir": PYTHON_DIR,
                  "probe_repeats": a.probe_repeats,
                  "param_names": param_names}
        samples = {c: [] for c in configs}
        probes = []

        load_start = bc.report_load()
        wall_t0 = time.perf_counter()
        for rnd, order, results, seconds in bc.launch_rounds(bench_worker, common, configs, a.rounds,
                                                             a.timeout, env):
            for i, cfg in enumerate(order):
                values = [r["configs"][i] for r in results]
                samples[cfg].append(values)
                print("round %d/%d %-7s median %7.1f ms wall, %7.1f ms CPU" % (
                    rnd, a.rounds, cfg, 1e3 * median(bc.slower_rank(values, "times")),
                    1e3 * median(bc.slower_rank(values, "cpu"))), flush=True)
            if a.probe_repeats:
                probes.append([r["probe"] for r in results])
            print("round %d/%d %.1f s wall" % (rnd, a.rounds, seconds), flush=True)
        wall_s = time.perf_counter() - wall_t0

        # ---- aggregate ------------------------------------------------------------------------
        rows = {}
        for cfg in configs:
            per_step, cpu_step = [], []
            phases = {k: [] for k in PHASES}
            for values in samples[cfg]:
                per_step += bc.slower_rank(values, "times")
                cpu_step += bc.slower_rank(values, "cpu")
                for k in PHASES:
                    phases[k] += bc.slower_rank([v["phases"] for v in values], k)
            counts = samples[cfg][-1][0]["counts"]
            counts1 = samples[cfg][-1][1]["counts"]
            rows[cfg] = {
                "label": CONFIGS[cfg],
                "ms": 1e3 * median(per_step), "ms_all": [1e3 * t for t in per_step],
                "cpu_ms": 1e3 * median(cpu_step), "cpu_ms_all": [1e3 * t for t in cpu_step],
                "phase_ms": {k: 1e3 * median(phases[k]) for k in PHASES},
                "n_timed": len(per_step),
                "all_gathers": counts["all_gathers"], "reductions": counts["reductions"],
                "collectives": counts["all_gathers"] + counts["reductions"],
                "peak_unsharded_bytes": counts["peak_unsharded_bytes"],
                "peak_unsharded_grad_bytes": counts["peak_unsharded_grad_bytes"],
                "counts_r1": counts1,
                "other_collectives": counts.get("other_collectives", {}),
                "bytes_gathered": counts.get("bytes_gathered"),
                "runtime_stats": counts.get("stats"),
                "losses_r0": samples[cfg][-1][0]["losses"],
                "predicted_gathers": opt[cfg]["predicted_gathers"] if cfg in opt else None,
            }
        ref_ms = rows[REF]["ms"] if REF in rows else None
        ref_cpu = rows[REF]["cpu_ms"] if REF in rows else None
        for r in rows.values():
            r["vs_ref"] = r["ms"] / ref_ms if ref_ms else None
            r["cpu_vs_ref"] = r["cpu_ms"] / ref_cpu if ref_cpu else None

        # parameters after the same steps, vs FSDP2 reshard=True's, round by round
        compared = []
        for cfg in configs:
            rows[cfg]["max_abs_diff"] = None
            if cfg == "a" or REF not in rows:
                continue
            worst = 0.0
            for rnd in range(a.rounds):
                mine = samples[cfg][rnd][0]["state"]
                want = samples[REF][rnd][0]["state"]
                if set(mine) != set(want):
                    sys.exit("error: %s's gathered parameters are %s, FSDP2's %s" % (cfg, sorted(mine), sorted(want)))
                for k in want:
                    worst = max(worst, (mine[k].double() - want[k].double()).abs().max().item())
            rows[cfg]["max_abs_diff"] = worst
            if cfg != REF:
                compared.append(cfg)
        if "ours" in rows and "ours_b" in rows:
            same = all(all(torch.equal(samples["ours"][rnd][0]["state"][k], samples["ours_b"][rnd][0]["state"][k])
                           for k in param_names) for rnd in range(a.rounds))
        else:
            same = None

        # ---- table ----------------------------------------------------------------------------
        head = ("configuration", "ms/step", "/ FSDP2 (T)", "CPU ms", "fwd / bwd / opt ms", "peak unsharded params",
                "peak unsharded grads", "all-gathers", "grad reductions", "collectives/step",
                "max |diff| vs FSDP2 (T)")
        lines = []
        for cfg in configs:
            r = rows[cfg]
            ph = r["phase_ms"]
            lines.append((r["label"], "%.1f" % r["ms"], "%.2f" % r["vs_ref"] if r["vs_ref"] else "-",
                          "%.1f" % r["cpu_ms"], "%.1f / %.1f / %.1f" % (ph["fwd"], ph["bwd"], ph["opt"]),
                          fmt_bytes(r["peak_unsharded_bytes"]), fmt_bytes(r["peak_unsharded_grad_bytes"]),
                          fmt_count(r["all_gathers"]), fmt_count(r["reductions"]), fmt_count(r["collectives"]),
                          "-" if r["max_abs_diff"] is None else "%.2g" % r["max_abs_diff"]))
        table = bc.print_table(head, lines)
        print("ms/step: median over %s timed steps (%d rounds x %d steps of each configuration, each round after %d "
              "untimed warmup steps) of the slower rank's wall time; / FSDP2 (T): that median divided by FSDP2 "
              "reshard_after_forward=True's; CPU ms: the same median of the process's CPU time; fwd / bwd / opt: "
              "medians of the slower rank's forward + loss, backward, zero_grad + optimizer step; collectives per "
              "step on rank 0 (ours: the runtime's all_gathers and grad_reductions; eager: c10d all-gathers and "
              "reduce-scatters/all-reduces); peaks: the most bytes of full parameters / full gradients alive at "
              "once; %.0f s in all, load average %.1f at the end"
              % ("/".join(sorted({str(r["n_timed"]) for r in rows.values()})), a.rounds, a.repeats, a.warmup,
                 wall_s, os.getloadavg()[0]))

        # ---- targets --------------------------------------------------------------------------
        targets = []

        def target(name, metric, ok, detail):
            targets.append({"target": name, "metric": metric, "met": bool(ok), "detail": detail})
            print("target %-52s %-5s %-7s (%s)" % (name, metric, "MET" if ok else "NOT MET", detail))

        for cfg in OURS:
            if cfg in rows and REF in rows:
                for key, metric in (("ms", "wall"), ("cpu_ms", "CPU")):
                    target("%s faster than FSDP2 reshard=True" % cfg, metric, rows[cfg][key] < rows[REF][key],
                           "%s/FSDP2(T) = %.2f" % (cfg, rows[cfg][key] / rows[REF][key]))
                mine, theirs = rows[cfg]["peak_unsharded_bytes"], rows[REF]["peak_unsharded_bytes"]
                target("%s peak unsharded <= FSDP2 reshard=True" % cfg, "bytes", mine <= theirs,
                       "%d vs %d" % (mine, theirs))
        if a.quick:
            print("(--quick: tiny model, 1 warmup + 1 timed step: timings and targets mean nothing here)")
        ok = all(rows[c]["max_abs_diff"] <= a.tolerance for c in compared)
        if compared:
            print("correctness: %s after %d steps: %s" % (
                "parameters match FSDP2 reshard_after_forward=True's within %g" % a.tolerance if ok else "MISMATCH",
                steps, ", ".join("%s %.2g" % (c, rows[c]["max_abs_diff"]) for c in compared)))
        if same is not None:
            print("ours with and without budget: parameters %s" % ("bitwise equal" if same else "DIFFER"))
        probe = None
        if probes:
            kinds = list(probes[0][0]["times"])
            probe = {"counts": probes[0][0]["counts"], "bytes": probes[0][0]["bytes"], "ms": {}, "ms_all": {}}
            for k in kinds:
                per = []
                for values in probes:
                    per += bc.slower_rank([v["times"] for v in values], k)
                probe["ms"][k] = 1e3 * median(per)
                probe["ms_all"][k] = [1e3 * t for t in per]
            c = probe["counts"]
            print("collectives alone (torch.distributed gloo, %s of padded full gradients, median of the slower rank "
                  "over %d repetitions): %d all-to-alls, one per parameter: %.1f ms; %d all-to-alls, one per unit: "
                  "%.1f ms; %d reduce-scatters, one per unit: %.1f ms; %d all-gathers, one per unit: %.1f ms"
                  % (fmt_bytes(probe["bytes"]), len(probe["ms_all"]["a2a_per_unit"]), c["a2a_per_param"],
                     probe["ms"]["a2a_per_param"], c["a2a_per_unit"], probe["ms"]["a2a_per_unit"], c["rs_per_unit"],
                     probe["ms"]["rs_per_unit"], c["ag_per_unit"], probe["ms"]["ag_per_unit"]))

        out = {"model": model_kwargs, "batch": a.batch, "lr": a.lr, "model_bytes": model_bytes,
               "root_bytes": root_bytes, "block_bytes": block_bytes, "n_param_tensors": n_params,
               "budget_ours_b": budget, "rounds": a.rounds, "warmup": a.warmup, "repeats": a.repeats,
               "configs": configs, "rows": rows, "targets": targets, "params_match": ok,
               "ours_budget_bitwise_equal": same, "tolerance": a.tolerance, "probe": probe,
               **bc.run_record(load_start, os.getloadavg(), opt, wall_s, argv, table)}
        if a.json:
            bc.write_json(a.json, out)
        if plot:
            _plot(out, plot)
            print("plot: %s" % plot)
        return 0 if ok else 1


def _plot(d, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows, configs = d["rows"], d["configs"]
    fig, axes = plt.subplots(1, 2, figsize=(14, 5), sharey=True, gridspec_kw={"width_ratios": [3, 2]})
    labels = [rows[c]["label"] for c in configs]
    ys = list(range(len(configs)))[::-1]
    ax = axes[0]
    left = [0.0] * len(configs)
    for k, color, name in (("fwd", "#1f77b4", "forward + loss"), ("bwd", "#d62728", "backward"),
                           ("opt", "#2ca02c", "zero_grad + AdamW step")):
        vals = [rows[c]["phase_ms"][k] for c in configs]
        ax.barh(ys, vals, left=left, color=color, alpha=0.8, label=name + " (median)")
        left = [x + v for x, v in zip(left, vals)]
    # x range: up to the second slowest step of any configuration; slower ones (a stall on the
    # shared machine) are marked at the edge with their time
    xmax = 1.45 * max(sorted(rows[c]["ms_all"] + [rows[c]["ms"]])[-2 if len(rows[c]["ms_all"]) > 1 else -1]
                      for c in configs)
    for y, c in zip(ys, configs):
        pts = rows[c]["ms_all"]
        inside = [t for t in pts if t <= xmax]
        ax.plot(inside, [y] * len(inside), "k.", ms=3, alpha=0.35)
        ax.plot([rows[c]["ms"]], [y], "k|", ms=14, mew=2)
        note = " %.0f ms" % rows[c]["ms"]
        if rows[c]["collectives"]:
            note += " (%s coll.)" % fmt_count(rows[c]["collectives"])
        outside = [t for t in pts if t > xmax]
        if outside:
            note += " [off scale: %s ms]" % ", ".join("%.0f" % t for t in sorted(outside))
        ax.text(max(inside + [rows[c]["ms"]]), y, note, va="center", fontsize=8)
    ax.set_xlim(0, xmax * 1.3)
    ax.set_xlabel("wall ms per training step (slower rank)\nbars: phase medians; |: step median; dots: every "
                  "timed step", fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    ax.grid(axis="x", alpha=0.3)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=8)
    ax = axes[1]
    mib = 1024.0 * 1024.0
    h = 0.38
    pv = [(rows[c]["peak_unsharded_bytes"] or 0) / mib for c in configs]
    gv = [(rows[c]["peak_unsharded_grad_bytes"] or 0) / mib for c in configs]
    ax.barh([y + h / 2 for y in ys], pv, height=h, color="#9467bd", label="peak unsharded parameters")
    ax.barh([y - h / 2 for y in ys], gv, height=h, color="#ff7f0e", label="peak unsharded gradients")
    for y, c, v, w in zip(ys, configs, pv, gv):
        if rows[c]["peak_unsharded_bytes"] is None:
            ax.text(0, y, " - (nothing sharded)", va="center", fontsize=8)
            continue
        ax.text(v, y + h / 2, " %.2f" % v, va="center", fontsize=7)
        ax.text(w, y - h / 2, " %.2f" % w, va="center", fontsize=7)
    ax.axvline(d["model_bytes"] / mib, color="k", ls=":", lw=1)
    ax.text(d["model_bytes"] / mib, ys[-1] - 0.6, " whole model", fontsize=7)
    ax.set_xlim(0, d["model_bytes"] / mib * 1.3)
    ax.set_xlabel("MiB unsharded at once (rank 0)", fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    ax.grid(axis="x", alpha=0.3)
    m = d["model"]
    fig.suptitle("training step: GPT n_layer=%d d_model=%d vocab=%d, batch %d x %d tokens per rank, AdamW; "
                 "W=2, gloo, CPU (torch %s)" % (m["n_layer"], m["n_embd"], m["vocab_size"], d["batch"],
                                                m["block_size"], d["torch"].split("+")[0]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
