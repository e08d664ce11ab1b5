# Rank-file checks (SPEC sections 6 and 7), in rank processes of our own at W=2: each rank
# loads a rank file with torch.jit.load and calls forward, which must fail with a clear error,
# never hang and never compute wrong numbers, when
#   - the files are swapped (rank r loads rank{1-r}.pt): an error naming the ranks;
#   - the two files come from two fsdp-opt runs on different inputs (GPT seed 0 vs seed 1),
#     or on the same input with different units: an error saying the runs differ;
#   - rank 1's file was sharded for world size 3: rank 1 fails naming both world sizes, and
#     rank 0 (whose file is fine) fails too, at once (rank 1 tells it through the store, well
#     before FSDP_OPT_TIMEOUT_S, 10 here), naming rank 1 and its file's world size.
# The scenarios run one after the other in the same two processes (each manifest check is a
# new round of the exchange); the world-size one comes last, and rank 1 leaves after it.
# The same mix-ups through fsdp-run are in rank_files_fsdp_run.py.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys
import time

import fsdp_harness as h
import fsdp_models as fm

TIMEOUT_S = 10
SLACK_S = 20  # process start-up and a loaded 2-core machine

# (name, file for rank 0, file for rank 1, substrings every failing rank's error must have)
# Directory keys: A = GPT seed 0, W=2, units . and blocks.*; B = GPT seed 1 (another input);
# C = GPT seed 0, W=2, unit . only; A3 = like A with W=3.
SCENARIOS = [
    ("swapped", ("A", 1), ("A", 0), [["rank 1", "rank 0"], ["rank 0", "rank 1"]]),
    ("different input", ("A", 0), ("B", 1), [["different fsdp-opt runs"], ["different fsdp-opt runs"]]),
    ("different units", ("A", 0), ("C", 1), [["different fsdp-opt runs"], ["different fsdp-opt runs"]]),
    # Rank 0's file is right; rank 1 publishes what it loaded instead of a manifest hash.
    ("rank 1 file of a W=3 run", ("A", 0), ("A3", 1), [["rank 1", "world size 3"], ["world size 3", "world size 2"]]),
]
# Scenarios where every rank must fail well before the collective timeout (nothing waits on it).
FAST = {"rank 1 file of a W=3 run": TIMEOUT_S / 2}


def rank_main(ctx):
    dirs = ctx.args["dirs"]
    x = h.torch_load(ctx.args["inputs"])
    out = {}
    for name, f0, f1, _ in SCENARIOS:
        key, file_rank = (f0, f1)[ctx.rank]
        m = ctx.load(os.path.join(dirs[key], "rank%d.pt" % file_rank))
        t0 = time.monotonic()
        try:
            y = m(*x)
            out[name] = {"result": y}
        except Exception as e:  # noqa: BLE001 - the error under test
            out[name] = {"error": str(e)}
        out[name]["elapsed"] = time.monotonic() - t0
    return out


def main():
    out_dir = sys.argv[1]
    os.environ["FSDP_OPT_TIMEOUT_S"] = str(TIMEOUT_S)
    t = h.Test("rank_files")
    srcs = {}
    for seed in (0, 1):
        srcs[seed] = os.path.join(out_dir, "gpt%d.pt" % seed)
        fm.save(fm.make("gpt", n_layer=2, seed=seed), srcs[seed])
    inputs = os.path.join(out_dir, "in.pt")
    fm.save_inputs(fm.example_inputs("gpt"), inputs)

    plan = {"A": (0, 2, ["--fsdp-unit=.", "--fsdp-unit=blocks.*"]),
            "B": (1, 2, ["--fsdp-unit=.", "--fsdp-unit=blocks.*"]),
            "C": (0, 2, ["--fsdp-unit=."]),
            "A3": (0, 3, ["--fsdp-unit=.", "--fsdp-unit=blocks.*"])}
    dirs = {}
    for key, (seed, w, units) in plan.items():
        dirs[key] = os.path.join(out_dir, key)
        r = h.fsdp_opt(srcs[seed], "--world-size=%d" % w, *units, "-o", dirs[key])
        if not t.check(r.returncode == 0, "fsdp-opt run %s (seed %d, W=%d, %s)" % (key, seed, w, " ".join(units)),
                       r.describe() if r.returncode else ""):
            return t.finish("")

    t0 = time.monotonic()
    results = h.run_ranks(2, rank_main, {"dirs": dirs, "inputs": inputs},
                          timeout=len(SCENARIOS) * (TIMEOUT_S + SLACK_S))
    wall = time.monotonic() - t0
    hung = [r.rank for r in results if r.timed_out]
    if not t.check(all(r.ok for r in results), "W=2: both ranks ran every scenario and exited (%.1f s)" % wall,
                   ("HUNG: ranks %s; " % hung if hung else "") + h.describe_ranks(results)):
        return t.finish("")
    for name, _, _, needles in SCENARIOS:
        problems, msgs = [], []
        for r in results:
            rec = r.value[name]
            if "error" not in rec:
                problems.append("rank %d got a result instead of an error" % r.rank)
                continue
            msg = rec["error"].strip().splitlines()[-1] if rec["error"].strip() else ""
            msgs.append("rank %d: %s" % (r.rank, msg[-300:]))
            missing = [n for n in needles[r.rank] if n not in rec["error"]]
            if missing:
                problems.append("rank %d's error lacks %s: %s" % (r.rank, missing, rec["error"][-600:]))
            if rec["elapsed"] > FAST.get(name, TIMEOUT_S + SLACK_S):
                problems.append("rank %d failed only after %.1f s" % (r.rank, rec["elapsed"]))
        t.check(not problems, "W=2 %s: every rank fails with a clear error within %g s"
                % (name, FAST.get(name, TIMEOUT_S + SLACK_S)),
                "; ".join(problems) or " | ".join(msgs))
    return t.finish("swapped files, files of two runs (other input / other units / other world size) all "
                    "refused with errors on every rank, none hung")


if __name__ == "__main__":
    sys.exit(main())
