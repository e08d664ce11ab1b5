# The collective fingerprint error as a user sees it through fsdp-run (SPEC section 11): two
# hand-made rank files whose forward gathers unit 'a' on rank 0 and unit 'b' on rank 1 (same
# shapes, so the same sizes). fsdp-run exits 3 with ONE error line naming both sides, reported as
# the cause (kind divergence, a rank's own error), not as a lost peer.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t
# RUN: not fsdp-run %t/files --inputs=%t/in.pt --timeout=60 > %t.out 2>&1
# RUN: FileCheck %s < %t.out
#
# CHECK-NOT: peer may have died
# CHECK: error: rank 0: fsdp::all_gather(unit 'a'): ranks issue different collectives: rank 0 gathers unit 'a' (#1: 2 parameters, 2 KiB per rank, float32) while rank 1 gathers unit 'b' (#1: 2 parameters, 2 KiB per rank, float32); every rank must issue the same collectives in the same order (a branch or loop whose collectives depend on each rank's data needs the rank-uniform-control-flow pass; every rank must call the same entry methods: README, "Ranks that take different paths")
# CHECK-NOT: error:

import json
import os
import sys

import torch


class Linear(torch.nn.Module):
    def __init__(self, weight, bias):
        super().__init__()
        self.weight = torch.nn.Parameter(weight)
        self.bias = torch.nn.Parameter(bias)

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight, self.bias)


class Diverging(torch.nn.Module):
    """What a rewrite without rank-uniform-control-flow would leave: which unit is gathered
    depends on something that differs between ranks (here the rank itself)."""

    _fsdp_rank: int
    _fsdp_world_size: int
    _fsdp_manifest_sha256: str

    def __init__(self, shards, rank: int, world: int):
        super().__init__()
        self.a = Linear(shards[0], shards[1])
        self.b = Linear(shards[2], shards[3])
        self._fsdp_rank = rank
        self._fsdp_world_size = world
        self._fsdp_manifest_sha256 = "hand-made"

    def forward(self, x):
        torch.ops.fsdp.check_rank(self._fsdp_rank, self._fsdp_world_size, self._fsdp_manifest_sha256)
        if self._fsdp_rank == 0:
            f = torch.ops.fsdp.all_gather([self.a.weight, self.a.bias], [16, 16], "a")
            y = self.a(x)
            torch.ops.fsdp.reshard(f, "a")
        else:
            f = torch.ops.fsdp.all_gather([self.b.weight, self.b.bias], [16, 16], "b")
            y = self.b(x)
            torch.ops.fsdp.reshard(f, "b")
        return y


def main(out):
    torch.ops.load_library(os.environ["FSDP_OPT_RUNTIME_LIB"])  # lit sets it
    world = 2
    g = torch.Generator().manual_seed(0)
    # [16, 64] + [16] float32: 8 rows per rank, 2048 + 32 bytes packed: 2 KiB per rank
    full = [torch.randn(16, 64, generator=g), torch.randn(16, generator=g)] * 2
    files = os.path.join(out, "files")
    os.makedirs(files)
    for r in range(world):
        shards = [f[r * 8:(r + 1) * 8].clone() for f in full]
        torch.jit.script(Diverging(shards, r, world)).save(os.path.join(files, "rank%d.pt" % r))
    with open(os.path.join(files, "manifest.json"), "w") as f:
        json.dump({"format_version": 1, "world_size": world}, f)
    torch.save((torch.randn(2, 64, generator=g),), os.path.join(out, "in.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
