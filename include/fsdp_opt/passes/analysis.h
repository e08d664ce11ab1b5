// The analyses that build the FsdpPlan. PassContext::plan() runs them in this order.
#pragma once

#include <fsdp_opt/passes/diagnostics.h>
#include <fsdp_opt/passes/options.h>
#include <fsdp_opt/passes/plan.h>

#include <torch/csrc/jit/api/module.h>

#include <string>
#include <utility>
#include <vector>

namespace fsdp_opt {

// Units from --fsdp-unit patterns and `_fsdp_unit` markers; forward methods from
// --forward-method and `_fsdp_forward_methods` markers (SPEC section 3). Fills plan.units with
// empty groups. Errors: a pattern matching no module, a registered method a unit lacks.
// Remarks: each unit found, each registration on a non-unit (a no-op, as in FSDP2).
bool findUnits(const torch::jit::Module& root, const PipelineOptions& options,
               DiagnosticSink& diagnostics, FsdpPlan& plan);

// Parameter groups by FSDP2's nesting rule; tied parameters join the nearest unit holding all of
// their slots (SPEC section 2). Error when no unit holds all slots of a tie that some unit owns.
bool collectParameterGroups(const torch::jit::Module& root, DiagnosticSink& diagnostics,
                            FsdpPlan& plan);

// Error when the plan shards nothing: units that hold no parameter (a frozen or quantized model's
// weights are not parameters), or no unit at all from world size 2 on.
bool checkSomethingIsSharded(const torch::jit::Module& root, int64_t worldSize, const FsdpPlan& plan,
                             DiagnosticSink& diagnostics);

// The counts `--stats` prints and TransformResult::statistics holds, in this order: units,
// sharded parameters, world size, sharded and replicated bytes per rank, the passes' own counts
// (`passStatistics`), then "gathers per call of M" for every root method M: the collectives one
// call issues as the rewritten IR says (a gather inside a loop counted once, and said so).
std::vector<std::pair<std::string, std::string>> transformStatistics(
    const torch::jit::Module& module, const FsdpPlan& plan, const Mesh& mesh,
    const std::vector<std::pair<std::string, std::string>>& passStatistics);

// The most unsharded parameter bytes the module holds at once over any call of a root method,
// as its IR says (gathers, waits, and started gathers in flight): where, and which units.
struct UnshardedPeak {
  int64_t bytes = 0;
  std::string entryMethod;         // the root method whose call reaches it
  std::vector<const Unit*> units;  // unsharded or in flight together there, by path
};
UnshardedPeak staticUnshardedPeak(const torch::jit::Module& module, const FsdpPlan& plan);
// "448 bytes in entry method 'forward', units '.' (160 bytes), 'blocks.0' (288 bytes) unsharded together"
std::string describePeak(const UnshardedPeak& peak);

}  // namespace fsdp_opt
