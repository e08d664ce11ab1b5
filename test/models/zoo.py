#!/usr/bin/env python3
"""The model zoo: real torchvision, timm and Hugging Face models through fsdp-opt at W=2.

Every entry is a model as its users build it (random weights, eval mode, a small input), made
into TorchScript the way its library supports (torch.jit.script for torchvision and timm with
scriptable=True, torch.jit.trace for transformers), sharded with the fsdp-opt flags a user
would write, and run on 2 ranks. Every method a user calls must give outputs bitwise equal to
the original archive run in this (the driver) process at the same thread count. The Hugging
Face decoders (GPT-2, Llama, Qwen2) also decode: a `*_generate` entry wraps the same trace in
the scripted greedy `generate` of the README (test/Inputs/decoders.py's HFGenerate), each rank
decodes its own prompt and stops at its own step, and a call must issue the one all-gather
`fsdp-opt --stats` predicts.

    python test/models/zoo.py --list
    python test/models/zoo.py --subset ci [--source timm] [--filter REGEX] [--work DIR]
    python test/models/zoo.py --subset all --build build/t2 --write-docs docs/models.md

Outside lit, --build DIR puts DIR/bin first on PATH and sets FSDP_OPT_RUNTIME_LIB (lit sets
both). One row per selected entry; an entry that cannot work on this leg (it does not script,
its library lacks it) gets a row saying why. Exit status: 0 when every entry expected to work
is exact and every entry expected to fail still fails, 1 otherwise, 2 on bad usage.
--write-docs rewrites only this leg's section of the file, so the torch 2.x and the 1.13 runs
(scripts/models.sh) each keep theirs.
"""

import argparse
import collections
import contextlib
import datetime
import gc
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "Inputs"))

import fsdp_harness as h  # noqa: E402

warnings.filterwarnings("ignore")

WORLD = 2
LEGS = ("torch2", "torch113")


# ---- the registry ---------------------------------------------------------------------------

class Ref:
    """An argument that is the original model's output of an earlier call (forward_head takes
    what forward_features returned). Every rank gets the same tensor, so a difference shows up
    in the method that causes it, not in every method after it."""

    def __init__(self, label):
        self.label = label


class Input:
    """The i-th tensor of the entry's inputs."""

    def __init__(self, index=0):
        self.index = index


class RankInput:
    """Rank r's own row of the i-th tensor of the entry's inputs (a batch of one row per rank):
    ranks whose data differs, each compared with its own run in the driver (SPEC 11)."""

    def __init__(self, index=0):
        self.index = index


NEVER = -1  # an eos id no token equals: the loop runs all its max_new_tokens


class EosAt:
    """The eos argument of a greedy `generate(idx, max_new_tokens, eos)` call (HFGenerate's):
    for rank r, the token that rank's prompt (the call's first argument) makes the original
    generate at step steps[r] (0-based) when nothing stops it, so its loop ends at that step,
    or at an earlier step that made the same token; NEVER where steps[r] is None. Ranks then
    leave the data-dependent loop at different steps."""

    def __init__(self, *steps):
        self.steps = steps

    def token(self, module, method, args, position, rank):
        import torch
        step = self.steps[rank] if rank < len(self.steps) else None
        if step is None:
            return NEVER
        free = list(args)
        free[position] = NEVER
        with torch.no_grad():
            out = getattr(module, method)(*free)
        return int(out[0, args[0].size(1) + step])


class Call:
    """A method call. `loop_iterations(args, output)`, for a method whose loop issues gathers
    per iteration under some schedule, says how many times this call's loop ran, so that the
    gathers `fsdp-opt --stats` predicts can be checked whatever the schedule; `gathers`, when
    set, is the count a call must issue besides matching the prediction (what the planner
    promises: a generate call under the default pipeline and no budget costs one)."""

    def __init__(self, method, args, kwargs=None, label=None, loop_iterations=None, gathers=None):
        self.method = method
        self.args = list(args)
        self.kwargs = dict(kwargs or {})
        self.label = label or method
        self.loop_iterations = loop_iterations
        self.gathers = gathers


class Entry:
    """One model. `make()` returns the nn.Module (called right after torch.manual_seed(0));
    `inputs(gen)` the input tensors; `capture` is "script", "trace" (traced with the inputs
    of seed 0, called with those of seed 1: a trace specialised on its example values would
    show) or "generate" (traced with the first row of the seed-0 inputs, one prompt as users
    trace it, then wrapped in decoders.HFGenerate and scripted; called with rows of the seed-1
    inputs); `calls` the methods a user calls, in order; `flags` fsdp-opt's unit flags; `legs`
    where it runs ("torch2", "torch113") and `ci` on which of them it is in the CI subset;
    `timeout` bounds fsdp-opt and the ranks, each; `expect_fail`, when set, says why the entry
    cannot work and is a substring of the failure it must report; `op_library`, when set, names
    the package whose op library the model calls (fsdp-opt gets --load-op-library, the ranks
    import the package, as its users' programs do)."""

    def __init__(self, name, source, family, make, inputs, input_desc, calls, flags,
                 capture="script", legs=("torch2",), ci=(), note="", expect_fail=None,
                 timeout=600, op_library=None):
        self.name = name
        self.source = source
        self.family = family
        self.make = make
        self.inputs = inputs
        self.input_desc = input_desc
        self.calls = calls
        self.flags = list(flags)
        self.capture = capture
        self.legs = tuple(legs)
        self.ci = tuple(ci)
        self.note = note
        self.expect_fail = expect_fail
        self.timeout = timeout
        self.op_library = op_library


def images(batch, size):
    def make(gen):
        import torch
        return (torch.randn(batch, 3, size, size, generator=gen),)
    return make


def token_ids(batch, length, vocab, mask=False, decoder_length=0):
    """input_ids [, attention_mask with the last two positions of row 0 padded]
    [, decoder_input_ids]: the positional order of the Hugging Face forwards traced here."""
    def make(gen):
        import torch
        ids = torch.randint(0, vocab, (batch, length), generator=gen)
        out = [ids]
        if mask:
            m = torch.ones(batch, length, dtype=torch.long)
            m[0, -2:] = 0
            out.append(m)
        if decoder_length:
            out.append(torch.randint(0, vocab, (batch, decoder_length), generator=gen))
        return tuple(out)
    return make


def unit_types(*names):
    return ["--fsdp-unit-type=%s" % n for n in names] + ["--fsdp-unit=."]


