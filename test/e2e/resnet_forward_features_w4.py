# resnet_forward_features.py's registered case (backbone._forward_impl registered, bitwise
# on every rank, shard layout, gather counts) for W=4, in a lit test of its own.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/resnet_forward_features.py --worlds 4 %t
