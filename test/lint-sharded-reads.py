# lint-sharded-reads: the torchvision-style wrapper calls backbone._forward_impl, not its
# forward. Eager FSDP would run that on sharded parameters; fsdp-opt warns once, naming the
# method, the unit, the parameter read, and the flag that fixes it. At --world-size=1 the
# warning is all: exit 0.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models resnet -o %t/in.pt
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=backbone \
# RUN:   | FileCheck %s --implicit-check-not=warning: --implicit-check-not=error:
# CHECK:      [stderr]
# CHECK-NEXT: warning: method '_forward_impl' of unit 'backbone' is not a forward method, but reads parameter 'backbone.conv1.weight' (in method 'forward' of 'backbone.conv1') while eager FSDP keeps it sharded; register it with --forward-method=backbone:_forward_impl
# CHECK-NEXT: [exit 0]
#
# The suggested flag silences it, and the call of _forward_impl is now gathered in the root.
# RUN: fsdp-opt %t/in.pt --fsdp-unit=backbone --forward-method=backbone:_forward_impl --print-ir --method=forward 2>%t/fixed.err \
# RUN:   | FileCheck %s --check-prefix=FIXED
# FIXED-LABEL: // . : __torch__.ResNetClassifier :: forward
# FIXED:       %[[G:.*]] : Tensor[] = fsdp::all_gather(
# FIXED-NEXT:  prim::CallMethod[name="_forward_impl"](%backbone
# FIXED-NEXT:  fsdp::reshard(%[[G]],
# RUN: %python -m lit_helpers tree %t/fixed.err | FileCheck %s --check-prefix=EMPTY
# EMPTY: fixed.err 0
#
# The lint changes nothing: alone, it leaves the IR without any fsdp op.
# RUN: fsdp-opt %t/in.pt --fsdp-unit=backbone --passes=lint-sharded-reads --print-ir --method=forward 2>/dev/null \
# RUN:   | FileCheck %s --check-prefix=NOCHANGE --implicit-check-not=fsdp::
# NOCHANGE: // . : __torch__.ResNetClassifier :: forward