# torchvision: every classification model of torchvision.models.list_models() (0.29 on the
# torch 2.x leg; torchvision 0.14, the 1.13 leg's, has the same 80). Name prefix -> the block
# type(s) a user wraps. AlexNet and VGG have no blocks: FSDP1's size policy instead, with a
# threshold that makes each big Linear and the conv stack units.
TV_BLOCKS = [
    ("alexnet", None), ("vgg", None),
    ("convnext_", ["CNBlock"]),
    ("densenet", ["_DenseLayer"]),
    ("efficientnet_v2_", ["MBConv", "FusedMBConv"]),
    ("efficientnet_b", ["MBConv"]),
    ("googlenet", ["Inception"]),
    ("inception_v3", ["InceptionA", "InceptionB", "InceptionC", "InceptionD", "InceptionE"]),
    ("maxvit_", ["MaxVitLayer"]),
    ("mnasnet", ["_InvertedResidual"]),
    ("mobilenet_", ["InvertedResidual"]),
    ("regnet_", ["ResBottleneckBlock"]),
    ("resnet18", ["BasicBlock"]), ("resnet34", ["BasicBlock"]),
    ("resnet", ["Bottleneck"]), ("resnext", ["Bottleneck"]), ("wide_resnet", ["Bottleneck"]),
    ("shufflenet_", ["InvertedResidual"]),
    ("squeezenet", ["Fire"]),
    ("swin_v2_", ["SwinTransformerBlockV2"]),
    ("swin_", ["SwinTransformerBlock"]),
    ("vit_", ["EncoderBlock"]),
]
TV_MODELS = [
    "alexnet", "convnext_base", "convnext_large", "convnext_small", "convnext_tiny",
    "densenet121", "densenet161", "densenet169", "densenet201",
    "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4",
    "efficientnet_b5", "efficientnet_b6", "efficientnet_b7",
    "efficientnet_v2_l", "efficientnet_v2_m", "efficientnet_v2_s",
    "googlenet", "inception_v3", "maxvit_t",
    "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3",
    "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small",
    "regnet_x_16gf", "regnet_x_1_6gf", "regnet_x_32gf", "regnet_x_3_2gf", "regnet_x_400mf",
    "regnet_x_800mf", "regnet_x_8gf", "regnet_y_128gf", "regnet_y_16gf", "regnet_y_1_6gf",
    "regnet_y_32gf", "regnet_y_3_2gf", "regnet_y_400mf", "regnet_y_800mf", "regnet_y_8gf",
    "resnet101", "resnet152", "resnet18", "resnet34", "resnet50",
    "resnext101_32x8d", "resnext101_64x4d", "resnext50_32x4d",
    "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
    "squeezenet1_0", "squeezenet1_1",
    "swin_b", "swin_s", "swin_t", "swin_v2_b", "swin_v2_s", "swin_v2_t",
    "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "vit_b_16", "vit_b_32", "vit_h_14", "vit_l_16", "vit_l_32",
    "wide_resnet101_2", "wide_resnet50_2",
]
# Models that do not take 64x64: the ViTs' position embeddings and MaxViT's partition grid are
# built for 224x224; Inception v3's stem needs at least 75x75.
TV_SIZES = {"vit_b_16": 224, "vit_b_32": 224, "vit_h_14": 224, "vit_l_16": 224, "vit_l_32": 224,
            "maxvit_t": 224, "inception_v3": 75}
# Over 300M parameters (1.2 GB and more): minutes per step on two cores, and on the 1.13 leg,
# whose Debian torch has only the reference BLAS, the ViTs' Linears take tens of minutes.
TV_HUGE = {"regnet_y_128gf", "vit_h_14", "vit_l_16", "vit_l_32"}
TV_CI = {"resnet18": ("torch2", "torch113"), "mobilenet_v3_small": ("torch2", "torch113"),
         "alexnet": ("torch113",)}


def tv_make(name):
    def make():
        import torchvision
        return getattr(torchvision.models, name)(weights=None)
    return make


def tv_entry(name):
    blocks = next(b for prefix, b in TV_BLOCKS if name.startswith(prefix))
    flags = unit_types(*blocks) if blocks else ["--fsdp-min-unit-params=1000000"]
    size = TV_SIZES.get(name, 64)
    note = "no blocks: units by size" if not blocks else ""
    if size != 64:
        note = "needs %dx%d" % (size, size)
    # One image where the model needs 224x224: the ViTs are the zoo's slowest entries.
    batch = 1 if size == 224 else 2
    return Entry("torchvision/" + name, "torchvision", name.rstrip("0123456789_").split("_")[0],
                 tv_make(name), images(batch, size), "%dx3x%dx%d" % (batch, size, size),
                 [Call("forward", [Input()])], flags, legs=LEGS, ci=TV_CI.get(name, ()),
                 note=note, timeout=3600 if name in TV_HUGE else 600)


# torchvision beyond classification: every detection, segmentation, video and optical-flow
# model, scripted as torchvision documents, with the constructor arguments its users pass for
# small images (min_size/max_size; fewer proposals and detections, every box kept so that the
# detections are never empty) and their backbones' blocks as units. (name, subpackage, block
# types or None for explicit units, constructor arguments, input maker, input description,
# CI legs.) The detectors call torchvision::nms and roi_align: fsdp-opt loads torchvision's op
# library (--load-op-library), the ranks import torchvision.
TV_RCNN = dict(box_score_thresh=0.0, rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=100,
               box_detections_per_img=20, min_size=128, max_size=160)
TV_ONE_STAGE = dict(score_thresh=0.0, detections_per_img=20, topk_candidates=100)


def image_list(*sizes):
    """One List[Tensor] argument, as torchvision's detectors take their images."""
    def make(gen):
        import torch
        return ([torch.rand(3, hh, ww, generator=gen) for hh, ww in sizes],)
    return make


def clips(t, size):
    def make(gen):
        import torch
        return (torch.rand(1, 3, t, size, size, generator=gen),)
    return make


def image_pair(size):
    def make(gen):
        import torch
        return (torch.rand(1, 3, size, size, generator=gen), torch.rand(1, 3, size, size, generator=gen))
    return make


