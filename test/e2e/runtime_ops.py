#!/usr/bin/env python3
# lit: the main scenarios here; mixed precision in runtime_ops_mp.py, the split form in
# runtime_ops_split.py, the failure scenarios in runtime_ops_failures.py.
# RUN: %python %s %runtime_lib --scenarios=main
"""End-to-end test of libfsdp_runtime's ops, without any fsdp-opt pass.

    runtime_ops.py LIB [--worlds 1,2,3,4] [--timeout S]
                   [--scenarios main,mp,split,memory,death,deathwait,stall]

For each world size W it starts W processes. Each builds full tensors from a seed shared by
all ranks, cuts its own shard by hand (SPEC section 2: uneven dim 0, dim 0 < W, mixed dtypes,
tied aliases), and calls torch.ops.fsdp.{init_process_group, all_gather, reshard, release_all,
check_rank, stats, reset_stats} directly, checking the results bit for bit; `mp` does the same
with param_dtype (results bitwise `full.to(dtype)`), `split` with all_gather_start /
all_gather_wait (including a functional check that start does not wait for its peers). Then, for W >= 2,
it kills one rank (os._exit) or stalls one, and checks that the survivors fail with an error
within FSDP_OPT_TIMEOUT_S instead of hanging.

Prints one line per failed check, then `N passed, M failed`; exits 1 if anything failed.
"""

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

from fsdp_harness import ReservedPort  # test/Inputs, on PYTHONPATH under lit

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


def expect_kind(torch, text, *kinds):
    """The last fsdp op's recorded failure (fsdp::last_error) is of one of `kinds` and is the
    error just raised (`text`)."""
    kind, message = torch.ops.fsdp.last_error()
    expect(kind in kinds, "last_error kind %r, expected %s, for %r" % (kind, " or ".join(kinds), text))
    expect(message and message in text, "last_error message %r is not the error raised: %r" % (message, text))


