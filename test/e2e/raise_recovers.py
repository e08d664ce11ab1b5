# A method that raises (TorchScript `raise`) while units are gathered leaves the sharded
# module usable (SPEC section 5): at W=2 every rank calls the model with bad inputs, gets the
# exception (the same message as the original model's), finds nothing left unsharded
# (stats unsharded_bytes == 0, parameters back to their shard shapes), and then gets
# bitwise the original's result for good inputs. Three raise sites:
#   - generate(n < 0): raises at its top, inside the root unit's entry gather;
#   - generate(..., fail_step, fail_layer): raises inside blocks.<fail_layer>'s forward in the
#     middle of the loop, with the root and that block gathered;
#   - forward(idx, fail_layer): raises inside a block called from the entry forward.
# Bad and good calls alternate three times, so the profiling executor's optimised graphs
# raise too.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch
import torch.nn as nn

import fsdp_harness as h
import fsdp_models as fm

WORLD = 2
VOCAB = 67
D = 32
N_LAYER = 2
ROUNDS = 3


class RBlock(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)

    def forward(self, x, fail: bool):
        if fail:
            raise ValueError("block asked to fail")
        return x + torch.tanh(self.fc(self.ln(x)))


class RaisingLM(nn.Module):
    def __init__(self):
        super().__init__()
        with fm.seeded(0):
            self.emb = nn.Embedding(VOCAB, D)
            self.blocks = nn.ModuleList([RBlock(D) for _ in range(N_LAYER)])
            self.ln = nn.LayerNorm(D)
            self.head = nn.Linear(D, VOCAB, bias=False)
        self.head.weight = self.emb.weight
        self._fsdp_unit = True
        self._fsdp_forward_methods = ["generate"]

    def forward(self, idx, fail_layer: int = -1):
        x = self.emb(idx)
        i = 0
        for block in self.blocks:
            x = block(x, i == fail_layer)
            i += 1
        return self.head(self.ln(x))

    @torch.jit.export
    def generate(self, idx: torch.Tensor, n: int, fail_step: int = -1, fail_layer: int = -1) -> torch.Tensor:
        if n < 0:
            raise ValueError("generate: n must be >= 0")
        for step in range(n):
            logits = self.forward(idx, fail_layer if step == fail_step else -1)
            nxt = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


def calls(prompt):
    """(label, method, args, raises) in the order every rank runs them, ROUNDS times."""
    seq = [
        ("generate(n=-1)", "generate", (prompt, -1), "generate: n must be >= 0"),
        ("generate(n=4)", "generate", (prompt, 4), None),
        ("generate(n=4, fail in blocks.1 at step 2)", "generate", (prompt, 4, 2, 1), "block asked to fail"),
        ("forward", "forward", (prompt,), None),
        ("forward(fail in blocks.0)", "forward", (prompt, 0), "block asked to fail"),
        ("generate(n=3)", "generate", (prompt, 3), None),
    ]
    return seq * ROUNDS


def shard_shapes_ok(m, world):
    want = h.shard_rows(VOCAB, world)
    got = [m.emb.weight.shape[0], m.head.weight.shape[0], h.attr_path(m, "blocks.1.fc.weight").shape[0]]
    return got == [want, want, h.shard_rows(D, world)], got


def rank_main(ctx):
    m = ctx.load(ctx.rank_file(ctx.args["dir"]))
    prompt = h.torch_load(ctx.args["inputs"])[0]
    out = []
    for label, method, args, _ in calls(prompt):
        s0 = ctx.stats()
        rec = {"label": label}
        try:
            rec["out"] = getattr(m, method)(*args)
        except Exception as e:  # noqa: BLE001 - the expected TorchScript exception
            rec["error"] = "%s: %s" % (type(e).__name__, e)
        s1 = ctx.stats()
        rec["unsharded_bytes"] = s1["unsharded_bytes"]
        rec["delta"] = h.stats_delta(s0, s1)
        ok, shapes = shard_shapes_ok(m, ctx.world_size)
        rec["sharded_again"] = ok
        rec["shapes"] = shapes
        out.append(rec)
    return out


