# The model zoo's CI subset of torchvision models (test/models/zoo.py; the whole zoo is
# scripts/models.sh): each scripted as its users do, sharded for W=2 with its blocks as units by
# type and the root a unit (AlexNet, which has no blocks, by FSDP1's size policy), and its
# forward run twice on both ranks, bitwise equal to the original run in this process. The
# entries are the registry's `ci` ones for this leg; zoo.py exits non-zero on any that is not
# exact, and FileCheck makes sure they ran.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/zoo.py --subset ci --source torchvision --work %t | FileCheck %s
# CHECK: torchvision/mobilenet_v3_small: EXACT
# CHECK: units 12: root (MobileNetV3), 11 InvertedResidual;
# CHECK: torchvision/resnet18: EXACT
# CHECK: units 9: root (ResNet), 8 BasicBlock; {{.*}}; gathers forward 3;
# A detector (a List[Tensor] of two image sizes; torchvision's op library loaded) and a
# segmentation model:
# CHECK: torchvision/fasterrcnn_mobilenet_v3_large_320_fpn: EXACT
# CHECK: units 16: root (FasterRCNN), 15 InvertedResidual;
# CHECK: torchvision/lraspp_mobilenet_v3_large: EXACT
# CHECK: units 16: root (LRASPP), 15 InvertedResidual;
# CHECK: zoo {{torch2|torch113}} ci: {{[1-9][0-9]*}} exact, 0 cannot work, 0 failed
