# A peer that stays alive but stops taking part (SPEC section 7): at W=2 both ranks call the
# sharded GPT's generate once; then rank 1 sleeps (it neither dies nor calls) while rank 0
# keeps calling generate. Rank 0's next collective must fail with an error within
# FSDP_OPT_TIMEOUT_S (10 here) plus slack, not hang, and leave nothing unsharded; rank 1
# wakes when rank 0 has failed (or after a bound) and leaves.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys
import time

import fsdp_harness as h

TIMEOUT_S = 10
SLACK_S = 5


def rank_main(ctx):
    m = ctx.load(ctx.rank_file(ctx.args["dir"]))
    args = h.torch_load(ctx.args["inputs"])
    m.generate(*args)
    marker = ctx.args["marker"]
    if ctx.rank == 1:
        t0 = time.monotonic()
        while not os.path.exists(marker) and time.monotonic() - t0 < TIMEOUT_S + 30:
            time.sleep(0.1)
        return {"slept": time.monotonic() - t0}
    t0 = time.monotonic()
    try:
        m.generate(*args)
        rec = {"error": None}
    except Exception as e:  # noqa: BLE001 - the failure under test
        rec = {"error": str(e)}
    rec["elapsed"] = time.monotonic() - t0
    rec["unsharded_bytes"] = ctx.stats()["unsharded_bytes"]
    with open(marker, "w") as f:
        f.write("done\n")
    return rec


def main():
    out_dir = sys.argv[1]
    os.environ["FSDP_OPT_TIMEOUT_S"] = str(TIMEOUT_S)
    t = h.Test("stalled_peer")
    files = h.gpt_generate_rank_files(t, out_dir, 2, 3)
    if not files:
        return t.finish("")
    inputs, d = files
    marker = os.path.join(out_dir, "rank0-done")
    results = h.run_ranks(2, rank_main, {"dir": d, "inputs": inputs, "marker": marker}, timeout=60 + 3 * TIMEOUT_S)
    if not t.check(all(r.ok for r in results), "W=2: both ranks finished (none hung)", h.describe_ranks(results)):
        return t.finish("")
    rec = results[0].value
    msg = (rec["error"] or "").strip().splitlines()[-1:] or [""]
    t.check(rec["error"] is not None and rec["elapsed"] <= TIMEOUT_S + SLACK_S and rec["unsharded_bytes"] == 0,
            "W=2, rank 1 alive but silent: rank 0's generate fails after %.1f s (FSDP_OPT_TIMEOUT_S=%d), "
            "nothing left unsharded" % (rec["elapsed"], TIMEOUT_S),
            "%s; unsharded_bytes=%s" % (msg[0][:400], rec["unsharded_bytes"]))
    return t.finish("W=2 stalled peer: rank 0 failed with an error after %.1f s, within FSDP_OPT_TIMEOUT_S=%d + %d s"
                    % (rec["elapsed"], TIMEOUT_S, SLACK_S))


if __name__ == "__main__":
    sys.exit(main())
