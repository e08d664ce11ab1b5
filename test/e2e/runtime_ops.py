#!/usr/bin/env python3
# lit: the main scenarios here; the failure scenarios in runtime_ops_failures.py.
# RUN: %python %s %runtime_lib --scenarios=main
"""End-to-end test of libfsdp_runtime's ops, without any fsdp-opt pass.

    runtime_ops.py LIB [--worlds 1,2,3,4] [--timeout S] [--scenarios main,death,stall]

For each world size W it starts W processes. Each builds full tensors from a seed shared by
all ranks, cuts its own shard by hand (SPEC section 2: uneven dim 0, dim 0 < W, mixed dtypes,
tied aliases), and calls torch.ops.fsdp.{init_process_group, all_gather, reshard, release_all,
check_rank, stats, reset_stats} directly, checking the results bit for bit. Then, for W >= 2,
it kills one rank (os._exit) or stalls one, and checks that the survivors fail with an error
within FSDP_OPT_TIMEOUT_S instead of hanging.

Prints one line per failed check, then `N passed, M failed`; exits 1 if anything failed.
"""

import argparse
import math
import os
import socket
import subprocess
import sys
import time
import traceback

HERE = os.path.abspath(__file__)


# ---------------------------------------------------------------------------------------------
# worker side
# ---------------------------------------------------------------------------------------------

class Reporter:
    def __init__(self, rank):
        self.rank = rank

    def result(self, name, ok, msg=""):
        line = "RESULT %s %s %s" % (name, "PASS" if ok else "FAIL", msg.replace("\n", " | "))
        print(line, flush=True)

    def check(self, name, fn):
        try:
            fn()
            self.result(name, True)
        except Exception as e:  # noqa: BLE001 - every failure is a test result
            where = traceback.extract_tb(e.__traceback__)
            lines = ["%s:%d" % (os.path.basename(f.filename), f.lineno) for f in where
                     if f.filename == HERE]
            self.result(name, False, "%s: %s (at %s)" % (type(e).__name__, e, " <- ".join(reversed(lines))))


def random_full(torch, shape, dtype, seed):
    """A tensor of random BITS (NaNs, -0.0, denormals included): equality must be bitwise."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    if dtype in (torch.float32, torch.int32):
        bits = torch.randint(-2**31, 2**31, (n,), generator=g, dtype=torch.int64).to(torch.int32)
        return bits.view(dtype).reshape(shape)
    if dtype in (torch.float16, torch.bfloat16, torch.int16):
        bits = torch.randint(-2**15, 2**15, (n,), generator=g, dtype=torch.int64).to(torch.int16)
        return bits.view(dtype).reshape(shape)
    if dtype in (torch.float64, torch.int64):
        bits = torch.randint(-2**62, 2**62, (n,), generator=g, dtype=torch.int64)
        return bits.view(dtype).reshape(shape)
    raise ValueError(dtype)


def shard_of(torch, full, world, rank):
    n = full.shape[0]
    c = -(-n // world)
    rows = full[min(rank * c, n):min((rank + 1) * c, n)]
    pad = torch.zeros((c - rows.shape[0],) + tuple(full.shape[1:]), dtype=full.dtype)
    return torch.cat([rows, pad]).contiguous()


def same_bits(a, b):
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    ac = a.detach().contiguous()
    bc = b.detach().contiguous()
    if ac.numel() == 0:
        return True
    return bytes(ac.view(-1).view(__import__("torch").uint8).numpy()) == \
        bytes(bc.view(-1).view(__import__("torch").uint8).numpy())


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def expect_raises(fn, *needles):
    try:
        fn()
    except RuntimeError as e:
        text = str(e)
        for n in needles:
            expect(n in text, "error %r does not mention %r" % (text, n))
        return text
    raise AssertionError("no error raised (expected one mentioning %s)" % (needles,))


class Unit:
    """A hand-made FSDP unit: full tensors, this rank's shards as Parameters."""

    def __init__(self, torch, specs, world, rank, seed):
        self.torch = torch
        self.fulls = []
        self.params = []
        for i, (shape, dtype) in enumerate(specs):
            full = random_full(torch, shape, dtype, seed * 1000 + i)
            self.fulls.append(full)
            shard = shard_of(torch, full, world, rank)
            self.params.append(torch.nn.Parameter(shard.clone(), requires_grad=dtype.is_floating_point))
        self.shards = [p.detach().clone() for p in self.params]
        self.shard_ptrs = [p.data_ptr() for p in self.params]
        self.full_rows = [f.shape[0] for f in self.fulls]

    def full_bytes(self):
        return sum(f.numel() * f.element_size() for f in self.fulls)

    def check_full(self):
        for i, (p, f) in enumerate(zip(self.params, self.fulls)):
            expect(same_bits(p, f), "param %d is not bitwise the full tensor (shape %s vs %s)"
                   % (i, tuple(p.shape), tuple(f.shape)))
            expect(p.requires_grad == f.is_floating_point(), "param %d lost requires_grad" % i)
            expect(p.is_leaf, "param %d is no longer a leaf" % i)

    def check_sharded(self):
        for i, (p, s, ptr) in enumerate(zip(self.params, self.shards, self.shard_ptrs)):
            expect(same_bits(p, s), "param %d is not bitwise its shard again" % i)
            expect(p.numel() == 0 or p.data_ptr() == ptr, "param %d is not back on its shard storage" % i)
            expect(p.requires_grad == s.is_floating_point(), "param %d lost requires_grad" % i)


