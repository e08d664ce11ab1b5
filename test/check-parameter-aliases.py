# check-parameter-aliases: what a model does with a unit's parameter that sharding would drop or
# cut short is refused, with one error naming the method, the parameter and the op: exit 1,
# nothing written, the input untouched. At --world-size=1 the same findings are warnings.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t
#
# An in-place write under torch.no_grad(): the gathered copy would take it and the reshard drop it.
# RUN: %python -m lit_helpers sha256 %t/scales.pt > %t/before.txt
# RUN: %python -m lit_helpers run fsdp-opt %t/scales.pt --fsdp-unit=. --fsdp-unit=fc --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=SCALES --implicit-check-not=error: --implicit-check-not=note:
# SCALES: error: method 'forward' of '.' writes parameter 'fc.weight' of unit 'fc' in place (aten::mul_); the write would land on the gathered copy, which the reshard drops, so later calls and training would differ from the original; write to a copy, or keep the parameter out of every unit
# SCALES: [exit 1]
# RUN: %python -m lit_helpers tree %t/out | FileCheck %s --check-prefix=NOTHING
# NOTHING: out: missing
# RUN: %python -m lit_helpers sha256 %t/scales.pt > %t/after.txt
# RUN: %python -m lit_helpers diff %t/before.txt %t/after.txt
#
# Through `.data` on each element of a list of parameters (an element aliases what the list holds),
# in a helper method: one error and one note, one per parameter.
# RUN: %python -m lit_helpers run fsdp-opt %t/zeroes.pt --fsdp-unit=. --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=ZEROES --implicit-check-not=error: --implicit-check-not=note:
# ZEROES: error: method 'reset' of '.' writes parameter 'fc.bias' of unit '.' in place (aten::zero_)
# ZEROES: note: method 'reset' of '.' writes parameter 'fc.weight' of unit '.' in place (aten::zero_)
# ZEROES: [exit 1]
#
# A traced nn.Embedding with max_norm renormalises its weight in place (scripting drops that call).
# RUN: %python -m lit_helpers run fsdp-opt %t/max_norm.pt --fsdp-unit=. --fsdp-unit=emb --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=RENORM --implicit-check-not=error:
# RENORM: error: method 'forward' of 'emb' writes parameter 'emb.weight' of unit 'emb' in place (aten::embedding_renorm_) (nn.Embedding's max_norm renormalises its weight in place)
# RENORM: [exit 1]
#
# A view of a parameter returned by an entry method: the caller would hold it past the reshard.
# RUN: %python -m lit_helpers run fsdp-opt %t/returns_view.pt --fsdp-unit=. --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=ENTRY --implicit-check-not=error: --implicit-check-not=note:
# ENTRY: error: entry method 'forward' returns a value that may alias parameter 'fc.weight' of unit '.'; after the call the parameter is sharded again, so the caller would hold its shard or freed memory; return a copy (.clone())
# ENTRY: [exit 1]
#
# A unit's forward returning a slice of its own parameter to its caller, which uses it after the
# unit's reshard.
# RUN: %python -m lit_helpers run fsdp-opt %t/positions.pt --fsdp-unit=. --fsdp-unit=pos --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=UNIT --implicit-check-not=error:
# UNIT: error: method 'forward' of unit 'pos' returns a value that may alias its parameter 'pos.table' to method 'forward' of '.', where it outlives the unit's gather around the call; return a copy (.clone())
# UNIT: [exit 1]
#
# Stored in module state: assigned to an attribute, appended to a list attribute.
# RUN: %python -m lit_helpers run fsdp-opt %t/keeps.pt --fsdp-unit=. --fsdp-unit=fc --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --check-prefix=KEEPS --implicit-check-not=error: --implicit-check-not=note:
# KEEPS: error: method 'forward' of '.' stores a value that may alias parameter 'fc.weight' of unit 'fc' in attribute 'last', where it outlives the gather (after it the parameter is sharded again); store a copy (.clone())
# KEEPS: note: method 'forward' of '.' stores a value that may alias parameter 'fc.bias' of unit 'fc' in attribute 'history'
# KEEPS: [exit 1]
#
# At --world-size=1 nothing is sharded: a warning, and the output is written.
# RUN: fsdp-opt %t/scales.pt --fsdp-unit=. --fsdp-unit=fc -o %t/w1.pt 2>&1 | FileCheck %s --check-prefix=W1
# W1: warning: method 'forward' of '.' writes parameter 'fc.weight' of unit 'fc' in place (aten::mul_){{.*}}(harmless at --world-size=1, where nothing is sharded)
# RUN: %python -m lit_helpers tree %t/w1.pt | FileCheck %s --check-prefix=W1FILE
# W1FILE: w1.pt {{[0-9]+}} {{[0-9a-f]+}}
#
# What is not refused: in-place ops on copies and on activations, a write to the result of
# torch.cat over a list holding a parameter, a returned copy, and writes to parameters no unit
# shards (`scale` of Counts, when only `fc` is a unit).
# RUN: %python -m lit_helpers run fsdp-opt %t/copies.pt --fsdp-unit=. --fsdp-unit=fc --world-size=2 -o %t/copies \
# RUN:   | FileCheck %s --check-prefix=FINE --implicit-check-not=check-parameter-aliases
# RUN: %python -m lit_helpers run fsdp-opt %t/counts.pt --fsdp-unit=fc --world-size=2 -o %t/outside \
# RUN:   | FileCheck %s --check-prefix=FINE --implicit-check-not=check-parameter-aliases
# FINE: [exit 0]

import os
import sys

import torch

import alias_models as am
import lit_helpers as lh


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    for name, model in [("scales", am.Scales()), ("counts", am.Counts()), ("zeroes", am.Zeroes()),
                        ("returns_view", am.ReturnsView()), ("positions", am.Positions()), ("keeps", am.Keeps()),
                        ("copies", am.Copies())]:
        lh.save(model, os.path.join(out, name + ".pt"))
    torch.jit.trace(am.MaxNorm().eval(), torch.tensor([[1, 2, 3]])).save(os.path.join(out, "max_norm.pt"))


main()
