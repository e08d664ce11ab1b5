# --help (and -h) describes the usage and every flag of SPEC section 4, exits 0, needs no input.
#
# RUN: %python -m lit_helpers run fsdp-opt --help | FileCheck %s
# CHECK:     [stdout]
# CHECK:     Usage: fsdp-opt
# One line per flag, flag first:
# CHECK-DAG: {{^ *--fsdp-unit }}
# CHECK-DAG: {{^ *--fsdp-unit-type }}
# CHECK-DAG: {{^ *--fsdp-min-unit-params }}
# CHECK-DAG: {{^ *--max-unsharded-bytes }}
# CHECK-DAG: {{^ *--bucket-bytes }}
# CHECK-DAG: {{^ *--param-dtype }}
# CHECK-DAG: {{^ *--forward-method }}
# CHECK-DAG: {{^ *--world-size }}
# CHECK-DAG: {{^ *-o }}
# CHECK-DAG: {{^ *--print-ir }}
# CHECK-DAG: {{^ *--method }}
# CHECK-DAG: {{^ *--passes }}
# CHECK-DAG: {{^ *--list-passes }}
# CHECK-DAG: {{^ *--load-pass-plugin }}
# CHECK-DAG: {{^ *--load-op-library }}
# CHECK-DAG: {{^ *--print-ir-after }}
# CHECK-DAG: {{^ *--print-ir-after-all }}
# CHECK-DAG: {{^ *--verify-each }}
# CHECK-DAG: {{^ *--remarks }}
# CHECK-DAG: {{^ *--stats }}
# CHECK-DAG: {{^ *--version }}
# CHECK:     [stderr]
# CHECK-NEXT: [exit 0]
#
# RUN: fsdp-opt -h | FileCheck %s --check-prefix=SHORT
# SHORT: Usage: fsdp-opt
#
# An unknown flag is a usage error: non-zero, one `error:` line naming it.
# RUN: %python -m lit_helpers run fsdp-opt --frobnicate | FileCheck %s --check-prefix=BAD --implicit-check-not=error:
# BAD:      [stderr]
# BAD-NEXT: error: {{.*}}--frobnicate
# BAD-NEXT: [exit {{[1-9][0-9]*}}]
