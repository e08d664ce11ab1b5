# A rank dies mid-run (SPEC section 7): the survivors' next collective fails with an error
# that says so, within FSDP_OPT_TIMEOUT_S (10 here) plus slack, instead of hanging.
# The GPT (root unit, blocks.* units, generate registered) is sharded and every rank calls
# generate once, successfully; then the victim dies while the others keep calling generate.
#   - W=2, rank 1 leaves with os._exit(1) (this file);
#   - W=3, rank 0 (which also hosts the rendezvous store) is killed with SIGKILL
#     (dead_peer_w3.py runs this driver with --world 3).
# stalled_peer.py covers a peer that stays alive but stops calling.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s --world 2 %t

import os
import sys
import time

import fsdp_harness as h

TIMEOUT_S = 10
SLACK_S = 5          # on top of TIMEOUT_S, for the failing call itself
MAX_CALLS = 50
FAILURE_WORDS = ("peer", "died", "closed", "timed out", "timeout", "connection", "reset")


def rank_main(ctx):
    m = ctx.load(ctx.rank_file(ctx.args["dir"]))
    args = h.torch_load(ctx.args["inputs"])
    m.generate(*args)  # every rank once, successfully
    sync = ctx.args["sync_dir"]
    open(os.path.join(sync, "rank%d.first-call-done" % ctx.rank), "w").close()
    if ctx.rank == ctx.args["victim"]:
        # Die only once every survivor has its first result (so no survivor fails in it).
        others = [os.path.join(sync, "rank%d.first-call-done" % r) for r in range(ctx.world_size)]
        t0 = time.monotonic()
        while not all(os.path.exists(p) for p in others) and time.monotonic() - t0 < 60:
            time.sleep(0.02)
        h.kill_self(ctx.args["how"])
    for i in range(MAX_CALLS):
        t0 = time.monotonic()
        try:
            m.generate(*args)
        except Exception as e:  # noqa: BLE001 - the failure under test
            return {"error": str(e), "elapsed": time.monotonic() - t0, "calls_ok": i + 1,
                    "unsharded_bytes": ctx.stats()["unsharded_bytes"]}
    return {"error": None, "calls_ok": MAX_CALLS + 1}


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1].strip() if lines else ""


def main():
    world_arg = int(sys.argv[sys.argv.index("--world") + 1])
    out_dir = sys.argv[-1]
    os.environ["FSDP_OPT_TIMEOUT_S"] = str(TIMEOUT_S)
    t = h.Test("dead_peer")
    summary = []
    victims = {2: (1, "exit"), 3: (0, "sigkill")}  # world size -> (victim rank, how it dies)
    for world in (world_arg,):
        victim, how = victims[world]
        files = h.gpt_generate_rank_files(t, out_dir, world, 4)
        if not files:
            continue
        inputs, d = files
        label = "W=%d, rank %d dies (%s)" % (world, victim, "os._exit(1)" if how == "exit" else "SIGKILL")
        sync = os.path.join(out_dir, "sync%d" % world)
        os.makedirs(sync)
        t0 = time.monotonic()
        results = h.run_ranks(world, rank_main, {"dir": d, "inputs": inputs, "victim": victim, "how": how,
                                                 "sync_dir": sync}, timeout=90 + 2 * TIMEOUT_S)
        wall = time.monotonic() - t0
        v = results[victim]
        t.check(not v.timed_out and v.returncode == (1 if how == "exit" else -9),
                "%s: the victim died as planned" % label, v.describe() if not v.returncode else "")
        survivors = [r for r in results if r.rank != victim]
        problems, msgs = [], []
        for r in survivors:
            if not r.ok:
                problems.append(r.describe())
                continue
            rec = r.value
            if rec["error"] is None:
                problems.append("rank %d: %d generate calls succeeded after its peer died" % (r.rank, rec["calls_ok"]))
                continue
            msg = last_line(rec["error"])
            msgs.append("rank %d after %.1f s: %s" % (r.rank, rec["elapsed"], msg[:300]))
            if rec["elapsed"] > TIMEOUT_S + SLACK_S:
                problems.append("rank %d's failing call took %.1f s (FSDP_OPT_TIMEOUT_S=%d)" % (r.rank, rec["elapsed"], TIMEOUT_S))
            if not any(w in msg.lower() for w in FAILURE_WORDS):
                problems.append("rank %d's error does not say what failed: %s" % (r.rank, msg))
            if rec["unsharded_bytes"] != 0:
                problems.append("rank %d: %d bytes left unsharded after the failed call" % (r.rank, rec["unsharded_bytes"]))
        t.check(not problems, "%s: every survivor's next generate fails with an error within %d + %d s, no hang "
                "(all ranks done in %.1f s)" % (label, TIMEOUT_S, SLACK_S, wall),
                "; ".join(problems) or " | ".join(msgs))
        summary.append("W=%d rank %d %s" % (world, victim, how))
    return t.finish("%s: survivors failed with errors in time, none hung" % ", ".join(summary))


if __name__ == "__main__":
    sys.exit(main())
