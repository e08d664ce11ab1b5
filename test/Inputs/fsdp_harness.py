"""Multi-process helpers for fsdp-opt's end-to-end lit tests (test/e2e/).

A test is a Python driver that builds a model, runs fsdp-opt and fsdp-run (or its own rank
processes) and compares results bit for bit with the original model run in one process.
Nothing here ever waits without a timeout: a hung rank is killed and reported as HUNG.

Driver side:
    import fsdp_harness as h
    t = h.Test("gather_once")                       # collects checks, prints PASS/FAIL lines
    h.fsdp_opt(model_pt, "--world-size=2", "-o", out_dir)          # -> CompletedProcess
    h.fsdp_run(out_dir, method="generate", inputs=in_pt, check=model_pt, repeat=3, stats=True)
    results = h.run_ranks(2, my_worker, args={"dir": out_dir}, timeout=60)
    t.check(results[0].ok, "rank 0 ran", results[0].describe())
    diff = h.same_bits(got, want)                   # None when bitwise identical, else a reason
    h.check_rank_files(t, out_dir, model_pt, 2, "W=2")   # each rank file holds exactly its shards
    h.gathers_per_call(opt_result.stdout, "generate", 13)  # collectives fsdp-opt --stats predicts
    h.held_units(opt_result.stderr, "generate")     # units --remarks says the planner holds for the call
    sys.exit(t.finish("W=2 generate: 2 ranks bitwise identical"))   # the one-line SUMMARY

Rank side: `run_ranks(W, fn, args)` starts W processes of `python -m fsdp_harness --worker`
with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT=<a port held until every rank has ended: ReservedPort>). Each imports the file that defines `fn`
(a top-level function of the test file; the file is imported under another name, so its
`if __name__ == "__main__":` block does not run) and calls fn(ctx), where ctx is a
RankContext: ctx.rank, ctx.world_size, ctx.args (the JSON-able dict given to run_ranks),
ctx.load(path) (loads $FSDP_OPT_RUNTIME_LIB once, then torch.jit.load), ctx.stats(),
ctx.reset_stats(). fn's return value (tensors, numbers, strings, lists, tuples, dicts) is
torch.save'd and comes back as RankResult.value. A rank that raises prints its traceback to
stderr and exits 1. Workers leave with os._exit (a failed collective may leave Gloo threads
blocked in teardown).

A shell script that starts ranks itself holds its port with `python -m fsdp_harness
--reserve-port-while $$` (hold_port_while).
"""

import contextlib
import importlib.util
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)

HERE = os.path.dirname(os.path.abspath(__file__))

# Seconds any single tool invocation may take before the harness kills it. Generous: the
# machine is shared, but a test must end rather than hang.
TOOL_TIMEOUT = float(os.environ.get("FSDP_HARNESS_TOOL_TIMEOUT", "240"))


class HarnessError(Exception):
    pass


# ---- small utilities -------------------------------------------------------------------------

class ReservedPort:
    """A loopback port for a rendezvous store that listens on it later, held until close() (or
    the end of a `with` block): the Python twin of fsdp_opt::runtime::ReservedPort
    (docs/runtime.md, "Rendezvous ports"). A port found by binding port 0 and closing the socket
    stays free while the ranks load torch, and the kernel may hand it out again meanwhile (to
    another bind of port 0, or as any outgoing connection's local port); rank 0's store then fails
    with EADDRINUSE. This socket stays bound, with SO_REUSEADDR and never listening, so the
    kernel gives the port to nobody else while c10d's TCPStore, which sets SO_REUSEADDR too, can
    still listen on it. Python sockets are not inherited by child processes."""

    def __init__(self):
        self._socket = socket.socket()
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind(("127.0.0.1", 0))
        except OSError:
            self._socket.close()
            raise
        self.port = self._socket.getsockname()[1]

    def close(self):
        self._socket.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def runtime_lib():
    lib = os.environ.get("FSDP_OPT_RUNTIME_LIB")
    if not lib:
        raise HarnessError("FSDP_OPT_RUNTIME_LIB is not set (lit sets it)")
    return lib


def collective_timeout():
    return float(os.environ.get("FSDP_OPT_TIMEOUT_S", "60"))


def which(tool):
    path = shutil.which(tool)
    if path is None:
        raise HarnessError("%s is not on PATH (lit puts the build's bin/ first)" % tool)
    return path


