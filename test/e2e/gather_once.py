# Gather once (SPEC section 3): a registered forward method that calls `self.forward` of the
# same unit in a loop must gather that unit ONCE per call, not once per forward.
#
# A: `decoder`, a unit that is not the root, registers `generate` (a greedy loop over
#    self.forward); the root's forward calls self.decoder.generate(idx, n). Per call of the
#    root's forward: exactly 1 all-gather (torch.ops.fsdp.stats()["all_gathers"] counts
#    collectives), moving exactly the decoder's bytes.
# B: the same with decoder.layers.* nested units (and --bucket-bytes=0, so that no two
#    gathers share a collective): the planner holds the decoder and its layers for the whole
#    parent call, so 1 + n_layer all-gathers per call (the rewrite alone: 1 + n_layer * n), and
#    bytes_gathered = decoder's own bytes + each layer's bytes, once.
# C: fsdp_models' GPT with the root a unit and `generate` registered on it, blocks.* units:
#    C-budget: --max-unsharded-bytes = the root's bytes + one block's, so no block gather can
#      leave the decoding loop (FSDP2's reshard-after-forward), --bucket-bytes=0:
#      1 + n_layer * max_new_tokens all-gathers per generate call, and the runtime's peak of
#      unsharded bytes within the budget;
#    C-roomy: --max-unsharded-bytes = the whole model, --bucket-bytes=0: fsdp-opt remarks that
#      it holds both blocks for the whole generate call (none in C-budget), and generate costs
#      1 + n_layer;
#    C (default pipeline): as many per generate / forward call as `fsdp-opt --stats` predicts
#      ("gathers per call of METHOD: N (K inside loops)" -> N - K + K * max_new_tokens).
# Every call's output is bitwise the original model's (run unsharded in the driver), at W=2,
# three calls each so that the profiling executor's optimised graphs run too.
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
CALLS = 3
N_LAYER = 2
NEW_TOKENS = 5


