# hsdp.py's inference checks (rank files, generate and forward bitwise, the bytes each collective
# kind moves) at W = 4 as 1 x 4 (S = W, plain FSDP spelled with the flag) and 4 x 1 (S = 1, every
# rank holds everything), in a lit test of its own.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/hsdp.py --cases 1x4,4x1 %t
