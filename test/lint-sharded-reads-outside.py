# lint-sharded-reads: a parent that reads a unit's parameter directly (not through a forward
# method of the unit) reads it sharded; the warning says "from outside the unit", names the
# reading method and module, the parameter and the unit (one warning per unit and reading
# method). Reads inside a unit's forward, and reads of non-unit parameters, are fine.
#
# RUN: %python %s %t.pt
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=child --fsdp-unit=helper.inner \
# RUN:   | FileCheck %s --implicit-check-not=warning: --implicit-check-not=error:
# CHECK:      [stderr]
# CHECK-NEXT: warning: method 'forward' of '.' reads parameter 'child.fc.bias' of unit 'child' from outside the unit, where it is sharded; call a forward method of 'child' instead, or do not make it a unit
# CHECK-NEXT: warning: method 'peek' of 'helper' reads parameter 'helper.inner.fc.weight' of unit 'helper.inner' from outside the unit, where it is sharded; call a forward method of 'helper.inner' instead, or do not make it a unit
# CHECK-NEXT: [exit 0]
#
# With `helper` the unit instead, peek reads helper's own group from a method that is not a
# forward method of helper: the other kind of warning, with the flag that fixes it.
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=helper \
# RUN:   | FileCheck %s --check-prefix=METHOD --implicit-check-not=warning:
# METHOD:      [stderr]
# METHOD-NEXT: warning: method 'peek' of unit 'helper' is not a forward method, but reads parameter 'helper.inner.fc.weight' (in method 'peek' of 'helper') while eager FSDP keeps it sharded; register it with --forward-method=helper:peek
# METHOD-NEXT: [exit 0]
#
# Registered, nothing is reported.
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=helper --forward-method=helper:peek \
# RUN:   | FileCheck %s --check-prefix=CLEAN --match-full-lines
# CLEAN:      [stdout]
# CLEAN-NEXT: [stderr]
# CLEAN-NEXT: [exit 0]

import sys

import torch
import torch.nn as nn

import lit_helpers as lh


class Child(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


class Helper(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Child()

    def forward(self, x):
        return self.inner(x)

    def peek(self) -> torch.Tensor:
        return self.inner.fc.weight.sum()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.child = Child()
        self.helper = Helper()
        self.plain = nn.Linear(4, 4)

    def forward(self, x):
        y = self.child(x) + self.child.fc.bias
        return self.helper(self.plain(y)) + self.helper.peek()


lh.save(Model(), sys.argv[1])