DET_IMAGES = (image_list((128, 160), (96, 128)), "[3x128x160, 3x96x128]")
TV_TASKS = [
    ("fasterrcnn_mobilenet_v3_large_320_fpn", "detection", ["InvertedResidual"],
     dict(TV_RCNN, min_size=320, max_size=320), *DET_IMAGES, LEGS),
    ("fasterrcnn_mobilenet_v3_large_fpn", "detection", ["InvertedResidual"], TV_RCNN, *DET_IMAGES, ()),
    ("fasterrcnn_resnet50_fpn", "detection", ["Bottleneck"], TV_RCNN, *DET_IMAGES, ()),
    ("fasterrcnn_resnet50_fpn_v2", "detection", ["Bottleneck"], TV_RCNN, *DET_IMAGES, ()),
    ("maskrcnn_resnet50_fpn", "detection", ["Bottleneck"], TV_RCNN, *DET_IMAGES, ()),
    ("maskrcnn_resnet50_fpn_v2", "detection", ["Bottleneck"], TV_RCNN, *DET_IMAGES, ()),
    ("keypointrcnn_resnet50_fpn", "detection", ["Bottleneck"], TV_RCNN, *DET_IMAGES, ()),
    ("retinanet_resnet50_fpn", "detection", ["Bottleneck"], dict(TV_ONE_STAGE, min_size=128, max_size=160),
     *DET_IMAGES, ()),
    ("retinanet_resnet50_fpn_v2", "detection", ["Bottleneck"], dict(TV_ONE_STAGE, min_size=128, max_size=160),
     *DET_IMAGES, ()),
    ("fcos_resnet50_fpn", "detection", ["Bottleneck"], dict(TV_ONE_STAGE, min_size=128, max_size=160),
     *DET_IMAGES, ()),
    ("ssd300_vgg16", "detection", None, TV_ONE_STAGE, *DET_IMAGES, ()),
    ("ssdlite320_mobilenet_v3_large", "detection", ["InvertedResidual"], TV_ONE_STAGE, *DET_IMAGES, ()),
    ("deeplabv3_mobilenet_v3_large", "segmentation", ["InvertedResidual"], {}, images(1, 64), "1x3x64x64", ()),
    ("deeplabv3_resnet50", "segmentation", ["Bottleneck"], {}, images(1, 64), "1x3x64x64", ()),
    ("deeplabv3_resnet101", "segmentation", ["Bottleneck"], {}, images(1, 64), "1x3x64x64", ()),
    ("fcn_resnet50", "segmentation", ["Bottleneck"], {}, images(1, 64), "1x3x64x64", ()),
    ("fcn_resnet101", "segmentation", ["Bottleneck"], {}, images(1, 64), "1x3x64x64", ()),
    ("lraspp_mobilenet_v3_large", "segmentation", ["InvertedResidual"], {}, images(1, 64), "1x3x64x64", LEGS),
    ("r3d_18", "video", ["BasicBlock"], {}, clips(4, 64), "1x3x4x64x64", ()),
    ("mc3_18", "video", ["BasicBlock"], {}, clips(4, 64), "1x3x4x64x64", ()),
    ("r2plus1d_18", "video", ["BasicBlock"], {}, clips(4, 64), "1x3x4x64x64", ()),
    # S3D's last pooling is 2x7x7; MViT's position embeddings are for 16x224x224.
    ("s3d", "video", ["SepInceptionBlock3D"], {}, clips(16, 224), "1x3x16x224x224", ()),
    ("mvit_v1_b", "video", ["MultiscaleBlock"], {}, clips(16, 224), "1x3x16x224x224", ()),
    ("mvit_v2_s", "video", ["MultiscaleBlock"], {}, clips(16, 224), "1x3x16x224x224", ()),
    ("swin3d_t", "video", ["SwinTransformerBlock"], {}, clips(4, 64), "1x3x4x64x64", ()),
    ("swin3d_s", "video", ["SwinTransformerBlock"], {}, clips(4, 64), "1x3x4x64x64", ()),
    ("swin3d_b", "video", ["SwinTransformerBlock"], {}, clips(4, 64), "1x3x4x64x64", ()),
    # RAFT's correlation pyramid needs feature maps of 16x16 at least: 128x128 images. Its
    # forward runs the update block 12 times in a loop: units named as a user names them.
    ("raft_small", "optical_flow", None, {}, image_pair(128), "2 x 1x3x128x128", ()),
    ("raft_large", "optical_flow", None, {}, image_pair(128), "2 x 1x3x128x128", ()),
]
TV_TASK_UNITS = ["--fsdp-unit=feature_encoder", "--fsdp-unit=context_encoder", "--fsdp-unit=update_block"]
# Torchvision 0.14 (the 1.13 leg's) lacks these.
TV_TASK_NEWER = {"fasterrcnn_resnet50_fpn_v2", "maskrcnn_resnet50_fpn_v2", "retinanet_resnet50_fpn_v2",
                 "s3d", "mvit_v1_b", "mvit_v2_s", "swin3d_t", "swin3d_s", "swin3d_b"}


def tv_task_make(name, subpackage, kwargs):
    def make():
        import importlib
        module = importlib.import_module("torchvision.models." + subpackage)
        backbone = {} if subpackage in ("video", "optical_flow") else {"weights_backbone": None}
        classes = {"num_classes": 5} if subpackage in ("detection", "segmentation") else {}
        return getattr(module, name)(weights=None, **backbone, **classes, **kwargs)
    return make


def tv_task_entry(name, subpackage, blocks, kwargs, inputs, input_desc, ci):
    flags = unit_types(*blocks) if blocks else (
        TV_TASK_UNITS + ["--fsdp-unit=."] if subpackage == "optical_flow" else ["--fsdp-min-unit-params=1000000"])
    note = "no blocks: units by size" if blocks is None and subpackage != "optical_flow" else ""
    args = [Input(0), Input(1)] if subpackage == "optical_flow" else [Input(0)]
    return Entry("torchvision/" + name, "torchvision", subpackage, tv_task_make(name, subpackage, kwargs),
                 inputs, input_desc, [Call("forward", args)], flags, legs=("torch2",) if name in TV_TASK_NEWER else LEGS, ci=ci, note=note,
                 op_library="torchvision" if subpackage == "detection" else None)


def timm_make(model_name, **kwargs):
    def make():
        import timm
        return timm.create_model(model_name, pretrained=False, scriptable=True, **kwargs)
    return make


TIMM_CALLS = [Call("forward_features", [Input()]),
              Call("forward_head", [Ref("forward_features")]),
              Call("forward", [Input()])]
TIMM_CALLS_PRE_LOGITS = TIMM_CALLS[:2] + [
    Call("forward_head", [Ref("forward_features")], {"pre_logits": True},
         label="forward_head(pre_logits=True)"), TIMM_CALLS[2]]

# (model, family, img_size passed to create_model or None for a model that takes any size,
# block types, CI legs, why it cannot work or None). The smallest variant of each family, the
# families of the issue first; transformers get a small img_size (their position embeddings
# follow it), convnets a 64x64 input.
TIMM = [
    ("vit_tiny_patch16_224", "ViT", 64, ["Block"], ("torch2",), None),
    ("deit_tiny_distilled_patch16_224", "DeiT", 64, ["Block"], (), None),
    ("swin_tiny_patch4_window7_224", "Swin", 64, ["SwinTransformerBlock"], (), None),
    ("convnext_atto", "ConvNeXt", None, ["ConvNeXtBlock"], ("torch2",), None),
    ("efficientnet_b0", "EfficientNet", None, ["DepthwiseSeparableConv", "InvertedResidual"], (), None),
    ("mobilenetv3_small_050", "MobileNetV3", None, ["DepthwiseSeparableConv", "InvertedResidual"], (), None),
    ("regnetx_002", "RegNet", None, ["Bottleneck"], (), None),
    ("resnet18", "ResNet", None, ["BasicBlock"], (), None),
    ("beit_base_patch16_224", "BEiT", 64, ["Block"], (), None),
    ("eva02_tiny_patch14_224", "EVA", 56, ["EvaBlock"], (), None),
    ("maxvit_pico_rw_256", "MaxViT", 64, ["MaxxVitBlock"], (), None),
    ("coatnet_pico_rw_224", "CoAtNet", 64, ["MbConvBlock", "TransformerBlock2d"], (), None),
    # More families, beyond the list.
    ("deit3_small_patch16_224", "DeiT III", 64, ["Block"], (), None),
    ("vit_small_patch14_reg4_dinov2", "ViT (DINOv2, registers)", 56, ["Block"], (), None),
    ("cait_xxs24_224", "CaiT", 64, ["LayerScaleBlock", "LayerScaleBlockClassAttn"], (), None),
    ("xcit_nano_12_p16_224", "XCiT", 64, ["XCABlock", "ClassAttentionBlock"], (), None),
    ("crossvit_tiny_240", "CrossViT", 120, ["MultiScaleBlock"], (), None),
    ("pvt_v2_b0", "PVTv2", None, ["Block"], (), None),
    ("levit_128s", "LeViT", 64, ["LevitBlock"], (), None),
    ("efficientformerv2_s0", "EfficientFormerV2", 64, ["EfficientFormerV2Block"], (), None),
    ("tiny_vit_5m_224", "TinyViT", None, ["TinyVitBlock"], (), None),
    ("mixer_s32_224", "MLP-Mixer", 64, ["MixerBlock"], (), None),
    ("poolformerv2_s12", "PoolFormer", None, ["MetaFormerBlock"], (), None),
    # Scripts, but its forward calls a @torch.jit.ignore'd method (_forward_cross_attn), and an
    # archive cannot hold a Python function: torch.jit.save refuses it.
    ("mobilevitv2_050", "MobileViTv2", None, ["BottleneckBlock", "MobileVitV2Block"], (), "does not save"),
    ("fastvit_t8", "FastViT", None, ["RepMixerBlock"], (), None),
    ("nextvit_small", "Next-ViT", None, ["NextConvBlock", "NextTransformerBlock"], (), None),
    ("edgenext_xx_small", "EdgeNeXt", None, ["ConvBlock", "SplitTransposeBlock"], (), None),
    ("repvit_m0_9", "RepViT", None, ["RepViTBlock"], (), None),
    ("ghostnet_100", "GhostNet", None, ["GhostBottleneck"], (), None),
    ("densenet121", "DenseNet", None, ["DenseLayer"], (), None),
    ("dla34", "DLA", None, ["DlaBasic"], (), None),
    # HRNet's SequentialList overrides forward with a List[Tensor] argument that TorchScript
    # cannot type without an annotation timm does not have.
    ("hrnet_w18_small", "HRNet", None, ["BasicBlock", "Bottleneck"], (), "does not script"),
]