class Unit:
    """A hand-made FSDP unit: full tensors, this rank's shards as Parameters."""

    def __init__(self, torch, specs, world, rank, seed, gen=None):
        self.torch = torch
        self.fulls = []
        self.params = []
        for i, (shape, dtype) in enumerate(specs):
            full = (gen or random_full)(torch, shape, dtype, seed * 1000 + i)
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
        expect(s1["host_buffer_cached_bytes"] == 0, "release_all kept %d cached buffer bytes"
               % s1["host_buffer_cached_bytes"])
        expect_raises(lambda: ops.reshard(b.params, "b"), "not gathered", "unit 'b'")
        # usable again afterwards
        ops.all_gather(a.params, a.full_rows, "a")
        a.check_full()
        ops.reshard(a.params, "a")
        a.check_sharded()
    rep.check("release_all", release_all)

    def large_unit():
        # Over 1 MiB per rank the Gloo backend splits the byte all-gather into one collective
        # per worker thread (gloo_backend.cpp); odd sizes leave a shorter last piece.
        big = Unit(torch, [((2101, 517), f32), ((333, 7), i64), ((1,), f16)], world, rank, seed=23)
        ops.all_gather(big.params, big.full_rows, "big")
        big.check_full()
        ops.reshard(big.params, "big")
        big.check_sharded()
    rep.check("large_unit", large_unit)

    if world > 1:
        def host_buffers_reused():
            # Two units of the same shapes and different data take turns: each gather gets the
            # other's freed buffers (pack, receive, full parameters) back from the pool, so a
            # byte left over from the previous owner would show in check_full.
            shapes = [((7, 3), f32), ((5,), f16), ((9, 2), i64)]
            x = Unit(torch, shapes, world, rank, seed=21)
            y = Unit(torch, shapes, world, rank, seed=22)
            ops.release_all()
            readings = []
            for _ in range(6):
                for u, name in ((x, "x"), (y, "y")):
                    ops.all_gather(u.params, u.full_rows, name)
                    u.check_full()
                    ops.reshard(u.params, name)
                    u.check_sharded()
                    s = stats(torch)
                    readings.append((s["host_buffer_cached_bytes"], s["host_buffer_cache_limit"]))
            one_gather = readings[0][1]  # nothing overlapped yet: one gather's buffers
            expect(one_gather > 0, "nothing went through the pool: %s" % readings)
            # Gloo only borrows the pack and receive buffers (gloo_backend.cpp), so they are back
            # in the pool when all_gather returns and the full parameters when reshard does,
            # however late Gloo's worker drops its finished work: after every reshard the pool
            # holds exactly one gather's buffers, and its bound never grows past them.
            expect(all(r == (one_gather, one_gather) for r in readings),
                   "the pool kept other than one gather's buffers: %s" % readings)
            ops.release_all()
            s = stats(torch)
            expect(s["host_buffer_cached_bytes"] == 0, "release_all kept cached buffers: %s" % s)
        rep.check("host_buffers_reused", host_buffers_reused)

    def bad_rows():
        bad = Unit(torch, [((4, 2), f32), ((6,), f32)], world, rank, seed=6)
        c = bad.params[1].shape[0]
        wrong = c * world + 1  # ceil(wrong / W) = c + 1 != c
        text = expect_raises(lambda: ops.all_gather(bad.params, [4, wrong], "blocks.7"),
                             "unit 'blocks.7'", "parameter 1", "ceil(")
        expect_kind(torch, text, "bad-input")
        bad.check_sharded()
        ops.reset_stats()
        expect(tuple(ops.last_error()) == ("", ""), "a successful op left %s recorded" % (ops.last_error(),))
        expect_raises(lambda: ops.all_gather(bad.params, [4], "blocks.7"), "unit 'blocks.7'")
    rep.check("bad_rows_error", bad_rows)

    def zero_dim():
        expect_raises(lambda: ops.all_gather([torch.nn.Parameter(torch.tensor(1.0))], [1], "z"),
                      "unit 'z'", "0-dim")
    rep.check("zero_dim_error", zero_dim)

    def sparse():
        text = expect_raises(
            lambda: ops.all_gather([torch.nn.Parameter(torch.eye(2).to_sparse())], [2], "s"),
            "unit 's'", "parameter 0", "no storage")
        expect_kind(torch, text, "bad-input")
    rep.check("sparse_error", sparse)

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
            text = expect_raises(lambda: ops.check_rank(rank, world, "sha-of-run-on-rank-%d" % rank),
                                 "rank files come from different fsdp-opt runs")
            expect_kind(torch, text, "mismatch")
        rep.check("manifest_mismatch", manifest_mismatch)

    def reset():
        ops.reset_stats()
        s = stats(torch)
        # the host_buffer_* keys are readings of the buffer pool, not counts
        expect(all(v == 0 for k, v in s.items() if not k.startswith("host_buffer_")),
               "counters not reset: %s" % s)
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
        expect_kind(torch, text, "peer-lost")  # its sockets closed: long before the timeout
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
        expect_kind(torch, text, "timeout")
        expect(elapsed <= timeout + 5, "failed only after %.1f s (timeout %s s): %s" % (elapsed, timeout, text))
        u.check_sharded()
    rep.check("stalled_peer_times_out", times_out)


def random_finite(torch, shape, dtype, seed):
    """Finite values over a wide range of magnitudes (subnormals of float32 and float16, values
    past float16's range, +-0.0), for casts: a cast's result is only bitwise reproducible for
    non-NaN inputs (NaN payloads depend on the conversion routine). Integers: random bits."""
    if not dtype.is_floating_point:
        return random_full(torch, shape, dtype, seed)
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    x = torch.randn(n, generator=g, dtype=torch.float64)
    x = x * torch.pow(2.0, torch.randint(-150, 90, (n,), generator=g).to(torch.float64))
    x[::7] = 0.0
    x[1::11] = -0.0
    return x.to(dtype).reshape(shape)


def elem_size(torch, dtype):
    return torch.empty(0, dtype=dtype).element_size()


def gathered_dtype(dtype, param_dtype):
    return param_dtype if (param_dtype is not None and dtype.is_floating_point) else dtype


def check_full_as(u, param_dtype):
    """u's parameters hold full.to(param_dtype) (floating point) or full (others), bitwise."""
    for i, (p, f) in enumerate(zip(u.params, u.fulls)):
        want = f.to(gathered_dtype(f.dtype, param_dtype))
        expect(p.dtype == want.dtype, "param %d has dtype %s, expected %s" % (i, p.dtype, want.dtype))
        expect(same_bits(p, want), "param %d is not bitwise full.to(%s)" % (i, want.dtype))
        expect(p.requires_grad == f.is_floating_point(), "param %d lost requires_grad" % i)
        expect(p.is_leaf, "param %d is no longer a leaf" % i)


