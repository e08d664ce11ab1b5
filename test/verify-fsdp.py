# verify-fsdp always runs last in the default pipeline. With --world-size=2 the unregistered
# torchvision case (the parent calls backbone._forward_impl, which no gather covers) would
# compute on shards: the verifier rejects it with one `error:` line naming the parameter, the
# unit and the methods (further reads as notes), exit 1, and -o writes NOTHING.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models resnet -o %t/in.pt
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=backbone --world-size=2 -o %t/out \
# RUN:   | FileCheck %s --implicit-check-not=error:
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: warning: method '_forward_impl' of unit 'backbone' is not a forward method{{.*}}--forward-method=backbone:_forward_impl
# CHECK-NEXT: error: parameter 'backbone.conv1.weight' of unit 'backbone' is read while sharded in method 'forward' of 'backbone.conv1' (entry method 'forward')
# CHECK-NEXT: note: parameter 'backbone.bn1.weight' of unit 'backbone' is read while sharded
# CHECK:      note: parameter 'backbone.fc.bias' of unit 'backbone' is read while sharded in method 'forward' of 'backbone.fc' (entry method 'forward')
# CHECK-NEXT: [exit 1]
#
# Nothing was written: no output directory, no temporary left beside it.
# RUN: %python -m lit_helpers tree %t | FileCheck %s --check-prefix=NOTHING --implicit-check-not=out --match-full-lines
# NOTHING: in.pt {{[0-9]+}} {{[0-9a-f]+}}
#
# The verifier alone after the rewrite (no scheduling pass) finds the same read.
# RUN: not fsdp-opt %t/in.pt --fsdp-unit=backbone --world-size=2 \
# RUN:   --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods,verify-fsdp 2>&1 \
# RUN:   | FileCheck %s --check-prefix=ALONE --implicit-check-not=warning:
# ALONE: error: parameter 'backbone.conv1.weight' of unit 'backbone' is read while sharded in method 'forward' of 'backbone.conv1' (entry method 'forward')
#
# The same input with the fix passes the verifier and writes the directory.
# RUN: fsdp-opt %t/in.pt --fsdp-unit=backbone --forward-method=backbone:_forward_impl --world-size=2 -o %t/out
# RUN: %python -m lit_helpers tree %t/out | FileCheck %s --check-prefix=WRITTEN
# WRITTEN:      manifest.json
# WRITTEN-NEXT: rank0.pt
# WRITTEN-NEXT: rank1.pt
