#include <fsdp_opt/passes/analysis.h>
#include <fsdp_opt/fsdp_opt.h>
#include <fsdp_opt/runtime/runtime.h>
#include <fsdp_opt/passes/output.h>
#include <fsdp_opt/passes/passes.h>

#include "module_states.h"

#include <sstream>

namespace fsdp_opt {
namespace {

const FsdpPlan& planOf(const TransformResult& result, const char* what) {
  if (!result.ok || !result.plan) throw std::runtime_error(std::string("the transform failed; nothing to ") + what);
  return *result.plan;
}

}  // namespace

TransformResult transform(const torch::jit::Module& module, const PipelineOptions& options,
                          std::vector<std::string> pipeline, const PipelineHooks& hooks, InputModule input) {
  registerAllPasses();
  if (pipeline.empty()) pipeline = defaultPipeline();
  TransformResult result;
  DiagnosticSink diagnostics;
  PassContext context(input == InputModule::Keep ? module.clone(/*inplace=*/true) : module, options, diagnostics);
  try {
    result.ok = runPipeline(context, pipeline, hooks) && !diagnostics.hasErrors();
  } catch (const std::exception& e) {
    diagnostics.error("pipeline", "internal error while running the pipeline: " + runtime::oneLineMessage(e));
    result.ok = false;
  }
  result.module = context.module();
  if (result.ok) {
    const FsdpPlan* plan = context.plan();
    if (!plan) {
      diagnostics.error("pipeline", "no FSDP plan could be built");
      result.ok = false;
    } else {
      result.plan = *plan;
      result.statistics = transformStatistics(result.module, *plan, Mesh{options.worldSize, options.shardGroup()},
                                              context.statistics().entries());
    }
  }
  result.diagnostics = diagnostics.all();
  return result;
}

void writeOutput(TransformResult& result, const PipelineOptions& options, const std::string& output,
                 const ModuleSource& source) {
  const FsdpPlan& plan = planOf(result, "write");
  // A rank file checks its rank, world size and run before the first collective (SPEC section 6);
  // wrap-entry-methods puts that check in every entry method and adds the attributes it reads.
  if (!result.module.hasattr(kRankAttr)) {
    throw std::runtime_error("the pipeline did not run " + wrapEntryMethodsPass().name +
                             ", which gives every rank file its rank check; add it to --passes");
  }
  std::string sha256 = source.sha256;
  const bool pending = sha256.empty() && source.pendingSha256.valid();
  if (sha256.empty() && !pending && source.parameters) {
    throw std::logic_error("writeOutput: a module loaded with deferred parameters needs its input's sha256");
  }
  if (sha256.empty() && !pending) {
    std::ostringstream serialized;
    result.module.save(serialized);
    sha256 = sha256Hex(serialized.str());
  }
  const Mesh mesh{options.worldSize, options.shardGroup()};
  // Reads only the plan and the module's method names, which writing rank files leaves alone.
  auto manifestText = [&] {
    ManifestInput input{source.path, pending ? source.pendingSha256.get() : sha256, mesh};
    return buildManifest(result.module, plan, input);
  };
  if (options.worldSize == 1) {
    writeSingleFile(result.module, sha256Hex(manifestText()), output, source.parameters.get(), source.extraFiles);
  } else {
    writeShardedDirectory(result.module, plan, mesh, manifestText, output, source.parameters.get(),
                          source.extraFiles);
  }
}

void shardForRank(TransformResult& result, const PipelineOptions& options, int64_t rank,
                  ModuleStates states) {
  const FsdpPlan& plan = planOf(result, "shard");
  if (rank < 0 || rank >= options.worldSize) {
    throw std::runtime_error("rank " + std::to_string(rank) + " is outside world size " +
                             std::to_string(options.worldSize));
  }
  // Before any row is cut: a rank's rows of another rank's model would mix the two silently.
  const StateReplacements synced = agreeOnModuleStates(result.module, rank, options.worldSize, states);
  applyStateReplacements(result.module, synced);
  makeRankModule(result.module, plan, Mesh{options.worldSize, options.shardGroup()}, rank,
                 [&](const GroupParam& param) -> const at::Tensor& {
                   auto replaced = synced.find(param.tensor.unsafeGetTensorImpl());
                   return replaced == synced.end() ? param.tensor : replaced->second;
                 });
}

}  // namespace fsdp_opt