def gathered_bytes(torch, u, param_dtype):
    return sum(f.numel() * elem_size(torch, gathered_dtype(f.dtype, param_dtype)) for f in u.fulls)


def scenario_mixed_precision(torch, rank, world, rep):
    ops = torch.ops.fsdp
    f32, f64, f16, bf16, i64 = torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64
    specs = [((10, 3), f32), ((2, 5), f64), ((7,), i64), ((1, 4, 2), f16), ((0, 3), f32),
             ((13,), bf16), ((9, 2), f32)]
    ops.reset_stats()

    for k, pd in enumerate([bf16, f16, f32, f64]):
        def cast_bitwise(pd=pd, k=k):
            u = Unit(torch, specs, world, rank, seed=40 + k, gen=random_finite)
            s0 = stats(torch)
            out = ops.all_gather(u.params, u.full_rows, "mp", pd)
            for a, b in zip(out, u.params):
                expect(a is b, "all_gather did not return the parameter objects themselves")
            check_full_as(u, pd)
            d = delta(s0, stats(torch))
            want = gathered_bytes(torch, u, pd)
            expect(d["all_gathers"] == 1, "stats delta %s" % d)
            expect(d["bytes_gathered"] == want, "bytes_gathered %d != %d" % (d["bytes_gathered"], want))
            expect(stats(torch)["unsharded_bytes"] == want, "unsharded_bytes %s" % stats(torch))
            ops.reshard(out, "mp")
            u.check_sharded()
            for p, s in zip(u.params, u.shards):
                expect(p.dtype == s.dtype, "reshard did not restore dtype %s" % s.dtype)
            expect(stats(torch)["unsharded_bytes"] == 0, "unsharded_bytes after reshard %s" % stats(torch))
        rep.check("mp_cast_bitwise_%s" % str(pd).replace("torch.", ""), cast_bitwise)

    def three_arg_default():
        u = Unit(torch, specs, world, rank, seed=50, gen=random_finite)
        out = ops.all_gather(u.params, u.full_rows, "mp", None)
        u.check_full()
        ops.reshard(out, "mp")
        out = ops.all_gather(u.params, u.full_rows, "mp")
        u.check_full()
        ops.reshard(out, "mp")
        u.check_sharded()
    rep.check("mp_none_is_own_dtype", three_arg_default)

    def nested_same_dtype():
        u = Unit(torch, specs, world, rank, seed=51, gen=random_finite)
        s0 = stats(torch)
        ops.all_gather(u.params, u.full_rows, "outer", bf16)
        ops.all_gather(u.params, u.full_rows, "outer", bf16)
        d = delta(s0, stats(torch))
        expect(d["all_gathers"] == 1 and d["gather_calls"] == 2, "nested stats %s" % d)
        ops.reshard(u.params, "outer")
        check_full_as(u, bf16)
        ops.reshard(u.params, "outer")
        u.check_sharded()
    rep.check("mp_nested_same_dtype", nested_same_dtype)

    def nested_other_dtype():
        u = Unit(torch, specs, world, rank, seed=52, gen=random_finite)
        ops.all_gather(u.params, u.full_rows, "outer", bf16)
        expect_raises(lambda: ops.all_gather(u.params, u.full_rows, "inner"),
                      "unit 'inner'", "already gathered", "BFloat16", "Float")
        expect_raises(lambda: ops.all_gather(u.params, u.full_rows, "inner", f16),
                      "unit 'inner'", "already gathered", "BFloat16", "Half")
        check_full_as(u, bf16)  # the failed nested gathers changed nothing
        ops.reshard(u.params, "outer")
        u.check_sharded()
        expect_raises(lambda: ops.reshard(u.params, "outer"), "not gathered")
    rep.check("mp_nested_other_dtype_error", nested_other_dtype)

    def bad_dtype():
        u = Unit(torch, specs, world, rank, seed=53, gen=random_finite)
        expect_raises(lambda: ops.all_gather(u.params, u.full_rows, "bad", torch.int32),
                      "unit 'bad'", "param_dtype", "floating-point")
        u.check_sharded()
    rep.check("mp_non_float_param_dtype_error", bad_dtype)

    def scripted():
        class M(torch.nn.Module):
            def __init__(self, w):
                super().__init__()
                self.w = w

            def forward(self, x):
                full = torch.ops.fsdp.all_gather([self.w], [11], "m", torch.bfloat16)
                y = x + self.w.float()
                torch.ops.fsdp.reshard(full, "m")
                return y
        full = random_finite(torch, (11,), f32, 54)
        w = torch.nn.Parameter(shard_of(torch, full, world, rank))
        sm = torch.jit.script(M(w))
        for _ in range(3):  # the profiling executor must cope with the dtype change
            y = sm(torch.zeros(11))
            expect(same_bits(y, torch.zeros(11) + full.to(bf16).float()), "scripted result differs")
            expect(sm.w.dtype == f32 and tuple(sm.w.shape) == tuple(w.shape), "left gathered")
    rep.check("mp_torchscript_call", scripted)