def _set_pdeathsig():
    # Rank and tool processes die with the test driver (lit's timeout kills the driver).
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass


def torch_load(path):
    import torch
    try:
        return torch.load(path, weights_only=False)
    except TypeError:  # a torch without weights_only
        return torch.load(path)


def ceil_div(a, b):
    return -(-a // b)


def shard_rows(n, world):
    return ceil_div(n, world)


def expected_shard(full, world, rank):
    """SPEC section 2: rows [r*c, min((r+1)*c, N)) of `full`, zero-padded to c rows."""
    import torch
    n = full.shape[0]
    c = shard_rows(n, world)
    lo, hi = min(rank * c, n), min((rank + 1) * c, n)
    rows = full[lo:hi]
    pad = torch.zeros((c - rows.shape[0],) + tuple(full.shape[1:]), dtype=full.dtype)
    return torch.cat([rows.detach(), pad])


# ---- running tools ---------------------------------------------------------------------------

class ToolResult:
    def __init__(self, cmd, returncode, stdout, stderr, elapsed, timed_out):
        self.cmd = cmd
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.elapsed = elapsed
        self.timed_out = timed_out

    def describe(self, tail=3000):
        return "`%s` -> rc=%s%s in %.1f s\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
            " ".join(self.cmd), self.returncode, " (TIMED OUT, killed)" if self.timed_out else "",
            self.elapsed, self.stdout[-tail:], self.stderr[-tail:])


def run_tool(cmd, timeout=None, env=None, cwd=None):
    """Runs cmd (a list) with a timeout; never raises on a non-zero exit or a timeout."""
    timeout = TOOL_TIMEOUT if timeout is None else timeout
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=err, env=env, cwd=cwd,
                             preexec_fn=_set_pdeathsig, start_new_session=True)
        timed_out = False
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # the tool and the ranks it started
            p.wait(timeout=30)
        out.seek(0)
        err.seek(0)
        return ToolResult([str(c) for c in cmd], p.returncode, out.read(), err.read(),
                          time.monotonic() - t0, timed_out)


def fsdp_opt(*args, timeout=None, env=None):
    """fsdp-opt ARGS...; returns a ToolResult."""
    return run_tool([which("fsdp-opt")] + [str(a) for a in args], timeout=timeout, env=env)


def sharded(t, orig, out, *flags):
    """fsdp-opt ORIG FLAGS -o OUT, checked with Test `t` (the check names the flags): OUT, or
    None when fsdp-opt failed."""
    r = fsdp_opt(orig, *flags, "-o", out)
    return out if t.check(r.returncode == 0, "fsdp-opt " + " ".join(str(f) for f in flags), r.describe()) else None


def gpt_generate_rank_files(t, out_dir, world, new_tokens, *flags):
    """The setup of the failure tests (a peer that dies, stalls, or is killed under fsdp-run):
    fsdp_models' 2-layer GPT with the root a unit and `generate` registered, saved to
    OUT_DIR/gpt.pt; its example prompt and `new_tokens` saved as OUT_DIR/in.pt; the GPT sharded
    with --fsdp-unit=blocks.* (and `flags`) for `world` ranks into OUT_DIR/w{world}, checked with
    Test `t`. Returns (inputs, rank-file dir), or None when fsdp-opt failed."""
    import fsdp_models as fm
    src = os.path.join(out_dir, "gpt.pt")
    if not os.path.exists(src):
        fm.save(fm.mark(fm.make("gpt", n_layer=2), units=["."], forward_methods={".": ["generate"]}), src)
    inputs = os.path.join(out_dir, "in.pt")
    fm.save_inputs((fm.example_inputs("gpt")[0], new_tokens), inputs)
    d = sharded(t, src, os.path.join(out_dir, "w%d" % world), "--world-size=%d" % world, "--fsdp-unit=blocks.*", *flags)
    return (inputs, d) if d else None


def fsdp_opt_package():
    """The fsdp_opt Python package of this checkout (python/), its libraries this build's: what a
    rank process imports to call the package's API on rank files."""
    os.environ["FSDP_OPT_LIB_DIR"] = os.path.dirname(runtime_lib())
    python_dir = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
    if python_dir not in sys.path:
        sys.path.insert(0, python_dir)
    import fsdp_opt
    fsdp_opt.load()
    return fsdp_opt


