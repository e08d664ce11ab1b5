# --load-pass-plugin with a real plugin: libfsdp_test_plugin.so (test/plugin/count_gathers.cpp),
# whose fsdp_opt_register_passes() adds `count-gathers` when fsdp-opt loads it.
#
# --list-passes shows the plugin's pass among the built-in ones (sorted); without the plugin it
# is not there.
# RUN: fsdp-opt --load-pass-plugin=%plugin_lib --list-passes | FileCheck %s --check-prefix=LIST
# LIST:      bucket-gathers
# LIST-NEXT: check-hidden-unit-calls
# LIST-NEXT: check-parameter-aliases
# LIST-NEXT: check-unsharded-budget
# LIST-NEXT: count-gathers{{ +}}(test plugin) remark with the number of fsdp::all_gather nodes
# LIST-NEXT: eliminate-redundant-gathers
# LIST:      verify-fsdp
# RUN: fsdp-opt --list-passes | FileCheck %s --check-prefix=BUILTIN --implicit-check-not=count-gathers
# BUILTIN: verify-fsdp
#
# --passes runs it like any pass, here before and after the gathers are inserted.
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models gpt -o %t/gpt.pt
# RUN: fsdp-opt %t/gpt.pt --load-pass-plugin=%plugin_lib --fsdp-unit='blocks.*' --remarks \
# RUN:   --passes=specialize-unit-types,count-gathers,insert-unit-gathers,wrap-entry-methods,count-gathers,verify-fsdp \
# RUN:   2>&1 | FileCheck %s --check-prefix=PIPE
# PIPE: remark: [count-gathers] 0 fsdp::all_gather node(s) in 0 method(s)
# PIPE: remark: [count-gathers] 2 fsdp::all_gather node(s) in 1 method(s)
#
# After the default pipeline, with --stats (its counter) and -o (the output is written).
# RUN: fsdp-opt %t/gpt.pt --load-pass-plugin=%plugin_lib --fsdp-unit='blocks.*' --stats -o %t/out.pt \
# RUN:   --passes=specialize-unit-types,lint-sharded-reads,insert-unit-gathers,wrap-entry-methods,reshard-on-raise,verify-fsdp,count-gathers \
# RUN:   | FileCheck %s --check-prefix=STATS
# STATS: fsdp::all_gather nodes: 2
# RUN: %python -c "import os, sys; sys.exit(0 if os.path.getsize(r'%t/out.pt') > 0 else 1)"
#
# Without the plugin the name is unknown, and the error lists the known passes.
# RUN: not fsdp-opt %t/gpt.pt --fsdp-unit='blocks.*' --passes=count-gathers 2>&1 \
# RUN:   | FileCheck %s --check-prefix=UNKNOWN --implicit-check-not=error:
# UNKNOWN: error: unknown pass 'count-gathers' (known passes: {{.*}}verify-fsdp{{.*}})
#
# A library that does not exist: one `error:` line naming it, exit 1, nothing on stdout.
# RUN: not fsdp-opt --load-pass-plugin=%t/missing.so --list-passes >%t/missing.out 2>%t/missing.err
# RUN: FileCheck %s --check-prefix=MISSING --implicit-check-not=error: < %t/missing.err
# MISSING: {{^}}error: cannot load pass plugin '{{.*}}missing.so': {{.+}}
# RUN: %python -c "import os, sys; sys.exit(os.path.getsize(r'%t/missing.out'))"
#
# Two copies of one plugin register one name twice: an error, never a silent pick.
# RUN: cp %plugin_lib %t/copy.so
# RUN: not fsdp-opt --load-pass-plugin=%plugin_lib --load-pass-plugin=%t/copy.so --list-passes 2>&1 \
# RUN:   | FileCheck %s --check-prefix=TWICE
# TWICE: error: pass 'count-gathers' is registered twice
