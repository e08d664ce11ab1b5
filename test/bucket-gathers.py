# bucket-gathers: after hoisting, generate's root gather and the two layer gathers are adjacent
# and so are their reshards: they merge into ONE collective under the default 25 MiB bucket;
# --bucket-bytes below the sum keeps them apart; forward's gathers (not adjacent) never merge.
#
# RUN: %python -m fsdp_models gpt --arg n_layer=2 -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --print-ir --stats --remarks 2>%t.remarks | FileCheck %s
# RUN: FileCheck %s --check-prefix=REMARK < %t.remarks
# REMARK: remark: [bucket-gathers] merged two adjacent gathers into one collective of 61696 bytes in __torch__.GPT::generate
# REMARK: remark: [bucket-gathers] merged two adjacent gathers into one collective of 112512 bytes in __torch__.GPT::generate
#
# forward's gathers are not adjacent: they stay apart (the third is prefetched as start/wait).
# CHECK-LABEL: // . : __torch__.GPT :: forward
# CHECK-COUNT-2: fsdp::all_gather(
# CHECK:       fsdp::all_gather_start(
# CHECK-LABEL: // . : __torch__.GPT :: generate
# CHECK:       aten::join(
# CHECK:       %[[NAMES:.*]] : str = aten::join(
# CHECK:       %[[ALL:.*]] : Tensor[] = fsdp::all_gather(%{{.*}}, %{{.*}}, %[[NAMES]])
# CHECK-NOT:   fsdp::all_gather(
# CHECK:       prim::Loop(
# CHECK:       fsdp::reshard(%[[ALL]],
# CHECK-NOT:   fsdp::reshard(
# CHECK:       gathers merged into buckets: 2
# CHECK:       gathers per call of generate: 1
#
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --bucket-bytes=60000 --stats | FileCheck %s --check-prefix=SMALL
# SMALL: gathers merged into buckets: 0
# SMALL: gathers per call of generate: 3
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit='blocks.*' --forward-method=.:generate --bucket-bytes=0 --stats | FileCheck %s --check-prefix=SMALL
