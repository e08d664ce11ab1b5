# Training through HSDP rank files (--shard-group-size; docs/multi-node.md "Training"):
# train_exact.py's checks (first-step gradients and parameters after 5 steps against the
# original model trained in one process) at W = 4 as 2 x 2, 4 x 1 and 1 x 4 (replicas x shard
# group size). Each unit gradient is reduce-scattered within the shard group (added in rank
# order there), the groups' sums are added in group order across the replica group, and the
# total divided by W: the reference adds in that order, so every rank is bitwise equal to it, and
# the R replicas of a shard stay equal. Replicated parameters are averaged over all W ranks.
# With AdamW (moments of the shard's shape) and SGD with momentum, and gradient accumulation.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/train_exact.py --model gpt --worlds 4 --shard-group-size 2 --optim adamw %t
# RUN: %python %S/train_exact.py --model gpt --worlds 4 --shard-group-size 2 --optim sgd --mode accumulate %t
# RUN: %python %S/train_exact.py --model gpt --worlds 4 --shard-group-size 1 --optim sgd %t
# RUN: %python %S/train_exact.py --model gpt --worlds 4 --shard-group-size 4 --optim adamw %t