class Layer(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return x + torch.tanh(self.fc(self.ln(x)))


class Decoder(nn.Module):
    """Embedding tied to the LM head, n_layer Layers; generate() loops over self.forward."""

    def __init__(self, vocab: int = 67, d: int = 32, n_layer: int = N_LAYER):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([Layer(d) for _ in range(n_layer)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x))

    @torch.jit.export
    def generate(self, idx: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            logits = self.forward(idx)
            nxt = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


class Wrapper(nn.Module):
    """The parent: calls decoder.generate, and has a replicated parameter of its own."""

    def __init__(self, seed: int = 0):
        super().__init__()
        with fm.seeded(seed):
            self.decoder = Decoder()
            self.temperature = nn.Parameter(torch.tensor([0.5, 2.0]))
        self.decoder._fsdp_unit = True
        self.decoder._fsdp_forward_methods = ["generate"]

    def forward(self, idx: torch.Tensor, n: int):
        tokens = self.decoder.generate(idx, n)
        return tokens, tokens.to(torch.float32).mean() * self.temperature


# ---- rank side --------------------------------------------------------------------------------

def rank_main(ctx):
    out = {}
    for case in ctx.args["cases"]:
        m = ctx.load(ctx.rank_file(case["dir"]))
        args = h.torch_load(case["inputs"])
        runs = []
        for _ in range(CALLS):
            ctx.reset_stats()  # also restarts peak_unsharded_bytes
            s0 = ctx.stats()
            y = getattr(m, case["method"])(*args)
            s1 = ctx.stats()
            runs.append({"out": y, "delta": h.stats_delta(s0, s1), "peak": s1["peak_unsharded_bytes"]})
        out[case["name"]] = runs
    return out


# ---- driver -----------------------------------------------------------------------------------

def unit_bytes(manifest):
    return {u["path"]: u["bytes"] for u in manifest["units"]}


def main():
    out_dir = sys.argv[1]
    t = h.Test("gather_once")
    prompt = fm.example_inputs("gpt")[0]

    wrapper_pt = os.path.join(out_dir, "wrapper.pt")
    fm.save(Wrapper().eval(), wrapper_pt)
    wrapper_in = os.path.join(out_dir, "wrapper.in.pt")
    fm.save_inputs((prompt, NEW_TOKENS), wrapper_in)
    gpt_pt = os.path.join(out_dir, "gpt.pt")
    fm.save(fm.mark(fm.make("gpt", n_layer=N_LAYER), units=["."], forward_methods={".": ["generate"]}), gpt_pt)
    gen_in = os.path.join(out_dir, "generate.in.pt")
    fm.save_inputs((prompt, NEW_TOKENS), gen_in)
    fwd_in = os.path.join(out_dir, "forward.in.pt")
    fm.save_inputs((prompt,), fwd_in)

    configs = {
        "A": (wrapper_pt, []),
        "B": (wrapper_pt, ["--fsdp-unit=decoder.layers.*", "--bucket-bytes=0"]),
        "C": (gpt_pt, ["--fsdp-unit=blocks.*"]),
    }
    manifests, held, predicted = {}, {}, {}

    def shard(name, src, flags):
        d = os.path.join(out_dir, name)
        r = h.fsdp_opt(src, "--world-size=%d" % WORLD, *flags, "--remarks", "--stats", "-o", d)
        if not t.check(r.returncode == 0, "config %s: fsdp-opt %s" % (name, " ".join(flags)),
                       r.describe() if r.returncode else ""):
            return False
        manifests[name] = h.check_rank_files(t, d, src, WORLD, "config %s" % name)
        held[name] = h.held_units(r.stderr, "generate")
        predicted[name] = {"generate": h.gathers_per_call(r.stdout, "generate", NEW_TOKENS),
                           "forward": h.gathers_per_call(r.stdout, "forward", 1)}
        return True

    for name, (src, flags) in configs.items():
        if not shard(name, src, flags):
            return t.finish("")
    ub = {k: unit_bytes(m) for k, m in manifests.items()}
    one_block = ub["C"]["."] + ub["C"]["blocks.0"]
    whole = sum(ub["C"].values())
    for name, budget in (("C-budget", one_block), ("C-roomy", whole)):
        if not shard(name, gpt_pt, ["--fsdp-unit=blocks.*", "--max-unsharded-bytes=%d" % budget, "--bucket-bytes=0"]):
            return t.finish("")
    t.check(held["C-budget"] == [] and held["C-roomy"] == ["blocks.%d" % i for i in range(N_LAYER)],
            "fsdp-opt holds no block for the whole generate call within %d bytes, both within %d"
            % (one_block, whole), str(held))
    t.check(predicted["C"]["generate"] is not None and predicted["C"]["forward"] is not None,
            "config C: fsdp-opt --stats predicts %s collectives per generate, %s per forward"
            % (predicted["C"]["generate"], predicted["C"]["forward"]), str(predicted["C"]))

    t.check(sorted(ub["A"]) == ["decoder"], "config A: decoder is the only unit", str(ub["A"]))
    t.check(sorted(ub["B"]) == ["decoder"] + ["decoder.layers.%d" % i for i in range(N_LAYER)],
            "config B: decoder and decoder.layers.* are units", str(ub["B"]))
    layer_bytes = sum(v for k, v in ub["B"].items() if k != "decoder")
    block_bytes = sum(v for k, v in ub["C"].items() if k != ".")
    cases = [
        {"name": "A", "dir": os.path.join(out_dir, "A"), "inputs": wrapper_in, "method": "forward",
         "src": wrapper_pt, "gathers": 1, "bytes": ub["A"]["decoder"],
         "what": "parent forward -> decoder.generate -> %d x decoder.forward" % NEW_TOKENS},
        {"name": "B", "dir": os.path.join(out_dir, "B"), "inputs": wrapper_in, "method": "forward",
         "src": wrapper_pt, "gathers": 1 + N_LAYER,
         "bytes": ub["B"]["decoder"] + layer_bytes,
         "what": "same, with %d nested layer units, all held for the call" % N_LAYER},
        {"name": "C-budget-generate", "dir": os.path.join(out_dir, "C-budget"), "inputs": gen_in,
         "method": "generate", "src": gpt_pt, "gathers": 1 + N_LAYER * NEW_TOKENS,
         "bytes": ub["C"]["."] + NEW_TOKENS * block_bytes, "peak": one_block,
         "what": "root-unit GPT generate within one block's budget (1 + n_layer x max_new_tokens)"},
        {"name": "C-roomy-generate", "dir": os.path.join(out_dir, "C-roomy"), "inputs": gen_in,
         "method": "generate", "src": gpt_pt, "gathers": 1 + N_LAYER, "bytes": whole, "peak": whole,
         "what": "root-unit GPT generate, blocks held for the call (1 + n_layer)"},
        {"name": "C-generate", "dir": os.path.join(out_dir, "C"), "inputs": gen_in, "method": "generate",
         "src": gpt_pt, "gathers": predicted["C"]["generate"], "bytes": None,
         "what": "root-unit GPT generate, default pipeline (%d blocks held)" % len(held["C"])},
        {"name": "C-forward", "dir": os.path.join(out_dir, "C"), "inputs": fwd_in, "method": "forward",
         "src": gpt_pt, "gathers": predicted["C"]["forward"], "bytes": ub["C"]["."] + block_bytes,
         "what": "root-unit GPT forward, default pipeline"},
    ]

    expected = {}
    for c in cases:
        m = torch.jit.load(c["src"])
        expected[c["name"]] = getattr(m, c["method"])(*h.torch_load(c["inputs"]))

    results = h.run_ranks(WORLD, rank_main, {"cases": [{k: c[k] for k in ("name", "dir", "inputs", "method")}
                                                       for c in cases]}, timeout=150)
    if not t.check(all(r.ok for r in results), "W=%d: all ranks ran every case" % WORLD, h.describe_ranks(results)):
        return t.finish("")
    for c in cases:
        exact, counts = [], []
        for r in results:
            for i, run in enumerate(r.value[c["name"]]):
                d = h.same_bits(run["out"], expected[c["name"]])
                if d:
                    exact.append("rank %d call %d: %s" % (r.rank, i + 1, d))
                delta = run["delta"]
                if delta["all_gathers"] != c["gathers"] or delta["unsharded_bytes"] != 0 or \
                        (c["bytes"] is not None and delta["bytes_gathered"] != c["bytes"]) or \
                        run["peak"] > c.get("peak", run["peak"]):
                    counts.append("rank %d call %d: %s, peak_unsharded_bytes %d" % (r.rank, i + 1, delta, run["peak"]))
        t.check(not exact, "%s [%s]: %d calls on %d ranks bitwise identical to the original"
                % (c["name"], c["what"], CALLS, WORLD), "; ".join(exact))
        t.check(not counts, "%s: exactly %d all-gather(s) per call%s%s, nothing left unsharded"
                % (c["name"], c["gathers"], "" if c["bytes"] is None else ", %d bytes" % c["bytes"],
                   ", peak unsharded <= %d bytes" % c["peak"] if "peak" in c else ""),
                "; ".join(counts) or "gather_calls per call: %d" % results[0].value[c["name"]][-1]["delta"]["gather_calls"])
    return t.finish("W=%d: decoder.generate gathers its units once per parent call (A, B); root GPT generate "
                    "1 + %d x %d gathers within a one-block budget, 1 + %d with room to hold, %s by default "
                    "as --stats predicts; all outputs bitwise identical"
                    % (WORLD, N_LAYER, NEW_TOKENS, N_LAYER, predicted["C"]["generate"]))


if __name__ == "__main__":
    sys.exit(main())
