# prefetch-gathers: in the torchvision ResNet's _forward_impl, layer k+1's gather starts right
# after layer k's gather (before layer k's call) and is waited just before its own call; under
# a budget only root methods are prefetched, and the budget test is in e2e/max-unsharded-bytes.py.
#
# RUN: %python -m fsdp_models resnet -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=backbone --fsdp-unit='backbone.layer*' --forward-method=backbone:_forward_impl --print-ir --method=_forward_impl --stats --remarks --world-size=2 2>%t.remarks | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t.remarks
# REMARK: remark: [prefetch-gathers] unit 'backbone.layer2' prefetched during unit 'backbone.layer1'
# REMARK: remark: [prefetch-gathers] unit 'backbone.layer3' prefetched during unit 'backbone.layer2'
# REMARK: remark: [prefetch-gathers] unit 'backbone.layer4' prefetched during unit 'backbone.layer3'
#
# CHECK-LABEL: :: _forward_impl
# CHECK:       %[[L1:.*]] : Tensor[] = fsdp::all_gather(
# CHECK:       %[[H2:.*]] : int = fsdp::all_gather_start(
# CHECK-NEXT:  prim::CallMethod[name="forward"](%layer1
# CHECK-NEXT:  fsdp::reshard(%[[L1]],
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK-NEXT:  %[[L2:.*]] : Tensor[] = fsdp::all_gather_wait(%[[H2]])
# CHECK:       %[[H3:.*]] : int = fsdp::all_gather_start(
# CHECK-NEXT:  prim::CallMethod[name="forward"](%layer2
# CHECK-NEXT:  fsdp::reshard(%[[L2]],
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK-NEXT:  %[[L3:.*]] : Tensor[] = fsdp::all_gather_wait(%[[H3]])
# CHECK-NOT:   fsdp::
# CHECK:       %[[H4:.*]] : int = fsdp::all_gather_start(
# CHECK-NEXT:  prim::CallMethod[name="forward"](%layer3
# CHECK-NEXT:  fsdp::reshard(%[[L3]],
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK-NEXT:  %[[L4:.*]] : Tensor[] = fsdp::all_gather_wait(%[[H4]])
# CHECK-NEXT:  prim::CallMethod[name="forward"](%layer4
# CHECK-NEXT:  fsdp::reshard(%[[L4]],
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# Nothing is left to prefetch after the last layer, and layer1 itself has nothing before it.
# CHECK-NOT:   fsdp::all_gather
# CHECK:       gathers prefetched: 3
#
# RUN: fsdp-opt %t.pt --fsdp-unit=backbone --fsdp-unit='backbone.layer*' --forward-method=backbone:_forward_impl --max-unsharded-bytes=1GiB --stats | FileCheck %s --check-prefix=BUDGET
# BUDGET: gathers prefetched: 0
#
# The pass alone, right after the rewrite: the same three prefetches, and only them.
# RUN: fsdp-opt %t.pt --fsdp-unit=backbone --fsdp-unit='backbone.layer*' --forward-method=backbone:_forward_impl --world-size=2 \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,prefetch-gathers,verify-fsdp \
# RUN:   --print-ir --method=_forward_impl --stats | FileCheck %s --check-prefix=ALONE
# ALONE-LABEL: :: _forward_impl
# ALONE-NOT:   fsdp::
# ALONE:       %[[L1:.*]] : Tensor[] = fsdp::all_gather(
# ALONE-NOT:   fsdp::
# ALONE:       fsdp::all_gather_start(
# ALONE-NEXT:  prim::CallMethod[name="forward"](%layer1
# ALONE-NEXT:  fsdp::reshard(%[[L1]],
# ALONE-NEXT:  prim::TupleConstruct
# ALONE-NEXT:  fsdp::backward_hook(
# ALONE-COUNT-2: fsdp::all_gather_start(
# ALONE:       fsdp::all_gather_wait(
# ALONE-NEXT:  prim::CallMethod[name="forward"](%layer4
# ALONE-NEXT:  fsdp::reshard(
# ALONE-NEXT:  prim::TupleConstruct
# ALONE-NEXT:  fsdp::backward_hook(
# ALONE-NOT:   fsdp::
# ALONE:       gathers prefetched: 3
