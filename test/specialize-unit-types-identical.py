# specialize-unit-types leaves alone what needs no split: units of one type with the same
# shapes keep their one type (no `__fsdp` clone anywhere), and so does their parent.
#
# RUN: %python -m fsdp_models two_blocks -o %t.pt
# RUN: fsdp-opt %t.pt '--fsdp-unit=layers.*' --remarks --print-ir 2>&1 \
# RUN:   | FileCheck %s --implicit-check-not=__fsdp --implicit-check-not='[specialize-unit-types]'
# CHECK-DAG:   [find-units] unit 'layers.0' (__torch__.LinearBlock)
# CHECK-DAG:   [find-units] unit 'layers.1' (__torch__.LinearBlock)
# CHECK-LABEL: // . : __torch__.TwoBlocks :: forward
# CHECK:       %_0 : __torch__.LinearBlock = prim::GetAttr[name="0"]
# CHECK:       %_1 : __torch__.LinearBlock = prim::GetAttr[name="1"]
# Both held for the call in one bucket (plan-gather-lifetimes, bucket-gathers).
# CHECK:       fsdp::all_gather
# CHECK-NOT:   fsdp::all_gather
# CHECK-LABEL: // . : __torch__.TwoBlocks :: _fsdp_no_grad_forward
# CHECK:       fsdp::all_gather
# CHECK-NOT:   fsdp::all_gather
# One type for both instances: printed once.
# CHECK:       // layers.0 : __torch__.LinearBlock :: forward
# CHECK-NOT:   // layers.1 :
#
# The pass alone reports no change either: the IR after it has no fsdp op and no clone.
# RUN: fsdp-opt %t.pt '--fsdp-unit=layers.*' --passes=specialize-unit-types --print-ir \
# RUN:   | FileCheck %s --check-prefix=ALONE --implicit-check-not=__fsdp --implicit-check-not=fsdp::
# ALONE: // layers.0 : __torch__.LinearBlock :: forward
