// The catalogue of built-in passes and the default pipeline.
#include <fsdp_opt/passes.h>

#include <mutex>

namespace fsdp_opt {

void registerAllPasses() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& registry = PassRegistry::global();
    registry.add({"specialize-unit-types",
                  "clone class types shared by instances that need different rewrites",
                  specializeUnitTypes});
    registry.add({"lint-sharded-reads",
                  "warn where a non-forward method reads a unit's parameters while sharded",
                  lintShardedReads});
    registry.add({"insert-unit-gathers",
                  "fsdp::all_gather/fsdp::reshard around calls of units' forward methods",
                  insertUnitGathers});
    registry.add({"wrap-entry-methods",
                  "rank check in root methods; root unit gathered inside its forward methods",
                  wrapEntryMethods});
    registry.add({"inline-loop-calls",
                  "inline method calls in loop bodies that reach a gather", inlineLoopCalls});
    registry.add({"eliminate-redundant-gathers",
                  "drop gathers of units already unsharded on every path", eliminateRedundantGathers});
    registry.add({"hoist-loop-gathers",
                  "gather loop-invariant units once per loop, within --max-unsharded-bytes",
                  hoistLoopGathers});
    registry.add({"bucket-gathers",
                  "merge adjacent gathers into one collective up to --bucket-bytes", bucketGathers});
    registry.add({"prefetch-gathers",
                  "start the next unit's gather before the current unit's call (start/wait)",
                  prefetchGathers});
    registry.add({"reshard-on-raise", "fsdp::release_all before every raise", reshardOnRaise});
    registry.add({"verify-fsdp", "check gather/reshard pairing, DCE survival, no sharded reads",
                  verifyFsdp});
  });
}

std::vector<std::string> defaultPipeline() {
  return {
      // Types first: every later pass edits graphs, which belong to types.
      "specialize-unit-types",
      // Lint on the original program, before gathers hide what eager FSDP would do.
      "lint-sharded-reads",
      // Call sites inside graphs, then the entry methods whose callers are outside TorchScript.
      "insert-unit-gathers",
      "wrap-entry-methods",
      // Scheduling: bring the gathers a loop runs into its graph, drop the ones the caller's
      // gathers already cover, then gather loop-invariant units once per loop.
      "inline-loop-calls",
      "eliminate-redundant-gathers",
      "hoist-loop-gathers",
      // Last of the scheduling passes: hoisting is what makes gathers adjacent.
      "bucket-gathers",
      // After bucketing, so a bucket is prefetched whole; what is left per call overlaps.
      "prefetch-gathers",
      // After every insertion, so the release covers all gathers a raise can skip.
      "reshard-on-raise",
      // Always last: the output must satisfy SPEC section 5.
      "verify-fsdp",
  };
}

}  // namespace fsdp_opt
