# The forward_features case with torchvision: a wrapper whose forward calls
# backbone._forward_impl (a resnet18), not backbone.forward. With `backbone` a unit and
# _forward_impl NOT registered, eager FSDP2 would run _forward_impl on sharded parameters:
# fsdp-opt must say so (lint warning naming the method and the --forward-method to add, then
# a verifier error naming a parameter read while sharded), exit non-zero and write nothing.
# With --forward-method=backbone:_forward_impl (and backbone.layer* units nested inside it)
# every rank's output is bitwise the original's, for W in {1, 2, 3, 4}.
#
# This file is the driver; resnet_forward_features_w3.py and _w4.py run it for W=3 and W=4.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s --worlds 1,2 --unregistered %t

import argparse
import os
import sys

import fsdp_harness as h
import fsdp_models as fm

REPEAT = 3
UNITS = ["--fsdp-unit=backbone", "--fsdp-unit=backbone.layer*"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="1,2,3,4")
    ap.add_argument("--unregistered", action="store_true",
                    help="also check that fsdp-opt refuses the model without the registration")
    ap.add_argument("out")
    a = ap.parse_args()
    worlds = [int(w) for w in a.worlds.split(",")]
    t = h.Test("resnet_forward_features W=%s" % a.worlds)

    orig = os.path.join(a.out, "resnet.pt")
    fm.save(fm.make("resnet"), orig)
    inputs = os.path.join(a.out, "resnet.in.pt")
    fm.save_inputs(fm.example_inputs("resnet"), inputs)

    if a.unregistered:
        out = os.path.join(a.out, "unregistered")
        before = h.dir_entries(a.out)
        r = h.fsdp_opt(orig, "--world-size=2", *UNITS, "-o", out)
        t.check(r.returncode != 0 and not r.timed_out, "W=2 without registration: fsdp-opt fails",
                "rc=%s" % r.returncode)
        t.check("warning: method '_forward_impl' of unit 'backbone' is not a forward method" in r.stderr
                and "--forward-method=backbone:_forward_impl" in r.stderr,
                "lint warning names backbone._forward_impl and the --forward-method to add", r.stderr[-1500:])
        errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
        t.check(len(errors) == 1 and "'backbone.conv1.weight'" in errors[0] and "sharded" in errors[0],
                "one verifier error: backbone.conv1.weight read while sharded",
                errors[0] if errors else r.stderr[-1500:])
        t.check(not os.path.exists(out) and h.dir_entries(a.out) == before,
                "nothing written (no output directory, no temporary left)",
                "entries now %s, before %s" % (h.dir_entries(a.out), before))

    done = []
    for w in worlds:
        out = os.path.join(a.out, "resnet.w%d%s" % (w, ".pt" if w == 1 else ""))
        r = r_opt = h.fsdp_opt(orig, "--world-size=%d" % w, *UNITS,
                       "--forward-method=backbone:_forward_impl", "--stats", "-o", out)
        if not t.check(r.returncode == 0 and "warning:" not in r.stderr,
                       "W=%d with --forward-method=backbone:_forward_impl: fsdp-opt succeeds, no warning" % w,
                       "" if r.returncode == 0 else r.describe()):
            continue
        if w > 1:
            man = h.check_rank_files(t, out, orig, w, "W=%d" % w)
            units = {u["path"]: u["forward_methods"] for u in man["units"]}
            t.check(sorted(units) == ["backbone"] + ["backbone.layer%d" % i for i in range(1, 5)]
                    and "_forward_impl" in units.get("backbone", []),
                    "W=%d manifest: backbone (with _forward_impl) and backbone.layer1-4 are units" % w,
                    str(units))
        r = h.fsdp_run(out, inputs=inputs, check=orig, repeat=REPEAT, stats=True)
        if h.check_fsdp_run_exact(t, r, "W=%d forward x%d" % (w, REPEAT), w, orig):
            # backbone and its four layer units held for the call, in buckets of at most
            # --bucket-bytes (25 MiB): fewer collectives than the 5 units, as --stats predicts
            predicted = h.gathers_per_call(r_opt.stdout, "forward", 1)
            bad = {k: s for k, s in r.stats.items() if s.get("all_gathers") != (predicted or 0) * REPEAT
                   or s.get("unsharded_bytes") != 0}
            t.check(predicted is not None and 1 <= predicted < 5 and not bad,
                    "W=%d: %s gathers per call as --stats predicts (5 units, bucketed), all resharded" % (w, predicted),
                    str(bad))
            done.append("W=%d" % w)
    return t.finish("resnet wrapper via backbone._forward_impl: %s bitwise identical on every rank%s"
                    % (", ".join(done), "; unregistered case refused" if a.unregistered else ""))


if __name__ == "__main__":
    sys.exit(main())