# The convnets again as timm's --channels-last runs them: `model.to(memory_format=
# torch.channels_last)` and channels_last inputs, so that their convolution weights are not
# row-major (docs/runtime.md, "Gathered layouts"); then `forward` once more on the same images
# contiguous, as a caller that does not convert its inputs passes them: the convolutions' path
# then follows their weights' layout alone. (model, CI legs.)
TIMM_CHANNELS_LAST = [
    ("convnext_atto", ()),
    ("efficientnet_b0", ()),
    ("mobilenetv3_small_050", ("torch2",)),
    ("regnetx_002", ()),
    ("resnet18", ()),
    ("densenet121", ()),
]


def channels_last_images(batch, size):
    """The images in channels_last, and the same contiguous."""
    def make(gen):
        import torch
        x = torch.randn(batch, 3, size, size, generator=gen)
        return (x.contiguous(memory_format=torch.channels_last), x)
    return make


TIMM_CHANNELS_LAST_CALLS = TIMM_CALLS + [Call("forward", [Input(1)], label="forward(contiguous input)")]


def timm_channels_last_entry(model_name, ci):
    import_name, family, _, blocks, _, _ = next(t for t in TIMM if t[0] == model_name)
    make_plain = timm_make(import_name)

    def make():
        import torch
        return make_plain().to(memory_format=torch.channels_last)
    return Entry("timm/%s (channels_last)" % model_name, "timm", family, make, channels_last_images(2, 64),
                 "2x3x64x64, channels_last (and contiguous)", TIMM_CHANNELS_LAST_CALLS, unit_types(*blocks), ci=ci)


def timm_entry(model_name, family, img_size, blocks, ci, expect_fail):
    kwargs = {"img_size": img_size} if img_size else {}
    size = img_size or 64
    calls = TIMM_CALLS_PRE_LOGITS if family == "ViT" else TIMM_CALLS
    return Entry("timm/" + model_name, "timm", family, timm_make(model_name, **kwargs),
                 images(2, size), "2x3x%dx%d" % (size, size), calls, unit_types(*blocks),
                 ci=ci, note="img_size=%d" % img_size if img_size else "",
                 expect_fail=expect_fail)


VOCAB = 128


def hf_make(model_cls, config_cls, **config):
    def make():
        import transformers
        transformers.logging.set_verbosity_error()
        # use_cache=False: a cache object is no tensor and cannot leave a trace.
        cfg = getattr(transformers, config_cls)(vocab_size=VOCAB, use_cache=False,
                                                bos_token_id=0, eos_token_id=1, pad_token_id=0,
                                                **config)
        return getattr(transformers, model_cls)(cfg)
    return make


DECODER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64)
T5 = dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
          decoder_start_token_id=0)
HF = [
    # (name, family, model class, config class, config, block type, inputs, input text, CI)
    ("gpt2", "GPT-2", "GPT2LMHeadModel", "GPT2Config",
     dict(n_embd=64, n_layer=2, n_head=4, n_positions=64), "GPT2Block",
     token_ids(2, 16, VOCAB), "input_ids 2x16", ("torch2",)),
    ("llama", "Llama", "LlamaForCausalLM", "LlamaConfig", DECODER, "LlamaDecoderLayer",
     token_ids(2, 16, VOCAB), "input_ids 2x16", ()),
    ("qwen2", "Qwen2", "Qwen2ForCausalLM", "Qwen2Config", DECODER, "Qwen2DecoderLayer",
     token_ids(2, 16, VOCAB), "input_ids 2x16", ()),
    ("bert", "BERT", "BertModel", "BertConfig",
     dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
          max_position_embeddings=64), "BertLayer",
     token_ids(2, 16, VOCAB, mask=True), "input_ids, attention_mask 2x16", ("torch2",)),
    ("t5", "T5", "T5ForConditionalGeneration", "T5Config", T5, "T5Block",
     token_ids(2, 16, VOCAB, mask=True, decoder_length=8),
     "input_ids, attention_mask 2x16, decoder_input_ids 2x8", ()),
    ("t5_encoder", "T5", "T5EncoderModel", "T5Config", T5, "T5Block",
     token_ids(2, 16, VOCAB, mask=True), "input_ids, attention_mask 2x16", ()),
]


def hf_entry(name, family, model_cls, config_cls, config, block, inputs, desc, ci):
    n_inputs = desc.count(",") + 1
    return Entry("hf/" + name, "hf", family, hf_make(model_cls, config_cls, **config), inputs,
                 desc, [Call("forward", [Input(i) for i in range(n_inputs)])],
                 unit_types(block), capture="trace", ci=ci,
                 note="%s, 2 layers, traced" % model_cls)


# The decoders of HF that also decode, and the CI legs of their generate entries.
HF_GENERATE = {"gpt2": ("torch2",), "llama": (), "qwen2": ()}
PROMPT = 5
MAX_NEW = 8
# Rank 0 stops at the token its third step makes (or earlier, where an earlier step made it),
# rank 1 never: ranks leave the loop at different steps.
STOP_AT = EosAt(2, None)


def new_tokens(args, output):
    return output.size(1) - args[0].size(1)


