# A Hugging Face decoder in a Python loop under `fsdp_opt.unsharded` (docs/runtime.md, "Unshard
# scopes"): GPT2LMHeadModel from a tiny random config (seed 0, nothing downloaded, as the model
# zoo builds it), traced with torch.jit.trace, sharded for 2 ranks with the root and every
# GPT2Block (transformer.h.*) a unit, as the zoo's flags do. Each rank decodes 8 tokens greedily
# in Python, one traced `forward` per token over a sliding window of the last 12 tokens (the trace
# keeps the input's shape), inside one scope: every rank's tokens and logits bitwise equal to the
# same loop on the unsharded trace in this process; the scope ONE collective (the whole model fits
# one 25 MiB bucket), every token none, nothing unsharded after. The same loop without the scope,
# as a control, gathers on every token.
#
# REQUIRES: torch2
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch

import fsdp_harness as h

WORLD = 2
TOKENS = 8
WINDOW = 12


def decode(m, window, stats=None):
    """Greedy decoding, one forward per token over the last WINDOW tokens; with `stats`, the
    runtime's all_gathers of each call."""
    tokens, logits_seen, per_call = [], [], []
    for _ in range(TOKENS):
        before = stats()["all_gathers"] if stats else 0
        logits = m(window)["logits"]
        if stats:
            per_call.append(stats()["all_gathers"] - before)
        nxt = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
        tokens.append(nxt)
        logits_seen.append(logits)
        window = torch.cat([window[:, 1:], nxt], dim=1)
    return torch.cat(tokens, dim=1), logits_seen, per_call


def rank_main(ctx):
    torch.set_num_threads(1)
    fsdp_opt = h.fsdp_opt_package()
    m = fsdp_opt.load_rank_file(ctx.args["dir"])
    prompt = h.torch_load(ctx.args["inputs"])[0]
    with torch.no_grad():
        fsdp_opt.reset_stats()
        with fsdp_opt.unsharded(m) as scope:
            entered = fsdp_opt.stats()
            tokens, logits, per_call = decode(m, prompt, stats=fsdp_opt.stats)
        after = fsdp_opt.stats()
        plain_tokens, _, plain_per_call = decode(m, prompt, stats=fsdp_opt.stats)
    return {"tokens": tokens, "logits": logits, "per_call": per_call, "entered": entered, "after": after,
            "units": scope.units, "collectives": scope.collectives, "plain_tokens": plain_tokens,
            "plain_per_call": plain_per_call}


def main():
    out_dir = sys.argv[1]
    t = h.Test("unsharded_scope_hf")
    import transformers
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(vocab_size=128, use_cache=False, bos_token_id=0, eos_token_id=1,
                                     pad_token_id=0, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    example = torch.randint(0, 128, (2, WINDOW), generator=torch.Generator().manual_seed(0))
    prompt = torch.randint(0, 128, (2, WINDOW), generator=torch.Generator().manual_seed(1))
    orig_pt = os.path.join(out_dir, "gpt2.pt")
    with torch.no_grad():
        torch.jit.trace(model, (example,), strict=False).save(orig_pt)  # strict=False: a dict output
    del model
    inputs = os.path.join(out_dir, "prompt.pt")
    torch.save((prompt,), inputs)
    d = os.path.join(out_dir, "w2")
    r = h.fsdp_opt(orig_pt, "--fsdp-unit-type=GPT2Block", "--fsdp-unit=.", "--world-size=%d" % WORLD, "-o", d)
    if not t.check(r.returncode == 0, "fsdp-opt: GPT2Block units and the root, W=%d" % WORLD, r.describe()):
        return t.finish("")
    with torch.no_grad():
        want_tokens, want_logits, _ = decode(torch.jit.load(orig_pt), prompt)

    results = h.run_ranks(WORLD, rank_main, {"dir": d, "inputs": inputs}, timeout=200)
    if not t.check(all(x.ok for x in results), "W=%d: both ranks decoded" % WORLD, h.describe_ranks(results)):
        return t.finish("")
    for x in results:
        v = x.value
        diff = h.same_bits((v["tokens"], v["logits"]), (want_tokens, want_logits))
        t.check(diff is None, "rank %d: %d tokens and their logits under the scope bitwise equal to the unsharded "
                "trace's loop" % (x.rank, TOKENS), diff or "")
        t.check(v["units"] == [".", "transformer.h.0", "transformer.h.1"] and v["collectives"] == 1 and
                v["entered"]["all_gathers"] == 1 and v["per_call"] == [0] * TOKENS and
                v["after"]["all_gathers"] == 1 and v["after"]["unsharded_bytes"] == 0,
                "rank %d: one collective for the scope, none per token, nothing unsharded after" % x.rank,
                "units %s, collectives %d, per token %s, after %s"
                % (v["units"], v["collectives"], v["per_call"], {k: v["after"][k] for k in ("all_gathers", "unsharded_bytes")}))
        diff = h.same_bits(v["plain_tokens"], want_tokens)
        t.check(diff is None and all(n > 0 for n in v["plain_per_call"]),
                "rank %d: without the scope the same loop is exact and gathers on every token" % x.rank,
                diff or "per token %s" % v["plain_per_call"])
    return t.finish("W=%d: traced GPT2LMHeadModel, %d-token Python decode under fsdp_opt.unsharded bitwise equal, "
                    "1 collective for the whole loop" % (WORLD, TOKENS))


if __name__ == "__main__":
    sys.exit(main())
