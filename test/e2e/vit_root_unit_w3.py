# vit_root_unit.py (root and encoder layers as units, bitwise on every rank) for W=3.
#
# Expected to fail until fsdp-opt handles Optional[Tensor] parameters (the Conv2d bias of
# vit.conv_proj in the root's group): see vit_root_unit.py and conv_bias_unit.py.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/vit_forward_features.py --root-unit --worlds 3 %t
