# --remarks: one line per decision on stderr, `remark: [origin] ...`: each unit found (with its
# type and forward methods), each call site rewritten, each entry method wrapped, each no-op
# registration, tied and 0-dim parameters, the least peak of unsharded bytes, the units held for a
# whole call, the gathers removed and merged, the entry methods given a path without grad mode; without the flag there are none (and stdout is the
# same either way).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models nested -o %t/in.pt
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --forward-method=head:forward --remarks --print-ir 2>%t/remarks >%t/with.ir
# RUN: FileCheck %s --match-full-lines --implicit-check-not=remark: < %t/remarks
# CHECK:      remark: [find-units] --forward-method=head:forward on module 'head' is a no-op: the module is not an FSDP unit
# CHECK-NEXT: remark: [find-units] unit '.' (__torch__.NestedUnits), forward methods: forward
# CHECK-NEXT: remark: [find-units] unit 'outer' (__torch__.Outer), forward methods: forward
# CHECK-NEXT: remark: [find-units] unit 'outer.inner' (__torch__.Inner), forward methods: forward
# CHECK-NEXT: remark: [insert-unit-gathers] call site rewritten: unit 'outer' method forward in __torch__.NestedUnits::forward
# CHECK-NEXT: remark: [insert-unit-gathers] call site rewritten: unit 'outer.inner' method forward in __torch__.Outer::forward
# CHECK-NEXT: remark: [wrap-entry-methods] entry method forward wrapped in the root unit's gather/reshard
# CHECK-NEXT: remark: [check-unsharded-budget] least peak of unsharded parameters: 1152 bytes in entry method 'forward', units '.' (288 bytes), 'outer' (576 bytes), 'outer.inner' (288 bytes) unsharded together
# CHECK-NEXT: remark: [plan-gather-lifetimes] 2 unit(s) held for the whole call of __torch__.NestedUnits::forward: 'outer', 'outer.inner' (static peak 1152 bytes)
# CHECK-NEXT: remark: [eliminate-redundant-gathers] 1 redundant gather(s) removed in __torch__.NestedUnits::forward
# CHECK-NEXT: remark: [bucket-gathers] merged two adjacent gathers into one collective of 864 bytes in __torch__.NestedUnits::forward
# CHECK-NEXT: remark: [bucket-gathers] merged two adjacent gathers into one collective of 1152 bytes in __torch__.NestedUnits::forward
# CHECK-NEXT: remark: [specialize-no-grad] 1 entry method(s) get a path without training ops for calls without grad mode
#
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=. --forward-method=head:forward \
# RUN:   | FileCheck %s --check-prefix=QUIET --match-full-lines
# QUIET:      [stdout]
# QUIET-NEXT: [stderr]
# QUIET-NEXT: [exit 0]
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --forward-method=head:forward --print-ir >%t/without.ir
# RUN: %python -m lit_helpers diff %t/with.ir %t/without.ir
