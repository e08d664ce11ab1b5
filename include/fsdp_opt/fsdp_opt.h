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

#include <fsdp_opt/passes/diagnostics.h>
#include <fsdp_opt/passes/options.h>
#include <fsdp_opt/passes/pass_manager.h>
#include <fsdp_opt/passes/passes.h>

#include <torch/csrc/jit/api/module.h>

#include <future>
#include <memory>
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
  // What `fsdp-opt --stats` prints (analysis.h, transformStatistics), when ok.
  std::vector<std::pair<std::string, std::string>> statistics;
};

// What transform() rewrites.
enum class InputModule {
  // A clone that shares the tensors but has its own types and methods: the caller's module, and
  // TorchScript's executor caches of it, never see the rewritten graphs. The clone's class
  // names carry TorchScript's `___torch_mangle_N` components.
  Keep,
  // The module itself, for a caller that loaded it only to transform it (fsdp-opt): class
  // names stay as the model spelled them.
  Consume,
};

// Runs `pipeline` (default: defaultPipeline()) on `module` (a clone unless `input` says
// otherwise). Built-in passes are registered on first use; passes of loaded plugins are found
// by name as well.
TransformResult transform(const torch::jit::Module& module, const PipelineOptions& options,
                          std::vector<std::string> pipeline = {}, const PipelineHooks& hooks = {},
                          InputModule input = InputModule::Keep);

// Where the transformed module came from, for the manifest (SPEC section 6).
class ParameterBytes;  // deferred_load.h

struct ModuleSource {
  std::string path = "<in-memory module>";
  std::string sha256;  // of the input file; empty: of the module as serialised in memory
  // Where the bytes of parameters loaded unread are (loadDeferringParameters); null: in memory.
  std::shared_ptr<ParameterBytes> parameters;
  // The input file's hash while it is still being computed (fsdp-opt -o starts it beside the
  // load and the pipeline); used when sha256 is empty. The writer waits for it only when a rank
  // file first needs the manifest's hash, after that file's tensors are written.
  std::shared_future<std::string> pendingSha256;
  // Extra files (torch.jit.save's `_extra_files`: a model's config, its tokenizer) that every
  // file written carries, as the input file held them (readExtraFiles).
  torch::jit::ExtraFilesMap extraFiles;
};

// Writes the result of a transform as `fsdp-opt -o` does (fsdp-opt calls it): DIR/rank{r}.pt
// and manifest.json for options.worldSize > 1, one .pt file otherwise.
void writeOutput(TransformResult& result, const PipelineOptions& options, const std::string& output,
                 const ModuleSource& source = {});

// What shardForRank does about ranks whose modules hold different values (ranks that built the
// model without a common seed would otherwise each keep their rows of a different model).
enum class ModuleStates {
  // Every rank compares a SHA-256 of each of its parameters and buffers with every other rank's
  // (through the process group's store); a difference is an error naming the first differing
  // tensor. The default.
  kCheck,
  // Take rank 0's values, as FSDP1's sync_module_states=True: the tensors that differ are
  // broadcast from rank 0 (one collective); equal ones cost only their hash.
  kSyncFromRank0,
};

// In-process sharding without files: replaces the parameters of every unit group in
// `result.module` by rank `rank`'s shards, and sets the rank attributes, as the rank file
// for that rank would hold them. When the runtime's process group is the job of `rank` (world
// size options.worldSize > 1, this process rank `rank`; initialised from torchrun's environment
// if needed), every rank must call it: the ranks' module states are first checked, or synced,
// as `states` says (docs/runtime.md, "Ranks that start from different weights"). A process
// outside such a job (inspecting a rank's shards) skips the check; kSyncFromRank0 is then an
// error.
void shardForRank(TransformResult& result, const PipelineOptions& options, int64_t rank,
                  ModuleStates states = ModuleStates::kCheck);

}  // namespace fsdp_opt
