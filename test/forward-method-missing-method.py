# Registering a METHOD that a matched unit does not have is an error naming the module and the
# method (exit 1, one `error:` line), by flag and by marker alike.
#
# RUN: %python -m fsdp_models gpt -o %t.pt
# RUN: %python -m lit_helpers run fsdp-opt %t.pt '--fsdp-unit=blocks.*' --forward-method=blocks.1:generate \
# RUN:   | FileCheck %s --implicit-check-not=error:
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: module 'blocks.1' has no method 'generate' (registered by --forward-method=blocks.1:generate{{.*}}
# CHECK-NEXT: [exit 1]
#
# The same through the `_fsdp_forward_methods` marker on a unit.
# RUN: %python -m fsdp_models gpt -o %t.marked.pt --unit blocks.0 --forward-method blocks.0:decode
# RUN: %python -m lit_helpers run fsdp-opt %t.marked.pt \
# RUN:   | FileCheck %s --check-prefix=MARKER --implicit-check-not=error:
# MARKER:      [stderr]
# MARKER-NEXT: error: module 'blocks.0' has no method 'decode' (registered by marker _fsdp_forward_methods{{.*}}
# MARKER-NEXT: [exit 1]
