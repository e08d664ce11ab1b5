# check-hidden-unit-calls: a module whose subtree holds a unit's parameters, handed to
# torch.jit.fork or called through a module interface, is refused with one error naming the
# module, the parameter and the way it is called: exit 1, nothing written. No gather can be placed
# around such a call, and the call would run on shards: an embedding unit looks up the wrong rows
# on rank 1 without any error. At --world-size=1 the same findings are warnings.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t
#
# An embedding unit and a block, each forked.
# RUN: %python -m lit_helpers run fsdp-opt %t/fork.pt --fsdp-unit=. --fsdp-unit=emb --fsdp-unit=block --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=FORK --implicit-check-not=error: --implicit-check-not=note:
# FORK: error: method 'forward' of '.' hands module 'emb' to prim::fork (torch.jit.fork or an awaitable), and it holds parameter 'emb.weight' of unit 'emb'; the forked call runs apart from its caller, where fsdp-opt cannot gather around it, so it would run on shards: call the module directly
# FORK: note: method 'forward' of '.' hands module 'block' to prim::fork (torch.jit.fork or an awaitable), and it holds parameter 'block.fc.weight' of unit 'block'
# FORK: [exit 1]
# RUN: %python -m lit_helpers tree %t/out | FileCheck %s --check-prefix=NOTHING
# NOTHING: out: missing
#
# A forked method of the root, which calls the units: the root itself is handed over.
# RUN: %python -m lit_helpers run fsdp-opt %t/fork_self.pt --fsdp-unit=emb --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=SELF --implicit-check-not=error: --implicit-check-not=note:
# SELF: error: method 'forward' of '.' hands module '.' to prim::fork (torch.jit.fork or an awaitable), and it holds parameter 'emb.weight' of unit 'emb'
# SELF: [exit 1]
#
# A unit held through a module interface.
# RUN: %python -m lit_helpers run fsdp-opt %t/interface.pt --fsdp-unit=. --fsdp-unit=emb --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=INTERFACE --implicit-check-not=error: --implicit-check-not=note:
# INTERFACE: error: method 'forward' of '.' calls 'forward' through the module interface __torch__.{{.*}}Lookup (an attribute of interface type), which may reach module 'emb', and it holds parameter 'emb.weight' of unit 'emb'; fsdp-opt cannot place a gather around a call whose module it cannot name, so the call would run on shards: call the module through its own class
# INTERFACE: [exit 1]
#
# A ModuleList element handed to a helper method as an interface-typed argument (the call in
# `forward` on an element chosen by an argument is lower-indexed-module-calls' to rewrite, and
# is no error).
# RUN: %python -m lit_helpers run fsdp-opt %t/indexed.pt --fsdp-unit-type=Embedding --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=INDEXED --implicit-check-not=error: --implicit-check-not=note:
# INDEXED: error: method 'look_up' of '.' calls 'forward' through the module interface __torch__.{{.*}}Lookup (a value of interface type), which may reach module 'tables.0', and it holds parameter 'tables.0.weight' of unit 'tables.0'; fsdp-opt cannot place a gather around a call whose module it cannot name, so the call would run on shards: call the module through its own class
# INDEXED: [exit 1]
# RUN: %python -m lit_helpers tree %t/out | FileCheck %s --check-prefix=NOTHING
#
# At world size 1: warnings, and the file is written.
# RUN: fsdp-opt %t/fork.pt --fsdp-unit=emb -o %t/one.pt 2>&1 | FileCheck %s --check-prefix=ONE --implicit-check-not=error:
# ONE: warning: method 'forward' of '.' hands module 'emb' to prim::fork {{.*}} (harmless at --world-size=1, where nothing is sharded)
# RUN: %python -m lit_helpers tree %t/one.pt | FileCheck %s --check-prefix=WRITTEN
# WRITTEN: one.pt {{[0-9]+}}
#
# Forking a function of tensors that the caller reads is no hidden call: the reads are the
# caller's, gathered there. Sharded, it runs as the original does, bit for bit.
# RUN: fsdp-opt %t/fork_tensors.pt --fsdp-unit=. --fsdp-unit=emb --world-size=2 -o %t/tensors
# RUN: fsdp-run %t/tensors --inputs %t/ids.pt --check %t/fork_tensors.pt | FileCheck %s --check-prefix=TENSORS
# TENSORS: rank 0: outputs bitwise identical to {{.*}}fork_tensors.pt
# TENSORS: rank 1: outputs bitwise identical to {{.*}}fork_tensors.pt

import os
import sys

import torch
import torch.nn as nn

out = sys.argv[1]
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Fork(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.block = Block()
        self.head = nn.Linear(8, 4)

    def forward(self, ids):
        looked_up = torch.jit.fork(self.emb, ids)
        x = torch.jit.wait(looked_up)
        y = torch.jit.wait(torch.jit.fork(self.block, x))
        return self.head(y)


class ForkSelf(Fork):
    def forward(self, ids):
        return torch.jit.wait(torch.jit.fork(self.body, ids))

    @torch.jit.export
    def body(self, ids):
        return self.head(self.block(self.emb(ids)))


class ForkTensors(Fork):
    def forward(self, ids):
        x = self.emb(ids)
        y = torch.jit.wait(torch.jit.fork(torch.nn.functional.linear, x, self.head.weight, self.head.bias))
        return y + self.block(x).sum()


@torch.jit.interface
class Lookup(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        pass


class Interface(nn.Module):
    emb: Lookup

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, ids):
        return self.head(self.emb.forward(ids))


class Indexed(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList([nn.Embedding(10, 8) for _ in range(3)])

    def forward(self, ids, table: int):
        chosen: Lookup = self.tables[table]
        return chosen.forward(ids) + self.look_up(self.tables[0], ids)

    @torch.jit.export
    def look_up(self, table: Lookup, ids):
        return table.forward(ids)


for name, cls in [("fork", Fork), ("fork_self", ForkSelf), ("fork_tensors", ForkTensors), ("interface", Interface),
                  ("indexed", Indexed)]:
    torch.jit.script(cls()).save(os.path.join(out, name + ".pt"))
torch.save((torch.tensor([[1, 7, 3, 9]]),), os.path.join(out, "ids.pt"))
