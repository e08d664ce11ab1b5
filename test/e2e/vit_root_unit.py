# vit_forward_features.py with the root a unit too: units `.` and the encoder layers, so
# vit's own parameters (conv_proj.weight/bias, class_token, pos_embedding, ln, heads) are in
# the root's group, gathered by the entry wrapper. Bitwise on every rank for W=1 and W=2
# (vit_root_unit_w3.py, _w4.py: W=3, W=4). Also: `vit` a unit with _process_input registered
# must still be refused with one clear error, because the wrapper reads vit.class_token from
# outside the unit.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/vit_forward_features.py --root-unit --refused --worlds 1,2 %t