def distinct_named_parameters(module):
    """name -> parameter, each tensor once (tied ones under their first name): what an optimizer
    steps and what a reference compares."""
    seen, out = set(), {}
    for name, p in module.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out[name] = p
    return out


class MeanGradientReference:
    """The original model trained in one process on the mean of the W ranks' gradients (SPEC
    section 10's reference), with one copy of the original per rank, holding the same values,
    each called exactly as often as that rank calls its file. Why copies: TorchScript's profiling
    executor runs a module's first call as it is and later ones through an optimised graph
    (differentiated as a whole), whose backward may add in another order; one module called W
    times a step would run rank 1's step 0 the way rank 1 runs its step 1 (seen on an AVX-512
    machine with torch 2.15, where the two orders round differently).

        ref = MeanGradientReference(path, world=2)
        optimizer = torch.optim.SGD(ref.params.values(), ...)
        for step in ...:
            optimizer.zero_grad()
            ref.backward(lambda rank, module: loss(module, batch(rank, step)).backward())
            optimizer.step()
            ref.sync()
    ref.params: name -> parameter of the trained model (copy 0), each tensor once."""

    def __init__(self, path, world):
        import torch
        self.world = world
        self.copies = [torch.jit.load(path) for _ in range(world)]
        self.params = distinct_named_parameters(self.copies[0])
        self._copy_params = [distinct_named_parameters(c) for c in self.copies]

    def backward(self, run_rank):
        """run_rank(rank, module) runs rank's backward on its copy; then every parameter's .grad
        is the ranks' gradients summed in rank order and divided by W, as the runtime reduces
        them (None where no rank produced one)."""
        total = {}
        for rank, (module, params) in enumerate(zip(self.copies, self._copy_params)):
            for p in params.values():
                p.grad = None
            run_rank(rank, module)
            for n, p in params.items():
                if p.grad is not None:
                    total[n] = p.grad.clone() if n not in total else total[n] + p.grad
        for n, p in self.params.items():
            p.grad = total[n].div(self.world) if n in total else None

    def sync(self):
        """After the optimizer stepped copy 0: the other copies take its values."""
        import torch
        with torch.no_grad():
            for params in self._copy_params[1:]:
                for n, p in params.items():
                    p.copy_(self.params[n])


def fsdp_run(target, method=None, inputs=None, check=None, repeat=None, stats=False,
             nproc=None, timeout_s=None, save_outputs=None, extra=(), timeout=None, env=None):
    """fsdp-run TARGET [options]; returns a ToolResult with .ranks = {rank: line} and
    .stats = {rank: {counter: value}} parsed from its stdout."""
    cmd = [which("fsdp-run"), target]
    if method:
        cmd.append("--method=" + method)
    if inputs:
        cmd.append("--inputs=" + str(inputs))
    if check:
        cmd.append("--check=" + str(check))
    if repeat:
        cmd.append("--repeat=%d" % repeat)
    if stats:
        cmd.append("--stats")
    if nproc:
        cmd.append("--nproc=%d" % nproc)
    if timeout_s:
        cmd.append("--timeout=%s" % timeout_s)
    if save_outputs:
        cmd.append("--save-outputs=" + str(save_outputs))
    cmd.extend(extra)
    r = run_tool(cmd, timeout=timeout, env=env)
    r.ranks = {}
    r.stats = {}
    for line in r.stdout.splitlines():
        head, sep, rest = line.partition(": ")
        if not sep or not head.startswith("rank "):
            continue
        name = head[len("rank "):]
        if name.isdigit():
            r.ranks[int(name)] = rest
        elif name.endswith(" stats") and name[:-len(" stats")].isdigit():
            counters = {}
            for kv in rest.split():
                k, _, v = kv.partition("=")
                with contextlib.suppress(ValueError):
                    counters[k] = int(v)
            r.stats[int(name[:-len(" stats")])] = counters
    return r


def readme_shows_example(t, repo, relpath):
    """Checks that README.md shows the example file `relpath` verbatim (as an indented block);
    returns the README's text and the example's path."""
    script = os.path.join(repo, relpath)
    code = open(script).read()
    readme = open(os.path.join(repo, "README.md")).read()
    shown = "".join("    " + l if l.strip() else "\n" for l in code.splitlines(True))
    t.check(shown in readme, "README shows %s verbatim" % relpath)
    return readme, script


