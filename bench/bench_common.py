"""Helpers shared by the benchmarks in bench/ (not a benchmark itself).

One place for what every benchmark must do alike, so that their numbers stay comparable: how
rank processes are launched and timed, how eager FSDP2/FSDP1 wrap the GPT, how collectives and
unsharded bytes are counted, and how the tables print.

Importing it puts test/Inputs on sys.path (fsdp_harness, fsdp_models, divergent_models: the
benchmarks launch ranks and build models with the test suite's helpers) and silences torch's
warning that TorchScript is deprecated (the benchmarks measure TorchScript on purpose), in the
driver and in every rank process.
"""

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUTS = os.path.join(ROOT, "test", "Inputs")
if INPUTS not in sys.path:
    sys.path.insert(0, INPUTS)

warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)

# The W every benchmark measures at: fsdp-opt shards for it and launch_ranks starts that many
# ranks, which must agree.
WORLD_SIZE = 2


def git_head(root):
    """The short commit of the checkout at `root`, or "?" outside git."""
    try:
        return subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def median(xs):
    """statistics.median, NaN for no samples (a configuration that was not run)."""
    return statistics.median(xs) if xs else float("nan")


def rotated(xs, k):
    """xs started at index k (mod its length): runs visit the same items in a different order
    each time, so that the machine's load, which drifts over seconds, hits all of them alike."""
    k %= len(xs)
    return xs[k:] + xs[:k]


def slower_rank(values, key):
    """Per call, the slower rank's value of `key` (one result dict per rank): the ranks meet
    before every call, so a call of the job ends when its slower rank ends."""
    return [max(ts) for ts in zip(*[v[key] for v in values])]


def call_times(rounds, single_process):
    """A configuration's wall and CPU times per call over its rounds (each round: one result
    dict per process, with "times" and "cpu"): every call of every copy for independent
    single-process copies, the slower rank's per call for ranks, which wait for each other."""
    per_call, cpu_call = [], []
    for values in rounds:
        if single_process:
            per_call += [t for v in values for t in v["times"]]
            cpu_call += [t for v in values for t in v["cpu"]]
        else:
            per_call += slower_rank(values, "times")
            cpu_call += slower_rank(values, "cpu")
    return per_call, cpu_call


def cpu_model():
    """The CPU's model name, for the JSON: timings mean little without the machine."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


# ---- command line ----------------------------------------------------------------------------

def add_model_args(p, n_embd):
    """The GPT's shape, the same flags in every benchmark so that their models can be made
    alike; only the default width differs."""
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=n_embd)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--block-size", type=int, default=64)


def use_tiny_model(a):
    """--quick's GPT: the counts and bytes test/bench-smoke.py expects are this model's."""
    a.n_layer, a.n_embd, a.n_head, a.vocab, a.block_size = 4, 32, 2, 67, 16


def model_kwargs(a):
    """fsdp_models.make("gpt")'s arguments for the shape on the command line; seed 0, so that
    every benchmark and run starts from the same weights."""
    return dict(vocab_size=a.vocab, block_size=a.block_size, n_layer=a.n_layer, n_head=a.n_head,
                n_embd=a.n_embd, seed=0)


def add_build_args(p):
    """--build and --work, as every benchmark that launches ranks reads them."""
    p.add_argument("--build", help="build directory with bin/fsdp-opt and lib/libfsdp_runtime.so "
                   "(default: fsdp-opt on PATH and $FSDP_OPT_RUNTIME_LIB, else build/t2)")
    p.add_argument("--work", help="scratch directory (default: a temporary one, removed)")


def parse_configs(text, known):
    """The comma-separated configurations of --configs, exiting on an unknown one before any
    time is spent building models."""
    configs = [c for c in text.split(",") if c]
    for c in configs:
        if c not in known:
            sys.exit("error: unknown configuration %r (known: %s)" % (c, ", ".join(known)))
    return configs


@contextlib.contextmanager
def scratch_dir(work, prefix):
    """The directory for models and rank files: `work` emptied first (--work, kept afterwards
    for a look), else a temporary one removed at the end, errors included."""
    if work:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        yield work
        return
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- the build -------------------------------------------------------------------------------

def find_built(build, sub, name):
    """build/sub/name; else, for a tool, the one on PATH (lit puts the build's bin/ first);
    else the default build's (build/t2: the torch the benchmarks' venv has)."""
    if build:
        path = os.path.join(build, sub, name)
        if os.path.exists(path):
            return path
    if sub == "bin" and shutil.which(name):
        return shutil.which(name)
    path = os.path.join(ROOT, "build", "t2", sub, name)
    if os.path.exists(path):
        return path
    sys.exit("error: cannot find %s (build it: bash scripts/build.sh t2, or pass --build)" % name)


def runtime_lib(build):
    """The libfsdp_runtime.so the rank processes load: --build's, else lit's
    $FSDP_OPT_RUNTIME_LIB, else the default build's."""
    if build:
        return os.path.join(build, "lib", "libfsdp_runtime.so")
    return os.environ.get("FSDP_OPT_RUNTIME_LIB") or os.path.join(ROOT, "build", "t2", "lib", "libfsdp_runtime.so")


