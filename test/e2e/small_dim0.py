# Parameters whose dim 0 is smaller than the world size (fsdp_models' small_dim0: fc.weight
# [3, 8], fc.bias [3], gain [1]) at W=3 and W=4: some ranks hold only zero padding
# (SPEC section 2). Rank files hold exactly the padded shards, and the sharded model run by
# fsdp-run is bitwise the original on every rank. Units: the root (holding `gain`) and fc
# (holding fc.weight and fc.bias) nested in it.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import fsdp_harness as h
import fsdp_models as fm

REPEAT = 3


def main():
    out_dir = sys.argv[1]
    t = h.Test("small_dim0")
    orig = os.path.join(out_dir, "small_dim0.pt")
    fm.save(fm.make("small_dim0"), orig)
    inputs = os.path.join(out_dir, "in.pt")
    fm.save_inputs(fm.example_inputs("small_dim0"), inputs)

    done = []
    for w in (3, 4):
        units = ["--fsdp-unit=.", "--fsdp-unit=fc"]
        label = "W=%d %s" % (w, " ".join(units))
        out = os.path.join(out_dir, "w%d_%d" % (w, len(units)))
        r = h.fsdp_opt(orig, "--world-size=%d" % w, *units, "-o", out)
        if not t.check(r.returncode == 0, "%s: fsdp-opt succeeds" % label, "" if r.returncode == 0 else r.describe()):
            continue
        man = h.check_rank_files(t, out, orig, w, label)
        rows = {p["path"]: p["shard_rows"] for u in man["units"] for p in u["params"]}
        want = {"fc.weight": 1, "fc.bias": 1, "gain": 1}
        t.check(rows == want, "%s: manifest shard_rows %s (ceil(N/W) = 1 for N <= W)" % (label, want), str(rows))
        r = h.fsdp_run(out, inputs=inputs, check=orig, repeat=REPEAT, stats=True)
        if h.check_fsdp_run_exact(t, r, "%s forward x%d" % (label, REPEAT), w, orig):
            # both units held for the call in one bucket (plan-gather-lifetimes, bucket-gathers)
            bad = {k: s for k, s in r.stats.items()
                   if s.get("all_gathers") != 1 * REPEAT or s.get("unsharded_bytes") != 0}
            t.check(not bad, "%s: 1 gather per call for %d units, all resharded" % (label, len(units)), str(bad))
            done.append(label)
    return t.finish("dim 0 < W: %s bitwise identical on every rank" % "; ".join(done))


if __name__ == "__main__":
    sys.exit(main())