def default_pipeline():
    """The default pipeline, from libfsdp_passes itself (so a test follows it)."""
    import torch
    torch.ops.load_library(runtime_lib())
    torch.ops.load_library(os.path.join(os.path.dirname(runtime_lib()), "libfsdp_passes.so"))
    return list(torch.ops.fsdp_opt.default_pipeline())


def held_units(remarks, method):
    """Units fsdp-opt --remarks says plan-gather-lifetimes holds for the whole call of the root
    method `method`, in module order; [] when it holds none."""
    import re
    m = re.search(r"\[plan-gather-lifetimes\] \d+ unit\(s\) held for the whole call of \S+::%s: (.*) \(static peak"
                  % re.escape(method), remarks)
    return re.findall(r"'([^']*)'", m.group(1)) if m else []


def gathers_per_call(stats_text, method, iterations):
    """Collectives per call of `method` that fsdp-opt --stats predicts, for a method whose
    loops run `iterations` times: its line `gathers per call of METHOD: N` or
    `... N (K inside loops, once per iteration)` gives N - K + K * iterations. None when
    --stats has no such line."""
    import re
    m = re.search(r"gathers per call of %s: (\d+)(?: \((\d+) inside loops)?" % re.escape(method), stats_text)
    if not m:
        return None
    n, k = int(m.group(1)), int(m.group(2) or 0)
    return n - k + k * iterations


