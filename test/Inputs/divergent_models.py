"""Models whose collectives depend on each rank's data (SPEC section 11), for the
rank-uniform-control-flow tests (test/rank-uniform-control-flow*.py, test/e2e/divergent_*.py).

    stop_gpt   fsdp_models' GPT with `generate_until(idx, max_new_tokens, eos)`: greedy decoding
               that stops early at `eos`, so ranks with different prompts stop at different steps
    chooser    forward runs unit `a` or unit `b` (same shapes) depending on the input's sign
    orderer    forward runs a then b, or b then a, depending on the input's sign

    %python -m divergent_models NAME OUT.pt
"""

import sys

import torch
import torch.nn as nn

import fsdp_models as fm


class StopGPT(fm.GPT):
    @torch.jit.export
    def generate_until(self, idx: torch.Tensor, max_new_tokens: int, eos: int) -> torch.Tensor:
        """Greedy decoding that stops after emitting `eos` (every row of the batch)."""
        for _ in range(max_new_tokens):
            logits = self.forward(idx[:, max(0, idx.size(1) - self.block_size):])
            next_token = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
            idx = torch.cat([idx, next_token], dim=1)
            if bool((next_token == eos).all()):
                break
        return idx


class Unit(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.fc(x))


class Chooser(nn.Module):
    def __init__(self, d: int = 8, seed: int = 0):
        super().__init__()
        with fm.seeded(seed):
            self.a = Unit(d)
            self.b = Unit(d)
            self.head = nn.Linear(d, 3)

    def forward(self, x):
        if bool(x.sum() > 0):
            y = self.a(x)
        else:
            y = self.b(x)
        return self.head(y)


class Orderer(Chooser):
    def forward(self, x):
        if bool(x.sum() > 0):
            y = self.b(self.a(x))
        else:
            y = self.a(self.b(x))
        return self.head(y)


MODELS = {"stop_gpt": StopGPT, "chooser": Chooser, "orderer": Orderer}


def make(name: str, **kwargs) -> nn.Module:
    return MODELS[name](**kwargs).eval()


if __name__ == "__main__":
    fm.save(make(sys.argv[1]), sys.argv[2])
