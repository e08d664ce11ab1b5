"""Decoding loops as users write them, for the gather-lifetime planner's tests (issue 20).

KVDecoder is a small causal decoder (token + position embeddings, `Block`s of single-head
attention with a key/value cache and an MLP, two LM heads) whose root methods spell greedy
decoding in the ways people do:

    generate_while(idx, max_new_tokens, eos)    (a) `while` with the eos test in its condition
    generate_break(idx, max_new_tokens, eos)    (b) `for` + `if eos: break`
    generate_cached(idx, max_new_tokens, eos)   (c) `prefill`, then a cached `step` per token,
                                                    the cache a List[Tensor] per layer
    generate_helpers(idx, max_new_tokens, eos)  (d) the loop body calls helper methods
    generate_branch(idx, max_new_tokens, eos)   (e) an `if` in the body picks one of two heads

Every loop stops after `max_new_tokens` tokens or once the token it appended is `eos`, so ranks
given different prompts or eos ids stop at different steps. `loop_iterations(method, ...)`
says how many iterations of its loop a call ran, from the lengths of prompt and output.

HFGenerate wraps a traced Hugging Face causal LM (its forward returns a dict with "logits") in
a scripted `generate` written as (b), case (f); `traced_hf("gpt2" | "llama")` builds one from a
small random config (torch 2.x leg only: transformers lives in its venv; nothing is downloaded).
The model zoo (test/models/zoo.py, its `*_generate` entries) wraps its own traces of GPT-2,
Llama and Qwen2 in HFGenerate the same way.

    python -m decoders kv -o kv.pt [--n-layer N] [--d D]
    python -m decoders gpt2|llama -o hf.pt [--n-layer N]
"""

import argparse
import math
import warnings
from typing import List, Tuple

import torch
import torch.nn as nn
from torch import Tensor

warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)

KV_METHODS = ["generate_while", "generate_break", "generate_cached", "generate_helpers", "generate_branch"]
# The flags a user would write: every Block a unit, the two heads and the root too.
KV_UNIT_FLAGS = ["--fsdp-unit=.", "--fsdp-unit-type=Block", "--fsdp-unit=head_a", "--fsdp-unit=head_b"]
HF_UNIT_FLAGS = {"gpt2": ["--fsdp-unit=model", "--fsdp-unit-type=GPT2Block"],
                 "llama": ["--fsdp-unit=model", "--fsdp-unit-type=LlamaDecoderLayer"]}