def scenario_split(torch, rank, world, rep, scratch, timeout):
    ops = torch.ops.fsdp
    f32, f16, i64, bf16 = torch.float32, torch.float16, torch.int64, torch.bfloat16
    specs = [((10, 3), f32), ((2, 5), f16), ((7,), i64), ((0, 3), f32), ((13,), f16)]
    ops.reset_stats()

    def start_wait_bitwise():
        u = Unit(torch, specs, world, rank, seed=60)
        s0 = stats(torch)
        h = ops.all_gather_start(u.params, u.full_rows, "s")
        expect(isinstance(h, int), "handle %r is not an int" % (h,))
        u.check_sharded()  # nothing swapped before the wait
        s1 = stats(torch)
        expect(s1["in_flight"] == 1 and s1["in_flight_peak"] >= 1, "stats after start %s" % s1)
        expect(s1["unsharded_bytes"] - s0["unsharded_bytes"] == u.full_bytes(),
               "a started gather's buffers are not counted: %s" % s1)
        out = ops.all_gather_wait(h)
        for a, b in zip(out, u.params):
            expect(a is b, "all_gather_wait did not return the parameter objects themselves")
        u.check_full()
        d = delta(s0, stats(torch))
        expect(d["all_gathers"] == 1 and d["gather_calls"] == 1 and d["wait_calls"] == 1, "stats %s" % d)
        expect(stats(torch)["in_flight"] == 0, "in_flight after wait %s" % stats(torch))
        ops.reshard(out, "s")
        u.check_sharded()
        expect(delta(s0, stats(torch))["reshards"] == 1, "reshard stats %s" % stats(torch))
    rep.check("split_start_wait_bitwise", start_wait_bitwise)

    def start_wait_dtype():
        u = Unit(torch, specs, world, rank, seed=61, gen=random_finite)
        s0 = stats(torch)
        h = ops.all_gather_start(u.params, u.full_rows, "s", bf16)
        expect(stats(torch)["unsharded_bytes"] - s0["unsharded_bytes"] == gathered_bytes(torch, u, bf16),
               "started bytes %s" % stats(torch))
        out = ops.all_gather_wait(h)
        check_full_as(u, bf16)
        expect(delta(s0, stats(torch))["bytes_gathered"] == gathered_bytes(torch, u, bf16), "bytes")
        ops.reshard(out, "s")
        u.check_sharded()
    rep.check("split_param_dtype_bitwise", start_wait_dtype)

    def two_outstanding():
        a = Unit(torch, specs, world, rank, seed=62)
        b = Unit(torch, [((5, 4), f32), ((3,), i64)], world, rank, seed=63)
        ops.reset_stats()
        ha = ops.all_gather_start(a.params, a.full_rows, "a")
        hb = ops.all_gather_start(b.params, b.full_rows, "b", bf16)
        s = stats(torch)
        expect(s["in_flight"] == 2 and s["in_flight_peak"] == 2, "in_flight %s" % s)
        expect(s["peak_unsharded_bytes"] >= a.full_bytes() + gathered_bytes(torch, b, bf16), "peak %s" % s)
        ops.all_gather_wait(hb)  # the other order than started
        ops.all_gather_wait(ha)
        a.check_full()
        check_full_as(b, bf16)
        ops.reshard(a.params, "a")
        ops.reshard(b.params, "b")
        a.check_sharded()
        b.check_sharded()
        s = stats(torch)
        expect(s["in_flight"] == 0 and s["in_flight_peak"] == 2 and s["unsharded_bytes"] == 0, "end %s" % s)
    rep.check("split_two_outstanding", two_outstanding)

    def work_between():
        # Prefetch shape: start B, run A (its own gather, compute, reshard), then wait for B.
        a = Unit(torch, [((6, 4), f32), ((4,), f32)], world, rank, seed=64)
        b = Unit(torch, specs, world, rank, seed=65)
        hb = ops.all_gather_start(b.params, b.full_rows, "b")
        ops.all_gather(a.params, a.full_rows, "a")
        a.check_full()
        y = a.params[0].detach().nan_to_num(0.0).sum()
        ops.reshard(a.params, "a")
        a.check_sharded()
        b.check_sharded()
        expect(y.numel() == 1, "compute between start and wait failed")
        ops.all_gather_wait(hb)
        b.check_full()
        ops.reshard(b.params, "b")
        b.check_sharded()
    rep.check("split_work_between_start_and_wait", work_between)

    def start_does_not_block(unit_specs, name):
        # Functional proof that start returns before the collective completes: rank 0 starts,
        # then publishes a file; every other rank starts only once it sees that file. A start
        # that waited for its peers would never publish it, and the others would give up.
        # Small units ride in the fingerprint envelope, larger ones are issued after it by the
        # issuer thread: neither may wait at the start.
        u = Unit(torch, unit_specs, world, rank, seed=66)
        flag = os.path.join(scratch, "rank0-started-" + name)
        if rank == 0:
            h = ops.all_gather_start(u.params, u.full_rows, "nb")
            with open(flag + ".tmp", "w") as f:
                f.write("started\n")
            os.rename(flag + ".tmp", flag)
        else:
            deadline = time.monotonic() + timeout
            while not os.path.exists(flag):
                expect(time.monotonic() < deadline, "rank 0 did not return from all_gather_start")
                time.sleep(0.01)
            h = ops.all_gather_start(u.params, u.full_rows, "nb")
        ops.all_gather_wait(h)
        u.check_full()
        ops.reshard(u.params, "nb")
        u.check_sharded()
    rep.check("split_start_returns_before_peers_join", lambda: start_does_not_block(specs, "small"))
    rep.check("split_start_returns_before_peers_join_large",
              lambda: start_does_not_block([((600, 8), f32), ((600,), f32)], "large"))

    def already_gathered():
        u = Unit(torch, specs, world, rank, seed=67)
        ops.all_gather(u.params, u.full_rows, "g")
        s0 = stats(torch)
        h = ops.all_gather_start(u.params, u.full_rows, "g")
        d = delta(s0, stats(torch))
        expect(d["all_gathers"] == 0 and stats(torch)["in_flight"] == 0, "start issued a gather: %s" % d)
        ops.all_gather_wait(h)
        ops.reshard(u.params, "g")
        u.check_full()  # the wait took a reference
        ops.reshard(u.params, "g")
        u.check_sharded()
    rep.check("split_start_of_gathered_unit", already_gathered)

    def resharded_between():
        u = Unit(torch, specs, world, rank, seed=68)
        ops.all_gather(u.params, u.full_rows, "g")
        h = ops.all_gather_start(u.params, u.full_rows, "g")  # no collective: gathered
        ops.reshard(u.params, "g")
        u.check_sharded()
        s0 = stats(torch)
        ops.all_gather_wait(h)  # gathers again
        expect(delta(s0, stats(torch))["all_gathers"] == 1, "wait did not gather again: %s" % stats(torch))
        u.check_full()
        ops.reshard(u.params, "g")
        u.check_sharded()
    rep.check("split_unit_resharded_between", resharded_between)

    def mixed_known_fresh():
        a = Unit(torch, [((6, 4), f32)], world, rank, seed=69)
        b = Unit(torch, [((5,), f16), ((3, 2), i64)], world, rank, seed=70)
        ops.all_gather(a.params, a.full_rows, "a")
        s0 = stats(torch)
        h = ops.all_gather_start(a.params + b.params, a.full_rows + b.full_rows, "ab")
        d = delta(s0, stats(torch))
        expect(d["all_gathers"] == 1 and d["bytes_gathered"] == b.full_bytes(), "start %s" % d)
        ops.all_gather_wait(h)
        a.check_full()
        b.check_full()
        ops.reshard(a.params + b.params, "ab")
        a.check_full()
        b.check_sharded()
        ops.reshard(a.params, "a")
        a.check_sharded()
    rep.check("split_known_and_fresh", mixed_known_fresh)

    def errors():
        u = Unit(torch, specs, world, rank, seed=71)
        expect_raises(lambda: ops.all_gather_wait(987654), "unknown handle 987654")
        h = ops.all_gather_start(u.params, u.full_rows, "e")
        expect_raises(lambda: ops.all_gather(u.params, u.full_rows, "e2"),
                      "unit 'e2'", "all_gather_start", "handle %d" % h)
        expect_raises(lambda: ops.all_gather_start(u.params, u.full_rows, "e3"),
                      "unit 'e3'", "handle %d" % h)
        expect_raises(lambda: ops.reshard(u.params, "e"), "unit 'e'", "not gathered", "all_gather_wait")
        u.check_sharded()
        ops.all_gather_wait(h)
        u.check_full()
        expect_raises(lambda: ops.all_gather_wait(h), "unknown handle %d" % h, "already waited")
        ops.reshard(u.params, "e")
        u.check_sharded()
        bad = Unit(torch, [((4, 2), f32)], world, rank, seed=72)
        expect_raises(lambda: ops.all_gather_start(bad.params, [4 * world + 1], "b7"),
                      "all_gather_start(unit 'b7')", "ceil(")
        expect(stats(torch)["in_flight"] == 0, "a rejected start left something in flight")
    rep.check("split_errors", errors)

    def release_all_drops():
        a = Unit(torch, specs, world, rank, seed=73)
        b = Unit(torch, [((5, 4), f32)], world, rank, seed=74)
        c = Unit(torch, [((3, 3), f32)], world, rank, seed=75)
        ops.all_gather(c.params, c.full_rows, "c")
        h1 = ops.all_gather_start(a.params, a.full_rows, "a")
        h2 = ops.all_gather_start(b.params, b.full_rows, "b", bf16)
        s0 = stats(torch)
        ops.release_all()
        s1 = stats(torch)
        for x in (a, b, c):
            x.check_sharded()
        expect(s1["in_flight"] == 0 and s1["unsharded_bytes"] == 0, "after release_all %s" % s1)
        expect(delta(s0, s1)["reshards"] == 3, "release_all reshards %s" % delta(s0, s1))
        expect_raises(lambda: ops.all_gather_wait(h1), "unknown handle %d" % h1)
        expect_raises(lambda: ops.all_gather_wait(h2), "unknown handle %d" % h2)
        # the ranks' collectives are still in step afterwards
        ops.all_gather(a.params, a.full_rows, "a")
        a.check_full()
        ops.reshard(a.params, "a")
    rep.check("split_release_all_drops_handles", release_all_drops)

    def scripted():
        class M(torch.nn.Module):
            def __init__(self, w, v):
                super().__init__()
                self.w = w
                self.v = v

            def forward(self, x):
                h = torch.ops.fsdp.all_gather_start([self.v], [7], "v", torch.float16)
                fw = torch.ops.fsdp.all_gather([self.w], [10], "w")
                y = x + self.w.sum()
                torch.ops.fsdp.reshard(fw, "w")
                fv = torch.ops.fsdp.all_gather_wait(h)
                z = y + self.v.double().sum()
                torch.ops.fsdp.reshard(fv, "v")
                return z
        fw = random_finite(torch, (10,), torch.float64, 76)
        fv = random_finite(torch, (7,), torch.float64, 77).clamp(-1e4, 1e4)
        m = M(torch.nn.Parameter(shard_of(torch, fw, world, rank)),
              torch.nn.Parameter(shard_of(torch, fv, world, rank)))
        sm = torch.jit.script(m)
        x = torch.zeros(2, dtype=torch.float64)
        want = x + fw.sum() + fv.to(torch.float16).double().sum()
        for _ in range(3):
            expect(same_bits(sm(x), want), "scripted result differs")
        expect(stats(torch)["in_flight"] == 0, "scripted module left a gather in flight")
    rep.check("split_torchscript_call", scripted)

    def pass_style_node():
        # Graph::create builds nodes with exactly the inputs given; a 3-input fsdp::all_gather
        # node (what the passes insert) must still find a schema (the .no_cast overload).
        g = torch._C.parse_ir('''
graph(%w : Tensor, %x : Tensor):
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %l : Tensor[] = prim::ListConstruct(%w)
  %r : int[] = prim::Constant[value=[10]]()
  %u : str = prim::Constant[value="n"]()
  %f : Tensor[] = fsdp::all_gather(%l, %r, %u)
  %h : int = fsdp::all_gather_start(%l, %r, %u)
  %f2 : Tensor[] = fsdp::all_gather_wait(%h)
  %s : Tensor = aten::sum(%w, %none)
  %d : Tensor = aten::add(%x, %s, %one)
  fsdp::reshard(%f2, %u)
  fsdp::reshard(%f, %u)
  return (%d)
''')
        fn = torch._C._create_function_from_graph("pass_style", g)
        full = random_finite(torch, (10,), torch.float64, 78)
        w = torch.nn.Parameter(shard_of(torch, full, world, rank))
        one = torch.ones((), dtype=torch.float64)
        got = fn(w, one)
        expect(same_bits(got, one + full.sum()), "3-input node result differs")
        expect(tuple(w.shape) == (-(-10 // world),), "3-input node left the parameter gathered")
    rep.check("split_three_input_nodes", pass_style_node)


def scenario_death_in_wait(torch, rank, world, rep, timeout):
    ops = torch.ops.fsdp
    u = Unit(torch, [((9, 3), torch.float32), ((5,), torch.int64)], world, rank, seed=80)
    ops.all_gather(u.params, u.full_rows, "warmup")
    ops.reshard(u.params, "warmup")
    victim = world - 1
    if rank == victim:
        sys.stdout.flush()
        os._exit(17)
    time.sleep(0.5)

    def wait_fails():
        t0 = time.monotonic()
        h = ops.all_gather_start(u.params, u.full_rows, "blocks.5")
        text = expect_raises(lambda: ops.all_gather_wait(h), "all_gather_wait(unit 'blocks.5')",
                             "peer may have died")
        elapsed = time.monotonic() - t0
        expect_kind(torch, text, "peer-lost")  # its sockets closed: long before the timeout
        expect(elapsed <= timeout + 5, "failed only after %.1f s (timeout %s s): %s" % (elapsed, timeout, text))
        u.check_sharded()
        s = stats(torch)
        expect(s["in_flight"] == 0 and s["unsharded_bytes"] == 0, "state after a failed wait %s" % s)
        expect_raises(lambda: ops.all_gather_wait(h), "unknown handle")
    rep.check("death_during_start_wait", wait_fails)


def malloc_system_bytes():
    """Bytes glibc's malloc holds from the system in its arenas (mallinfo2's arena): what heap
    fragmentation grows. Unlike RSS, it does not move when the kernel maps a huge page."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    return libc.mallinfo2().arena


def scenario_memory(torch, rank, world, rep):
    """Gathers repeated in a steady state allocate nothing and do not grow the process: a unit
    under 1 MiB per rank, then one over it (the Gloo backend gathers the two differently), each
    gathered and resharded 300 times after a warm-up, with small tensors allocated in between as
    a call would. With c10d's Gloo allgather underneath, torch 2.15 grew a rank file's process by
    about 0.2 MiB per call (its caller-side buffers fragmented the heap), and malloc's heap in
    this loop by 0.9 to 22 MiB; now not at all (at most 256 KiB allowed). The second unit's warm-up also shows that the first one's cached buffers,
    a size nobody asks for any more, make room for it (runtime/host_buffer_pool.cpp)."""
    ops = torch.ops.fsdp
    f32 = torch.float32
    small = Unit(torch, [((300, 400), f32), ((400,), f32), ((9, 3), torch.int64)], world, rank, seed=31)
    large = Unit(torch, [((3000, 600), f32), ((7, 3), f32)], world, rank, seed=32)

    def steady_state():
        grown = 0
        per_unit = []
        for u, name in ((small, "small"), (large, "large")):
            ops.all_gather(u.params, u.full_rows, name)
            u.check_full()
            ops.reshard(u.params, name)
            for i in range(320):
                if i == 20:
                    before, heap_before = stats(torch), malloc_system_bytes()
                ops.all_gather(u.params, u.full_rows, name)
                # what a call computes between gather and reshard: small tensors of other
                # lifetimes, allocated among the gather's buffers
                work = [u.params[0][:16].float() * 2 for _ in range(8)]
                ops.reshard(u.params, name)
                del work
            after, heap_after = stats(torch), malloc_system_bytes()
            ops.all_gather(u.params, u.full_rows, name)
            u.check_full()
            ops.reshard(u.params, name)
            u.check_sharded()
            allocated = after["host_buffer_allocations"] - before["host_buffer_allocations"]
            expect(allocated == 0, "300 steady-state gathers of unit '%s' allocated %d host buffers" % (name, allocated))
            expect(after["host_buffer_live_bytes"] == 0, "buffers still in use after reshard: %s" % after)
            grown += heap_after - heap_before
            per_unit.append("%s %.1f MiB" % (name, (heap_after - heap_before) / 2**20))
        expect(grown <= 2**18, "600 steady-state gathers grew the heap by %.1f MiB (%s)"
               % (grown / 2**20, ", ".join(per_unit)))
    rep.check("steady_state", steady_state)


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
    elif args.scenario == "mp":
        scenario_mixed_precision(torch, args.rank, args.world, rep)
    elif args.scenario == "memory":
        scenario_memory(torch, args.rank, args.world, rep)
    elif args.scenario == "split":
        scenario_split(torch, args.rank, args.world, rep, args.scratch, timeout)
    elif args.scenario == "deathwait":
        scenario_death_in_wait(torch, args.rank, args.world, rep, timeout)
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

def run_scenario(lib, world, scenario, timeout, expect_exit):
    """Runs one scenario on `world` processes; returns (passed, failed_lines)."""
    with ReservedPort() as reserved:
        return run_scenario_on(reserved.port, lib, world, scenario, timeout, expect_exit)


def run_scenario_on(port, lib, world, scenario, timeout, expect_exit):
    env = dict(os.environ)
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(v, None)
    env["FSDP_OPT_TIMEOUT_S"] = str(timeout)
    env.setdefault("OMP_NUM_THREADS", "1")
    procs = []
    scratch = tempfile.mkdtemp(prefix="fsdp-runtime-ops-")
    for r in range(world):
        cmd = [sys.executable, HERE, lib, "--worker", scenario, "--rank", str(r),
               "--world", str(world), "--port", str(port), "--scratch", scratch]
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
    shutil.rmtree(scratch, ignore_errors=True)
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib", help="path of libfsdp_runtime.so")
    ap.add_argument("--worlds", default="1,2,3,4")
    ap.add_argument("--timeout", type=float, default=10.0, help="FSDP_OPT_TIMEOUT_S for the ranks")
    ap.add_argument("--scenarios", default="main,death,stall",
                    help="main: the ops on healthy ranks; mp: mixed precision (param_dtype); "
                         "memory: steady-state gathers allocate nothing and do not grow the process (W >= 2); "
                         "split: all_gather_start/all_gather_wait; death: a rank dies; "
                         "deathwait: a rank dies between start and wait (W=2); stall: a rank "
                         "stops calling (takes the timeout)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--scratch", help=argparse.SUPPRESS)
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
    unknown = scenarios - {"main", "mp", "split", "memory", "death", "deathwait", "stall"}
    if unknown:
        print("error: unknown scenarios %s" % ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    plan = []
    for w in worlds:
        for name in ("main", "mp", "split"):
            if name in scenarios:
                plan.append((w, name, lambda r: 0))
        if "memory" in scenarios and w >= 2:
            plan.append((w, "memory", lambda r: 0))
    for w in worlds:
        if "death" in scenarios and w >= 2:
            victim = w - 1
            plan.append((w, "death%d" % victim, lambda r, v=victim: 17 if r == v else 0))
        if "death" in scenarios and w >= 3:
            plan.append((w, "death0", lambda r: 17 if r == 0 else 0))
    if "deathwait" in scenarios and 2 in worlds:
        plan.append((2, "deathwait", lambda r: 17 if r == 1 else 0))
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
