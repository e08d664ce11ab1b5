// Entry points of the fsdp-opt passes, one per file in passes/. Each returns whether it changed
// the module and reports through the context's DiagnosticSink. registerAllPasses() registers
// them under the names given here; defaultPipeline() orders them.
#pragma once

#include <fsdp_opt/pass_manager.h>

namespace fsdp_opt {

// specialize-unit-types: gives instances that need different rewrites their own class types.
bool specializeUnitTypes(PassContext& context);

// lint-sharded-reads: warns where a method that is not a forward method reads a unit's
// parameters while eager FSDP would have them sharded, with the flag that fixes it.
bool lintShardedReads(PassContext& context);

// insert-unit-gathers: fsdp::all_gather / fsdp::reshard around every call of a unit's forward
// method, in the caller's graph, at any block depth.
bool insertUnitGathers(PassContext& context);

// wrap-entry-methods: rank check in every root method; gather/reshard of the root unit inside
// the body of its forward methods.
bool wrapEntryMethods(PassContext& context);

// inline-loop-calls: inlines, into loop bodies, method calls that reach an fsdp::all_gather.
bool inlineLoopCalls(PassContext& context);

// eliminate-redundant-gathers: removes gathers of units already unsharded at that point.
bool eliminateRedundantGathers(PassContext& context);

// hoist-loop-gathers: moves loop-invariant gathers out of loops within --max-unsharded-bytes.
bool hoistLoopGathers(PassContext& context);

// bucket-gathers: merges adjacent gathers (and reshards) into one collective up to --bucket-bytes.
bool bucketGathers(PassContext& context);

// prefetch-gathers: splits sequential gathers into start/wait so the next unit's collective
// overlaps the current unit's call, within --max-unsharded-bytes.
bool prefetchGathers(PassContext& context);

// reshard-on-raise: fsdp::release_all before every prim::RaiseException.
bool reshardOnRaise(PassContext& context);

// verify-fsdp: the invariants of SPEC section 5.
bool verifyFsdp(PassContext& context);

}  // namespace fsdp_opt
