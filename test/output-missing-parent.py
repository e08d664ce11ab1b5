# -o into a directory that does not exist is an error (one `error:` line naming the path,
# exit 1), for a single file and for a sharded directory alike; nothing is created, not even
# the parent.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models two_blocks -o %t/in.pt
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=. -o %t/no/such/out.pt \
# RUN:   | FileCheck %s --implicit-check-not=error: --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: cannot write '{{.*}}/no/such/out.pt': {{.*}}'{{.*}}/no/such' does not exist
# CHECK-NEXT: [exit 1]
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=. --world-size=2 -o %t/no/out \
# RUN:   | FileCheck %s --check-prefix=DIR --implicit-check-not=error: --match-full-lines
# DIR:      [stdout]
# DIR-NEXT: [stderr]
# DIR-NEXT: error: cannot write '{{.*}}/no/out': {{.*}}'{{.*}}/no' does not exist
# DIR-NEXT: [exit 1]
#
# RUN: %python -m lit_helpers tree %t | FileCheck %s --check-prefix=TREE --match-full-lines
# TREE:      in.pt {{[0-9]+}} {{[0-9a-f]+}}
# TREE-NOT:  {{.}}
