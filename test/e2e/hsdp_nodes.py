# hsdp.py's inference checks at W = 8 as 2 simulated nodes of 4 (LOCAL_RANK, LOCAL_WORLD_SIZE=4
# and GROUP_RANK as torchrun sets them on two nodes), HSDP with S = 4: each shard group is a node
# (docs/multi-node.md, "Tested here"), in a lit test of its own.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/hsdp.py --cases 2x4-nodes %t