def dir_entries(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


# ---- bitwise comparison ----------------------------------------------------------------------

def same_bits(a, b, path="output"):
    """None if a and b are bitwise identical (recursively through tuples, lists, dicts),
    else a one-line reason naming where they first differ."""
    import torch
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return "%s: %s vs %s" % (path, type(a).__name__, type(b).__name__)
        if a.dtype != b.dtype:
            return "%s: dtype %s vs %s" % (path, a.dtype, b.dtype)
        if tuple(a.shape) != tuple(b.shape):
            return "%s: shape %s vs %s" % (path, tuple(a.shape), tuple(b.shape))
        if a.numel() == 0:
            return None
        ab = a.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        bb = b.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        if torch.equal(ab, bb):
            return None
        es = a.element_size()
        diff = (ab.view(-1, es) != bb.view(-1, es)).any(dim=1)
        idx = diff.nonzero()
        return "%s: %d of %d elements differ bitwise (first at flat index %d)" % (
            path, int(diff.sum()), a.numel(), int(idx[0]))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if type(a) is not type(b):
            return "%s: %s vs %s" % (path, type(a).__name__, type(b).__name__)
        if len(a) != len(b):
            return "%s: %d elements vs %d" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = same_bits(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a.keys()) != list(b.keys()):
            return "%s: keys %s vs %s" % (path, list(a.keys()), list(b.keys()))
        for k in a:
            d = same_bits(a[k], b[k], "%s[%r]" % (path, k))
            if d:
                return d
        return None
    if isinstance(a, float) and isinstance(b, float):
        import struct
        return None if struct.pack("<d", a) == struct.pack("<d", b) else "%s: %r vs %r" % (path, a, b)
    if type(a) is not type(b) or a != b:
        return "%s: %r vs %r" % (path, a, b)
    return None


# ---- checks and the one-line summary ---------------------------------------------------------

class Test:
    """Collects named checks; prints `PASS name: detail` / `FAIL name: detail` lines and, at
    the end, one summary line. finish() returns the exit status (1 if any check failed)."""

    def __init__(self, name):
        self.name = name
        self.failed = []
        self.passed = 0
        self.t0 = time.monotonic()

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("PASS %s%s" % (what, (": " + detail) if detail else ""), flush=True)
        else:
            self.failed.append(what)
            print("FAIL %s%s" % (what, (": " + detail) if detail else ""), flush=True)
        return bool(cond)

    def note(self, text):
        print("  " + text.replace("\n", "\n  "), flush=True)

    def finish(self, summary):
        dt = time.monotonic() - self.t0
        if self.failed:
            print("SUMMARY %s: FAILED %d of %d checks (%s) [%.1f s]" % (
                self.name, len(self.failed), len(self.failed) + self.passed,
                ", ".join(self.failed), dt), flush=True)
            return 1
        print("SUMMARY %s: %s (%d checks) [%.1f s]" % (self.name, summary, self.passed, dt),
              flush=True)
        return 0


def check_fsdp_run_exact(t, r, label, world, check_name):
    """Checks an fsdp-run --check result: exit 0 and every rank 'bitwise identical'."""
    ok = r.returncode == 0 and not r.timed_out
    lines_ok = all("outputs bitwise identical" in r.ranks.get(k, "") for k in range(world))
    t.check(ok and lines_ok and len(r.ranks) == world,
            "%s: %d rank%s bitwise identical to %s" % (label, world, "s" if world > 1 else "",
                                                       os.path.basename(check_name)),
            "" if ok and lines_ok else r.describe())
    return ok and lines_ok


def attr_path(module, dotted):
    """module.a.b.c for 'a.b.c' (works on loaded TorchScript modules and ModuleLists)."""
    for name in dotted.split("."):
        module = getattr(module, name)
    return module


def check_rank_files(t, out_dir, original_pt, world, label):
    """SPEC sections 2 and 6: DIR/manifest.json names every unit parameter with its full shape;
    rank r's file holds exactly rank r's zero-padded shard of it (bitwise, from the original
    model), never the full parameter (unless W=1), tied aliases stay one tensor, and the file
    carries its rank, the world size and the manifest's sha256. Returns the manifest."""
    import hashlib
    import torch
    torch.ops.load_library(runtime_lib())
    manifest_path = os.path.join(out_dir, "manifest.json")
    with open(manifest_path, "rb") as f:
        raw = f.read()
    manifest = json.loads(raw)
    sha = hashlib.sha256(raw).hexdigest()
    original = torch.jit.load(original_pt)
    problems = []
    n_params = 0
    if manifest.get("world_size") != world:
        problems.append("manifest world_size %r != %d" % (manifest.get("world_size"), world))
    # An HSDP run (--shard-group-size=S): rank r holds shard r % S of S.
    group = manifest.get("mesh", {}).get("shard_group_size", world)
    shard_bytes = [0] * world
    for r in range(world):
        m = torch.jit.load(os.path.join(out_dir, "rank%d.pt" % r))
        tags = [("_fsdp_rank", r), ("_fsdp_world_size", world), ("_fsdp_manifest_sha256", sha)]
        if group != world:
            tags.append(("_fsdp_shard_group_size", group))
        for attr, want in tags:
            got = m._c.getattr(attr) if m._c.hasattr(attr) else "<missing>"
            if got != want:
                problems.append("rank%d.pt: %s = %r, expected %r" % (r, attr, got, want))
        for unit in manifest["units"]:
            for p in unit["params"]:
                n_params += r == 0
                full = attr_path(original, p["path"])
                shard = attr_path(m, p["path"])
                shard_bytes[r] += nbytes(shard)
                if list(full.shape) != p["shape"]:
                    problems.append("manifest shape of %s: %s vs original %s" % (p["path"], p["shape"], list(full.shape)))
                    continue
                if full.dim() == 0:
                    d = same_bits(shard, full, "rank%d.pt %s" % (r, p["path"]))
                else:
                    d = same_bits(shard, expected_shard(full, group, r % group), "rank%d.pt %s" % (r, p["path"]))
                if d:
                    problems.append(d)
                for alias in p.get("aliases", []):
                    a = attr_path(m, alias)
                    if a.data_ptr() != shard.data_ptr() or tuple(a.shape) != tuple(shard.shape):
                        problems.append("rank%d.pt: %s is no longer tied to %s" % (r, alias, p["path"]))
    t.check(not problems, "%s: rank files hold exactly their shards of %d unit parameters, "
            "tagged with rank/world/manifest sha" % (label, n_params), "; ".join(problems[:10]))
    if group > 1:
        check_no_full_copies(t, out_dir, original_pt, original, manifest, shard_bytes, label)
    return manifest


def tensor_data_bytes(pt_path):
    """Bytes of a TorchScript file's tensor storages: the sizes of its data/ records."""
    import zipfile
    with zipfile.ZipFile(pt_path) as archive:
        return sum(i.file_size for i in archive.infolist() if "/data/" in i.filename)


def nbytes(tensor):
    return tensor.numel() * tensor.element_size()


def storage_ptr(tensor):
    storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
    return storage.data_ptr()


def check_no_full_copies(t, out_dir, original_pt, original, manifest, shard_bytes, label):
    """SPEC section 6, whatever holds the tensor: each rank file's tensor data is at most the
    original's, less the whole unit parameters, plus that rank's shards (`shard_bytes[r]`):
    fsdp-opt adds no tensor of its own, so a whole parameter left in the file (in a list, an
    attribute) exceeds it. check_rank_files compares the parameter slots; this catches a whole
    copy held anywhere else (nn.LSTM's _flat_weights was one)."""
    params = [attr_path(original, p["path"]) for u in manifest["units"] for p in u["params"]]
    whole = sum(nbytes(p) for p in params)
    # A buffer over a parameter's storage (registered from `weight.data`) is not sharded: that
    # storage stays whole (docs/design.md).
    buffer_storages = {storage_ptr(b) for b in original.buffers()}
    kept = sum(nbytes(p) for p in params if storage_ptr(p) in buffer_storages)
    base = tensor_data_bytes(original_pt) - whole + kept
    over = []
    for r, shards in enumerate(shard_bytes):
        held = tensor_data_bytes(os.path.join(out_dir, "rank%d.pt" % r))
        if held > base + shards:
            over.append("rank%d.pt holds %d bytes of tensor data, %d more than the original's %d less its "
                        "unit parameters' %d plus its shards' %d" % (r, held, held - base - shards,
                                                                     base + whole - kept, whole - kept, shards))
    t.check(not over, "%s: no rank file holds more tensor data than its shards and the original's "
            "other tensors (%d bytes of unit parameters are not kept whole)" % (label, whole - kept), "; ".join(over))


# ---- rank processes --------------------------------------------------------------------------

class RankResult:
    def __init__(self, rank):
        self.rank = rank
        self.returncode = None
        self.signal = None
        self.timed_out = False
        self.stdout = ""
        self.stderr = ""
        self.value = None
        self.has_value = False
        self.elapsed = 0.0

    @property
    def ok(self):
        return self.returncode == 0 and self.has_value and not self.timed_out

    def describe(self, tail=3000):
        how = ("HUNG (killed after the deadline)" if self.timed_out else
               "killed by signal %d" % self.signal if self.signal else "exit %s" % self.returncode)
        return "rank %d: %s after %.1f s\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
            self.rank, how, self.elapsed, self.stdout[-tail:], self.stderr[-tail:])