def hf_generate_entry(name, family, model_cls, config_cls, config, block, inputs, desc, ci):
    """The decoder of hf_entry(name, ...), the same model, traced and wrapped in the scripted
    greedy generate of the README ("Greedy decoding with a Hugging Face model"), sharded with
    its flags: the traced model a unit (embeddings, final norm, LM head) and every layer."""
    return Entry("hf/%s_generate" % name, "hf", family, hf_make(model_cls, config_cls, **config),
                 token_ids(WORLD, PROMPT, VOCAB),
                 "a 1x%d prompt per rank, up to %d new tokens; eos: rank 0's token of step %d, "
                 "rank 1 none" % (PROMPT, MAX_NEW, STOP_AT.steps[0] + 1),
                 [Call("generate", [RankInput(0), MAX_NEW, STOP_AT], loop_iterations=new_tokens,
                       gathers=1)],
                 ["--fsdp-unit=model", "--fsdp-unit-type=" + block], capture="generate",
                 ci=HF_GENERATE[name], note="%s traced, in a scripted greedy generate" % model_cls)


def registry():
    entries = [tv_entry(n) for n in TV_MODELS]
    entries += [tv_task_entry(*t) for t in TV_TASKS]
    entries += [timm_entry(*t) for t in TIMM]
    entries += [timm_channels_last_entry(*t) for t in TIMM_CHANNELS_LAST]
    for t in HF:
        entries.append(hf_entry(*t))
        if t[0] in HF_GENERATE:
            entries.append(hf_generate_entry(*t))
    return entries


# ---- running one entry ----------------------------------------------------------------------

class Failure(Exception):
    """Ends an entry with a row: kind is what went wrong, in a table's words."""

    def __init__(self, kind, detail):
        super().__init__("%s: %s" % (kind, detail))
        self.kind = kind
        self.detail = detail


def first_line(text, limit=300):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def exception_text(e):
    """What an exception says went wrong: TorchScript's frontend errors give the schema and
    the reason in their first lines, the source excerpt after."""
    lines = []
    for l in str(e).splitlines():
        if l.strip().startswith('File "'):
            break
        if l.strip():
            lines.append(l.strip())
    return first_line("%s: %s" % (type(e).__name__, " ".join(lines[:3])))


def error_line(stderr):
    """The last `Error:` line of a traceback, or fsdp-opt's `error:` line."""
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    for l in lines:
        if l.startswith("error:"):
            return l
    errs = [l for l in lines if re.match(r"^[\w.]*(Error|Exception)\b", l)]
    return (errs or lines or ["(no output)"])[-1]


def plain(value):
    """Outputs as torch.save and same_bits take them: TorchScript NamedTuples (GoogLeNet's and
    Inception's outputs) as tuples."""
    import torch
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def rank_dependent(call):
    return any(isinstance(a, (RankInput, EosAt)) for a in call.args + list(call.kwargs.values()))


def resolve(call, inputs, outputs, rank, module):
    """The call's arguments for `rank`; `outputs` are that rank's earlier outputs, `module` the
    original archive (EosAt runs it)."""
    def one(a):
        if isinstance(a, Input):
            return inputs[a.index]
        if isinstance(a, RankInput):
            return inputs[a.index][rank:rank + 1].clone()
        if isinstance(a, Ref):
            return outputs[a.label]
        return a
    if any(isinstance(v, EosAt) for v in call.kwargs.values()):
        raise ValueError("%s: EosAt is a positional argument" % call.label)
    args = [one(a) for a in call.args]
    for i, a in enumerate(args):
        if isinstance(a, EosAt):
            args[i] = a.token(module, call.method, args, i, rank)
    return args, {k: one(v) for k, v in call.kwargs.items()}


def parse_stats(text):
    stats = {"gathers": {}, "in_loops": {}}
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"units: (\d+)$", line)
        if m:
            stats["units"] = int(m.group(1))
        m = re.match(r"sharded bytes per rank: (\d+) \(of (\d+)\)$", line)
        if m:
            stats["sharded_bytes"], stats["full_bytes"] = int(m.group(1)), int(m.group(2))
        m = re.match(r"replicated bytes per rank: (\d+)$", line)
        if m:
            stats["replicated_bytes"] = int(m.group(1))
        m = re.match(r"gathers per call of (\w+): (\d+)(?: \((\d+) inside loops)?", line)
        if m:
            stats["gathers"][m.group(1)] = int(m.group(2))
            stats["in_loops"][m.group(1)] = int(m.group(3) or 0)
    return stats


def human(n, unit=""):
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return "%.1f %s%s" % (n / div, suffix, unit) if unit else "%.1f%s" % (n / div, suffix)
    return "%d %s" % (n, unit) if unit else str(n)


class Row:
    def __init__(self, entry):
        self.entry = entry
        self.units = ""
        self.params = ""
        self.bytes = ""
        self.gathers = ""
        self.transform_s = None
        self.status = None      # exact | differs | error | cannot | xpass
        self.parity = ""
        self.elapsed = 0.0

    @property
    def ok(self):
        return self.status in ("exact", "cannot")

    def as_dict(self):
        e = self.entry
        return {"model": e.name, "family": e.family, "input": e.input_desc,
                "flags": " ".join(e.flags), "units": self.units, "params": self.params,
                "bytes": self.bytes, "gathers": self.gathers, "transform_s": self.transform_s,
                "status": self.status, "parity": self.parity, "note": e.note,
                "elapsed_s": round(self.elapsed, 1)}


def describe_units(manifest, orig):
    """'9: root (ResNet), 8 BasicBlock', from the manifest's unit paths and the modules' types."""
    kinds = collections.Counter()
    root = None
    for unit in manifest["units"]:
        if unit["path"] in (".", ""):
            root = orig.original_name
            continue
        kinds[h.attr_path(orig, unit["path"]).original_name] += 1
    parts = (["root (%s)" % root] if root else []) + ["%d %s" % (n, k) for k, n in kinds.most_common()]
    return "%d: %s" % (len(manifest["units"]), ", ".join(parts))


def count_params(module):
    seen = set()
    n = 0
    for p in module.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        n += p.numel()
    return n


def op_library_of(package):
    """The op library of `package` (torchvision: the _C*.so beside its __init__.py)."""
    import glob
    module = __import__(package)
    found = sorted(glob.glob(os.path.join(os.path.dirname(module.__file__), "_C*.so")))
    if not found:
        raise Failure("no op library", "%s has no _C*.so beside %s" % (package, module.__file__))
    return found[0]


def transform(entry, orig_pt, out_dir, row):
    """fsdp-opt with the entry's flags, for W ranks, with --stats."""
    libraries = ["--load-op-library=" + op_library_of(entry.op_library)] if entry.op_library else []
    r = h.fsdp_opt(orig_pt, *entry.flags, *libraries, "--world-size=%d" % WORLD, "--stats", "-o", out_dir,
                   timeout=entry.timeout)
    if r.timed_out:
        raise Failure("fsdp-opt timed out", "after %.0f s" % r.elapsed)
    row.transform_s = r.elapsed
    if r.returncode != 0:
        raise Failure("fsdp-opt failed", error_line(r.stderr))
    return parse_stats(r.stdout)