def main():
    out_dir = sys.argv[1]
    t = h.Test("raise_recovers")
    orig = os.path.join(out_dir, "raising.pt")
    fm.save(RaisingLM().eval(), orig)
    inputs = os.path.join(out_dir, "in.pt")
    fm.save_inputs(fm.example_inputs("gpt"), inputs)
    prompt = h.torch_load(inputs)[0]

    d = os.path.join(out_dir, "w%d" % WORLD)
    r = h.fsdp_opt(orig, "--world-size=%d" % WORLD, "--fsdp-unit=blocks.*", "--remarks", "-o", d)
    if not t.check(r.returncode == 0, "W=%d fsdp-opt (root and blocks.* units, generate registered)" % WORLD,
                   r.describe() if r.returncode else ""):
        return t.finish("")
    t.check("release_all inserted before" in r.stderr, "fsdp-opt remarks that release_all guards the raises",
            [l for l in r.stderr.splitlines() if "raise" in l].__repr__())
    h.check_rank_files(t, d, orig, WORLD, "W=%d" % WORLD)

    # The original, unsharded, in this process: the same exceptions and results.
    original = torch.jit.load(orig)
    expected = []
    for label, method, args, raises in calls(prompt):
        try:
            expected.append(("out", getattr(original, method)(*args)))
        except Exception as e:  # noqa: BLE001
            expected.append(("error", str(e)))
    seq = calls(prompt)
    t.check(all((kind == "error") == (raises is not None) and (raises is None or raises in val)
                for (kind, val), (_, _, _, raises) in zip(expected, seq)),
            "the original raises exactly on the bad inputs", str([k for k, _ in expected]))

    results = h.run_ranks(WORLD, rank_main, {"dir": d, "inputs": inputs}, timeout=120)
    if not t.check(all(r.ok for r in results), "W=%d: all ranks ran every call" % WORLD, h.describe_ranks(results)):
        return t.finish("")
    n_raised = n_exact = 0
    problems = []
    for r in results:
        for i, (rec, (kind, want), (label, _, _, raises)) in enumerate(zip(r.value, expected, seq)):
            where = "rank %d call %d %s" % (r.rank, i + 1, label)
            if raises is not None:
                if "error" not in rec or raises not in rec["error"]:
                    problems.append("%s: expected an exception mentioning %r, got %s"
                                    % (where, raises, rec.get("error") or "a result"))
                else:
                    n_raised += 1
                if rec["unsharded_bytes"] != 0 or not rec["sharded_again"]:
                    problems.append("%s: after the raise unsharded_bytes=%d, parameter rows %s"
                                    % (where, rec["unsharded_bytes"], rec["shapes"]))
                if rec["delta"].get("release_all_calls", 1) < 1:
                    problems.append("%s: no release_all ran (%s)" % (where, rec["delta"]))
            else:
                if "error" in rec:
                    problems.append("%s: raised %s" % (where, rec["error"]))
                    continue
                diff = h.same_bits(rec["out"], want)
                if diff:
                    problems.append("%s: %s" % (where, diff))
                elif rec["unsharded_bytes"] != 0 or not rec["sharded_again"]:
                    problems.append("%s: left unsharded_bytes=%d" % (where, rec["unsharded_bytes"]))
                else:
                    n_exact += 1
    t.check(not problems, "W=%d: %d raises caught with nothing left unsharded, %d good calls bitwise identical"
            % (WORLD, n_raised, n_exact),
            "; ".join(problems[:8]) or "rank 0's first exception: " + results[0].value[0].get("error", "")[-300:])
    return t.finish("W=%d: %d raises (entry, nested unit mid-generate, nested unit from forward) left the "
                    "model sharded; the %d calls after them bitwise identical on both ranks"
                    % (WORLD, n_raised, n_exact))


if __name__ == "__main__":
    sys.exit(main())
