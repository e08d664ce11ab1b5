"""Models that do with a unit's parameters what sharding would drop or cut short (check-parameter-aliases
refuses them), and models that only look alike (it lets them through). Used by
test/check-parameter-aliases.py and test/e2e/parameter_writes.py."""

from typing import List

import torch
import torch.nn as nn


class Scales(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            self.fc.weight.mul_(0.5)
        return self.fc(x)


class Counts(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x):
        with torch.no_grad():
            self.scale.add_(1.0)
        return self.fc(x) * self.scale


class Zeroes(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    @torch.jit.export
    def reset(self):
        for w in [self.fc.weight, self.fc.bias]:
            w.data.zero_()

    def forward(self, x):
        self.reset()
        return self.fc(x)


class MaxNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 4, max_norm=1.0)
        self.fc = nn.Linear(4, 4)

    def forward(self, ids):
        return self.fc(self.emb(ids))


class ReturnsView(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x), self.fc.weight.t()


class Table(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 4))

    def forward(self, n: int):
        return self.table[:n]


class Positions(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = Table()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x + self.pos(x.size(0)))


class Keeps(nn.Module):
    history: List[torch.Tensor]

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.last = torch.zeros(4, 4)
        self.history = []

    def forward(self, x):
        self.last = self.fc.weight.detach()
        self.history.append(self.fc.bias)
        return self.fc(x)


class Copies(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        w = self.fc.weight.clone()
        w.mul_(2.0)
        y = self.fc(x)
        y.add_(1.0)
        y.relu_()
        both = torch.cat([w.flatten(), [self.fc.weight, self.fc.bias][0].flatten()])
        both.mul_(3.0)
        return y, self.fc.weight.t().clone(), both