def run_entry(entry, opts):
    row = Row(entry)
    t0 = time.monotonic()
    work = os.path.join(opts.work, re.sub(r"\W", "_", entry.name))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        run_entry_in(entry, opts, row, work)
    except Failure as f:
        row.status = "error"
        row.parity = "%s: %s" % (f.kind, f.detail)
    except Exception as e:  # noqa: BLE001 - the runner itself: report it on the row
        row.status = "error"
        traceback.print_exc()
        row.parity = "zoo runner: %s" % exception_text(e)
    finally:
        gc.collect()
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)
    if entry.expect_fail:
        if row.status == "exact":
            row.status = "xpass"
            row.parity = "exact, but the registry says it cannot work (%s): update it" % entry.expect_fail
        elif entry.expect_fail in row.parity:
            row.status = "cannot"
        else:
            row.parity += " (expected instead: %s)" % entry.expect_fail
    row.elapsed = time.monotonic() - t0
    return row


def run_entry_in(entry, opts, row, work):
    import torch
    orig_pt = os.path.join(work, "original.pt")
    library = {"timm": "timm", "hf": "transformers", "torchvision": "torchvision"}[entry.source]
    try:
        __import__(library)
    except ImportError as e:
        raise Failure("%s not importable" % library,
                      "%s (scripts/install-deps.sh installs it in the torch 2.x venv)" % e)

    # Build and capture as a user would, then keep only the saved archive: what fsdp-opt reads
    # is what the reference outputs come from.
    example = entry.inputs(torch.Generator().manual_seed(0))
    call_inputs = entry.inputs(torch.Generator().manual_seed(1)) if entry.capture != "script" else example
    try:
        torch.manual_seed(0)
        model = entry.make().eval()
    except Exception as e:  # noqa: BLE001
        raise Failure("cannot build", exception_text(e))
    try:
        with torch.no_grad():
            if entry.capture == "script":
                captured = torch.jit.script(model)
            else:
                if entry.capture == "generate":
                    example = tuple(t[:1] for t in example)
                # strict=False: the transformers models return dicts.
                captured = torch.jit.trace(model, example, strict=False)
    except Exception as e:  # noqa: BLE001
        raise Failure("does not %s" % ("script" if entry.capture == "script" else "trace"),
                      exception_text(e))
    if entry.capture == "generate":
        import decoders
        try:
            captured = torch.jit.script(decoders.HFGenerate(captured))
        except Exception as e:  # noqa: BLE001
            raise Failure("generate does not script", exception_text(e))
    try:
        captured.save(orig_pt)
    except Exception as e:  # noqa: BLE001
        raise Failure("does not save", exception_text(e))
    del model, captured
    gc.collect()

    orig = torch.jit.load(orig_pt)
    row.params = human(count_params(orig))
    # Each rank's calls and the outputs its own unsharded run gives; computed once and shared
    # where no argument depends on the rank.
    ranks = range(WORLD) if any(rank_dependent(c) for c in entry.calls) else [0]
    outputs = [{} for _ in ranks]
    resolved = [[] for _ in ranks]
    iterations = collections.defaultdict(list)
    for call in entry.calls:
        if not hasattr(orig, call.method):
            raise Failure("no method", "%s has no method %s in this version" % (entry.name, call.method))
        for rank in ranks:
            try:
                args, kwargs = resolve(call, call_inputs, outputs[rank], rank, orig)
                with torch.no_grad():
                    out = plain(getattr(orig, call.method)(*args, **kwargs))
            except Exception as e:  # noqa: BLE001
                raise Failure("original fails", "%s: %s" % (call.label, exception_text(e)))
            outputs[rank][call.label] = out
            resolved[rank].append((call.label, call.method, args, kwargs))
            if call.loop_iterations:
                iterations[call.label].append(call.loop_iterations(args, out))
    if len(ranks) == 1:
        outputs, resolved = outputs * WORLD, resolved * WORLD
    calls_pt = os.path.join(work, "calls.pt")
    torch.save(resolved, calls_pt)

    out_dir = os.path.join(work, "sharded")
    stats = transform(entry, orig_pt, out_dir, row)
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    row.units = describe_units(manifest, orig)
    if "sharded_bytes" in stats:
        per_rank = stats["sharded_bytes"] + stats.get("replicated_bytes", 0)
        everything = stats["full_bytes"] + stats.get("replicated_bytes", 0)
        row.bytes = "%s of %s" % (human(per_rank, "B"), human(everything, "B"))
    del orig
    gc.collect()

    # Each rank file must hold exactly its shards: the parity below would not notice a file
    # that kept the full parameters.
    layout = h.Test(entry.name)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        h.check_rank_files(layout, out_dir, orig_pt, WORLD, "W=%d" % WORLD)
    if layout.failed:
        raise Failure("rank files", first_line(printed.getvalue().strip().splitlines()[-1]))
    gc.collect()

    results = h.run_ranks(WORLD, rank_worker, args={"dir": out_dir, "calls": calls_pt,
                                                    "threads": opts.threads, "repeat": opts.repeat,
                                                    "import": entry.op_library},
                          timeout=entry.timeout)
    bad = [r for r in results if not r.ok]
    if bad:
        r = bad[0]
        why = ("still running after %d s, killed (slow or hung: the entry's timeout)" % entry.timeout
               if r.timed_out else error_line(r.stderr))
        raise Failure("rank %d failed" % r.rank, why)

    diffs = []
    problems = []
    gathers = []
    for i, call in enumerate(entry.calls):
        label, method = call.label, call.method
        # --stats: N collectives per call, K of them once per iteration of a loop (the loop
        # running while any rank goes on); unknown for a loop whose iterations nobody counts.
        predicted = stats["gathers"].get(method)
        in_loops = stats["in_loops"].get(method, 0)
        if predicted is None:
            problems.append("%s: fsdp-opt --stats predicts no gathers per call of %s" % (label, method))
        elif in_loops:
            predicted = (predicted - in_loops + in_loops * max(iterations[label])
                         if iterations[label] else None)
        measured = {r.rank: [rep["gathers"][i] for rep in r.value] for r in results}
        for r in results:
            for k, rep in enumerate(r.value):
                d = h.same_bits(rep["outputs"][i], outputs[r.rank][label], label)
                if d:
                    diffs.append("rank %d call %d: %s" % (r.rank, k + 1, d))
                if rep["unsharded_after"][i] != 0:
                    problems.append("rank %d: %d bytes still unsharded after %s"
                                    % (r.rank, rep["unsharded_after"][i], label))
        counts = sorted({n for per in measured.values() for n in per})
        if len(counts) != 1:
            problems.append("%s: gathers per call vary: %s" % (label, measured))
        else:
            if predicted is not None and counts[0] != predicted:
                problems.append("%s: %d gathers per call, fsdp-opt --stats predicts %d"
                                % (label, counts[0], predicted))
            if call.gathers is not None and counts[0] != call.gathers:
                problems.append("%s: %d gathers per call, expected %d" % (label, counts[0], call.gathers))
        cell = "%s %s" % (label, "/".join(str(c) for c in counts))
        if iterations[label]:
            cell += " (loop iterations by rank: %s)" % ", ".join(str(n) for n in iterations[label])
        gathers.append(cell)
    row.gathers = ", ".join(gathers)
    problems = diffs + problems
    if problems:
        row.status = "differs" if diffs else "error"
        row.parity = ("" if diffs else "outputs exact, but ") + "; ".join(problems[:4]) + (
            "; ..." if len(problems) > 4 else "")
    else:
        row.status = "exact"
        row.parity = "exact"


