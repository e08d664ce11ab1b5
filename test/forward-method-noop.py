# A forward method registered on a module that is NOT a unit is a no-op (FSDP2's rule),
# reported as a remark; it changes nothing in the output.
#
# RUN: %python -m fsdp_models gpt -o %t.pt
# RUN: fsdp-opt %t.pt '--fsdp-unit=blocks.*' --forward-method=.:generate --remarks 2>&1 >/dev/null \
# RUN:   | FileCheck %s --check-prefix=REMARK
# REMARK: remark: [find-units] --forward-method=.:generate on module '.' is a no-op: the module is not an FSDP unit
# REMARK-NOT: error:
#
# No remark without --remarks (exit 0, stderr empty).
# RUN: %python -m lit_helpers run fsdp-opt %t.pt '--fsdp-unit=blocks.*' --forward-method=.:generate \
# RUN:   | FileCheck %s --check-prefix=QUIET --match-full-lines
# QUIET:      [stdout]
# QUIET-NEXT: [stderr]
# QUIET-NEXT: [exit 0]
#
# The registration changes nothing: the IR is the one without it, and generate never gathers
# the root's group (the 67-row tied embedding), only the blocks.
# RUN: fsdp-opt %t.pt '--fsdp-unit=blocks.*' --forward-method=.:generate --print-ir > %t.noop.ir
# RUN: fsdp-opt %t.pt '--fsdp-unit=blocks.*' --print-ir > %t.plain.ir
# RUN: %python -m lit_helpers diff %t.plain.ir %t.noop.ir
# RUN: FileCheck %s < %t.noop.ir
# CHECK-LABEL: // . : __torch__.GPT :: generate
# CHECK:       fsdp::check_rank
# CHECK-NOT:   prim::Constant[value=[67
# CHECK:       return
#
# The same through the marker: `_fsdp_forward_methods` on a module that is no unit.
# RUN: %python -m fsdp_models gpt -o %t.marked.pt --forward-method .:generate --unit blocks.0
# RUN: fsdp-opt %t.marked.pt --remarks 2>&1 >/dev/null | FileCheck %s --check-prefix=MARKER
# MARKER: remark: [find-units] marker _fsdp_forward_methods['generate'] on module '.' is a no-op: the module is not an FSDP unit
