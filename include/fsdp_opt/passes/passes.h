// Entry points of the fsdp-opt passes, one per file in passes/. Each returns whether it changed
// the module and reports through the context's DiagnosticSink. Each file also gives its
// catalogue entry (`...Pass()`: the flag, the one-line summary --list-passes prints, the entry
// point), so a pass's name and summary are written once, beside it; registerAllPasses() adds
// those entries and defaultPipeline() orders them.
#pragma once

#include <fsdp_opt/passes/pass_manager.h>

namespace fsdp_opt {

// expand-parameter-lists: reads of a list attribute that holds parameters (nn.LSTM's
// _flat_weights) become reads of those parameters, and the attribute is emptied.
bool expandParameterLists(PassContext& context);
PassInfo expandParameterListsPass();

// specialize-unit-types: gives instances that need different rewrites their own class types.
bool specializeUnitTypes(PassContext& context);
PassInfo specializeUnitTypesPass();

// lint-sharded-reads: warns where a method that is not a forward method reads a unit's
// parameters while eager FSDP would have them sharded, with the flag that fixes it.
bool lintShardedReads(PassContext& context);
PassInfo lintShardedReadsPass();

// check-parameter-aliases: errors where a method writes a unit's parameter in place or lets a
// value aliasing one outlive its gather (returned, or stored in module state).
bool checkParameterAliases(PassContext& context);
PassInfo checkParameterAliasesPass();

// lower-indexed-module-calls: calls on a ModuleList/ModuleDict element chosen at run time (through
// a module interface) become a prim::If per element, each calling its element by class.
bool lowerIndexedModuleCalls(PassContext& context);
PassInfo lowerIndexedModuleCallsPass();

// check-hidden-unit-calls: errors where a module holding unit parameters is handed to
// torch.jit.fork or held through a module interface, where no gather can be placed around its calls.
bool checkHiddenUnitCalls(PassContext& context);
PassInfo checkHiddenUnitCallsPass();

// insert-unit-gathers: fsdp::all_gather / fsdp::reshard around every call of a unit's forward
// method, in the caller's graph, at any block depth.
bool insertUnitGathers(PassContext& context);
PassInfo insertUnitGathersPass();

// wrap-entry-methods: rank check in every root method; gather/reshard of the root unit inside
// the body of each root method that reads the root's group (its forward methods among them).
bool wrapEntryMethods(PassContext& context);
PassInfo wrapEntryMethodsPass();

// check-unsharded-budget: fails when --max-unsharded-bytes is below the least peak of
// unsharded bytes any schedule of the rewrite can keep, naming that peak and what needs it.
bool checkUnshardedBudget(PassContext& context);
PassInfo checkUnshardedBudgetPass();

// plan-gather-lifetimes: per entry method, gathers the units it reaches once for the whole call,
// costliest (most gathered, inside loops) first, within --max-unsharded-bytes.
bool planGatherLifetimes(PassContext& context);
PassInfo planGatherLifetimesPass();

// inline-loop-calls: inlines, into loop bodies, method calls that reach an fsdp::all_gather.
bool inlineLoopCalls(PassContext& context);
PassInfo inlineLoopCallsPass();

// eliminate-redundant-gathers: removes gathers of units already unsharded at that point.
bool eliminateRedundantGathers(PassContext& context);
PassInfo eliminateRedundantGathersPass();

// hoist-loop-gathers: moves loop-invariant gathers out of loops within --max-unsharded-bytes.
bool hoistLoopGathers(PassContext& context);
PassInfo hoistLoopGathersPass();

// bucket-gathers: merges adjacent gathers (and reshards) into one collective up to --bucket-bytes.
bool bucketGathers(PassContext& context);
PassInfo bucketGathersPass();

// prefetch-gathers: splits sequential gathers into start/wait so the next unit's collective
// overlaps the current unit's call, within --max-unsharded-bytes.
bool prefetchGathers(PassContext& context);
PassInfo prefetchGathersPass();

// rank-uniform-control-flow: makes loops and branches whose collectives depend on the ranks'
// data issue the same collectives on every rank (ranks agree per loop iteration; a branch's
// arms join each other's collectives, or gather both arms' units at once).
bool rankUniformControlFlow(PassContext& context);
PassInfo rankUniformControlFlowPass();

// reshard-on-raise: fsdp::release_all before every prim::RaiseException.
bool reshardOnRaise(PassContext& context);
PassInfo reshardOnRaisePass();

// specialize-no-grad: entry methods that reach training ops (backward hooks) call a copy
// without them when grad mode is off.
bool specializeNoGrad(PassContext& context);
PassInfo specializeNoGradPass();

// verify-fsdp: the invariants of SPEC section 5.
bool verifyFsdp(PassContext& context);
PassInfo verifyFsdpPass();

}  // namespace fsdp_opt
