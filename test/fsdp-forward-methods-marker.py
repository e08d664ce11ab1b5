# The `_fsdp_forward_methods = [...]` marker is equivalent to --forward-method: a marked
# `generate` on the root unit gives the same IR as --forward-method=.:generate.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models gpt -o %t/flags.pt
# RUN: %python -m fsdp_models gpt -o %t/marked.pt --unit . --forward-method .:generate
# RUN: fsdp-opt %t/flags.pt --fsdp-unit=. --forward-method=.:generate --print-ir > %t/flags.ir
# RUN: fsdp-opt %t/marked.pt --print-ir > %t/marked.ir
# RUN: %python -m lit_helpers diff %t/flags.ir %t/marked.ir
#
# And it does register: generate is wrapped in the root unit's gather, whose list holds the
# tied weight under both of its paths.
# RUN: FileCheck %s < %t/marked.ir
# CHECK-LABEL: // . : __torch__.GPT :: generate
# CHECK:       fsdp::check_rank
# CHECK:       %[[FULL:.*]] : Tensor[] = fsdp::all_gather(
# CHECK:       prim::Loop
# CHECK-NOT:   fsdp::{{(all_gather|reshard)}}
# CHECK:       fsdp::reshard(%[[FULL]],
# CHECK-NEXT:  prim::TupleConstruct
# CHECK-NEXT:  fsdp::backward_hook(
# CHECK-NEXT:  -> (
#
# RUN: fsdp-opt %t/marked.pt --remarks 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
# REMARK: [find-units] unit '.' ({{.*}}GPT), forward methods: forward, generate
# REMARK: [wrap-entry-methods] entry method generate wrapped in the root unit's gather/reshard
