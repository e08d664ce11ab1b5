# --verify-each runs verify-fsdp after every pass. On a good input it changes nothing (same IR,
# exit 0); on a bad one it stops at the first pass after which the invariants fail and says
# which pass that was.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t/good.pt good
# RUN: %python %s %t/bad.pt bad
#
# Good: `child` called through its forward only. Same IR with and without the flag.
# RUN: fsdp-opt %t/good.pt --fsdp-unit=child --world-size=2 --print-ir > %t/plain.ir
# RUN: fsdp-opt %t/good.pt --fsdp-unit=child --world-size=2 --print-ir --verify-each > %t/each.ir
# RUN: %python -m lit_helpers diff %t/plain.ir %t/each.ir
# RUN: FileCheck %s --check-prefix=GOOD < %t/each.ir
# GOOD-LABEL:   :: forward
# GOOD-COUNT-1: fsdp::all_gather
#
# Bad: the parent's `peek` also reads child.fc.bias directly. At world size 2 the reads are rejected
# as soon as the rewrite is complete, i.e. right after wrap-entry-methods (before it, the
# verifier checks only pairing and DCE survival: the root's entry gathers do not exist yet).
# RUN: %python -m lit_helpers run fsdp-opt %t/bad.pt --fsdp-unit=child --world-size=2 --verify-each --method=peek \
# RUN:   | FileCheck %s --check-prefix=BAD --implicit-check-not=error:
# BAD:      [stderr]
# BAD:      error: parameter 'child.fc.bias' of unit 'child' is read while sharded in method 'peek' of '.' (entry method 'peek')
# BAD-NEXT: note: verification failed after pass 'wrap-entry-methods'
# BAD-NEXT: [exit 1]
#
# --verify-each with --print-ir-after-all: the IR after each pass up to the one whose
# verification failed, and none after it.
# RUN: %python -m lit_helpers run fsdp-opt %t/bad.pt --fsdp-unit=child --world-size=2 --verify-each --print-ir-after-all --method=peek \
# RUN:   | FileCheck %s --check-prefix=AFTER
# AFTER:     // *** IR after specialize-unit-types ***
# AFTER:     // *** IR after lint-sharded-reads ***
# AFTER:     // *** IR after check-parameter-aliases ***
# AFTER:     // *** IR after insert-unit-gathers ***
# AFTER:     // *** IR after wrap-entry-methods ***
# AFTER-NOT: // *** IR after
# AFTER:     note: verification failed after pass 'wrap-entry-methods'

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


class Good(nn.Module):
    def __init__(self):
        super().__init__()
        self.child = Child()

    def forward(self, x):
        return self.child(x)


class Bad(Good):
    @torch.jit.export
    def peek(self, x):
        return self.child(x) + self.child.fc.bias


lh.save(Good() if sys.argv[2] == "good" else Bad(), sys.argv[1])
