# torch.nn's recurrent layers, scripted and traced as their users do (fsdp_models' RecurrentStack:
# a 2-layer bidirectional nn.LSTM with proj_size, an nn.GRU and an nn.RNN side by side). Scripted,
# each keeps its weights also in `_flat_weights`, which its forward passes to aten::lstm / gru /
# rnn_tanh; before expand-parameter-lists every rank file kept those weights whole there and the
# call computed with them (bitwise "right" while sharding nothing, and training no weight).
# Checked at W=2 and 3, each recurrent layer a unit and the root alone a unit:
#   - the pass's remarks: each list read as its parameters (20, 4, 4);
#   - rank files hold exactly their shards and no more tensor data (check_rank_files), and
#     every `_flat_weights` in them is empty;
#   - fsdp-run's ranks return the original's outputs bit for bit, one gather per call;
# the traced model (whose graph reads the parameters directly) the same at W=2; training through
# the rank files exact at W = 1, 2, 3 (train_exact.py --model rnn: every weight gets its gradient).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t
# RUN: %python %S/train_exact.py --model rnn --worlds 1,2,3 --optim sgd,adamw %t

import os
import re
import sys

import torch

import fsdp_harness as h
import fsdp_models as fm

REPEAT = 3
RECURRENT = {"lstm": 20, "gru": 4, "rnn": 4}  # parameters each layer's list holds
EXPANDED = re.compile(r"remark: \[expand-parameter-lists\] list '(\w+)\._flat_weights' is read as its (\d+) parameters")


def check_lists_empty(t, out, world, label):
    torch.ops.load_library(h.runtime_lib())
    sizes = {}
    for r in range(world):
        m = torch.jit.load(os.path.join(out, "rank%d.pt" % r))
        for name in RECURRENT:
            sizes["rank%d %s" % (r, name)] = len(getattr(m, name)._flat_weights)
    t.check(not any(sizes.values()), "%s: every rank file's _flat_weights lists are empty" % label, str(sizes))


def main():
    out_dir = sys.argv[1]
    t = h.Test("rnn_models")
    scripted = os.path.join(out_dir, "rnn.pt")
    fm.save(fm.make("rnn"), scripted)
    inputs = os.path.join(out_dir, "in.pt")
    example = fm.example_inputs("rnn")
    fm.save_inputs(example, inputs)
    traced = os.path.join(out_dir, "rnn_traced.pt")
    torch.jit.save(torch.jit.trace(fm.make("rnn"), example), traced)

    done = []
    cases = [(scripted, "scripted", w, list(fm.RNN_UNIT_FLAGS)) for w in (2, 3)]
    cases += [(scripted, "scripted", 2, ["--fsdp-unit=."]), (traced, "traced", 2, list(fm.RNN_UNIT_FLAGS))]
    for src, kind, w, units in cases:
        label = "%s W=%d %s" % (kind, w, " ".join(units))
        out = os.path.join(out_dir, "%s.w%d.u%d" % (kind, w, len(units)))
        r = h.fsdp_opt(src, "--world-size=%d" % w, *units, "--remarks", "-o", out)
        if not t.check(r.returncode == 0, "%s: fsdp-opt succeeds" % label, "" if r.returncode == 0 else r.describe()):
            continue
        expanded = {m.group(1): int(m.group(2)) for m in EXPANDED.finditer(r.stderr)}
        want = RECURRENT if kind == "scripted" else {}
        t.check(expanded == want, "%s: expand-parameter-lists reads %s as their parameters" % (label, want or "no list"),
                str(expanded))
        h.check_rank_files(t, out, src, w, label)
        if kind == "scripted":
            check_lists_empty(t, out, w, label)
        r = h.fsdp_run(out, inputs=inputs, check=src, repeat=REPEAT, stats=True)
        if h.check_fsdp_run_exact(t, r, "%s forward x%d" % (label, REPEAT), w, src):
            bad = {k: s for k, s in r.stats.items() if s.get("all_gathers") != REPEAT or s.get("unsharded_bytes") != 0}
            t.check(not bad, "%s: 1 gather per call, all resharded" % label, str(bad))
            done.append(label)
    return t.finish("LSTM/GRU/RNN sharded for real and bitwise: %s" % "; ".join(done))


if __name__ == "__main__":
    sys.exit(main())