MIXED = None  # filled in worker_main once torch is imported


def stats(torch):
    return dict(torch.ops.fsdp.stats())


def delta(before, after):
    return {k: after[k] - before.get(k, 0) for k in after}


def scenario_main(torch, rank, world, rep):
    ops = torch.ops.fsdp
    f32, f16, i64 = torch.float32, torch.float16, torch.int64
    # Uneven dim 0, dim 0 < W (2 rows for W = 3, 4), empty, 1-row, 3-d, mixed dtypes.
    specs = [((10, 3), f32), ((2, 5), f16), ((7,), i64), ((1, 4, 2), f32), ((0, 3), f32),
             ((13,), f16), ((5, 2), i64)]
    ops.reset_stats()

    u = Unit(torch, specs, world, rank, seed=1)

    def gather_bitwise():
        s0 = stats(torch)
        out = ops.all_gather(u.params, u.full_rows, "unitA")
        expect(len(out) == len(u.params), "all_gather returned %d tensors" % len(out))
        for a, b in zip(out, u.params):
            expect(a is b, "all_gather did not return the parameter objects themselves")
        u.check_full()
        d = delta(s0, stats(torch))
        expect(d["all_gathers"] == 1 and d["gather_calls"] == 1, "stats delta %s" % d)
        expect(d["bytes_gathered"] == u.full_bytes(), "bytes_gathered %d != %d" % (d["bytes_gathered"], u.full_bytes()))
        expect(stats(torch)["unsharded_bytes"] == u.full_bytes(), "unsharded_bytes %s" % stats(torch))
        if world == 1:
            for i, p in enumerate(u.params):
                expect(p.numel() == 0 or p.data_ptr() == u.shard_ptrs[i], "W=1 copied param %d" % i)
        else:
            for i, p in enumerate(u.params):
                expect(p.numel() == 0 or p.data_ptr() != u.shard_ptrs[i], "param %d still on its shard storage" % i)
    rep.check("gather_bitwise", gather_bitwise)

    def reshard_restores():
        s0 = stats(torch)
        ops.reshard(u.params, "unitA")
        u.check_sharded()
        s1 = stats(torch)
        d = delta(s0, s1)
        expect(d["reshards"] == 1 and d["reshard_calls"] == 1, "stats delta %s" % d)
        expect(s1["unsharded_bytes"] == 0, "unsharded_bytes %d after reshard" % s1["unsharded_bytes"])
        expect(s1["peak_unsharded_bytes"] >= u.full_bytes(), "peak %s" % s1)
    rep.check("reshard_restores", reshard_restores)

    def tied_alias():
        t = Unit(torch, [((9, 2), f32), ((3,), f16)], world, rank, seed=2)
        tied = t.params[0]
        # a second TensorImpl on the same storage and offset: deduped by (storage, offset)
        other = torch.empty(0, dtype=tied.dtype).set_(tied.detach().storage(), tied.storage_offset(),
                                                      tied.size(), tied.stride())
        s0 = stats(torch)
        out = ops.all_gather([tied, t.params[1], tied, other], [9, 3, 9, 9], "tied")
        d = delta(s0, stats(torch))
        expect(d["all_gathers"] == 1, "tied gather issued %d collectives" % d["all_gathers"])
        expect(d["bytes_gathered"] == t.full_bytes(), "tied alias gathered twice: %s" % d)
        expect(out[0] is out[2], "aliases came back as different objects")
        t.check_full()
        expect(same_bits(other, t.fulls[0]), "second TensorImpl alias did not see the gathered tensor")
        expect(world == 1 or other.data_ptr() == tied.data_ptr(), "aliases do not share the full storage")
        ops.reshard(out, "tied")
        t.check_sharded()
        expect(same_bits(other, t.shards[0]), "second alias not resharded")
    rep.check("tied_alias", tied_alias)

    def nested_refcount():
        n = Unit(torch, [((6, 4), f32), ((3, 3), i64)], world, rank, seed=3)
        s0 = stats(torch)
        ops.all_gather(n.params, n.full_rows, "outer")
        ops.all_gather(n.params, n.full_rows, "outer")  # nested: same unit again
        d = delta(s0, stats(torch))
        expect(d["all_gathers"] == 1 and d["gather_calls"] == 2, "nested gather stats %s" % d)
        ops.reshard(n.params, "outer")
        n.check_full()  # still gathered: one reference left
        ops.reshard(n.params, "outer")
        n.check_sharded()
        d = delta(s0, stats(torch))
        expect(d["reshards"] == 1 and d["reshard_calls"] == 2, "nested reshard stats %s" % d)
    rep.check("nested_refcount", nested_refcount)

    def release_all():
        a = Unit(torch, [((5, 3), f32)], world, rank, seed=4)
        b = Unit(torch, [((11,), f16), ((4, 2), i64)], world, rank, seed=5)
        ops.all_gather(a.params, a.full_rows, "a")
        ops.all_gather(b.params, b.full_rows, "b")
        ops.all_gather(b.params, b.full_rows, "b")
        a.check_full()
        b.check_full()
        s0 = stats(torch)
        ops.release_all()
        a.check_sharded()
        b.check_sharded()
        s1 = stats(torch)
        d = delta(s0, s1)
        expect(d["reshards"] == 2 and d["release_all_calls"] == 1, "release_all stats %s" % d)
        expect(s1["unsharded_bytes"] == 0, "unsharded_bytes %d after release_all" % s1["unsharded_bytes"])
        expect_raises(lambda: ops.reshard(b.params, "b"), "not gathered", "unit 'b'")
        # usable again afterwards
        ops.all_gather(a.params, a.full_rows, "a")
        a.check_full()
        ops.reshard(a.params, "a")
        a.check_sharded()
    rep.check("release_all", release_all)

    def bad_rows():
        bad = Unit(torch, [((4, 2), f32), ((6,), f32)], world, rank, seed=6)
        c = bad.params[1].shape[0]
        wrong = c * world + 1  # ceil(wrong / W) = c + 1 != c
        expect_raises(lambda: ops.all_gather(bad.params, [4, wrong], "blocks.7"),
                      "unit 'blocks.7'", "parameter 1", "ceil(")
        bad.check_sharded()
        expect_raises(lambda: ops.all_gather(bad.params, [4], "blocks.7"), "unit 'blocks.7'")
    rep.check("bad_rows_error", bad_rows)

    def zero_dim():
        expect_raises(lambda: ops.all_gather([torch.nn.Parameter(torch.tensor(1.0))], [1], "z"),
                      "unit 'z'", "0-dim")
    rep.check("zero_dim_error", zero_dim)

    def empty_list():
        s0 = stats(torch)
        expect(ops.all_gather([], [], "empty") == [], "empty gather returned something")
        ops.reshard([], "empty")
        expect(delta(s0, stats(torch))["all_gathers"] == 0, "empty gather issued a collective")
    rep.check("empty_unit", empty_list)

    def many_rounds():
        m = Unit(torch, [((17, 3), f32), ((3,), f16)], world, rank, seed=7)
        for _ in range(20):
            ops.all_gather(m.params, m.full_rows, "loop")
            m.check_full()
            ops.reshard(m.params, "loop")
            m.check_sharded()
    rep.check("many_rounds", many_rounds)

    def check_rank_ok():
        ops.check_rank(rank, world, "sha-of-one-run")
        ops.check_rank(rank, world, "sha-of-one-run")  # second time: cached, no exchange
    rep.check("check_rank_ok", check_rank_ok)

    def check_rank_mismatch():
        expect_raises(lambda: ops.check_rank(rank, world + 1, "sha-of-one-run"),
                      "world size %d" % (world + 1), "world size %d" % world)
        other = (rank + 1) % (world + 1)
        expect_raises(lambda: ops.check_rank(other, world + 1, "x"), "rank %d" % other, "rank %d" % rank)
    rep.check("check_rank_mismatch", check_rank_mismatch)

    if world > 1:
        def manifest_mismatch():
            expect_raises(lambda: ops.check_rank(rank, world, "sha-of-run-on-rank-%d" % rank),
                          "rank files come from different fsdp-opt runs")
        rep.check("manifest_mismatch", manifest_mismatch)

    def reset():
        ops.reset_stats()
        s = stats(torch)
        expect(all(v == 0 for v in s.values()), "counters not reset: %s" % s)
        expect(set(s) >= {"all_gathers", "gather_calls", "bytes_gathered", "unsharded_bytes",
                          "peak_unsharded_bytes", "reshards"}, "missing keys: %s" % s)
    rep.check("reset_stats", reset)

    def scripted():
        # The ops are usable from TorchScript with the design's schemas.
        class M(torch.nn.Module):
            def __init__(self, w):
                super().__init__()
                self.w = w

            def forward(self, x):
                full = torch.ops.fsdp.all_gather([self.w], [10], "m")
                y = x + self.w.sum()
                torch.ops.fsdp.reshard(full, "m")
                return y
        full = random_full(torch, (10,), torch.float64, 99).abs().nan_to_num(0.0) % 1000
        w = torch.nn.Parameter(shard_of(torch, full, world, rank))
        sm = torch.jit.script(M(w))
        y = sm(torch.zeros(2, dtype=torch.float64))
        expect(same_bits(y, torch.zeros(2, dtype=torch.float64) + full.sum()), "scripted result differs")
        expect(tuple(sm.w.shape) == tuple(w.shape), "scripted module left sharded parameter gathered")
    rep.check("torchscript_call", scripted)


