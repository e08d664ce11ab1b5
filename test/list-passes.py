# --list-passes prints every registered pass, one line each (name, then a summary), sorted by
# name, on stdout; exit 0, no input needed.
#
# RUN: %python -m lit_helpers run fsdp-opt --list-passes | FileCheck %s --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: bucket-gathers {{[^ ].+}}
# CHECK-NEXT: check-hidden-unit-calls {{[^ ].+}}
# CHECK-NEXT: check-parameter-aliases {{[^ ].+}}
# CHECK-NEXT: check-unsharded-budget {{[^ ].+}}
# CHECK-NEXT: eliminate-redundant-gathers {{[^ ].+}}
# CHECK-NEXT: expand-parameter-lists {{[^ ].+}}
# CHECK-NEXT: hoist-loop-gathers {{[^ ].+}}
# CHECK-NEXT: inline-loop-calls {{[^ ].+}}
# CHECK-NEXT: insert-unit-gathers {{[^ ].+}}
# CHECK-NEXT: lint-sharded-reads {{[^ ].+}}
# CHECK-NEXT: lower-indexed-module-calls {{[^ ].+}}
# CHECK-NEXT: plan-gather-lifetimes {{[^ ].+}}
# CHECK-NEXT: prefetch-gathers {{[^ ].+}}
# CHECK-NEXT: rank-uniform-control-flow {{[^ ].+}}
# CHECK-NEXT: reshard-on-raise {{[^ ].+}}
# CHECK-NEXT: specialize-no-grad {{[^ ].+}}
# CHECK-NEXT: specialize-unit-types {{[^ ].+}}
# CHECK-NEXT: verify-fsdp {{[^ ].+}}
# CHECK-NEXT: wrap-entry-methods {{[^ ].+}}
# CHECK-NEXT: [stderr]
# CHECK-NEXT: [exit 0]
#
# The summaries say what each pass does.
# RUN: fsdp-opt --list-passes | FileCheck %s --check-prefix=SUMMARY
# SUMMARY: bucket-gathers {{.*}}collective
# SUMMARY: check-hidden-unit-calls {{.*}}torch.jit.fork
# SUMMARY: check-parameter-aliases {{.*}}in-place
# SUMMARY: expand-parameter-lists {{.*}}_flat_weights
# SUMMARY: hoist-loop-gathers {{.*}}loop
# SUMMARY: insert-unit-gathers {{.*}}fsdp::all_gather/fsdp::reshard
# SUMMARY: lower-indexed-module-calls {{.*}}one branch per element
# SUMMARY: reshard-on-raise {{.*}}release_all
# SUMMARY: specialize-no-grad {{.*}}grad mode
# SUMMARY: specialize-unit-types {{.*}}types
# SUMMARY: verify-fsdp {{.*}}check
#
# Every summary starts in the same column, however long the longest name.
# RUN: fsdp-opt --list-passes > %t.list
# RUN: %python -c "import re, sys; cols = {len(m.group(1)) for m in (re.match(r'(  \S+ +)\S', l) for l in open(sys.argv[1])) if m}; sys.exit(0 if len(cols) == 1 else 'summary columns %%s' %% sorted(cols))" %t.list
