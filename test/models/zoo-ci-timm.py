# The model zoo's CI subset of timm models (test/models/zoo.py): the seed scenario,
# `timm.create_model(name, scriptable=True)` + torch.jit.script, then
# `fsdp-opt --fsdp-unit-type=Block --fsdp-unit=. --world-size=2`, and forward_features,
# forward_head (on forward_features' output) and forward called on both ranks, twice, each
# bitwise equal to the original run in this process. A ViT and a ConvNeXt; and a MobileNetV3 as
# timm's --channels-last runs it (model and inputs in channels_last), then `forward` on the
# same images contiguous (with row-major gathered weights it differed in 1933 of 2000 elements).
#
# REQUIRES: torch2
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/zoo.py --subset ci --source timm --work %t | FileCheck %s
# CHECK: timm/vit_tiny_patch16_224: EXACT
# CHECK: units 13: root (VisionTransformer), 12 Block; {{.*}}; gathers forward_features {{[0-9]+}}, forward_head {{[0-9]+}}, forward_head(pre_logits=True) {{[0-9]+}}, forward {{[0-9]+}};
# CHECK: timm/convnext_atto: EXACT
# CHECK: units 13: root (ConvNeXt), 12 ConvNeXtBlock;
# CHECK: timm/mobilenetv3_small_050 (channels_last): EXACT
# CHECK: units 12: root (MobileNetV3), 10 InvertedResidual, 1 DepthwiseSeparableConv; {{.*}}; gathers forward_features {{[0-9]+}}, forward_head {{[0-9]+}}, forward {{[0-9]+}}, forward(contiguous input) {{[0-9]+}};
# CHECK: zoo torch2 ci: 3 exact, 0 cannot work, 0 failed