def scenario_peer_death(torch, rank, world, rep, victim, timeout):
    ops = torch.ops.fsdp
    u = Unit(torch, [((9, 3), torch.float32), ((5,), torch.int64)], world, rank, seed=11)
    ops.all_gather(u.params, u.full_rows, "warmup")
    ops.reshard(u.params, "warmup")
    if rank == victim:
        sys.stdout.flush()
        os._exit(17)
    time.sleep(0.5)

    def survivor_fails():
        t0 = time.monotonic()
        text = expect_raises(lambda: ops.all_gather(u.params, u.full_rows, "blocks.3"),
                             "unit 'blocks.3'", "peer may have died")
        elapsed = time.monotonic() - t0
        expect(elapsed <= timeout + 5, "failed only after %.1f s (timeout %s s): %s" % (elapsed, timeout, text))
        u.check_sharded()  # a failed gather leaves the unit sharded
    rep.check("peer_death_victim%d" % victim, survivor_fails)


def scenario_stall(torch, rank, world, rep, timeout):
    ops = torch.ops.fsdp
    u = Unit(torch, [((8, 2), torch.float32)], world, rank, seed=12)
    ops.all_gather(u.params, u.full_rows, "warmup")
    ops.reshard(u.params, "warmup")
    if rank == world - 1:
        # alive but never joins the collective: the others must time out
        time.sleep(timeout + 8)
        rep.result("stalled_rank_slept", True)
        return

    def times_out():
        t0 = time.monotonic()
        text = expect_raises(lambda: ops.all_gather(u.params, u.full_rows, "stuck"),
                             "unit 'stuck'", "peer may have died")
        elapsed = time.monotonic() - t0
        expect(elapsed <= timeout + 5, "failed only after %.1f s (timeout %s s): %s" % (elapsed, timeout, text))
        u.check_sharded()
    rep.check("stalled_peer_times_out", times_out)


