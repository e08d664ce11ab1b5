# The model zoo's CI subset of timm models (test/models/zoo.py): the seed scenario,
# `timm.create_model(name, scriptable=True)` + torch.jit.script, then
# `fsdp-opt --fsdp-unit-type=Block --fsdp-unit=. --world-size=2`, and forward_features,
# forward_head (on forward_features' output) and forward called on both ranks, twice, each
# bitwise equal to the original run in this process. A ViT and a ConvNeXt.
#
# REQUIRES: torch2
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/zoo.py --subset ci --source timm --work %t | FileCheck %s
# CHECK: timm/vit_tiny_patch16_224: EXACT
# CHECK: units 13: root (VisionTransformer), 12 Block; {{.*}}; gathers forward_features {{[0-9]+}}, forward_head {{[0-9]+}}, forward_head(pre_logits=True) {{[0-9]+}}, forward {{[0-9]+}};
# CHECK: timm/convnext_atto: EXACT
# CHECK: units 13: root (ConvNeXt), 12 ConvNeXtBlock;
# CHECK: zoo torch2 ci: 2 exact, 0 cannot work, 0 failed