class Attention(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.d = d
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: Tensor, k_cache: Tensor, v_cache: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.qkv(x).split(self.d, dim=-1)
        k = torch.cat([k_cache, k], dim=1)
        v = torch.cat([v_cache, v], dim=1)
        new, total = q.size(1), k.size(1)
        att = (q @ k.transpose(1, 2)) / math.sqrt(self.d)
        visible = torch.ones(new, total, dtype=torch.bool).tril(total - new)
        att = att.masked_fill(~visible, float("-inf")).softmax(dim=-1)
        return self.proj(att @ v), k, v


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x: Tensor, k_cache: Tensor, v_cache: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        a, k, v = self.attn(self.ln1(x), k_cache, v_cache)
        x = x + a
        return x + self.fc2(torch.tanh(self.fc1(self.ln2(x)))), k, v


class KVDecoder(nn.Module):
    def __init__(self, vocab: int = 67, d: int = 32, n_layer: int = 2, n_positions: int = 64):
        super().__init__()
        self.d = d
        self.n_layer = n_layer
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(n_positions, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.head_a = nn.Linear(d, vocab, bias=False)
        self.head_b = nn.Linear(d, vocab)

    def empty_cache(self, idx: Tensor) -> List[Tensor]:
        return [torch.zeros(idx.size(0), 0, self.d) for _ in range(self.n_layer)]

    def hidden(self, idx: Tensor, start: int, ks: List[Tensor], vs: List[Tensor]) -> Tuple[Tensor, List[Tensor], List[Tensor]]:
        x = self.wte(idx) + self.wpe(torch.arange(start, start + idx.size(1)))
        new_ks: List[Tensor] = []
        new_vs: List[Tensor] = []
        for i, block in enumerate(self.blocks):
            x, k, v = block(x, ks[i], vs[i])
            new_ks.append(k)
            new_vs.append(v)
        return self.ln_f(x), new_ks, new_vs

    def forward(self, idx: Tensor) -> Tensor:
        h, _, _ = self.hidden(idx, 0, self.empty_cache(idx), self.empty_cache(idx))
        return self.head_a(h)

    @torch.jit.export
    def prefill(self, idx: Tensor) -> Tuple[Tensor, List[Tensor], List[Tensor]]:
        h, ks, vs = self.hidden(idx, 0, self.empty_cache(idx), self.empty_cache(idx))
        return self.head_a(h[:, -1:, :]), ks, vs

    @torch.jit.export
    def step(self, token: Tensor, position: int, ks: List[Tensor], vs: List[Tensor]) -> Tuple[Tensor, List[Tensor], List[Tensor]]:
        h, ks, vs = self.hidden(token, position, ks, vs)
        return self.head_a(h), ks, vs

    @torch.jit.export
    def next_token(self, logits: Tensor) -> Tensor:
        return torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)

    @torch.jit.export
    def is_eos(self, token: Tensor, eos: int) -> bool:
        return bool((token == eos).all())

    @torch.jit.export
    def generate_while(self, idx: Tensor, max_new_tokens: int, eos: int) -> Tensor:
        n = 0
        done = False
        while n < max_new_tokens and not done:
            token = self.next_token(self.forward(idx))
            idx = torch.cat([idx, token], dim=1)
            n += 1
            done = self.is_eos(token, eos)
        return idx

    @torch.jit.export
    def generate_break(self, idx: Tensor, max_new_tokens: int, eos: int) -> Tensor:
        for _ in range(max_new_tokens):
            token = torch.argmax(self.forward(idx)[:, -1, :], dim=-1, keepdim=True)
            idx = torch.cat([idx, token], dim=1)
            if bool((token == eos).all()):
                break
        return idx

    @torch.jit.export
    def generate_cached(self, idx: Tensor, max_new_tokens: int, eos: int) -> Tensor:
        logits, ks, vs = self.prefill(idx)
        token = self.next_token(logits)
        idx = torch.cat([idx, token], dim=1)
        for _ in range(max_new_tokens - 1):
            logits, ks, vs = self.step(token, idx.size(1) - 1, ks, vs)
            token = self.next_token(logits)
            idx = torch.cat([idx, token], dim=1)
            if self.is_eos(token, eos):
                break
        return idx

    @torch.jit.export
    def decode_one(self, idx: Tensor) -> Tensor:
        return torch.cat([idx, self.next_token(self.forward(idx))], dim=1)

    @torch.jit.export
    def generate_helpers(self, idx: Tensor, max_new_tokens: int, eos: int) -> Tensor:
        for _ in range(max_new_tokens):
            idx = self.decode_one(idx)
            if self.is_eos(idx[:, -1:], eos):
                break
        return idx

    @torch.jit.export
    def generate_branch(self, idx: Tensor, max_new_tokens: int, eos: int) -> Tensor:
        for n in range(max_new_tokens):
            h, _, _ = self.hidden(idx, 0, self.empty_cache(idx), self.empty_cache(idx))
            if n % 2 == 0:
                logits = self.head_a(h)
            else:
                logits = self.head_b(h)
            token = self.next_token(logits)
            idx = torch.cat([idx, token], dim=1)
            if self.is_eos(token, eos):
                break
        return idx


class UnitDecoders(nn.Module):
    """(j) KVDecoder's loops run by a unit that is not the root: the root's methods call the
    decoder's registered generate_* methods (FSDP2's register_fsdp_forward_method on a child),
    so each loop lives in the unit's own method and is reached through a call."""

    def __init__(self, decoder: KVDecoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, idx: Tensor) -> Tensor:
        return self.decoder(idx)

    @torch.jit.export
    def generate_while(self, idx: Tensor, max_new_tokens: int, eos: int) -> Tensor:
        return self.decoder.generate_while(idx, max_new_tokens, eos)

    @torch.jit.export
    def generate_break(self, idx: Tensor, max_new_tokens: int, eos: int) -> Tensor:
        return self.decoder.generate_break(idx, max_new_tokens, eos)

    @torch.jit.export
    def generate_cached(self, idx: Tensor, max_new_tokens: int, eos: int) -> Tensor:
        return self.decoder.generate_cached(idx, max_new_tokens, eos)


UNIT_DECODER_METHODS = ["generate_while", "generate_break", "generate_cached"]
UNIT_DECODER_FLAGS = (["--fsdp-unit=decoder", "--fsdp-unit-type=Block"]
                      + ["--forward-method=decoder:%s" % m for m in UNIT_DECODER_METHODS])


def loop_iterations(method: str, prompt_length: int, output_length: int) -> int:
    """Iterations of `method`'s decoding loop in a call that turned a prompt of prompt_length
    tokens into output_length: one token each, except the cached loop's first (prefill's)."""
    new = output_length - prompt_length
    return new - 1 if method == "generate_cached" else new


class HFGenerate(nn.Module):
    """A traced Hugging Face causal LM and greedy decoding over it, written as (b)."""

    def __init__(self, traced):
        super().__init__()
        self.model = traced

    def forward(self, idx: Tensor) -> Tensor:
        return self.model(idx)["logits"]

    @torch.jit.export
    def generate(self, idx: Tensor, max_new_tokens: int, eos: int) -> Tensor:
        for _ in range(max_new_tokens):
            token = torch.argmax(self.model(idx)["logits"][:, -1, :], dim=-1, keepdim=True)
            idx = torch.cat([idx, token], dim=1)
            if bool((token == eos).all()):
                break
        return idx


def hf_model(family: str = "gpt2", n_layer: int = 2, seed: int = 0):
    """The eager Hugging Face causal LM (GPT2LMHeadModel or LlamaForCausalLM) that traced_hf
    traces: a small random config (use_cache=False: a cache object cannot leave a trace;
    Hugging Face's generate can still ask for one)."""
    import transformers
    transformers.logging.set_verbosity_error()
    common = dict(vocab_size=128, use_cache=False, bos_token_id=0, eos_token_id=1, pad_token_id=0)
    if family == "gpt2":
        config = transformers.GPT2Config(n_embd=64, n_layer=n_layer, n_head=4, n_positions=64, **common)
        model_class = transformers.GPT2LMHeadModel
    else:
        config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=n_layer,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          **common)
        model_class = transformers.LlamaForCausalLM
    torch.manual_seed(seed)
    return model_class(config).eval()


def traced_hf(family: str = "gpt2", n_layer: int = 2, seed: int = 0):
    """hf_model(family, n_layer, seed) traced as its users trace it (strict=False: it returns a dict)."""
    model = hf_model(family, n_layer, seed)
    example = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return torch.jit.trace(model, (example,), strict=False)


def kv_decoder(n_layer: int = 2, d: int = 32, seed: int = 0) -> KVDecoder:
    torch.manual_seed(seed)
    return KVDecoder(d=d, n_layer=n_layer).eval()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=["kv", "gpt2", "llama"])
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--d", type=int, default=32)
    args = parser.parse_args(argv)
    if args.model == "kv":
        scripted = torch.jit.script(kv_decoder(args.n_layer, args.d))
    else:
        scripted = torch.jit.script(HFGenerate(traced_hf(args.model, args.n_layer)))
    scripted.save(args.output)


if __name__ == "__main__":
    main()
