# expand-parameter-lists: a list attribute holding parameters is read as those parameters.
# A scripted nn.GRU passes `self._flat_weights` (its four weights, the same tensors) to aten::gru;
# after the pass the call gets a list built from the four parameter reads and the attribute is
# empty, so insert-unit-gathers sees the reads and the rank files hold no whole weight.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t
# RUN: fsdp-opt %t/gru.pt --fsdp-unit=gru --print-ir --method=forward__0 --passes=expand-parameter-lists \
# RUN:   | FileCheck %s --check-prefix=GRU --implicit-check-not='name="_flat_weights"'
# GRU-LABEL: // gru : __torch__.torch.nn.modules.rnn.GRU :: forward__0
# GRU:       %[[WI:.*]] : Tensor = prim::GetAttr[name="weight_ih_l0"](%[[SELF:.*]])
# GRU-NEXT:  %[[WH:.*]] : Tensor = prim::GetAttr[name="weight_hh_l0"](%[[SELF]])
# GRU-NEXT:  %[[BI:.*]] : Tensor = prim::GetAttr[name="bias_ih_l0"](%[[SELF]])
# GRU-NEXT:  %[[BH:.*]] : Tensor = prim::GetAttr[name="bias_hh_l0"](%[[SELF]])
# GRU-NEXT:  %[[LIST:.*]] : Tensor[] = prim::ListConstruct(%[[WI]], %[[WH]], %[[BI]], %[[BH]])
# GRU:       aten::gru(%{{[^,]+}}, %{{[^,]+}}, %[[LIST]],
#
# One remark per list; a second run finds the list empty and changes nothing (idempotent).
# RUN: fsdp-opt %t/gru.pt --fsdp-unit=gru --remarks --passes=expand-parameter-lists,expand-parameter-lists 2>&1 \
# RUN:   | FileCheck %s --check-prefix=ONCE --implicit-check-not=expand-parameter-lists
# ONCE: remark: [expand-parameter-lists] list 'gru._flat_weights' is read as its 4 parameters (2 read(s), 1 instance(s)); the attribute is emptied
#
# The default pipeline then gathers the GRU's weights around its call, and the rank files keep
# an empty list.
# RUN: fsdp-opt %t/gru.pt --fsdp-unit=gru --world-size=2 -o %t/gru.w2
# RUN: %python %s --flat-weights %t/gru.w2/rank0.pt | FileCheck %s --check-prefix=EMPTY
# EMPTY: gru._flat_weights: 0 tensors
#
# A list written by hand and read by a `for` loop and by indexing: each element taken out of it
# is the parameter either way.
# RUN: fsdp-opt %t/chain.pt --fsdp-unit=. --print-ir --method=forward --passes=expand-parameter-lists \
# RUN:   --remarks 2>&1 | FileCheck %s --check-prefix=CHAIN --implicit-check-not='name="ws"'
# CHAIN: remark: [expand-parameter-lists] list 'ws' is read as its 2 parameters (2 read(s), 1 instance(s)); the attribute is emptied
# CHAIN: prim::ListConstruct(%{{.*}}, %{{.*}})
# CHAIN: aten::__getitem__
#
# Lists the pass leaves as they are, each with a remark saying why; a list left holding a unit's
# parameter is then an error from parameter-groups: exit 1, nothing written, input untouched.
# RUN: %python -m lit_helpers sha256 %t/appends.pt > %t/before.txt
# RUN: %python -m lit_helpers run fsdp-opt %t/appends.pt --fsdp-unit=. --world-size=2 --remarks -o %t/out \
# RUN:   | FileCheck %s --check-prefix=APPENDS --implicit-check-not=error: --match-full-lines
# APPENDS:      [stderr]
# APPENDS-NEXT: remark: [expand-parameter-lists] list 'ws' left as it is: in __torch__.Appends::forward, aten::append writes it
# APPENDS-NEXT: remark: [find-units] unit '.' (__torch__.Appends), forward methods: forward
# APPENDS-NEXT: error: attribute 'ws' holds parameter 'a' outside its parameter slot; every rank file would keep it whole{{.*}}
# APPENDS-NEXT: [exit 1]
# RUN: %python -m lit_helpers tree %t/out | FileCheck %s --check-prefix=NOTHING
# NOTHING: out: missing
# RUN: %python -m lit_helpers sha256 %t/appends.pt > %t/after.txt
# RUN: %python -m lit_helpers diff %t/before.txt %t/after.txt
#
# RUN: %python -m lit_helpers run fsdp-opt %t/partial.pt --fsdp-unit=. --world-size=2 --remarks -o %t/out \
# RUN:   | FileCheck %s --check-prefix=PARTIAL --implicit-check-not=error:
# PARTIAL: remark: [expand-parameter-lists] list 'ws' left as it is: an element of 'ws' is not a parameter of that module or of a module below it
# PARTIAL: error: attribute 'ws' holds parameter 'a' outside its parameter slot
# PARTIAL: [exit 1]
#
# RUN: %python -m lit_helpers run fsdp-opt %t/returns.pt --fsdp-unit=. --world-size=2 --remarks -o %t/out \
# RUN:   | FileCheck %s --check-prefix=RETURNS --implicit-check-not=error:
# RUN: %python -m lit_helpers run fsdp-opt %t/assigns.pt --fsdp-unit=. --world-size=2 --remarks -o %t/out \
# RUN:   | FileCheck %s --check-prefix=ASSIGNS --implicit-check-not=error:
# RETURNS: remark: [expand-parameter-lists] list 'ws' left as it is: in __torch__.Returns::weights, it is used by prim::Return
# RETURNS: error: attribute 'ws' holds parameter 'a' outside its parameter slot
# ASSIGNS: remark: [expand-parameter-lists] list 'ws' left as it is: __torch__.Assigns::reset assigns it
# ASSIGNS: error: attribute 'ws' holds parameter 'a' outside its parameter slot
#
# A tuple of parameters is not expanded (only `List[Tensor]` attributes are): refused the same way.
# RUN: %python -m lit_helpers run fsdp-opt %t/pair.pt --fsdp-unit=. --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=TUPLE --implicit-check-not=error:
# TUPLE: error: attribute 'pair' holds parameter 'a' outside its parameter slot
# TUPLE: note: attribute 'pair' holds parameter 'b' outside its parameter slot
# TUPLE: [exit 1]
#
# A list holding parameters that no unit shards (`a`, when only `head` is a unit) stays as it is,
# and the model shards.
# RUN: fsdp-opt %t/appends.pt --fsdp-unit=head --world-size=2 -o %t/head.w2

