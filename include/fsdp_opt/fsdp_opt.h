// The C++ API of fsdp-opt, for programs that run the passes in their own JIT pipeline.
//
//   fsdp_opt::PipelineOptions options;
//   options.unitPatterns = {".", "blocks.*"};
//   options.forwardMethodSpecs = {{".", "generate"}};
//   auto result = fsdp_opt::transform(module, options);
//   if (!result.ok) { for (auto& d : result.diagnostics) report(fsdp_opt::formatDiagnostic(d)); }
//   result.module.get_method("generate")(...);
//
// Diagnostics are returned, never printed. The input module is left as it was: the pipeline runs
// on a clone that shares its tensors but has its own types and methods, so TorchScript's
// per-method executor caches of the input never see the rewritten graphs.
#pragma once

#include <fsdp_opt/diagnostics.h>
#include <fsdp_opt/options.h>
#include <fsdp_opt/pass_manager.h>
#include <fsdp_opt/passes.h>

#include <torch/csrc/jit/api/module.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fsdp_opt {

struct TransformResult {
  bool ok = false;
  torch::jit::Module module;  // the rewritten clone (whole parameters; see shardForRank)
  std::optional<FsdpPlan> plan;  // units and groups the pipeline worked with (when ok)
  std::vector<Diagnostic> diagnostics;
  std::vector<std::pair<std::string, std::string>> statistics;
};

// Runs `pipeline` (default: defaultPipeline()) on a clone of `module`. Built-in passes are
// registered on first use; passes of loaded plugins are found by name as well.
TransformResult transform(const torch::jit::Module& module, const PipelineOptions& options,
                          std::vector<std::string> pipeline = {});

// Writes the result of a transform like `fsdp-opt -o`: DIR/rank{r}.pt and manifest.json for
// options.worldSize > 1, one .pt file otherwise. `inputDescription` goes into the manifest's
// input path (its sha256 is of the module as serialised in memory).
void writeOutput(TransformResult& result, const PipelineOptions& options, const std::string& output,
                 const std::string& inputDescription = "<in-memory module>");

// In-process sharding without files: replaces the parameters of every unit group in
// `result.module` by rank `rank`'s shards, and sets the rank attributes, as the rank file
// for that rank would hold them.
void shardForRank(TransformResult& result, const PipelineOptions& options, int64_t rank);

}  // namespace fsdp_opt