def rank_worker(ctx):
    """On each rank: load the rank file, make each of this rank's calls `repeat` times, return
    the outputs with the collectives each call issued and what it left unsharded."""
    import torch
    torch.set_num_threads(ctx.args["threads"])
    if ctx.args.get("import"):
        __import__(ctx.args["import"])  # registers the ops the model calls
    model = ctx.load(ctx.rank_file(ctx.args["dir"]))
    calls = h.torch_load(ctx.args["calls"])[ctx.rank]
    reps = []
    for _ in range(ctx.args["repeat"]):
        rep = {"outputs": [], "gathers": [], "unsharded_after": []}
        for label, method, args, kwargs in calls:
            ctx.reset_stats()
            with torch.no_grad():
                rep["outputs"].append(plain(getattr(model, method)(*args, **kwargs)))
            s = ctx.stats()
            rep["gathers"].append(s["all_gathers"])
            rep["unsharded_after"].append(s["unsharded_bytes"])
        reps.append(rep)
    return reps


# ---- selection, report, docs ----------------------------------------------------------------

def leg():
    import torch
    return "torch2" if int(torch.__version__.split(".")[0]) >= 2 else "torch113"


def versions():
    out = {}
    for name in ("torch", "torchvision", "timm", "transformers"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = "not installed"
    r = h.run_tool([h.which("fsdp-opt"), "--version"], timeout=60)
    out["fsdp-opt"] = r.stdout.strip().split(" ")[1] if r.returncode == 0 and " " in r.stdout else "?"
    return out


def unregistered_torchvision(entries):
    """torchvision models (classification, detection, segmentation, video, optical flow) this
    torchvision has and the registry lacks: rows that fail, so that a new torchvision cannot
    silently grow past the zoo."""
    import torchvision
    import torchvision.models.detection
    import torchvision.models.optical_flow
    import torchvision.models.segmentation
    import torchvision.models.video
    known = {e.name for e in entries}
    modules = [torchvision.models, torchvision.models.detection, torchvision.models.segmentation,
               torchvision.models.video, torchvision.models.optical_flow]
    return [n for module in modules for n in torchvision.models.list_models(module=module)
            if "torchvision/" + n not in known]


def md(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


STATUS_WORDS = {"exact": "exact", "differs": "**differs**", "error": "**error**",
                "cannot": "cannot work", "xpass": "**unexpectedly works**"}


TABLE_HEAD = [
    "| model | input | fsdp-opt flags | units | parameters | bytes per rank | gathers per call | transform | parity |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]


def table_line(r):
    e = r.entry
    return "| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        md(e.name + (" (%s)" % e.note if e.note else "")), md(e.input_desc),
        md(" ".join("`%s`" % f for f in e.flags)), md(r.units), md(r.params), md(r.bytes),
        md(r.gathers), "%.1f s" % r.transform_s if r.transform_s is not None else "",
        md(STATUS_WORDS[r.status] + ("" if r.status == "exact" else ": " + r.parity)))


def line_model(line, names=()):
    """The entry a table row is of: the longest of `names` its first cell starts with (a name
    may hold spaces, "timm/resnet18 (channels_last)", and the cell may add the entry's note
    after it: a first word would make timm/resnet18 and its channels_last row one, and a
    filtered run would drop one of them); the cell's first word for a row of no such entry."""
    cell = line[2:].split(" | ", 1)[0]
    known = [n for n in names if cell == md(n) or cell.startswith(md(n) + " (")]
    return max(known, key=len) if known else cell.split(" ", 1)[0]


def line_status(line):
    parity = line.rstrip().rstrip("|").rsplit(" | ", 1)[-1]
    for status, word in STATUS_WORDS.items():
        if parity.startswith(word):
            return status
    return "error"


def markdown_section(the_leg, rows, argv, vers, threads, elapsed, previous=None, order=()):
    """This leg's section. `previous`, the section a filtered run updates: its header stays,
    a line says which rows this run replaced, and its other rows are kept."""
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    how = "`%s` on %s: %s; %d intra-op thread%s, W=%d, %.0f s in all" % (
        " ".join(argv), when, ", ".join("%s %s" % kv for kv in vers.items()), threads,
        "" if threads == 1 else "s", WORLD, elapsed)
    lines = {line_model(l, order): l for l in (previous or {}).get("rows", [])}
    lines.update({r.entry.name: table_line(r) for r in rows})
    rank = {name: i for i, name in enumerate(order)}
    names = sorted(lines, key=lambda n: (rank.get(n, len(rank)), n))
    counts = collections.Counter(line_status(lines[n]) for n in names)
    if previous:
        # An earlier re-run whose rows this run all replaces says nothing about the table.
        ran = {r.entry.name for r in rows}
        kept = [l for l in previous["header"] if not (l.startswith("Rows re-run by ") and set(
            l.rstrip(".").rsplit(" in all: ", 1)[-1].split(", ")) <= ran)]
        header = kept + ["Rows re-run by %s: %s." % (how, ", ".join(r.entry.name for r in rows))]
    else:
        header = ["Generated by %s." % how]
    out = ["<!-- zoo:%s -->" % the_leg,
           "## %s leg" % {"torch2": "torch 2.x", "torch113": "torch 1.13"}[the_leg], ""]
    out += header
    out += ["%d models: %d exact, %d differ, %d errors, %d cannot work%s." % (
        len(names), counts["exact"], counts["differs"], counts["error"], counts["cannot"],
        ", %d unexpectedly work" % counts["xpass"] if counts["xpass"] else ""), ""]
    out += TABLE_HEAD + [lines[n] for n in names] + ["<!-- /zoo:%s -->" % the_leg]
    return "\n".join(out) + "\n"


def read_section(path, the_leg):
    """The header lines (before the counts line) and table rows of this leg's section of
    PATH, or None."""
    if not os.path.exists(path):
        return None
    text = open(path).read()
    begin, end = "<!-- zoo:%s -->" % the_leg, "<!-- /zoo:%s -->" % the_leg
    if begin not in text or end not in text:
        return None
    body = text[text.index(begin) + len(begin):text.index(end)].strip().splitlines()[1:]
    header = [l for l in body if l and not l.startswith("|") and not re.match(r"\d+ models: ", l)]
    rows = [l for l in body if l.startswith("| ") and l not in TABLE_HEAD]
    return {"header": header, "rows": rows}


DOC_HEAD = """# Model zoo

Real models through fsdp-opt: every torchvision model (classification, detection,
segmentation, video, optical flow), the smallest variant of a dozen timm families
(`timm.create_model(name, scriptable=True)`, random weights) and Hugging Face decoders and
encoders traced from small random configs. Each is sharded for 2
ranks with the flags in the table (its blocks or layers as units by type, the root a unit;
FSDP1's size policy where a model has no blocks), and every method a user calls
(`forward_features`, `forward_head`, `forward`) is run twice on both ranks and compared bit
for bit with the original archive run in one process at the same thread count. The decoders
(GPT-2, Llama, Qwen2) also decode: each `*_generate` row is the same model traced and wrapped
in the README's scripted greedy `generate` ("Greedy decoding with a Hugging Face model"),
sharded with its flags, and each rank decodes its own prompt (rank 0 stops at an eos its
tokens reach, rank 1 runs all 8 steps); its tokens must be bitwise its own unsharded run's,
and a call must issue the one all-gather `fsdp-opt --stats` predicts. torchvision's detectors
take their images as one `List[Tensor]` and call `torchvision::nms`: fsdp-opt loads
torchvision's op library with `--load-op-library`, the ranks import torchvision.

Columns: *units*, how many and of which module types; *parameters*, elements (a tied
parameter once); *bytes per rank*, the parameter bytes one rank holds (its shards plus
replicated parameters) of the model's; *gathers per call*, collectives one call of the method
issues on each rank (measured; checked against `fsdp-opt --stats`; for a decoding loop also
how many times it ran on each rank); *transform*, fsdp-opt's wall time (load, passes,
writing both rank files); *parity*, exact or what went wrong.

Regenerate with `bash scripts/models.sh` (both legs), or one leg with
`python test/models/zoo.py --subset all --build build/<leg> --write-docs docs/models.md`.
The CI subset runs in lit: `test/models/zoo-ci-*.py`.
"""


def write_docs(path, the_leg, section):
    text = open(path).read() if os.path.exists(path) else DOC_HEAD
    begin, end = "<!-- zoo:%s -->" % the_leg, "<!-- /zoo:%s -->" % the_leg
    if begin in text and end in text:
        before = text[:text.index(begin)]
        after = text[text.index(end) + len(end):].lstrip("\n")
        text = before + section + ("\n" + after if after else "")
    else:
        # torch 2.x's section first, whichever leg writes first.
        other = "<!-- zoo:torch113 -->"
        if the_leg == "torch2" and other in text:
            i = text.index(other)
            text = text[:i] + section + "\n" + text[i:]
        else:
            text = text.rstrip("\n") + "\n\n" + section
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subset", choices=["ci", "all"], default="ci")
    ap.add_argument("--source", choices=["torchvision", "timm", "hf"], action="append",
                    help="only entries from this library (repeatable)")
    ap.add_argument("--filter", help="only entries whose name matches this regular expression")
    ap.add_argument("--list", action="store_true", help="list the selected entries and exit")
    ap.add_argument("--work", help="working directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep each entry's files in --work")
    ap.add_argument("--build", help="a build directory: its bin/ first on PATH, its runtime library")
    ap.add_argument("--threads", type=int,
                    default=int(os.environ.get("OMP_NUM_THREADS", "1") or 1),
                    help="intra-op threads, the same for the original and every rank "
                         "(default: $OMP_NUM_THREADS, else 1)")
    ap.add_argument("--repeat", type=int, default=2, help="calls of each method on each rank")
    ap.add_argument("--write-docs", metavar="PATH", help="rewrite this leg's section of PATH")
    ap.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    opts = ap.parse_args(argv)

    os.environ["OMP_NUM_THREADS"] = str(opts.threads)
    if opts.build:
        build = os.path.abspath(opts.build)
        os.environ["PATH"] = os.path.join(build, "bin") + os.pathsep + os.environ.get("PATH", "")
        os.environ["FSDP_OPT_RUNTIME_LIB"] = os.path.join(build, "lib", "libfsdp_runtime.so")
    os.environ.setdefault("FSDP_OPT_TIMEOUT_S", "60")
    import torch
    torch.set_num_threads(opts.threads)
    the_leg = leg()

    entries = registry()
    selected = [e for e in entries if the_leg in e.legs
                and (opts.subset == "all" or the_leg in e.ci)
                and (not opts.source or e.source in opts.source)
                and (not opts.filter or re.search(opts.filter, e.name))]
    if opts.list:
        for e in entries:
            print("%-45s %-11s legs=%-16s ci=%-16s %s" % (
                e.name, e.family, ",".join(e.legs), ",".join(e.ci) or "-", " ".join(e.flags)))
        return 0
    if not selected:
        print("error: no entry selected for the %s leg (subset %s, source %s, filter %r)"
              % (the_leg, opts.subset, opts.source, opts.filter), file=sys.stderr)
        return 2
    if not os.environ.get("FSDP_OPT_RUNTIME_LIB"):
        print("error: FSDP_OPT_RUNTIME_LIB is not set: run under lit or pass --build DIR",
              file=sys.stderr)
        return 2

    own_work = not opts.work
    opts.work = os.path.abspath(opts.work or tempfile.mkdtemp(prefix="fsdp-zoo."))
    os.makedirs(opts.work, exist_ok=True)
    vers = versions()
    print("zoo: %s leg, %s; %d entries, %d thread(s), W=%d" % (
        the_leg, ", ".join("%s %s" % kv for kv in vers.items()), len(selected), opts.threads, WORLD),
        flush=True)
    t0 = time.monotonic()
    rows = []
    extra = []
    if opts.subset == "all" and (not opts.source or "torchvision" in opts.source) and not opts.filter:
        extra = unregistered_torchvision(entries)
    for i, e in enumerate(selected):
        print("[%d/%d] %s ..." % (i + 1, len(selected), e.name), flush=True)
        row = run_entry(e, opts)
        rows.append(row)
        print("%s: %s%s [%.1f s]" % (e.name, row.status.upper(),
                                     "" if row.status == "exact" else " - " + row.parity,
                                     row.elapsed), flush=True)
        if row.status == "exact":
            print("    units %s; params %s; bytes/rank %s; gathers %s; transform %.1f s" % (
                row.units, row.params, row.bytes, row.gathers, row.transform_s), flush=True)
    for name in extra:
        e = Entry("torchvision/" + name, "torchvision", name, None, None, "", [], [], legs=LEGS)
        row = Row(e)
        row.status = "error"
        row.parity = "in torchvision %s but not in the zoo registry (test/models/zoo.py)" % vers["torchvision"]
        rows.append(row)
        print("%s: ERROR - %s" % (e.name, row.parity), flush=True)
    elapsed = time.monotonic() - t0
    if own_work and not opts.keep:
        shutil.rmtree(opts.work, ignore_errors=True)

    counts = collections.Counter(r.status for r in rows)
    failed = [r for r in rows if not r.ok]
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump([r.as_dict() for r in rows], f, indent=1)
    if opts.write_docs:
        shown = ["python", "test/models/zoo.py", "--subset", opts.subset]
        shown += ["--source=" + s for s in opts.source or []]
        shown += ["--filter='%s'" % opts.filter] if opts.filter else []
        shown += ["--write-docs", opts.write_docs]
        # A run of some entries only updates their rows of the existing table.
        partial = bool(opts.source or opts.filter) or opts.subset != "all"
        previous = read_section(opts.write_docs, the_leg) if partial else None
        write_docs(opts.write_docs, the_leg, markdown_section(
            the_leg, rows, shown, vers, opts.threads, elapsed, previous,
            [e.name for e in entries]))
        print("zoo: wrote the %s section of %s" % (the_leg, opts.write_docs), flush=True)
    print("zoo %s %s: %d exact, %d cannot work, %d failed%s [%.0f s]" % (
        the_leg, opts.subset, counts["exact"], counts["cannot"], len(failed),
        (" (" + ", ".join(r.entry.name for r in failed) + ")") if failed else "", elapsed), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
