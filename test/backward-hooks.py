# What a training step executes (SPEC section 10, docs/design.md "Training"): the root unit's
# entry method gathers, reshards, then hooks its own outputs for backward
# (fsdp::backward_hook with the gather's parameter list, rows and unit, the method's output and
# its inputs), and, above world size 1, hands its replicated parameters (the 0-dim `scale`) to
# fsdp::replicated_params, whose gradients are then averaged over the ranks. At world size 1
# nothing is replicated across ranks, so there is no such op.
#
# RUN: %python -m fsdp_models zero_dim -o %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --world-size=2 --print-ir --method=forward | FileCheck %s
# CHECK-LABEL: // . : __torch__.ZeroDimParam :: forward
# CHECK:       = fsdp::check_rank(
# CHECK:       %[[LIST:.*]] : Tensor[] = prim::ListConstruct(
# CHECK-NEXT:  %[[PATH:.*]] : str = prim::GetAttr[name="_fsdp_unit_path"](%self
# CHECK-NEXT:  %[[ROWS:.*]] : int[] = prim::Constant[value=[8, 8]]()
# CHECK-NEXT:  %[[FULL:.*]] : Tensor[] = fsdp::all_gather(%[[LIST]], %[[ROWS]], %[[PATH]])
# CHECK:       %[[SCALE:.*]] : Tensor = prim::GetAttr[name="scale"](%self
# CHECK-NEXT:  %[[REPLICATED:.*]] : Tensor[] = prim::ListConstruct(%[[SCALE]])
# CHECK-NEXT:  = fsdp::replicated_params(%[[REPLICATED]])
# CHECK:       = fsdp::reshard(%[[FULL]], %[[PATH]])
# CHECK-NEXT:  %[[IN:.*]] : (Tensor) = prim::TupleConstruct(%x.1)
# CHECK-NEXT:  = fsdp::backward_hook(%[[LIST]], %[[ROWS]], %[[PATH]], %[[OUT:.*]], %[[IN]], %[[NOBUDGET:.*]])
# CHECK-NEXT:  -> (%[[OUT]])
# That is the path a call takes with grad mode; without, it calls a copy with no training op
# (specialize-no-grad).
# CHECK:       prim::CallMethod[name="_fsdp_no_grad_forward"](%self
#
# RUN: fsdp-opt %t.pt --fsdp-unit=. --print-ir --method=forward | FileCheck %s --check-prefix=W1
# W1-LABEL: // . : __torch__.ZeroDimParam :: forward
# W1:       %[[NB:.*]] : int = prim::Constant[value=-1]()
# W1-NOT:   fsdp::replicated_params
# W1:       fsdp::backward_hook({{.*}}, %[[NB]])
#
# The hook's last operand is the budget backward prefetching keeps (-1 above: none).
# RUN: fsdp-opt %t.pt --fsdp-unit=. --world-size=2 --max-unsharded-bytes=1MiB --print-ir --method=forward \
# RUN:   | FileCheck %s --check-prefix=BUDGET
# BUDGET-LABEL: // . : __torch__.ZeroDimParam :: forward
# BUDGET:       %[[B:.*]] : int = prim::Constant[value=1048576]()
# BUDGET:       fsdp::backward_hook({{.*}}, %[[B]])
