# --load-pass-plugin=LIB.so dlopens a shared library (whose static PassRegistration objects add
# passes). A library that cannot be loaded is an error naming it and the loader's reason; a
# valid library that registers nothing leaves the pass list as it was.
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
# The runtime library is a valid shared library with no passes: the same pass list, exit 0.
# RUN: fsdp-opt --list-passes > %t/plain.list
# RUN: fsdp-opt --load-pass-plugin=%runtime_lib --list-passes > %t/plugin.list
# RUN: %python -m lit_helpers diff %t/plain.list %t/plugin.list
# RUN: FileCheck %s --check-prefix=NOPASS < %t/plugin.list
# NOPASS: insert-unit-gathers
# NOPASS: wrap-entry-methods
