# --param-dtype: every gather's dtype operand is the ScalarType constant (15 = bfloat16, 5 = half),
# in both forms (the split one made by prefetch-gathers, run here on the rewrite alone, since the
# default pipeline holds both layers in one gather); without the flag the operand is absent; bad
# names are errors. Exactness: e2e/param-dtype.py.
#
# RUN: %python -m fsdp_models two_blocks -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit='layers.*' --param-dtype=bf16 --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,prefetch-gathers,verify-fsdp --print-ir --method=forward | FileCheck %s --check-prefix=BF16
# BF16: %[[BF16_A:[0-9a-z_.]+]] : int = prim::Constant[value=15]()
# BF16: fsdp::all_gather(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[BF16_A]])
# BF16: %[[BF16_B:[0-9a-z_.]+]] : int = prim::Constant[value=15]()
# BF16: fsdp::all_gather_start(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[BF16_B]])
# RUN: fsdp-opt %t.pt --fsdp-unit='layers.*' --param-dtype=fp16 --print-ir --method=forward | FileCheck %s --check-prefix=FP16
# FP16: %[[FP16:[0-9a-z_.]+]] : int = prim::Constant[value=5]()
# FP16: fsdp::all_gather(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[FP16]])
# RUN: fsdp-opt %t.pt --fsdp-unit='layers.*' --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,prefetch-gathers,verify-fsdp --print-ir --method=forward | FileCheck %s --check-prefix=NONE
# NONE: fsdp::all_gather(%{{[^,]*}}, %{{[^,]*}}, %{{[^,)]*}})
# NONE: fsdp::all_gather_start(%{{[^,]*}}, %{{[^,]*}}, %{{[^,)]*}})
# RUN: not fsdp-opt %t.pt --param-dtype=int8 2>&1 | FileCheck %s --check-prefix=ERR
# ERR: error: --param-dtype expects bf16, fp16 or fp32, got 'int8'