def run_ranks(world_size, target, args=None, timeout=120, env=None, python=None, nodes=1, rank_env=None):
    """Starts world_size rank processes running target(ctx) (see the module docstring) and
    waits for all of them, at most `timeout` seconds in total; ranks still running then are
    killed and marked timed_out. Returns [RankResult] in rank order. `nodes`: the ranks are
    numbered as torchrun numbers them on that many nodes of world_size / nodes ranks each
    (LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK, the node's index). `rank_env`: {rank: {name:
    value}} set for single ranks only."""
    if callable(target):
        fn_name = target.__name__
        src = os.path.abspath(inspect.getsourcefile(target))
    else:
        src, fn_name = target.rsplit(":", 1)
        src = os.path.abspath(src)
    python = python or sys.executable
    base_env = dict(os.environ if env is None else env)
    for v in list(base_env):
        if v.startswith("TORCHELASTIC_"):
            del base_env[v]
    base_env["PYTHONPATH"] = os.pathsep.join([HERE] + ([base_env["PYTHONPATH"]] if base_env.get("PYTHONPATH") else []))
    base_env.setdefault("OMP_NUM_THREADS", "1")
    reserved = ReservedPort()  # rank 0's store port, until every rank has ended
    port = reserved.port
    work = tempfile.mkdtemp(prefix="fsdp-harness.")
    args_json = json.dumps(args or {})
    procs, files, results = [], [], []
    try:
        for r in range(world_size):
            e = dict(base_env)
            per_node = world_size // nodes
            e.update({"RANK": str(r), "LOCAL_RANK": str(r % per_node), "WORLD_SIZE": str(world_size),
                      "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(r // per_node),
                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
            e.update((rank_env or {}).get(r, {}))
            out_path = os.path.join(work, "rank%d.result.pt" % r)
            fo = open(os.path.join(work, "rank%d.stdout" % r), "w+")
            fe = open(os.path.join(work, "rank%d.stderr" % r), "w+")
            files.append((fo, fe, out_path))
            cmd = [python, "-m", "fsdp_harness", "--worker", src, fn_name, out_path, args_json]
            procs.append((subprocess.Popen(cmd, stdout=fo, stderr=fe, env=e,
                                           preexec_fn=_set_pdeathsig), time.monotonic()))
            results.append(RankResult(r))
        deadline = time.monotonic() + timeout
        pending = set(range(world_size))
        while pending:
            for r in sorted(pending):
                p, t0 = procs[r]
                rc = p.poll()
                if rc is not None:
                    results[r].elapsed = time.monotonic() - t0
                    results[r].returncode = rc
                    if rc < 0:
                        results[r].signal = -rc
                    pending.discard(r)
            if pending and time.monotonic() > deadline:
                for r in pending:
                    p, t0 = procs[r]
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()
                    p.wait(timeout=30)
                    results[r].timed_out = True
                    results[r].returncode = p.returncode
                    results[r].elapsed = time.monotonic() - t0
                pending.clear()
            time.sleep(0.02)
        for r, (fo, fe, out_path) in enumerate(files):
            fo.seek(0)
            fe.seek(0)
            results[r].stdout = fo.read()
            results[r].stderr = fe.read()
            if os.path.exists(out_path):
                try:
                    results[r].value = torch_load(out_path)
                    results[r].has_value = True
                except Exception as e:  # noqa: BLE001
                    results[r].stderr += "\n[harness] cannot read the rank's result: %s" % e
    finally:
        for fo, fe, _ in files:
            fo.close()
            fe.close()
        for p, _ in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
        reserved.close()
    return results


def describe_ranks(results):
    return "\n".join(r.describe() for r in results if not r.ok) or "(all ranks ok)"


class RankContext:
    def __init__(self, args):
        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.args = args
        self._lib_loaded = False

    @property
    def torch(self):
        import torch
        return torch

    def load_runtime(self):
        if not self._lib_loaded:
            self.torch.ops.load_library(runtime_lib())
            self._lib_loaded = True

    def load(self, path):
        """Loads the runtime library (once) and torch.jit.load(path)."""
        self.load_runtime()
        return self.torch.jit.load(path)

    def rank_file(self, directory, rank=None):
        return os.path.join(directory, "rank%d.pt" % (self.rank if rank is None else rank))

    def stats(self):
        self.load_runtime()
        return dict(self.torch.ops.fsdp.stats())

    def reset_stats(self):
        self.load_runtime()
        self.torch.ops.fsdp.reset_stats()

    def log(self, text):
        print("[rank %d] %s" % (self.rank, text), flush=True)


def timed_error(fn):
    """Calls fn(); returns (the text of the RuntimeError it raised, or None; seconds taken)."""
    t0 = time.monotonic()
    try:
        fn()
        error = None
    except RuntimeError as e:
        error = str(e)
    return error, time.monotonic() - t0


def stats_delta(before, after):
    return {k: after[k] - before.get(k, 0) for k in after}


def _import_file(path):
    name = "_fsdp_e2e_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _worker(src, fn_name, out_path, args_json):
    code = 0
    try:
        import torch
        mod = _import_file(src)
        ctx = RankContext(json.loads(args_json))
        value = getattr(mod, fn_name)(ctx)
        tmp = out_path + ".tmp"
        torch.save(value, tmp)
        os.replace(tmp, out_path)
    except BaseException:  # noqa: BLE001 - report anything, then leave
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def kill_self(how):
    """Dies now: how = 'exit' (os._exit(1)) or 'sigkill'."""
    sys.stdout.flush()
    sys.stderr.flush()
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    os._exit(1)


def hold_port_while(pid):
    """For shell scripts that start ranks themselves: reserves a port (ReservedPort), prints it
    and holds it until process `pid` (the script, `$$`) has ended.

        exec 3< <("$PYTHON" -m fsdp_harness --reserve-port-while $$); read -r port <&3"""
    with ReservedPort() as reserved:
        print(reserved.port, flush=True)
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return 0
            time.sleep(0.2)


def main(argv):
    if len(argv) == 5 and argv[0] == "--worker":
        _worker(*argv[1:])
    if len(argv) == 2 and argv[0] == "--reserve-port-while":
        return hold_port_while(int(argv[1]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
