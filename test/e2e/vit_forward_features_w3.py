# vit_forward_features.py for W=3 (the encoder-layer units, bitwise on every rank, shard
# layout, gather counts), in a lit test of its own.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/vit_forward_features.py --worlds 3 %t