import os
import sys
from typing import List, Tuple

import torch
import torch.nn as nn

import lit_helpers as lh


class WithGru(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 4, batch_first=True)

    def forward(self, x):
        return self.gru(x)[0]


class Chain(nn.Module):
    ws: List[torch.Tensor]

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(4, 4))
        self.b = nn.Parameter(torch.randn(4, 4))
        self.ws = [self.a, self.b]

    def forward(self, x):
        for w in self.ws:
            x = x @ w
        return x + self.ws[0].sum()


class OneParameterList(nn.Module):
    """`ws` holds parameter `a`; the subclasses differ in what their methods do with the list."""
    ws: List[torch.Tensor]

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(4, 4))
        self.ws = [self.a]


class Appends(OneParameterList):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        self.ws.append(x)
        return self.head(x @ self.ws[0])


class Partial(OneParameterList):
    def __init__(self):
        super().__init__()
        self.ws = [self.a, torch.ones(4, 4)]

    def forward(self, x):
        return x @ self.ws[0] @ self.ws[1]


class Returns(OneParameterList):
    def forward(self, x):
        return x @ self.weights()[0]

    @torch.jit.export
    def weights(self) -> List[torch.Tensor]:
        return self.ws


class Assigns(OneParameterList):
    def forward(self, x):
        return x @ self.ws[0]

    @torch.jit.export
    def reset(self):
        self.ws = [self.a]


class Pair(nn.Module):
    pair: Tuple[torch.Tensor, torch.Tensor]

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(4, 4))
        self.b = nn.Parameter(torch.randn(4, 4))
        self.pair = (self.a, self.b)

    def forward(self, x):
        return x @ self.pair[0] @ self.pair[1]


def main():
    if sys.argv[1] == "--flat-weights":
        lh.load_runtime()
        module = torch.jit.load(sys.argv[2])
        print("gru._flat_weights: %d tensors" % len(module.gru._flat_weights))
        return
    out = sys.argv[1]
    for name, model in [("gru", WithGru()), ("chain", Chain()), ("appends", Appends()), ("partial", Partial()),
                        ("returns", Returns()), ("assigns", Assigns()), ("pair", Pair())]:
        lh.save(model, os.path.join(out, name + ".pt"))


main()
