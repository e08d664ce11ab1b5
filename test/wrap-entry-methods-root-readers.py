# wrap-entry-methods: a root method that reads the root unit's group gets the root's gather in
# its own body whether it is registered or not (SPEC section 5: entry methods are wrapped), as
# timm's forward_features/forward_head and torchvision's _process_input need. The model
# (Inputs/root_methods_model.py): `_embed` reads `pos` and is called from forward only,
# `forward_features` is called from outside only (it reads `pos` through _embed), `forward_head`
# reads `head.weight` and is called both from forward and from outside; `describe` reads
# nothing and gets no gather.
#
# RUN: %python -m root_methods_model %t.pt
# RUN: fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit=block --passes=specialize-unit-types,insert-unit-gathers,wrap-entry-methods --print-ir > %t.ir
#
# A helper called from forward:
# RUN: FileCheck %s --check-prefix=EMBED < %t.ir
# EMBED-LABEL: // . : __torch__.RootReaders :: _embed
# EMBED:       = fsdp::check_rank(
# EMBED-NEXT:  prim::GetAttr[name="pos"](%self
# EMBED-NEXT:  prim::GetAttr[name="head"](%self
# EMBED:       %[[G:.*]] : Tensor[] = fsdp::all_gather(
# EMBED-NOT:   fsdp::
# EMBED:       = fsdp::reshard(%[[G]],
# EMBED-NEXT:  prim::TupleConstruct
# EMBED-NEXT:  fsdp::backward_hook(
# EMBED-NEXT:  return
#
# A helper called from outside only (the root's group is gathered, and the nested unit `block`
# keeps its own gather around its call):
# RUN: FileCheck %s --check-prefix=FEATURES < %t.ir
# FEATURES-LABEL: // . : __torch__.RootReaders :: forward_features
# FEATURES:       = fsdp::check_rank(
# FEATURES:       %[[ROOT:.*]] : Tensor[] = fsdp::all_gather(
# FEATURES:       prim::CallMethod[name="_embed"](%self
# FEATURES:       %[[BLOCK:.*]] : Tensor[] = fsdp::all_gather(
# FEATURES-NEXT:  prim::CallMethod[name="forward"](%block
# FEATURES-NEXT:  = fsdp::reshard(%[[BLOCK]],
# FEATURES-NEXT:  prim::TupleConstruct
# FEATURES-NEXT:  fsdp::backward_hook(
# FEATURES-NEXT:  = fsdp::reshard(%[[ROOT]],
# FEATURES-NEXT:  prim::TupleConstruct
# FEATURES-NEXT:  fsdp::backward_hook(
# FEATURES-NEXT:  return
#
# Both (forward calls it, and a user may): gathered in its body, so forward's call nests.
# RUN: FileCheck %s --check-prefix=HEAD < %t.ir
# HEAD-LABEL: // . : __torch__.RootReaders :: forward_head
# HEAD:       = fsdp::check_rank(
# HEAD:       %[[G:.*]] : Tensor[] = fsdp::all_gather(
# HEAD-NEXT:  prim::GetAttr[name="head"](%self
# HEAD-NEXT:  prim::CallMethod[name="forward"](%head
# HEAD-NEXT:  = fsdp::reshard(%[[G]],
# HEAD-NEXT:  prim::TupleConstruct
# HEAD-NEXT:  fsdp::backward_hook(
# HEAD-NEXT:  return
#
# forward, a registered forward method, as before; describe reads nothing: no gather.
# RUN: FileCheck %s --check-prefix=OTHERS < %t.ir
# OTHERS-LABEL: // . : __torch__.RootReaders :: forward
# OTHERS:       = fsdp::check_rank(
# OTHERS-NEXT:  prim::GetAttr[name="pos"](%self
# OTHERS:       fsdp::all_gather(
# OTHERS-LABEL: // . : __torch__.RootReaders :: describe
# OTHERS:       = fsdp::check_rank(
# OTHERS-NOT:   fsdp::
# OTHERS:       return
#
# What the lint says (a remark, no warning), and what the rewrite did.
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --fsdp-unit=. --fsdp-unit=block --world-size=2 --remarks -o %t.out \
# RUN:   | FileCheck %s --check-prefix=REMARKS --implicit-check-not=warning: --implicit-check-not=error:
# REMARKS-DAG: remark: [lint-sharded-reads] root method '_embed' is not a forward method, but reads parameter 'pos' (in method '_embed' of '.') that eager FSDP keeps sharded there; wrap-entry-methods gathers the root unit in its body
# REMARKS-DAG: remark: [lint-sharded-reads] root method 'forward_head' is not a forward method, but reads parameter 'head.weight' (in method 'forward' of 'head') that eager FSDP keeps sharded there; wrap-entry-methods gathers the root unit in its body
# REMARKS-DAG: remark: [wrap-entry-methods] entry method _embed wrapped in the root unit's gather/reshard (not a forward method, but reads parameter 'pos' of the root's group)
# REMARKS-DAG: remark: [wrap-entry-methods] entry method forward_features wrapped in the root unit's gather/reshard (not a forward method, but reads parameter 'pos' of the root's group)
# REMARKS-DAG: remark: [wrap-entry-methods] entry method forward_head wrapped in the root unit's gather/reshard (not a forward method, but reads parameter 'head.weight' of the root's group)
# REMARKS-DAG: remark: [wrap-entry-methods] entry method forward wrapped in the root unit's gather/reshard
# REMARKS:     [exit 0]
#
# Without the root a unit, nothing of the root is sharded: no root gather anywhere.
# RUN: fsdp-opt %t.pt --fsdp-unit=block --world-size=2 --print-ir --method=forward_head | FileCheck %s --check-prefix=PLAIN
# PLAIN-LABEL: // . : __torch__.RootReaders :: forward_head
# PLAIN:       fsdp::check_rank(
# PLAIN-NOT:   fsdp::all_gather
# PLAIN:       return
