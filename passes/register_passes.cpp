// The catalogue of built-in passes and the default pipeline. Names and summaries live beside
// each pass (its `...Pass()` entry); this file only lists and orders them.
#include <fsdp_opt/passes/passes.h>

#include <mutex>

namespace fsdp_opt {

void registerAllPasses() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& registry = PassRegistry::global();
    for (PassInfo pass : {lowerIndexedModuleCallsPass(), expandParameterListsPass(), specializeUnitTypesPass(), lintShardedReadsPass(), checkHiddenUnitCallsPass(), checkParameterAliasesPass(),
                          insertUnitGathersPass(),
                          wrapEntryMethodsPass(), checkUnshardedBudgetPass(), planGatherLifetimesPass(), inlineLoopCallsPass(), eliminateRedundantGathersPass(),
                          hoistLoopGathersPass(), bucketGathersPass(), prefetchGathersPass(),
                          rankUniformControlFlowPass(), reshardOnRaisePass(), specializeNoGradPass(), verifyFsdpPass()}) {
      registry.add(std::move(pass));
    }
  });
}

std::vector<std::string> defaultPipeline() {
  return {
      // First: a call on a container element chosen at run time becomes calls every later pass
      // can see (one branch per element).
      lowerIndexedModuleCallsPass().name,
      // Before anything reads parameters: a list attribute holding them would keep them whole.
      expandParameterListsPass().name,
      // Types first: every later pass edits graphs, which belong to types.
      specializeUnitTypesPass().name,
      // Calls no gather can be placed around (a forked task, an interface) are refused first.
      checkHiddenUnitCallsPass().name,
      // Lint on the original program, before gathers hide what eager FSDP would do.
      lintShardedReadsPass().name,
      // Also on the original program: what a model does with a parameter that sharding would
      // drop (an in-place write) or cut short (an alias that outlives the gather) is refused.
      checkParameterAliasesPass().name,
      // Call sites inside graphs, then the entry methods whose callers are outside TorchScript.
      insertUnitGathersPass().name,
      wrapEntryMethodsPass().name,
      // Before scheduling: the rewrite's peak is the least any schedule can keep, so a budget
      // below it is refused here rather than silently exceeded.
      checkUnshardedBudgetPass().name,
      // Scheduling: hold what fits for the whole entry call (the widest span), bring the gathers
      // a loop runs into its graph, drop the ones the held or the caller's gathers already
      // cover, then gather what is left and loop-invariant once per loop.
      planGatherLifetimesPass().name,
      inlineLoopCallsPass().name,
      eliminateRedundantGathersPass().name,
      hoistLoopGathersPass().name,
      // Last of the scheduling passes: hoisting is what makes gathers adjacent.
      bucketGathersPass().name,
      // After bucketing, so a bucket is prefetched whole; what is left per call overlaps.
      prefetchGathersPass().name,
      // On the final schedule: only collectives left in data-dependent loops and branches need
      // the ranks to agree, and a hoisted gather costs no agreement.
      rankUniformControlFlowPass().name,
      // After every insertion, so the release covers all gathers a raise can skip.
      reshardOnRaisePass().name,
      // On the finished schedule, which the copies for calls without grad mode repeat.
      specializeNoGradPass().name,
      // Always last: the output must satisfy SPEC section 5.
      verifyFsdpPass().name,
  };
}

}  // namespace fsdp_opt
