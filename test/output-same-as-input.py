# -o naming the input itself (however spelled) is an error: fsdp-opt never modifies its input.
# One `error:` line, exit 1, and the input's bytes are unchanged.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models two_blocks -o %t/in.pt
# RUN: %python -m lit_helpers sha256 %t/in.pt > %t/before
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=. -o %t/in.pt \
# RUN:   | FileCheck %s --implicit-check-not=error: --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: output '{{.*}}in.pt' is the input; fsdp-opt never modifies its input
# CHECK-NEXT: [exit 1]
#
# Spelled differently (through `.`), and as a directory with --world-size=2.
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=. -o %t/./in.pt \
# RUN:   | FileCheck %s --check-prefix=OTHER --implicit-check-not=error:
# OTHER:      error: output '{{.*}}' is the input; fsdp-opt never modifies its input
# OTHER-NEXT: [exit 1]
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=. --world-size=2 -o %t/in.pt \
# RUN:   | FileCheck %s --check-prefix=DIR --implicit-check-not=error:
# DIR:      [stderr]
# DIR-NEXT: error: {{.*}}in.pt{{.*}}
# DIR-NEXT: [exit 1]
#
# RUN: %python -m lit_helpers sha256 %t/in.pt > %t/after
# RUN: %python -m lit_helpers diff %t/before %t/after
# RUN: %python -m lit_helpers tree %t | FileCheck %s --check-prefix=TREE --match-full-lines
# TREE:      after {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NEXT: before {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NEXT: in.pt {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NOT:  {{.}}
