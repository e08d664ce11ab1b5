# Rank-file mix-ups through the launcher (SPEC sections 6 and 7): fsdp-run on a directory
# whose files do not belong together must exit non-zero with an `error:` line naming the
# cause, within FSDP_OPT_TIMEOUT_S (--timeout=10) plus slack, and never hang:
#   - swapped rank files (rank0.pt <-> rank1.pt);
#   - rank1.pt of another fsdp-opt run (GPT with another seed: a different input);
# and, with --nproc-cases (fsdp_run_nproc.py, a lit test of its own):
#   - a W=2 directory run with --nproc=1, or with --nproc=3 (no rank2.pt; then with a rank2.pt
#     taken from a W=3 run of the same model);
#   - a single W=1 model file with --nproc=2.
# rank_files.py checks the same mix-ups in rank processes of its own.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import shutil
import sys

import fsdp_harness as h
import fsdp_models as fm

TIMEOUT_S = 10
SLACK_S = 25


def assemble(out_dir, name, files):
    """A directory holding the given (source, name) files."""
    d = os.path.join(out_dir, name)
    os.makedirs(d)
    for src, dst in files:
        shutil.copyfile(src, os.path.join(d, dst))
    return d


def main():
    nproc_cases = sys.argv[1] == "--nproc-cases"
    out_dir = sys.argv[-1]
    t = h.Test("fsdp_run_nproc" if nproc_cases else "rank_files_fsdp_run")
    srcs = {}
    for seed in ((0,) if nproc_cases else (0, 1)):
        srcs[seed] = os.path.join(out_dir, "gpt%d.pt" % seed)
        fm.save(fm.make("gpt", n_layer=2, seed=seed), srcs[seed])
    inputs = os.path.join(out_dir, "in.pt")
    fm.save_inputs(fm.example_inputs("gpt"), inputs)
    units = ["--fsdp-unit=.", "--fsdp-unit=blocks.*"]
    if nproc_cases:
        runs = {"A": (0, 2, "A"), "A3": (0, 3, "A3"), "A1": (0, 1, "A1.pt")}
    else:
        runs = {"A": (0, 2, "A"), "B": (1, 2, "B")}
    path = {}
    for key, (seed, w, out) in runs.items():
        path[key] = os.path.join(out_dir, out)
        r = h.fsdp_opt(srcs[seed], "--world-size=%d" % w, *units, "-o", path[key])
        if not t.check(r.returncode == 0, "fsdp-opt run %s (seed %d, W=%d)" % (key, seed, w),
                       r.describe() if r.returncode else ""):
            return t.finish("")

    def f(key, name):
        return os.path.join(path[key], name)

    # (label, target, nproc, allowed exit codes, substrings of the error line)
    if nproc_cases:
        extra = assemble(out_dir, "extra", [(f("A", "rank0.pt"), "rank0.pt"), (f("A", "rank1.pt"), "rank1.pt"),
                                            (f("A3", "rank2.pt"), "rank2.pt"), (f("A", "manifest.json"), "manifest.json")])
        cases = [
            ("W=2 directory, --nproc=1", path["A"], 1, (2, 3), ["world size 2", "world size 1"]),
            ("W=2 directory, --nproc=3 (no rank2.pt)", path["A"], 3, (2,), ["rank2.pt"]),
            ("W=2 directory plus a W=3 run's rank2.pt, --nproc=3", extra, 3, (2, 3), ["world size"]),
            ("W=1 model file, --nproc=2", path["A1"], 2, (2,), ["--nproc=2"]),
        ]
    else:
        swapped = assemble(out_dir, "swapped", [(f("A", "rank0.pt"), "rank1.pt"), (f("A", "rank1.pt"), "rank0.pt"),
                                                (f("A", "manifest.json"), "manifest.json")])
        mixed = assemble(out_dir, "mixed", [(f("A", "rank0.pt"), "rank0.pt"), (f("B", "rank1.pt"), "rank1.pt"),
                                            (f("A", "manifest.json"), "manifest.json")])
        cases = [
            ("swapped rank files", swapped, None, (3,), ["rank 1", "rank 0"]),
            ("rank1.pt of another run (other input)", mixed, None, (3,), ["different fsdp-opt runs"]),
        ]
    for label, target, nproc, codes, needles in cases:
        r = h.fsdp_run(target, inputs=inputs, check=srcs[0], nproc=nproc, timeout_s=TIMEOUT_S,
                       timeout=TIMEOUT_S + SLACK_S + 30)
        errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
        ok = (not r.timed_out and r.returncode in codes and len(errors) == 1
              and all(n in errors[0] for n in needles) and r.elapsed <= TIMEOUT_S + SLACK_S
              and "bitwise identical" not in r.stdout)
        t.check(ok, "%s: fsdp-run exits %s with one error naming %s (%.1f s)" % (label, r.returncode, needles, r.elapsed),
                errors[0] if ok else r.describe())
    return t.finish(("fsdp-run refuses every wrong --nproc" if nproc_cases else
                     "fsdp-run refuses swapped files and files of two runs") + " with one error line, none hung")


if __name__ == "__main__":
    sys.exit(main())