def worker_main(args):
    import torch
    torch.ops.load_library(args.lib)
    rep = Reporter(args.rank)
    try:
        torch.ops.fsdp.init_process_group(args.rank, args.world, "127.0.0.1", args.port)
    except Exception as e:  # noqa: BLE001
        rep.result("init_process_group", False, str(e))
        sys.stdout.flush()
        os._exit(1)
    timeout = float(os.environ["FSDP_OPT_TIMEOUT_S"])
    if args.scenario == "main":
        scenario_main(torch, args.rank, args.world, rep)
    elif args.scenario.startswith("death"):
        scenario_peer_death(torch, args.rank, args.world, rep, int(args.scenario[5:]), timeout)
    elif args.scenario == "stall":
        scenario_stall(torch, args.rank, args.world, rep, timeout)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: after a failed collective Gloo threads may still be blocked.
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# driver side
# ---------------------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_scenario(lib, world, scenario, timeout, expect_exit):
    """Runs one scenario on `world` processes; returns (passed, failed_lines)."""
    port = free_port()
    env = dict(os.environ)
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(v, None)
    env["FSDP_OPT_TIMEOUT_S"] = str(timeout)
    env.setdefault("OMP_NUM_THREADS", "1")
    procs = []
    for r in range(world):
        cmd = [sys.executable, HERE, lib, "--worker", scenario, "--rank", str(r),
               "--world", str(world), "--port", str(port)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    passed, failed = 0, []
    deadline = time.monotonic() + 6 * timeout + 60
    for r, p in enumerate(procs):
        tag = "W=%d %s rank %d" % (world, scenario, r)
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, err = p.communicate()
            failed.append("%s: HUNG (killed after the deadline)" % tag)
            continue
        seen = 0
        for line in out.splitlines():
            if not line.startswith("RESULT "):
                continue
            seen += 1
            parts = line.split(" ", 3)
            name, verdict = parts[1], parts[2]
            if verdict == "PASS":
                passed += 1
            else:
                failed.append("%s: %s FAILED: %s" % (tag, name, parts[3] if len(parts) > 3 else ""))
        want = expect_exit(r)
        if p.returncode != want:
            failed.append("%s: exit status %s, expected %s; stderr: %s"
                          % (tag, p.returncode, want, err.strip()[-2000:]))
        elif want == 0 and seen == 0:
            failed.append("%s: reported no results; stderr: %s" % (tag, err.strip()[-2000:]))
        else:
            passed += 1  # the process itself behaved
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib", help="path of libfsdp_runtime.so")
    ap.add_argument("--worlds", default="1,2,3,4")
    ap.add_argument("--timeout", type=float, default=10.0, help="FSDP_OPT_TIMEOUT_S for the ranks")
    ap.add_argument("--scenarios", default="main,death,stall",
                    help="main: the ops on healthy ranks; death: a rank dies; stall: a rank "
                         "stops calling (takes the timeout)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.scenario = args.worker
        worker_main(args)
        return 0
    if not os.path.exists(args.lib):
        print("error: %s does not exist" % args.lib, file=sys.stderr)
        return 2

    worlds = [int(w) for w in args.worlds.split(",") if w]
    total_pass, total_fail = 0, []
    scenarios = set(args.scenarios.split(","))
    unknown = scenarios - {"main", "death", "stall"}
    if unknown:
        print("error: unknown scenarios %s" % ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    plan = []
    for w in worlds:
        if "main" in scenarios:
            plan.append((w, "main", lambda r: 0))
    for w in worlds:
        if "death" in scenarios and w >= 2:
            victim = w - 1
            plan.append((w, "death%d" % victim, lambda r, v=victim: 17 if r == v else 0))
        if "death" in scenarios and w >= 3:
            plan.append((w, "death0", lambda r: 17 if r == 0 else 0))
    if "stall" in scenarios and 2 in worlds:
        plan.append((2, "stall", lambda r: 0))
    for w, scenario, expect_exit in plan:
        t0 = time.monotonic()
        p, f = run_scenario(args.lib, w, scenario, args.timeout, expect_exit)
        total_pass += p
        total_fail += f
        print("[W=%d %s] %d passed, %d failed (%.1f s)" % (w, scenario, p, len(f), time.monotonic() - t0),
              flush=True)
        for line in f:
            print("  " + line, flush=True)
    print("%d passed, %d failed" % (total_pass, len(total_fail)))
    return 1 if total_fail else 0


if __name__ == "__main__":
    sys.exit(main())
