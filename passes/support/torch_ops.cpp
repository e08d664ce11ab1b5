// The pipeline as TorchScript operators (`torch.ops.fsdp_opt.*`), so Python can run it in-process
// on a ScriptModule (passed as its `_c` object) after torch.ops.load_library(libfsdp_passes.so).
// The python/ package wraps these; C++ programs use include/fsdp_opt/fsdp_opt.h instead.
#include <fsdp_opt/fsdp_opt.h>

#include <torch/library.h>

namespace fsdp_opt {
namespace {

// Python passes its keywords as "--name=value" items, parsed as the command line's flags are.
PipelineOptions optionsFrom(const std::vector<std::string>& items) {
  PipelineOptions options;
  std::string error = applyOptions(options, items);
  TORCH_CHECK(error.empty(), error);
  return options;
}

torch::jit::Module moduleFrom(const c10::IValue& value) {
  TORCH_CHECK(value.isObject() && value.toObjectRef().type()->is_module(),
              "expected a ScriptModule (pass `module._c`)");
  return torch::jit::Module(value.toObject());
}

// Errors become one exception naming every error; the rest comes back as lines.
std::vector<std::string> checkedDiagnostics(const TransformResult& result) {
  std::vector<std::string> lines;
  std::string errors;
  for (const auto& d : result.diagnostics) {
    if (d.severity == Severity::Error) errors += (errors.empty() ? "" : "; ") + d.message;
    else lines.push_back(formatDiagnostic(d));
  }
  TORCH_CHECK(result.ok && errors.empty(), "fsdp-opt: ", errors.empty() ? "pipeline failed" : errors);
  return lines;
}

// --stats' lines, "name: value".
std::vector<std::string> statisticsLines(const TransformResult& result) {
  std::vector<std::string> lines;
  for (const auto& [name, value] : result.statistics) lines.push_back(name + ": " + value);
  return lines;
}

std::tuple<c10::IValue, std::vector<std::string>, std::vector<std::string>> transformOp(
    c10::IValue module, std::vector<std::string> optionItems, int64_t rank, std::vector<std::string> passes,
    bool syncModuleStates) {
  PipelineOptions options = optionsFrom(optionItems);
  TransformResult result = transform(moduleFrom(module), options, passes);
  std::vector<std::string> lines = checkedDiagnostics(result);
  if (rank >= 0) {
    shardForRank(result, options, rank, syncModuleStates ? ModuleStates::kSyncFromRank0 : ModuleStates::kCheck);
  }
  return {result.module._ivalue(), lines, statisticsLines(result)};
}

std::tuple<std::vector<std::string>, std::vector<std::string>> saveOp(
    c10::IValue module, std::vector<std::string> optionItems, std::string output, std::vector<std::string> passes) {
  PipelineOptions options = optionsFrom(optionItems);
  TransformResult result = transform(moduleFrom(module), options, passes);
  std::vector<std::string> lines = checkedDiagnostics(result);
  writeOutput(result, options, output);
  return {lines, statisticsLines(result)};
}

std::vector<std::string> listPassesOp() {
  registerAllPasses();
  std::vector<std::string> lines;
  for (const PassInfo* pass : PassRegistry::global().list()) lines.push_back(pass->name + ": " + pass->summary);
  return lines;
}

std::vector<std::string> defaultPipelineOp() { return defaultPipeline(); }

void loadPluginOp(std::string path) {
  std::string error = loadPassPlugin(path);
  TORCH_CHECK(error.empty(), error);
}

}  // namespace

TORCH_LIBRARY(fsdp_opt, m) {
  // `options`: "--name=value" items, the flags of fsdp-opt (include/fsdp_opt/options.h).
  // Both return the diagnostics' lines (warnings, remarks) and the statistics' ("name: value").
  // sync_module_states: rank 0's values where the ranks' modules differ (shardForRank).
  m.def("transform(Any module, str[] options, int rank, str[] passes, bool sync_module_states=False) "
        "-> (Any, str[], str[])",
        transformOp);
  m.def("save(Any module, str[] options, str output, str[] passes) -> (str[], str[])", saveOp);
  m.def("list_passes() -> str[]", listPassesOp);
  m.def("default_pipeline() -> str[]", defaultPipelineOp);
  m.def("load_plugin(str path) -> ()", loadPluginOp);
}

}  // namespace fsdp_opt
