# --load-pass-plugin=LIB.so dlopens a shared library and calls its fsdp_opt_register_passes(),
# which adds its passes. A library that cannot be loaded is an error naming it and the loader's
# reason; a shared library without that entry point is not a plugin: an error, not a silent no-op.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m lit_helpers run fsdp-opt --load-pass-plugin=%t/missing.so --list-passes \
# RUN:   | FileCheck %s --implicit-check-not=error: --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: cannot load pass plugin '{{.*}}missing.so': {{.+}}
# CHECK-NEXT: [exit 1]
#
# RUN: %python -c "open('%t/text.so', 'w').write('not a shared library\n')"
# RUN: %python -m lit_helpers run fsdp-opt --load-pass-plugin=%t/text.so --list-passes \
# RUN:   | FileCheck %s --check-prefix=TEXT --implicit-check-not=error: --match-full-lines
# TEXT:      [stdout]
# TEXT-NEXT: [stderr]
# TEXT-NEXT: error: cannot load pass plugin '{{.*}}text.so': {{.+}}
# TEXT-NEXT: [exit 1]
#
# The runtime library is a valid shared library, but no plugin.
# RUN: %python -m lit_helpers run fsdp-opt --load-pass-plugin=%runtime_lib --list-passes \
# RUN:   | FileCheck %s --check-prefix=NOPLUGIN --implicit-check-not=error: --match-full-lines
# NOPLUGIN:      [stdout]
# NOPLUGIN-NEXT: [stderr]
# NOPLUGIN-NEXT: error: '{{.*}}libfsdp_runtime.so' is not a pass plugin: it does not export fsdp_opt_register_passes()
# NOPLUGIN-NEXT: [exit 1]
