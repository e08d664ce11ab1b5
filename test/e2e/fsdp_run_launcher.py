#!/usr/bin/env python3
# RUN: %python %s fsdp-run %runtime_lib
"""End-to-end test of the fsdp-run launcher, without any fsdp-opt pass.

    fsdp_run_launcher.py FSDP_RUN LIB [--worlds 1,2,3,4]

Builds by hand what fsdp-opt would write (rank{r}.pt files whose methods call the fsdp:: ops
around a unit's call, manifest.json), plus the original model and an inputs file, then runs
fsdp-run on them and checks exit codes, output lines and saved outputs: bitwise agreement for
W in 1..4, a detected mismatch, bad inputs, a rank that raises, rank files of two runs, a world
size that does not match the files, --repeat on a model with state across calls (each run
compared with the original's run of the same number), grad mode with and without --no-grad,
and a method that issues no collective, run again and again.

Prints one line per failed check, then `N passed, M failed`; exits 1 if anything failed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F

RESULTS = {"passed": 0, "failed": []}


def check(name, cond, detail=""):
    if cond:
        RESULTS["passed"] += 1
    else:
        RESULTS["failed"].append("%s: %s" % (name, detail))


def shard_of(full, world, rank):
    n = full.shape[0]
    c = -(-n // world)
    rows = full[min(rank * c, n):min((rank + 1) * c, n)]
    pad = torch.zeros((c - rows.shape[0],) + tuple(full.shape[1:]), dtype=full.dtype)
    return torch.cat([rows, pad]).contiguous()


class Block(torch.nn.Module):
    def __init__(self, weight, bias):
        super().__init__()
        self.weight = torch.nn.Parameter(weight)
        self.bias = torch.nn.Parameter(bias)

    def forward(self, x):
        return torch.tanh(F.linear(x, self.weight, self.bias))


class Original(torch.nn.Module):
    """The unsharded model: embedding tied to the head, two blocks."""

    calls: int

    def __init__(self, emb, w1, b1, w2, b2):
        super().__init__()
        self.emb = torch.nn.Parameter(emb)
        self.b1 = Block(w1, b1)
        self.b2 = Block(w2, b2)
        self.calls = 0

    def forward(self, ids, scale: float) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], int, List[float]]:
        h = F.embedding(ids, self.emb) * scale
        h = self.b1(h)
        h = self.b2(h)
        logits = F.linear(h, self.emb)
        return logits, {"h": h, "sum": logits.sum()}, int(ids.numel()), [scale, 2.0]

    @torch.jit.export
    def boom(self, ids, scale: float) -> torch.Tensor:
        return self.b1(F.embedding(ids, self.emb))

    @torch.jit.export
    def grad_mode(self, ids, scale: float) -> bool:
        return torch.is_grad_enabled()

    @torch.jit.export
    def counted(self, ids, scale: float) -> Tuple[torch.Tensor, int]:
        # state across calls: the same inputs give different outputs from call to call
        self.calls += 1
        return self.b1(F.embedding(ids, self.emb) * (scale * self.calls)), self.calls


class Rewritten(torch.nn.Module):
    """What fsdp-opt would produce: b1, b2 and the root are units; shards in the slots."""

    _fsdp_rank: int
    _fsdp_world_size: int
    _fsdp_manifest_sha256: str
    calls: int
    drift: int

    def __init__(self, emb, w1, b1, w2, b2, rows: List[int], rank: int, world: int, sha: str,
                 drift: int = 0):
        super().__init__()
        self.emb = torch.nn.Parameter(emb)
        self.b1 = Block(w1, b1)
        self.b2 = Block(w2, b2)
        self.calls = 0
        self.drift = drift  # a wrong rank file: its state drifts from the second call on
        self.rows = rows
        self._fsdp_rank = rank
        self._fsdp_world_size = world
        self._fsdp_manifest_sha256 = sha

    def forward(self, ids, scale: float) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], int, List[float]]:
        torch.ops.fsdp.check_rank(self._fsdp_rank, self._fsdp_world_size, self._fsdp_manifest_sha256)
        root = torch.ops.fsdp.all_gather([self.emb, self.emb], [self.rows[0], self.rows[0]], ".")
        h = F.embedding(ids, self.emb) * scale
        f1 = torch.ops.fsdp.all_gather([self.b1.weight, self.b1.bias], [self.rows[1], self.rows[2]], "b1")
        h = self.b1(h)
        torch.ops.fsdp.reshard(f1, "b1")
        f2 = torch.ops.fsdp.all_gather([self.b2.weight, self.b2.bias], [self.rows[3], self.rows[4]], "b2")
        h = self.b2(h)
        torch.ops.fsdp.reshard(f2, "b2")
        logits = F.linear(h, self.emb)
        torch.ops.fsdp.reshard(root, ".")
        return logits, {"h": h, "sum": logits.sum()}, int(ids.numel()), [scale, 2.0]

    @torch.jit.export
    def boom(self, ids, scale: float) -> torch.Tensor:
        torch.ops.fsdp.check_rank(self._fsdp_rank, self._fsdp_world_size, self._fsdp_manifest_sha256)
        root = torch.ops.fsdp.all_gather([self.emb], [self.rows[0]], ".")
        if self._fsdp_rank == 1:
            torch.ops.fsdp.release_all()
            raise RuntimeError("boom: rank 1 raised on purpose")
        f1 = torch.ops.fsdp.all_gather([self.b1.weight, self.b1.bias], [self.rows[1], self.rows[2]], "b1")
        h = self.b1(F.embedding(ids, self.emb))
        torch.ops.fsdp.reshard(f1, "b1")
        torch.ops.fsdp.reshard(root, ".")
        return h

    @torch.jit.export
    def grad_mode(self, ids, scale: float) -> bool:
        torch.ops.fsdp.check_rank(self._fsdp_rank, self._fsdp_world_size, self._fsdp_manifest_sha256)
        return torch.is_grad_enabled()

    @torch.jit.export
    def counted(self, ids, scale: float) -> Tuple[torch.Tensor, int]:
        torch.ops.fsdp.check_rank(self._fsdp_rank, self._fsdp_world_size, self._fsdp_manifest_sha256)
        if self.calls > 0:
            self.calls += self.drift
        self.calls += 1
        root = torch.ops.fsdp.all_gather([self.emb], [self.rows[0]], ".")
        f1 = torch.ops.fsdp.all_gather([self.b1.weight, self.b1.bias], [self.rows[1], self.rows[2]], "b1")
        h = self.b1(F.embedding(ids, self.emb) * (scale * self.calls))
        torch.ops.fsdp.reshard(f1, "b1")
        torch.ops.fsdp.reshard(root, ".")
        return h, self.calls

    @torch.jit.export
    def boom_in_peer_words(self, ids, scale: float) -> torch.Tensor:
        # rank 1's own error reads like a consequence ("a peer may have died"); the launcher must
        # rank it by its kind (the model raised), not by its words
        torch.ops.fsdp.check_rank(self._fsdp_rank, self._fsdp_world_size, self._fsdp_manifest_sha256)
        if self._fsdp_rank == 1:
            raise RuntimeError("boom: rank 1 says a peer may have died, but raised on purpose")
        f1 = torch.ops.fsdp.all_gather([self.b1.weight, self.b1.bias], [self.rows[1], self.rows[2]], "b1")
        h = self.b1(F.embedding(ids, self.emb))
        torch.ops.fsdp.reshard(f1, "b1")
        return h


def make_params(seed):
    g = torch.Generator().manual_seed(seed)
    # uneven dim 0; for W = 4 the 6-row parameters leave rank 3 with padding only
    return [torch.randn(11, 6, generator=g), torch.randn(7, 6, generator=g), torch.randn(7, generator=g),
            torch.randn(6, 7, generator=g), torch.randn(6, generator=g)]


def write_rank_dir(d, params, world, sha, drifting_rank=-1):
    os.makedirs(d, exist_ok=True)
    rows = [p.shape[0] for p in params]
    for r in range(world):
        shards = [shard_of(p, world, r) for p in params]
        m = torch.jit.script(Rewritten(*shards, rows=rows, rank=r, world=world, sha=sha,
                                       drift=1 if r == drifting_rank else 0))
        m.save(os.path.join(d, "rank%d.pt" % r))
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump({"format_version": 1, "world_size": world, "input_sha256": sha}, f)


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fsdp_run")
    ap.add_argument("lib")
    ap.add_argument("--worlds", default="1,2,3,4")
    args = ap.parse_args()
    torch.ops.load_library(args.lib)
    worlds = [int(w) for w in args.worlds.split(",") if w]
    tmp = tempfile.mkdtemp(prefix="fsdp-run-test.")
    try:
        params = make_params(0)
        orig = os.path.join(tmp, "orig.pt")
        torch.jit.script(Original(*params)).save(orig)
        inputs = os.path.join(tmp, "in.pt")
        torch.save((torch.tensor([[1, 3, 5], [10, 0, 2]]), 0.75), inputs)
        fr = args.fsdp_run

        for w in worlds:
            d = os.path.join(tmp, "w%d" % w)
            write_rank_dir(d, params, w, "sha-A")
            prefix = os.path.join(tmp, "out%d" % w)
            rc, out, err = run([fr, d, "--inputs=" + inputs, "--check=" + orig, "--stats",
                                "--repeat=2", "--save-outputs=" + prefix])
            name = "W=%d check" % w
            check(name + " exit", rc == 0, "rc %d\nstdout:%s\nstderr:%s" % (rc, out, err))
            for r in range(w):
                check(name + " rank %d line" % r,
                      ("rank %d: outputs bitwise identical to %s" % (r, orig)) in out, out)
                stat_line = [l for l in out.splitlines() if l.startswith("rank %d stats:" % r)]
                # 3 units per forward, 2 runs; the tied root lists emb twice but gathers once
                check(name + " rank %d stats" % r, len(stat_line) == 1 and "all_gathers=6" in stat_line[0]
                      and "gather_calls=6" in stat_line[0] and "unsharded_bytes=0" in stat_line[0], out)
                saved = prefix + ".rank%d.pt" % r
                check(name + " rank %d saved" % r, os.path.exists(saved), saved)
                if os.path.exists(saved):
                    got = torch.load(saved, weights_only=False)  # typed containers carry type tags
                    ref = torch.jit.load(orig)(*torch.load(inputs))
                    check(name + " rank %d saved bits" % r,
                          torch.equal(got[0], ref[0]) and got[2] == ref[2] and got[3] == ref[3], str(got))
            check(name + " original saved", os.path.exists(prefix + ".original.pt"))
            check(name + " no stderr", err.strip() == "", err)

        # An entry method that issues no collective: rank 0, which hosts the store, may finish
        # and exit while its peers still read the manifest hashes of fsdp::check_rank. Before
        # rank 0 waited for them, a quarter of such runs at W=4 failed with "Connection reset
        # by peer"; eight runs on the widest world.
        widest = max([w for w in worlds if w > 1], default=None)
        if widest is not None:
            dw = os.path.join(tmp, "w%d" % widest)
            failures = []
            for _ in range(8):
                rc, out, err = run([fr, dw, "--inputs=" + inputs, "--method=grad_mode"])
                if rc != 0:
                    failures.append("rc %d %s" % (rc, err.strip()[-300:]))
            check("W=%d: a method without collectives, 8 runs" % widest, not failures, "\n".join(failures))

        # No --check: one ok line per rank with an output summary.
        d2 = os.path.join(tmp, "w2")
        if os.path.isdir(d2):
            rc, out, err = run([fr, d2, "--inputs=" + inputs])
            check("plain exit", rc == 0, err)
            check("plain lines", "rank 0: ok, output (Tensor float32[2, 3, 11]" in out and "rank 1: ok" in out, out)

            # State across calls: with --check, run k of each rank is compared with run k of the
            # original, so a correct rank file of a stateful model passes every run.
            rc, out, err = run([fr, d2, "--inputs=" + inputs, "--method=counted", "--repeat=3",
                                "--check=" + orig])
            check("stateful check exit", rc == 0, "rc %d\nstdout:%s\nstderr:%s" % (rc, out, err))
            check("stateful check lines", out.count("outputs bitwise identical to " + orig) == 2, out)
            # Without --check the runs can only be compared with each other, and they differ.
            rc, out, err = run([fr, d2, "--inputs=" + inputs, "--method=counted", "--repeat=3"])
            check("stateful without check", rc == 1 and out.count("run 2 differs from run 1") == 2
                  and "with --check" in out, "rc %d %s %s" % (rc, out, err))
            # A rank file whose state drifts from its second call on: run 1 matches, run 2 does
            # not, and the report names the run.
            drifting = os.path.join(tmp, "drifting")
            write_rank_dir(drifting, params, 2, "sha-A", drifting_rank=1)
            rc, out, err = run([fr, drifting, "--inputs=" + inputs, "--method=counted", "--repeat=3",
                                "--check=" + orig])
            check("drifting rank exit", rc == 1, "rc %d %s %s" % (rc, out, err))
            check("drifting rank lines", ("rank 0: outputs bitwise identical to " + orig) in out
                  and "rank 1: MISMATCH: run 2 of 3: output[0]" in out, out)

            # Grad mode: on by default, as a C++ program starts; off with --no-grad, on the ranks
            # and for the original alike.
            for flag, want in ((None, True), ("--no-grad", False)):
                prefix = os.path.join(tmp, "grad%s" % ("off" if flag else "on"))
                rc, out, err = run([fr, d2, "--inputs=" + inputs, "--method=grad_mode", "--check=" + orig,
                                    "--save-outputs=" + prefix] + ([flag] if flag else []))
                seen = [torch.load(prefix + ".%s.pt" % who, weights_only=False)
                        for who in ("rank0", "rank1", "original") if os.path.exists(prefix + ".%s.pt" % who)]
                check("grad mode %s" % (flag or "(default)"), rc == 0 and seen == [want] * 3,
                      "rc %d %s %s %s" % (rc, seen, out, err))

            # --nproc larger than the files' world size: missing rank file.
            rc, out, err = run([fr, d2, "--inputs=" + inputs, "--nproc=3"])
            check("nproc too large", rc == 2 and err.startswith("error: ") and "rank2.pt" in err, "%d %s" % (rc, err))

        # A mismatching original.
        other = os.path.join(tmp, "other.pt")
        p2 = make_params(0)
        p2[3] = p2[3].clone()
        p2[3][0, 0] += 1e-3
        torch.jit.script(Original(*p2)).save(other)
        d3 = os.path.join(tmp, "w3")
        if os.path.isdir(d3):
            rc, out, err = run([fr, d3, "--inputs=" + inputs, "--check=" + other])
            check("mismatch exit", rc == 1, "rc %d %s %s" % (rc, out, err))
            check("mismatch lines", out.count("MISMATCH") == 3 and "output[0]" in out, out)

            # Fewer processes than the files were sharded for: check_rank fails.
            rc, out, err = run([fr, d3, "--inputs=" + inputs, "--nproc=2"])
            check("world mismatch exit", rc == 3, "rc %d %s" % (rc, err))
            check("world mismatch message", err.count("error:") == 1 and "world size 3" in err
                  and "world size 2" in err, err)

            # A rank that raises: named as the cause, the peers' follow-up errors are not.
            rc, out, err = run([fr, d3, "--inputs=" + inputs, "--method=boom", "--timeout=20"])
            check("raise exit", rc == 3, "rc %d %s" % (rc, err))
            check("raise message", err.strip().startswith("error: rank 1: ") and "raised on purpose" in err
                  and err.count("\n") == 1, err)

            # Failures are ranked by kind, not by their words: rank 1's own error (kind model)
            # explains the job's failure, the peers' lost collectives (kind peer-lost) do not.
            rc, out, err = run([fr, d3, "--inputs=" + inputs, "--method=boom_in_peer_words", "--timeout=20"])
            check("own error in peer words", rc == 3 and err.startswith("error: rank 1: ")
                  and "raised on purpose" in err and err.count("\n") == 1, "rc %d %s" % (rc, err))

            # One wrong rank file: rank 1 holds a file sharded for world size 3. Rank 0 fails too,
            # told by rank 1 (kind peer-failed); the report names rank 1's own error (bad-input).
            one_wrong = os.path.join(tmp, "onewrong")
            write_rank_dir(one_wrong, params, 2, "sha-A")
            shutil.copy(os.path.join(d3, "rank1.pt"), os.path.join(one_wrong, "rank1.pt"))
            rc, out, err = run([fr, one_wrong, "--inputs=" + inputs, "--timeout=20"])
            check("one wrong file: the rank that has it is named", rc == 3
                  and err.startswith("error: rank 1: fsdp::check_rank: this model file is rank 1 of world size 3")
                  and err.count("\n") == 1, "rc %d %s" % (rc, err))

            # Rank files of two different runs.
            mixed = os.path.join(tmp, "mixed")
            write_rank_dir(mixed, params, 3, "sha-A")
            other_run = os.path.join(tmp, "otherrun")
            write_rank_dir(other_run, params, 3, "sha-B")
            shutil.copy(os.path.join(other_run, "rank2.pt"), os.path.join(mixed, "rank2.pt"))
            rc, out, err = run([fr, mixed, "--inputs=" + inputs])
            check("mixed runs exit", rc == 3, "rc %d %s" % (rc, err))
            check("mixed runs message", "rank files come from different fsdp-opt runs" in err
                  and err.count("error:") == 1, err)

        # Bad usage and inputs.
        rc, out, err = run([fr, os.path.join(tmp, "nope")])
        check("missing dir", rc == 2 and err.startswith("error: "), "%d %s" % (rc, err))
        rc, out, err = run([fr, d2 if os.path.isdir(d2) else orig, "--inputs=" + orig])
        check("bad inputs", rc == 2 and "error: cannot read inputs" in err, "%d %s" % (rc, err))
        bad_inputs = os.path.join(tmp, "single.pt")
        torch.save(torch.ones(2), bad_inputs)
        rc, out, err = run([fr, orig, "--inputs=" + bad_inputs])
        check("inputs not a tuple", rc == 2 and "not a tuple or list" in err, "%d %s" % (rc, err))
        rc, out, err = run([fr, orig, "--inputs=" + inputs, "--method=nope"])
        check("missing method", rc == 2 and "no method 'nope'" in err, "%d %s" % (rc, err))
        rc, out, err = run([fr, orig, "--bogus"])
        check("bad flag", rc == 2 and err.startswith("error: "), "%d %s" % (rc, err))
        rc, out, err = run([fr, "--help"])
        check("help", rc == 0 and "--save-outputs" in out and "internal" not in out, "%d %s" % (rc, out))

        # A plain TorchScript file (world size 1) runs as is.
        rc, out, err = run([fr, orig, "--inputs=" + inputs, "--check=" + orig])
        check("single file", rc == 0 and "rank 0: outputs bitwise identical" in out, "%d %s %s" % (rc, out, err))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    for line in RESULTS["failed"]:
        print("FAILED " + line.replace("\n", "\n    "))
    print("%d passed, %d failed" % (RESULTS["passed"], len(RESULTS["failed"])))
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
