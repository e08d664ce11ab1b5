"""A root unit whose methods read its own group outside any registered forward method, as
timm's models do: `_embed` is called from `forward` only, `forward_features` only from outside,
`forward_head` from both; `describe` reads no parameter. Used by wrap-entry-methods-root-readers.py
and e2e/root_methods.py.

    %python -m root_methods_model OUT.pt
"""

import sys

import torch
import torch.nn as nn

import fsdp_models as fm


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return torch.relu(self.fc(x))


class RootReaders(nn.Module):
    def __init__(self, d: int = 6, classes: int = 5, seed: int = 0):
        super().__init__()
        with fm.seeded(seed):
            self.pos = nn.Parameter(torch.randn(d))
            self.block = Block(d)
            self.head = nn.Linear(d, classes)

    def _embed(self, x):
        return x + self.pos

    @torch.jit.export
    def forward_features(self, x):
        return self.block(self._embed(x))

    @torch.jit.export
    def forward_head(self, x):
        return self.head(x)

    def forward(self, x):
        return self.forward_head(self.block(self._embed(x)))

    @torch.jit.export
    def describe(self) -> str:
        return "root readers"


def example_input(batch: int = 3, d: int = 6, seed: int = 1):
    with fm.seeded(seed):
        return torch.randn(batch, d)


if __name__ == "__main__":
    fm.save(RootReaders().eval(), sys.argv[1])
