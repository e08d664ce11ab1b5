# --world-size=1 (the default) with -o FILE.pt writes ONE loadable TorchScript file (no
# directory, no manifest beside it): the rewritten methods, every parameter whole, rank 0 of 1.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models two_blocks -o %t/in.pt
# RUN: fsdp-opt %t/in.pt '--fsdp-unit=layers.*' --bucket-bytes=0 -o %t/out.pt
# RUN: %python -m lit_helpers tree %t | FileCheck %s --check-prefix=TREE --match-full-lines
# TREE:      in.pt {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NEXT: out.pt {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NOT:  {{.}}
#
# RUN: %python %s %t/in.pt %t/out.pt | FileCheck %s --match-full-lines
# CHECK: rank 0 of 1, manifest sha256 set: True
# CHECK: parameters whole and equal: True
# CHECK: gathers in forward: 2
#
# Writing over an existing file of that name replaces it (one unit: one gather, where the first
# file's two layers, unbucketed, had two).
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. -o %t/out.pt
# RUN: %python %s %t/in.pt %t/out.pt | FileCheck %s --check-prefix=AGAIN
# AGAIN: gathers in forward: 1

import sys

import torch

import lit_helpers as lh

original = dict(torch.jit.load(sys.argv[1]).named_parameters())
m = lh.load_rewritten(sys.argv[2])
sha = m._fsdp_manifest_sha256
print("rank %d of %d, manifest sha256 set: %s" % (m._fsdp_rank, m._fsdp_world_size, len(sha) == 64))
params = dict(m.named_parameters())
print("parameters whole and equal:", params.keys() == original.keys()
      and all(torch.equal(params[k], original[k]) for k in original))
print("gathers in forward:", lh.count_gathers(m.forward.graph))