def fsdp_opt_and_runtime(build):
    """fsdp-opt and the runtime library of a build (find_built, runtime_lib), exiting before
    any work when the library is missing: the rank processes could not load it."""
    tool = find_built(build, "bin", "fsdp-opt")
    lib = runtime_lib(build)
    if not os.path.exists(lib):
        sys.exit("error: no runtime library at %s" % lib)
    return tool, lib


def shard_gpt(tool, model_pt, method, out, *extra):
    """fsdp-opt on a GPT-shaped model, the root and every block a unit, W=2, into `out`.
    Returns the command (for the JSON), the manifest (unit bytes for a budget), fsdp-opt's
    --stats prediction of gathers per call of `method`, and its stderr (remarks)."""
    cmd = [tool, model_pt, "--fsdp-unit=.", "--fsdp-unit=blocks.*"]
    if method != "forward":
        cmd.append("--forward-method=.:" + method)
    cmd += ["--world-size=%d" % WORLD_SIZE, "-o", out, "--stats"] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit("error: %s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stderr))
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    predicted = None
    for line in r.stdout.splitlines():
        if "gathers per call of %s:" % method in line:
            predicted = line.split(":", 1)[1].strip()
    return {"cmd": cmd, "manifest": manifest, "predicted_gathers": predicted, "stderr": r.stderr}


# ---- launching rank processes ----------------------------------------------------------------

def rank_env(lib):
    """The rank processes' environment: the runtime library to load, and one OpenMP thread
    each, since the ranks share the machine's cores. A collective that cannot complete fails
    after FSDP_OPT_TIMEOUT_S (lit sets 60) rather than hanging the benchmark."""
    env = dict(os.environ)
    env["FSDP_OPT_RUNTIME_LIB"] = lib
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("FSDP_OPT_TIMEOUT_S", "120")
    return env


def report_load():
    """Prints and returns the load average before the first launch: on a shared machine it
    says how far the timings can be trusted."""
    load = os.getloadavg()
    print("load average at start: %.1f %.1f %.1f on %d CPUs" % (load + (os.cpu_count(),)), flush=True)
    return load


def launch_ranks(worker, args, what, timeout, env):
    """Runs worker(ctx) in a fresh pair of rank processes with ctx.args = args plus the port of
    torch.distributed's own group (see init_rank); exits naming `what` if a rank fails.
    Returns each rank's return value, in rank order."""
    import fsdp_harness
    with fsdp_harness.ReservedPort() as dist_port:
        args = dict(args, dist_port=dist_port.port)
        results = fsdp_harness.run_ranks(WORLD_SIZE, worker, args=args, timeout=timeout, env=env)
    if any(not r.ok for r in results):
        sys.exit("error: %s failed:\n%s" % (what, fsdp_harness.describe_ranks(results)))
    return [r.value for r in results]


def launch_rounds(worker, common, configs, rounds, timeout, env):
    """`rounds` launches of fresh rank processes, each setting every configuration up anew and
    running them in one schedule, rotated by one per round (see rotated). Yields per round its
    number from 1, the schedule, each rank's return value and the seconds the launch took."""
    for rnd in range(rounds):
        schedule = rotated(configs, rnd)
        t0 = time.perf_counter()
        values = launch_ranks(worker, dict(common, schedule=schedule), "round %d" % (rnd + 1), timeout, env)
        yield rnd + 1, schedule, values, time.perf_counter() - t0


# ---- rank side -------------------------------------------------------------------------------

def init_rank(ctx):
    """One intra-op thread (two ranks share two cores), and torch.distributed's gloo group for
    eager FSDP and the barriers, on its own port: MASTER_PORT is the fsdp runtime's store when
    both run in one process."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % ctx.args["dist_port"],
                                rank=ctx.rank, world_size=ctx.world_size)


class CallConfig:
    """One configuration, set up in this rank process: call() runs it once; before() and
    after() bracket each timed call outside the timed region; counts() describes the
    collectives."""

    def __init__(self, call, before=None, after=None, counts=None):
        self.call, self.before, self.after, self.counts = call, before, after, counts
        self.first = None
        self.times, self.cpu, self.per_call = [], [], []


def time_interleaved(confs, schedule, warmup, repeats):
    """Warms up every CallConfig of `schedule`, then times them call by call: pass i calls each
    once, in the schedule rotated by i. The ranks meet at a barrier (untimed) before every timed
    call, so that no call is charged for the other rank finishing the previous one. Every call
    must return what the first did."""
    import torch
    import torch.distributed as dist
    for cfg in schedule:
        for _ in range(warmup):
            out = confs[cfg].call()
            confs[cfg].first = out if confs[cfg].first is None else confs[cfg].first
    for rep in range(repeats):
        for cfg in rotated(schedule, rep):
            conf = confs[cfg]
            if conf.before:
                conf.before()
            dist.barrier()
            c0 = time.process_time()
            t0 = time.perf_counter()
            out = conf.call()
            conf.times.append(time.perf_counter() - t0)
            conf.cpu.append(time.process_time() - c0)
            if conf.after:
                conf.after()
            if conf.first is None:
                conf.first = out
            elif not torch.equal(out, conf.first):
                raise RuntimeError("%s: generate returned different tokens on a repeated call" % cfg)


# ---- eager FSDP --------------------------------------------------------------------------------

def eager_gpt(args):
    """The eager GPT that FSDP wraps, with the weights of the scripted model at
    args["model_pt"], so that every configuration starts from the same ones."""
    import torch
    import fsdp_models
    model = fsdp_models.make("gpt", **args["model"])
    state = torch.jit.load(args["model_pt"]).state_dict()
    model.load_state_dict(state)
    return model.eval()


def fsdp2_shard_blocks(model, world_size, reshard_after_forward, forward_methods=()):
    """FSDP2 the way its documentation wraps a transformer: fully_shard on every block, then
    the root; each of forward_methods registered so that calling it unshards like forward.
    Returns the FSDP modules, blocks first."""
    return fsdp2_shard_units(model, list(model.blocks), world_size, reshard_after_forward, forward_methods)


def fsdp2_shard_units(model, units, world_size, reshard_after_forward, forward_methods=()):
    """fully_shard on each of `units` (submodules of `model`, innermost first), then on the root
    `model`, each of forward_methods registered on the root. Returns the FSDP modules, units
    first: fsdp2_shard_blocks for models whose units are not `model.blocks`."""
    import torch.distributed.fsdp as fsdp
    if not hasattr(fsdp, "fully_shard"):  # torch < 2.6 has FSDP2 only here
        import torch.distributed._composable.fsdp as fsdp
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (world_size,))
    for unit in units:
        fsdp.fully_shard(unit, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fsdp.fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    for method in forward_methods:
        fsdp.register_fsdp_forward_method(model, method)
    return list(units) + [model]


def fsdp1_wrap_blocks(model):
    """FSDP1 (FullyShardedDataParallel, FULL_SHARD) on every block, then the root, on the CPU:
    the same units as FSDP2's and ours. Returns the wrapped root."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    cpu = torch.device("cpu")
    for i in range(len(model.blocks)):
        model.blocks[i] = FSDP(model.blocks[i], device_id=cpu)
    return FSDP(model, device_id=cpu)


def fsdp2_unsharded_bytes(modules):
    """Bytes of FSDP2 parameters now UNSHARDED, at their full unpadded size, each once: the
    quantity the fsdp runtime's peak_unsharded_bytes counts."""
    from torch.distributed.fsdp._fully_shard._fsdp_param import ShardedState
    total = 0
    seen = set()
    for m in modules:
        for group in m._get_fsdp_state()._fsdp_param_groups:
            for p in group.fsdp_params:
                if id(p) in seen:
                    continue
                seen.add(id(p))
                if p.sharded_state == ShardedState.UNSHARDED:
                    total += p._orig_size.numel() * (p.param_dtype or p.orig_dtype).itemsize
    return total


def fsdp1_unsharded_bytes(modules):
    """Bytes of FSDP1 flat parameters now unsharded, at their unpadded size (as
    fsdp2_unsharded_bytes)."""
    total = 0
    for m in modules:
        h = m._handle
        if h is not None and not h.is_sharded(h.flat_param):
            total += h.flat_param._unpadded_unsharded_size.numel() * h.flat_param.element_size()
    return total


def collective_counter(on_op=None):
    """A TorchDispatchMode (the kind CommDebugMode is: it sees every c10d collective, which
    eager FSDP issues without counting them anywhere) that counts all-gathers and the bytes of
    their outputs, every other c10d op by name, and all ops; on_op() runs before and after
    every op, where unsharded bytes can change (forward, backward and optimizer alike)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Mode(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.all_gathers = 0
            self.bytes = 0
            self.other = {}
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(getattr(func, "_overloadpacket", func))
            self.ops += 1
            if on_op:
                on_op()
            if name.startswith("c10d."):
                if "allgather" in name:
                    self.all_gathers += 1
                    self.bytes += sum(t.numel() * t.element_size() for t in tree_leaves(args[0])
                                      if isinstance(t, torch.Tensor))
                else:
                    self.other[name] = self.other.get(name, 0) + 1
            out = func(*args, **(kwargs or {}))
            if on_op:
                on_op()
            return out

    return Mode()


def count_eager_call(call, blocks, unsharded_bytes):
    """One untimed call of an eager FSDP configuration under the collective counter, sampling
    unsharded bytes in every block's forward pre-hook (after FSDP's own unshard) and after
    the call: eager FSDP has no counters of its own to read."""
    peak = [0]

    def sample(*_):
        peak[0] = max(peak[0], unsharded_bytes())

    handles = [b.register_forward_pre_hook(sample) for b in blocks]
    mode = collective_counter()
    try:
        with mode:
            call()
        sample()
    finally:
        for h in handles:
            h.remove()
    return {"all_gathers": mode.all_gathers, "bytes_gathered": mode.bytes,
            "peak_unsharded_bytes": peak[0], "other_collectives": mode.other}


# ---- output ----------------------------------------------------------------------------------

def fmt_bytes(n):
    """Bytes in B, KiB, MiB or GiB, whichever keeps the number under 1024, so that the
    columns stay narrow; "-" where a configuration has nothing to count."""
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return ("%.0f %s" % (n, unit)) if unit == "B" else ("%.2f %s" % (n, unit))
        n /= 1024.0


def fmt_count(x):
    """A count per call: whole when it is (the same every call), else to two decimals."""
    if x is None:
        return "-"
    return ("%d" % x) if float(x).is_integer() else ("%.2f" % x)


def run_record(load_start, load_end, opt, wall_s, argv, table):
    """The fields that end every benchmark's JSON: which torch, machine, load, commit and
    fsdp-opt commands produced its numbers, for comparing runs later."""
    import torch
    return {"torch": torch.__version__, "nproc": os.cpu_count(), "cpu": cpu_model(), "git_head": git_head(ROOT),
            "loadavg_start": load_start, "loadavg_end": load_end,
            "fsdp_opt_cmds": {k: v["cmd"][1:] for k, v in opt.items()}, "wall_s": wall_s,
            "argv": sys.argv[1:] if argv is None else argv, "table": table}


def write_json(path, out):
    """default=str: rows hold tensors and tuples that only need to be readable."""
    with open(path, "w") as f:
        json.dump(out, f, indent=1, default=str)


def print_table(head, lines):
    """Prints a Markdown table, every column as wide as its widest cell, between blank lines
    (test/bench-smoke.py reads it row by row). Returns its lines, which the JSON keeps."""
    widths = [max(len(str(x[i])) for x in [head] + lines) for i in range(len(head))]
    table = ["| " + " | ".join(str(x).ljust(w) for x, w in zip(head, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    table += ["| " + " | ".join(str(x).ljust(w) for x, w in zip(line, widths)) + " |" for line in lines]
    print()
    print("\n".join(table))
    print()
    return table
